"""Where the per-image work runs: an ordered, bounded parallel map over the plan.

Locally that is a pool of loky worker processes (joblib's process pool: robust to a worker
crash, reused between calls); across machines it is an existing Dask cluster, whose workers
read the originals from the shared mount while this process still writes every shard.  Either
way results come back in plan order, so shards are byte-identical whatever runs them.

Both maps submit batches themselves and keep at most ``2 x workers`` of them submitted or
waiting: a new batch goes out only when the oldest result has been taken.  joblib's
``Parallel(return_as="generator")`` dispatches the next batch whenever a worker finishes, so
when the writer is the slower side (thumbnails) finished results pile up in the driver
(measured: +50 MB on 100,000 tiny images, growing with the tree).  On Dask, joblib's backend
also waits for good on a task the scheduler gives up on (its workers died, ``KilledWorker``):
it fails the task's future but never tells ``Parallel``, so the pack hung.  Dask futures are
used directly instead: a task whose worker dies is run again elsewhere by the scheduler, and
one it gives up on stops the pack in one line, its finished shards kept for the rerun.
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

from ..config import RunConfig
from ..errors import ConfigError, ShardsmithError
from ..ordered import in_order

log = logging.getLogger(__name__)
IDLE_WORKER_SECONDS = 300
LOKY_TRACKER = "joblib.externals.loky.backend.resource_tracker"
STOP_SECONDS = 5.0  # what loky gets to tidy its threads after an interrupt
# How often a local worker checks that the driver still lives: a wake-up twice a second,
# nothing per image.
PARENT_CHECK_SECONDS = 0.5
PROXY_VARIABLES = ("http_proxy", "https_proxy", "no_proxy", "all_proxy")


def _import_image_libraries() -> None:
    from . import imaging  # noqa: F401  (cv2, numpy, Pillow, simplejpeg, tifffile)


def local_executor(workers: int) -> Any:
    """This process's pool of ``workers`` loky worker processes (reused between calls while
    the arguments are the same), whose workers end themselves when this process is gone."""
    from joblib.externals.loky import get_reusable_executor

    return get_reusable_executor(max_workers=workers, timeout=IDLE_WORKER_SECONDS,
                                 initializer=_exit_with_parent, initargs=(os.getpid(),),
                                 env=_store_environment())


def _store_environment() -> dict[str, str]:
    """The variables a worker's store client reads (AWS_*, proxies).  A worker keeps the
    environment it started with: given to loky, they make a pack whose process changed them
    since (another endpoint or key, in a notebook or a test) start new workers instead of
    reading the originals from the store the old ones know."""
    return {name: value for name, value in os.environ.items()
            if name.startswith("AWS_") or name.lower() in PROXY_VARIABLES}


def _exit_with_parent(parent_pid: int) -> None:
    """Worker initializer: watch the driver, and end this worker once it is gone.

    A driver killed with SIGKILL tells no one: its workers would wait for tasks for good
    (~80 MB each), and with them loky's resource trackers, which live as long as a worker
    holds their pipe.  A dead parent's children are adopted by init (or a subreaper), which
    ``getppid`` shows.  Not Linux's parent-death signal: it fires when the *thread* that
    started the worker ends, and workers start from threads that end (the warm-up)."""
    threading.Thread(target=_watch_parent, args=(parent_pid,), name="shardsmith-parent",
                     daemon=True).start()


def _watch_parent(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(PARENT_CHECK_SECONDS)
    os._exit(1)  # no clean-up to run: the driver that would use the results is gone


def _run_batch(function: Callable, args: tuple, items: Sequence) -> list:
    return [function(item, *args) for item in items]


class WorkerPool:
    """The workers of one pack run; use as a context manager.

    Local worker processes start at once, in the background, so that their start-up
    (interpreter, image libraries: ~0.7 s) overlaps the scan of the source tree.
    """

    def __init__(self, run: RunConfig):
        self.run = run
        self.workers = run.worker_count
        self._client = None
        self._executor = None
        self._warmup: threading.Thread | None = None
        if run.backend == "local" and self.workers > 1:
            self._warmup = threading.Thread(target=self._start, name="shardsmith-warmup",
                                            daemon=True)
            self._warmup.start()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, exc_type: type | None, *exc: object) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            _close_client(client)
        if self._warmup is not None:
            # Workers may be starting in the background: wait for the executor to exist, so
            # an interrupt during the scan still has workers to stop (the warm-up does not
            # wait for them to be ready, so this is short; bounded all the same, a daemon
            # thread stuck in loky must not keep an interrupted run from ending).
            self._warmup.join(STOP_SECONDS)
        if exc_type is not None and self._executor is not None:
            # Interrupted or failed: end the workers now.  Left alone, loky keeps them for
            # 300 s in case of reuse, which after SIGTERM means orphans busy on a NAS.
            self._stop_workers()

    def _stop_workers(self) -> None:
        """Kill the worker processes, then let loky wind down its threads, for a bounded time.

        The workers are killed from here, not by ``shutdown(kill_workers=True)``: loky's
        manager thread then drops the queued tasks but not their ids, and dies on a KeyError
        (a traceback on stderr) with queues and workers left as they were.  Workers that died
        are a "broken" pool to it instead, a path that fails every task and closes the queues
        cleanly.  Whatever loky does, no worker outlives this call by more than its join."""
        executor, self._executor = self._executor, None
        processes = list((getattr(executor, "_processes", None) or {}).values())
        manager = getattr(executor, "_executor_manager_thread", None)
        for process in processes:
            try:
                os.kill(process.pid, signal.SIGKILL)  # loky's Popen has no kill()
            except (OSError, TypeError):  # gone already, or not started (no pid)
                pass
        executor.shutdown(wait=False)
        if manager is not None:
            manager.join(STOP_SECONDS)
        for process in processes:
            process.join(STOP_SECONDS)  # reaped: no zombies while the driver finishes

    def _start(self) -> None:
        from multiprocessing import resource_tracker

        # Workers start from this thread: with SIGINT blocked here they inherit the block, so
        # a Ctrl-C at the terminal, which goes to the whole process group, reaches only the
        # driver, which stops them (instead of each printing a KeyboardInterrupt traceback).
        # The resource tracker first: starting it unblocks SIGINT in the calling thread.
        resource_tracker.ensure_running()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        # Workers killed mid-task (Ctrl-C) leave loky's resource tracker, a process of its
        # own started with the pool, warning about "leaked" semaphores that are already gone
        # (FileNotFoundError): lines on stderr that tell the user nothing.
        os.environ["PYTHONWARNINGS"] = ",".join(filter(None, (
            os.environ.get("PYTHONWARNINGS"), f"ignore::UserWarning:{LOKY_TRACKER}")))
        try:
            self._executor = local_executor(self.workers)
            # Queued, not waited for: the map's first tasks follow them, and ``__exit__``
            # joins this thread, so it must not wait for the workers to be ready.
            for _ in range(self.workers):
                self._executor.submit(_import_image_libraries)
        except Exception as exc:  # noqa: BLE001 - a warm-up only: the real map reports errors
            log.debug("worker warm-up did not finish: %s", exc)

    def map_ordered(self, function: Callable, items: Sequence, *args: Any,
                    batch_size: int = 1) -> Iterator:
        """``function(item, *args)`` for every item, results in item order, lazily.

        ``batch_size`` items go to a worker at once (tiny images: the dispatch cost of one
        task is more than the work); at most ``2 x workers`` batches are out at a time.
        """
        if self.run.backend == "dask":
            return self._map_dask(function, items, args, batch_size)
        if self._warmup is not None:
            self._warmup.join()
        if self.workers == 1 or len(items) <= 1:
            return (function(item, *args) for item in items)
        if self._executor is None:
            self._executor = local_executor(self.workers)
        batches = (batch for _, batch in _batches(items, batch_size))
        submit = partial(self._executor.submit, _run_batch, function, args)
        return itertools.chain.from_iterable(in_order(submit, batches, 2 * self.workers))

    def _map_dask(self, function: Callable, items: Sequence, args: tuple,
                  batch_size: int) -> Iterator:
        try:
            from distributed import Client
        except ImportError:
            raise ConfigError(
                "run.backend: dask needs the dask extra: pip install 'shardsmith[dask]'"
            ) from None
        try:
            self._client = Client(self.run.scheduler, timeout=10)
        except OSError as exc:
            raise ShardsmithError(
                f"run.scheduler: cannot reach the Dask scheduler at {self.run.scheduler}: {exc}"
            ) from None
        return _dask_results(self._client, function, items, args, batch_size)


def _close_client(client: Any) -> None:
    """Close a Dask client without its log.  After the scheduler was lost, the client is
    still trying to reconnect; closing it cancels that, which it logs as an error with a
    traceback that says nothing the pack's one line has not."""
    logger = logging.getLogger("distributed.client")
    disabled, logger.disabled = logger.disabled, True
    try:
        client.close()
    finally:
        logger.disabled = disabled


def _batches(items: Sequence, batch_size: int) -> Iterator[tuple[int, list]]:
    """(index of its first item, batch) for consecutive batches of ``batch_size`` items."""
    for start in range(0, len(items), batch_size):
        yield start, [items[at] for at in range(start, min(start + batch_size, len(items)))]


def _dask_results(client: Any, function: Callable, items: Sequence, args: tuple,
                  batch_size: int) -> Iterator:
    """The Dask side of ``map_ordered``: at most ``2 x`` the cluster's worker threads (when
    the map starts) batches submitted or waiting, results in item order.

    A future is let go as soon as its result is taken, so the scheduler forgets its task:
    what it holds for the run stays bounded by the window, not by the tree."""
    from concurrent.futures import CancelledError

    from distributed.scheduler import KilledWorker

    threads = sum(client.nthreads().values())
    if not threads:
        log.warning("the Dask cluster has no worker yet: the pack waits for one")
    run = uuid.uuid4().hex[:12]  # a task's key names the run and its first item

    def submitted(task: tuple[int, list]) -> Any:
        start, batch = task
        return client.submit(_run_batch, function, args, batch,
                             key=f"shardsmith-{run}-{start}", pure=False)

    def taken(task: tuple[int, list], future: Any) -> list:
        batch = task[1]
        try:
            return future.result()
        except KilledWorker:
            raise ShardsmithError(
                f"run.backend dask: the workers running {_names(batch)} died more often than "
                "the scheduler allows (distributed.scheduler.allowed-failures; see their "
                "logs: memory?); finished shards are kept, rerun the same command to resume"
            ) from None
        except CancelledError:
            raise ShardsmithError(
                f"run.backend dask: the scheduler at {client.scheduler.address} dropped the "
                f"task of {_names(batch)} (restarted or lost); finished shards are kept, "
                "rerun the same command to resume"
            ) from None

    for results in in_order(submitted, _batches(items, batch_size), 2 * max(1, threads), taken):
        yield from results


def _names(batch: list) -> str:
    """The originals of a batch, for a message: the first one's path and how many more."""
    source = getattr(batch[0], "source", None)
    first = getattr(source, "relpath", None) or f"item {batch[0]!r}"[:80]
    return first + (f" (and {len(batch) - 1} more)" if len(batch) > 1 else "")
