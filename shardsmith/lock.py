"""An exclusive, self-describing lock on a directory (one pack or stage at a time).

``flock`` is released by the kernel when the holder dies, however it dies, so a lock left by
a killed run is taken over at once; the lock file names its holder (pid, host, start time) so a
refused run can say who holds it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
from datetime import datetime
from pathlib import Path

from .atomic import naming
from .errors import LockedError

log = logging.getLogger(__name__)


class DirectoryLock:
    """``with DirectoryLock(path, "pack"):`` holds ``path`` exclusively or raises LockedError."""

    def __init__(self, lock_file: Path, activity: str):
        self.path = lock_file
        self.activity = activity
        self._handle = None

    def __enter__(self) -> DirectoryLock:
        with naming(self.path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle = open(self.path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip()
            handle.close()
            if not holder:  # shared holders write nothing: a stage reading this dataset
                raise LockedError(f"{self.path.parent.parent} is being read by another "
                                  "shardsmith process (a stage); rerun when it has finished"
                                  ) from None
            raise LockedError(
                f"{self.path.parent.parent} is being {self.activity} by {holder}"
            ) from None
        try:
            handle.seek(0)
            previous = handle.read().strip()
            if previous:
                log.warning("taking over the lock of a run that ended without releasing it "
                            "(%s)", previous)
            with naming(self.path):
                handle.seek(0)
                handle.truncate()
                handle.write(f"pid {os.getpid()} on {socket.gethostname()} since "
                             f"{datetime.now().isoformat(timespec='seconds')}\n")
                handle.flush()
        except BaseException:
            try:  # a full disk, say: do not keep the directory locked
                handle.close()
            except OSError:
                pass  # the same full disk, flushing: the error raised already says so
            raise
        self._handle = handle
        return self

    def __exit__(self, *exc: object) -> None:
        if self._handle is not None:
            self._handle.seek(0)
            self._handle.truncate()  # an empty lock file means: released cleanly
            self._handle.close()
            self._handle = None


class SharedLock:
    """``with SharedLock(path, "packed"):`` keeps an exclusive holder (a pack) out while a
    reader (a stage) copies; raises LockedError naming the pack that holds it.

    Where the lock file cannot be opened (a dataset without one, a read-only share) nothing is
    locked: the reader then checks afterwards whether the dataset changed.
    """

    def __init__(self, lock_file: Path, activity: str):
        self.path = lock_file
        self.activity = activity
        self._handle = None

    def __enter__(self) -> SharedLock:
        try:
            handle = open(self.path)
        except OSError:
            return self
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = handle.read().strip() or "another process"
            handle.close()
            raise LockedError(f"{self.path.parent.parent} is being {self.activity} by "
                              f"{holder}; rerun when it has finished") from None
        except OSError:
            handle.close()  # a file system without locks
            return self
        self._handle = handle
        return self

    def __exit__(self, *exc: object) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
