"""An exclusive, self-describing lock on a directory (one pack or stage at a time).

``flock`` is released by the kernel when the holder dies, however it dies, so a lock left by
a killed run is taken over at once; the lock file names its holder (pid, host, start time) so a
refused run can say who holds it.

The lock file lives in our own state folder and is never followed out of it (``statedir``): a
link, a FIFO or a folder in its place is refused before a byte is written, and what a lock file
holds is shown only when it is a holder line shardsmith wrote, never raw.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import socket
from datetime import datetime
from pathlib import Path

from ..atomic import naming
from ..door import STATE_CAP
from ..errors import LockedError
from .statedir import open_state_file, read_state, state_folder

log = logging.getLogger(__name__)

HOLDER_BYTES = 512  # a holder line is one short line; nothing more of a lock file is read
HOLDER = re.compile(r"pid \d{1,10} on [\x21-\x7e]{1,255} since [0-9T:+-]{10,40}")


def describe_holder(raw: bytes) -> str:
    """The holder a lock file names, when it holds a holder line shardsmith wrote; '' when
    empty; otherwise a phrase that quotes none of it (it may be anyone's file)."""
    text = raw.decode("ascii", "replace").strip()
    if not text:
        return ""
    if HOLDER.fullmatch(text):
        return text
    return "an unknown holder: its lock file holds something shardsmith did not write"


class DirectoryLock:
    """``with DirectoryLock(path, "packed"):`` holds ``path`` exclusively or raises LockedError."""

    def __init__(self, lock_file: Path, activity: str):
        self.path = lock_file
        self.activity = activity
        self._fd = -1

    def __enter__(self) -> DirectoryLock:
        state_folder(self.path.parent)
        fd = open_state_file(self.path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = describe_holder(os.pread(fd, HOLDER_BYTES, 0))
            finally:
                os.close(fd)
            if not holder:  # shared holders write nothing: a stage or an export reading it
                raise LockedError(f"{self.path.parent.parent} is being read by another "
                                  "shardsmith process (a stage or an export); rerun when it "
                                  "has finished") from None
            raise LockedError(
                f"{self.path.parent.parent} is being {self.activity} by {holder}"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            previous = describe_holder(os.pread(fd, HOLDER_BYTES, 0))
            if previous:
                log.warning("taking over the lock of a run that ended without releasing it "
                            "(%s)", previous)
            line = (f"pid {os.getpid()} on {socket.gethostname()} since "
                    f"{datetime.now().isoformat(timespec='seconds')}\n").encode("ascii",
                                                                              "replace")
            with naming(self.path):
                os.ftruncate(fd, 0)
                os.pwrite(fd, line, 0)
        except BaseException:
            os.close(fd)  # a full disk, say: do not keep the directory locked
            raise
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd >= 0:
            try:
                os.ftruncate(self._fd, 0)  # an empty lock file means: released cleanly
            finally:
                os.close(self._fd)
                self._fd = -1


class SharedLock:
    """``with SharedLock(path, "packed"):`` keeps an exclusive holder (a pack) out while a
    reader (a stage) copies; raises LockedError naming the pack that holds it.

    Where the lock file cannot be opened (a dataset without one, a read-only share) nothing is
    locked: the reader then checks afterwards whether the dataset changed.  A link, a FIFO or a
    folder in its place (or in place of the state folder) is refused (OutputStateError).
    """

    def __init__(self, lock_file: Path, activity: str):
        self.path = lock_file
        self.activity = activity
        self._handle = None

    def __enter__(self) -> SharedLock:
        if not state_folder(self.path.parent, create=False):
            return self
        try:
            handle = read_state(self.path, STATE_CAP)  # OutputStateError: not ours to follow
        except OSError:
            return self
        try:
            fcntl.flock(handle.fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = describe_holder(handle.pread(HOLDER_BYTES, 0)) or "another process"
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
