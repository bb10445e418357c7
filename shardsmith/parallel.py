"""Where the per-image work runs: an ordered, bounded parallel map over the plan.

Locally that is a pool of loky worker processes (joblib's process pool: robust to a worker
crash, reused between calls); across machines it is joblib's dask backend on an existing Dask
cluster, whose workers read the originals from the shared mount while this process still
writes every shard.  Either way results come back in plan order, so shards are byte-identical
whatever runs them.

Locally the map submits batches to the pool itself and keeps at most ``2 x workers`` of them
submitted or waiting: a new batch goes out only when the oldest result has been taken.
joblib's ``Parallel(return_as="generator")`` dispatches the next batch whenever a worker
finishes, so when the writer is the slower side (thumbnails) finished results pile up in the
driver (measured: +50 MB on 100,000 tiny images, growing with the tree).
"""

from __future__ import annotations

import collections
import logging
import signal
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .config import RunConfig
from .errors import ConfigError, ShardsmithError

log = logging.getLogger(__name__)
# A dask run that stops early (an error, Ctrl-C) closes joblib's result generator; joblib then
# warns that finished tasks went unused, which says nothing the user needs.
warnings.filterwarnings("ignore", category=UserWarning,
                        message=r".*tasks (have been successfully executed|which were still)")
IDLE_WORKER_SECONDS = 300


def _import_image_libraries() -> None:
    from . import imaging  # noqa: F401  (cv2, numpy, Pillow, simplejpeg, tifffile)


def _run_batch(function: Callable, items: Sequence, args: tuple) -> list:
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
            self._client.close()
            self._client = None
        if exc_type is not None and self._executor is not None:
            # Interrupted or failed: end the workers now.  Left alone, loky keeps them for
            # 300 s in case of reuse, which after SIGTERM means orphans busy on a NAS.
            self._executor.shutdown(wait=True, kill_workers=True)

    def _start(self) -> None:
        from multiprocessing import resource_tracker

        from joblib.externals.loky import get_reusable_executor

        # Workers start from this thread: with SIGINT blocked here they inherit the block, so
        # a Ctrl-C at the terminal, which goes to the whole process group, reaches only the
        # driver, which stops them (instead of each printing a KeyboardInterrupt traceback).
        # The resource tracker first: starting it unblocks SIGINT in the calling thread.
        resource_tracker.ensure_running()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            self._executor = get_reusable_executor(max_workers=self.workers,
                                                   timeout=IDLE_WORKER_SECONDS)
            for future in [self._executor.submit(_import_image_libraries)
                           for _ in range(self.workers)]:
                future.result()
        except Exception as exc:  # noqa: BLE001 - a warm-up only: the real map reports errors
            log.debug("worker warm-up did not finish: %s", exc)

    def map_ordered(self, function: Callable, items: Sequence, *args: Any,
                    batch_size: int = 1) -> Iterator:
        """``function(item, *args)`` for every item, results in item order, lazily.

        ``batch_size`` items go to a worker at once (tiny images: the dispatch cost of one
        task is more than the work); at most ``2 x workers`` batches are out at a time.
        """
        if self.run.backend == "dask":
            return self._map_dask(function, items, *args)
        if self._warmup is not None:
            self._warmup.join()
        if self.workers == 1 or len(items) <= 1:
            return (function(item, *args) for item in items)
        if self._executor is None:
            from joblib.externals.loky import get_reusable_executor

            self._executor = get_reusable_executor(max_workers=self.workers,
                                                   timeout=IDLE_WORKER_SECONDS)
        return self._map_local(function, items, args, batch_size)

    def _map_local(self, function: Callable, items: Sequence, args: tuple,
                   batch_size: int) -> Iterator:
        window: collections.deque = collections.deque()
        batches = ([items[at] for at in range(start, min(start + batch_size, len(items)))]
                   for start in range(0, len(items), batch_size))
        try:
            for batch in batches:
                window.append(self._executor.submit(_run_batch, function, batch, args))
                if len(window) >= 2 * self.workers:
                    yield from window.popleft().result()
            while window:
                yield from window.popleft().result()
        finally:
            for future in window:
                future.cancel()

    def _map_dask(self, function: Callable, items: Sequence, *args: Any) -> Iterator:
        try:
            from distributed import Client
            from joblib import Parallel, delayed, parallel_config
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
        with parallel_config(backend="dask", n_jobs=-1):
            parallel = Parallel(return_as="generator", pre_dispatch="2*n_jobs")
            return parallel(delayed(function)(item, *args) for item in items)
