"""Where the per-image work runs: an ordered, bounded parallel map over the plan.

Locally that is joblib's loky backend (worker processes that survive between calls).  Results
come back in plan order (so shards are identical whatever the worker count) and at most
``2 × workers`` tasks are in flight (so memory does not grow with the number of images).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .config import RunConfig


def _import_image_libraries() -> None:
    from . import imaging  # noqa: F401  (cv2, numpy, Pillow, simplejpeg, tifffile)


class WorkerPool:
    """Starts the worker processes early, in the background, so that their start-up
    (interpreter, image libraries: ~0.7 s) overlaps the scan of the source tree."""

    def __init__(self, run: RunConfig):
        self.workers = run.worker_count
        self._warmup: threading.Thread | None = None
        if self.workers > 1:
            self._warmup = threading.Thread(target=self._start, name="shardsmith-warmup",
                                            daemon=True)
            self._warmup.start()

    def _start(self) -> None:
        from joblib import Parallel, delayed

        Parallel(n_jobs=self.workers, backend="loky")(
            delayed(_import_image_libraries)() for _ in range(self.workers)
        )

    def map_ordered(self, function: Callable, items: Sequence, *args: Any) -> Iterator:
        """``function(item, *args)`` for every item, results in item order, lazily."""
        if self._warmup is not None:
            self._warmup.join()  # one joblib call at a time on the shared executor
        if self.workers == 1 or len(items) <= 1:
            return (function(item, *args) for item in items)
        from joblib import Parallel, delayed

        parallel = Parallel(
            n_jobs=self.workers, backend="loky", return_as="generator", pre_dispatch="2*n_jobs"
        )
        return parallel(delayed(function)(item, *args) for item in items)
