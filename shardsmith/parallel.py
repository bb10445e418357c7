"""Where the per-image work runs: an ordered, bounded parallel map over the plan.

Locally that is joblib's loky backend (worker processes that survive between calls); across
machines it is joblib's dask backend on an existing Dask cluster, whose workers read the
originals from the shared mount while this process still writes every shard.  Either way
results come back in plan order (so shards are byte-identical whatever runs them) and at most
``2 × workers`` tasks are in flight (so memory does not grow with the number of images).
"""

from __future__ import annotations

import logging
import signal
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .config import RunConfig
from .errors import ConfigError, ShardsmithError

log = logging.getLogger(__name__)
# A run that stops early (an error, Ctrl-C) closes the result generator; joblib then warns that
# finished tasks went unused, which says nothing the user needs.
warnings.filterwarnings("ignore", category=UserWarning,
                        message=r".*tasks (have been successfully executed|which were still)")


def _import_image_libraries() -> None:
    from . import imaging  # noqa: F401  (cv2, numpy, Pillow, simplejpeg, tifffile)


class WorkerPool:
    """The workers of one pack run; use as a context manager.

    Local worker processes start at once, in the background, so that their start-up
    (interpreter, image libraries: ~0.7 s) overlaps the scan of the source tree.
    """

    def __init__(self, run: RunConfig):
        self.run = run
        self.workers = run.worker_count
        self._client = None
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
        if exc_type is not None and self.run.backend == "local" and self.workers > 1:
            # Interrupted or failed: end the workers now.  Left alone, loky keeps them for
            # 300 s in case of reuse, which after SIGTERM means orphans busy on a NAS.
            from joblib.externals.loky import reusable_executor

            executor = reusable_executor._executor  # None when no worker was started
            if executor is not None:
                executor.shutdown(wait=False, kill_workers=True)

    def _start(self) -> None:
        from multiprocessing import resource_tracker

        from joblib import Parallel, delayed

        # Workers start from this thread: with SIGINT blocked here they inherit the block, so
        # a Ctrl-C at the terminal, which goes to the whole process group, reaches only the
        # driver, which stops them (instead of each printing a KeyboardInterrupt traceback).
        # The resource tracker first: starting it unblocks SIGINT in the calling thread.
        resource_tracker.ensure_running()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            Parallel(n_jobs=self.workers, backend="loky")(
                delayed(_import_image_libraries)() for _ in range(self.workers)
            )
        except Exception as exc:  # noqa: BLE001 - a warm-up only: the real map reports errors
            log.debug("worker warm-up did not finish: %s", exc)

    def map_ordered(self, function: Callable, items: Sequence, *args: Any) -> Iterator:
        """``function(item, *args)`` for every item, results in item order, lazily."""
        if self.run.backend == "dask":
            return self._map_dask(function, items, *args)
        if self._warmup is not None:
            self._warmup.join()  # one joblib call at a time on the shared executor
        if self.workers == 1 or len(items) <= 1:
            return (function(item, *args) for item in items)
        from joblib import Parallel, delayed

        parallel = Parallel(
            n_jobs=self.workers, backend="loky", return_as="generator", pre_dispatch="2*n_jobs"
        )
        return parallel(delayed(function)(item, *args) for item in items)

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
