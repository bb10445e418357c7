"""Reading an original: once, as a regular file, never through a link swapped in after the scan.

The scan saw a regular file; by the time a worker opens it, it may be a symlink to somewhere
outside the source tree, a FIFO (whose ``open`` would block forever) or a device.  Opening with
``O_NOFOLLOW | O_NONBLOCK`` and checking the open descriptor closes both holes: a link fails to
open, a FIFO opens at once and is refused by ``fstat``.  The bytes read are the bytes that are
hashed and decoded, so a rewrite between two opens cannot pair new pixels with an old digest.
"""

from __future__ import annotations

import os

from .door import OpenFile, Refused, open_file
from .errors import BadImage, ManifestError, SourceUnavailableError
from .jsonmodel import shown
from .records import EDGE_BYTES

UNCAPPED = 1 << 62


def open_original(path: str, follow_symlinks: bool, cap: int = UNCAPPED) -> OpenFile:
    """Open an original through the door; raises BadImage (``not_a_file``, ``too_large``) or
    OSError."""
    try:
        return open_file(path, cap, follow_symlinks=follow_symlinks)
    except Refused as exc:
        raise _as_bad_image(exc) from None


def open_regular(path: str, follow_symlinks: bool) -> tuple[int, os.stat_result]:
    """(fd, its stat) of a regular file opened through the door; the caller closes the fd."""
    handle = open_original(path, follow_symlinks)
    fd, handle.fd = handle.fd, -1
    return fd, handle.info


def _as_bad_image(exc: Refused) -> BadImage:
    if exc.reason == "link":
        return BadImage("not_a_file", "is a symbolic link now (source.follow_symlinks is false)")
    if exc.reason == "changed":
        return BadImage("unreadable", exc.detail)
    if exc.reason == "too_large":
        return BadImage("too_large", exc.detail)
    return BadImage("not_a_file", exc.detail)


def read_original(path: str, follow_symlinks: bool, cap: int = UNCAPPED
                  ) -> tuple[bytes, os.stat_result]:
    """All bytes of a regular file, read through one descriptor."""
    with open_original(path, follow_symlinks, cap) as handle:
        try:
            return handle.read(), handle.info
        except Refused as exc:
            raise _as_bad_image(exc) from None


def read_edges(path: str, follow_symlinks: bool) -> tuple[int, bytes, bytes, int]:
    """(size, first 64 KiB, last 64 KiB, mtime_ns): the parts ``edges_digest_of`` takes."""
    with open_original(path, follow_symlinks) as handle:
        size = handle.size
        head = os.pread(handle.fd, EDGE_BYTES, 0)
        tail = os.pread(handle.fd, EDGE_BYTES, max(EDGE_BYTES, size - EDGE_BYTES)) \
            if size > EDGE_BYTES else b""
        return size, head, tail, handle.info.st_mtime_ns


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
    data, _ = read_original(original_path(root, relpath), False, max_bytes)
    return data
