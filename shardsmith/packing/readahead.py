"""Read-ahead: ask the kernel to fetch upcoming source files while workers decode earlier ones.

On a NAS mount every original is a multi-megabyte network read.  Without read-ahead a worker
waits for its file, then decodes, then waits again, so slow or high-latency storage leaves
cores idle.  A driver thread walks the plan a bounded window ahead of the writer and calls
``posix_fadvise(WILLNEED)``, which starts asynchronous reads into the page cache (local disks,
NFS and CIFS alike); the workers' own reads then come from memory.  It is only a hint:
errors are ignored here and reported by the worker that reads the file.  It opens files the
way a worker does (``originals.open_source``: the file the scan saw, never through a link
swapped in for it or for a folder above it, no blocking on a FIFO, nothing over the decode
budget, which the worker refuses unread), so it never pulls a file from outside the source into
the cache, and never holds up the end of a run: ``close`` waits for it briefly, then leaves the
daemon thread behind.

Off by default (``run.readahead``): it costs a second open (a metadata round trip) per file,
and more workers than cores overlap reads with decoding without it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

from ..errors import BadImage
from .originals import UNCAPPED, open_source
from .plan import PlanItem

CLOSE_WAIT_SECONDS = 1.0
HINT_BYTES = 8 * 1024 * 1024


class ReadAhead:
    """Keeps the page cache filled ``window`` files ahead of the last consumed result."""

    def __init__(self, root: str, items: Sequence[PlanItem], window: int,
                 follow_symlinks: bool = False, cap: int = UNCAPPED):
        self._root = root
        self._follow_symlinks = follow_symlinks
        self._cap = cap
        self._items = items
        self._window = window
        self._consumed = 0
        self._closed = False
        self._condition = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="shardsmith-readahead",
                                        daemon=True)
        if window > 0 and items and hasattr(os, "posix_fadvise"):
            self._thread.start()

    def consumed(self, count: int) -> None:
        """The writer has taken ``count`` results: the window may move on."""
        with self._condition:
            self._consumed = count
            self._condition.notify()

    def close(self) -> None:
        with self._condition:
            self._closed = True
            self._condition.notify()
        if self._thread.is_alive():
            self._thread.join(CLOSE_WAIT_SECONDS)  # e.g. stuck in open() on a hung NAS

    def _run(self) -> None:
        for index, item in enumerate(self._items):
            with self._condition:
                self._condition.wait_for(
                    lambda i=index: self._closed or i < self._consumed + self._window
                )
                if self._closed:
                    return
            try:
                handle = open_source(self._root, item.source.relpath, self._follow_symlinks,
                                     self._cap, item.source.identity)
            except (OSError, BadImage):
                continue
            with handle:
                try:
                    # One hint per window: the kernel caps each at its read-ahead size (8 MB
                    # on a disk, 128 kB on FUSE), so a single hint covers only a file's start.
                    for offset in range(0, handle.size, HINT_BYTES):
                        os.posix_fadvise(handle.fd, offset, HINT_BYTES, os.POSIX_FADV_WILLNEED)
                except OSError:
                    pass  # not supported on this filesystem: the worker reads as usual
