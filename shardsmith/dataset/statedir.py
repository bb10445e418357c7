"""Our own state folder, ``DIR/.shardsmith``: the lock, a pack's journal and sample spool, a
stage's record of what it verified (docs/design.md, invariant 11).

Its files are written in place (a lock is truncated and rewritten, a journal is appended to and
cut back), so a link planted under one of their names, or in place of the folder, would make
us truncate or fill a file somewhere else, and a FIFO would hang us.  Hence:

* the folder must be a real directory inside DIR, not a link (``state_folder``);
* a state file is opened without following a link and without blocking, without ``O_TRUNC``,
  and checked on its descriptor before a byte changes: a regular file with no other name (a
  hard link would make us truncate the other one) (``open_state_file``);
* a state file read back goes through the door with a cap (``read_state``).

Anything else is an ``OutputStateError`` (one line, exit 2) naming the path; nothing outside
the folder is read or touched.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..door import OpenFile, Refused, kind_of, open_file
from ..errors import ManifestError, OutputStateError

STATE_DIR = ".shardsmith"
LOCK_NAME = "lock"


@dataclass(frozen=True)
class DatasetDir:
    """The paths of a dataset's own state, all in ``ROOT/.shardsmith``: named here, built
    nowhere else.  ``root`` is a ``storage.Location``: a folder, or a prefix in a bucket."""

    root: Any

    state = property(lambda self: self.root / STATE_DIR)
    lock = property(lambda self: self.state / LOCK_NAME)  # a pack's or stage's; shared to read
    journal = property(lambda self: self.state / "journal.jsonl")  # a pack's checkpoints
    samples = property(lambda self: self.state / "samples.jsonl")  # a pack's sample spool
    staged = property(lambda self: self.state / "staged.json")  # what a stage verified
    # In a bucket: its lease, its journal objects, and the objects of the version the manifest
    # commits and of the one it replaced, kept until the next commit (docs/storage.md).
    lease = property(lambda self: self.state / "lease")
    journals = property(lambda self: self.state / "journal")
    objects = property(lambda self: self.state / "objects.json")


ADVICE = ("shardsmith keeps its own state there and follows no link out of it; remove it "
          "and rerun")


def state_folder(folder: Path, create: bool = True) -> bool:
    """Check that ``folder`` (``DIR/.shardsmith``) is a real directory, making it when
    ``create``; returns whether it exists.  Raises OutputStateError for a link or a file."""
    try:
        info = os.lstat(folder)
    except FileNotFoundError:
        if not create:
            return False
        try:
            folder.parent.mkdir(parents=True, exist_ok=True)  # the directory itself: the user's
            os.mkdir(folder)
        except FileExistsError:
            pass  # another run made it meanwhile: checked below like any other
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, str(folder)) from None
        info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode):
        raise OutputStateError(f"{folder}: is {kind_of(info.st_mode)}, not a folder; {ADVICE}")
    return True


def open_state_file(path: Path, create: bool = True) -> int:
    """A descriptor (read and write) of the state file ``path``, never a link followed, a FIFO
    waited on or a file truncated before it was checked; the caller closes it.

    Raises FileNotFoundError (not there and not ``create``), OutputStateError (not a regular
    file of ours alone) or another OSError.
    """
    flags = (os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
             | (os.O_CREAT if create else 0))
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OutputStateError(f"{path}: is a symbolic link; {ADVICE}") from None
        if exc.errno in (errno.EISDIR, errno.ENXIO, errno.ENODEV, errno.EOPNOTSUPP):
            raise OutputStateError(f"{path}: is not a regular file; {ADVICE}") from None
        if exc.errno == errno.ENOENT and not create:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OutputStateError(f"{path}: is {kind_of(info.st_mode)}, not a regular file; "
                                   f"{ADVICE}")
        if info.st_nlink > 1:
            raise OutputStateError(f"{path}: has {info.st_nlink} names (a hard link to a file "
                                   f"elsewhere?); {ADVICE}")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_state(path: Path, cap: int) -> OpenFile:
    """Open the state file ``path`` for reading through the door; raises FileNotFoundError,
    OutputStateError (a link, not a regular file, past ``cap``) or another OSError."""
    try:
        return open_file(path, cap)
    except Refused as exc:
        raise OutputStateError(f"{path}: {exc.detail}; {ADVICE}") from None


def bounded_lines(handle: OpenFile, end: int | None = None,
                  line_cap: int | None = None) -> Iterator[bytes]:
    """The lines of ``handle`` up to byte ``end`` (its size when None), streamed: never a
    read past that, whatever the file holds; the descriptor is closed at the end.

    A line longer than ``line_cap`` bytes (when given) is ManifestError naming the file and
    the line: it is never read into memory whole (a sparse file of gigabytes of zeros)."""
    fd, handle.fd = handle.fd, -1
    remaining = handle.size if end is None else end
    with os.fdopen(fd, "rb") as reader:
        number = 0
        while remaining > 0:
            limit = remaining if line_cap is None else min(remaining, line_cap + 1)
            line = reader.readline(limit)
            if not line:
                return
            number += 1
            if line_cap is not None and len(line) > line_cap:
                raise ManifestError(f"{handle.path}: line {number}: longer than "
                                    f"{line_cap:,} bytes, which no record of ours is")
            remaining -= len(line)
            yield line
