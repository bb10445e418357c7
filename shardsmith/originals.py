"""Reading an original: once, as a regular file, never through a link swapped in after the scan.

The scan saw a regular file; by the time a worker opens it, it may be a symlink to somewhere
outside the source tree, a FIFO (whose ``open`` would block forever) or a device.  Opening with
``O_NOFOLLOW | O_NONBLOCK`` and checking the open descriptor closes both holes: a link fails to
open, a FIFO opens at once and is refused by ``fstat``.  The bytes read are the bytes that are
hashed and decoded, so a rewrite between two opens cannot pair new pixels with an old digest.
"""

from __future__ import annotations

import errno
import os
import stat

from .errors import BadImage, ManifestError, SourceUnavailableError
from .jsonmodel import shown
from .records import EDGE_BYTES


def open_regular(path: str, follow_symlinks: bool) -> tuple[int, os.stat_result]:
    """Open ``path`` for reading; returns (fd, its stat).  Raises BadImage or OSError."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks:
            raise BadImage("not_a_file", "is a symbolic link now (source.follow_symlinks is "
                           "false)") from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise BadImage("not_a_file", f"is not a regular file now ({_kind(info.st_mode)})")
    return fd, info


def read_original(path: str, follow_symlinks: bool) -> tuple[bytes, os.stat_result]:
    """All bytes of a regular file, read through one descriptor."""
    fd, info = open_regular(path, follow_symlinks)
    try:
        return _read_all(fd, info.st_size), info
    finally:
        os.close(fd)


def _read_all(fd: int, size: int) -> bytes:
    """To EOF (a file that grew since its stat is read whole), in as few reads as its size."""
    chunks, remaining = [], size
    while chunk := os.read(fd, max(remaining, 1 << 20)):
        chunks.append(chunk)
        remaining -= len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def read_edges(path: str, follow_symlinks: bool) -> tuple[int, bytes, bytes, int]:
    """(size, first 64 KiB, last 64 KiB, mtime_ns): the parts ``edges_digest_of`` takes."""
    fd, info = open_regular(path, follow_symlinks)
    try:
        size = info.st_size
        head = os.pread(fd, EDGE_BYTES, 0)
        tail = os.pread(fd, EDGE_BYTES, max(EDGE_BYTES, size - EDGE_BYTES)) \
            if size > EDGE_BYTES else b""
    finally:
        os.close(fd)
    return size, head, tail, info.st_mtime_ns


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def source_root(recorded: str) -> str:
    """The source root a manifest records, as a real path; SourceUnavailableError when it is
    not a directory here (the NAS is not mounted, or the dataset was copied elsewhere)."""
    if not recorded or not os.path.isabs(recorded):
        raise SourceUnavailableError("the manifest records no absolute source path (packed by "
                                     "an earlier version?): the originals cannot be found")
    if not os.path.isdir(recorded):
        raise SourceUnavailableError(f"the originals are not reachable: {recorded} (the source "
                                     "the dataset was packed from) is not a directory here; "
                                     "mount it at that path and rerun")
    return os.path.realpath(recorded)


def original_path(root: str, relpath: str) -> str:
    """``root/relpath`` for a relative path read from a manifest or sample index (untrusted).

    Refused (ManifestError): an absolute path, an empty, ``.`` or ``..`` component, a NUL, or
    a path whose real location (symlinks resolved) is not under ``root`` (a real path).
    """
    if (not relpath or relpath.startswith("/") or "\0" in relpath
            or any(part in ("", ".", "..") for part in relpath.split("/"))):
        raise ManifestError(f"the path {shown(relpath)} is not a plain relative path under the "
                            "source (refused)")
    path = os.path.realpath(os.path.join(root, relpath))
    if os.path.commonpath([root, path]) != root or path == root:
        raise ManifestError(f"the path {shown(relpath)} leads out of the source {root} "
                            "(refused)")
    return path


def read_under_root(root: str, relpath: str, max_bytes: int) -> bytes:
    """The bytes of the original ``relpath`` under ``root`` (checked by ``original_path``).

    The checked real path is opened without following a link swapped in meanwhile; raises
    BadImage (not a regular file, larger than ``max_bytes``) or OSError.
    """
    fd, info = open_regular(original_path(root, relpath), follow_symlinks=False)
    try:
        if info.st_size > max_bytes:
            raise BadImage("too_large", f"{info.st_size:,} bytes: not read")
        return _read_all(fd, info.st_size)[:max_bytes]
    finally:
        os.close(fd)
