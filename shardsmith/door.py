"""The one guarded door through which shardsmith reads every file (docs/design.md, invariant 11).

Originals, annotation files, manifests, sample indexes, shard indexes, shard lists, label maps,
configs and the shards a reader serves all come in through ``open_file``.  Any of them may be a
symlink to somewhere else, a FIFO whose ``open`` blocks forever, ``/dev/zero`` (endless), or a
file swapped in after it was listed.  So the door:

1. opens without following a final symlink (unless asked) and without blocking (``O_NONBLOCK``:
   a FIFO opens at once and is refused in step 2);
2. checks the open descriptor (``fstat``): a regular file, not larger than the cap of its kind,
   and, when the caller knows what it expects (the scan's inode and size), that identity;
3. reads within the size ``fstat`` gave and that cap: a file that grows while read is refused,
   never read without bound.

A refusal is a ``Refused`` with a short ``reason`` (``link``, ``not_a_file``, ``too_large``,
``changed``) that each caller turns into its own error: a reject of the image, a ``ManifestError``,
a corrupt sample.  A missing or unreadable file stays an ``OSError``.  An object-storage backend
implements the same two calls (``open_file``, ``read_file``) for its URLs.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .errors import ShardsmithError

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30

# Caps per kind of file: far above anything we write (so a real file never meets them) and low
# enough that a hostile one cannot exhaust memory.  Originals have no fixed cap: theirs is the
# decode budget (``image.max_decoded_mb``), since no supported format packs more pixels into a
# file than it holds bytes once decoded, BMP and raw TIFF being the 1:1 cases.
MANIFEST_CAP = 256 * MIB
CONFIG_CAP = 1 * MIB  # a hand-written job file is a few KiB
ANNOTATION_CAP = 64 * MIB  # one image's own file (YOLO, VOC, LabelMe, mask PNG)
SHARED_ANNOTATION_CAP = 1 * GIB  # a labels CSV for the whole tree (COCO: limits.COCO_CAP)
SHARD_LIST_CAP = 64 * MIB
LABEL_MAP_CAP = 16 * MIB
STATE_CAP = 64 * MIB  # our own lock and journal head
# One read of a chunked copy or hash (a ranged GET of an object): memory stays at one chunk,
# Ctrl-C stops a copy within ~10 ms, and a multiple of a tar block.
CHUNK = 8 * MIB
FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class Refused(ShardsmithError):
    """A file the door will not read: ``reason`` is ``link``, ``not_a_file``, ``too_large`` or
    ``changed``; ``detail`` says why in words, without the path (the caller adds it)."""

    exit_code = 2

    def __init__(self, reason: str, detail: str, path: str = ""):
        super().__init__(f"{path}: {detail}" if path else detail)
        self.reason = reason
        self.detail = detail
        self.path = path


@dataclass(frozen=True, slots=True)
class Identity:
    """What a listing saw of a file: its inode number and size (``st_dev`` is left out: it
    differs between NFS clients, so a worker on another host would refuse good files)."""

    inode: int
    size: int


class OpenFile:
    """A regular file opened through the door: its descriptor, ``size`` and ``stat``."""

    __slots__ = ("fd", "path", "info", "size", "cap")

    def __init__(self, fd: int, path: str, info: os.stat_result, cap: int):
        self.fd = fd
        self.path = path
        self.info = info
        self.size = info.st_size
        self.cap = cap

    def read(self) -> bytes:
        """Every byte, in as few reads as the size ``fstat`` gave; ``Refused`` (``changed``)
        when the file grew since (a file being written is read once it is finished)."""
        chunks, remaining = [], self.size
        while remaining > 0 and (chunk := os.read(self.fd, remaining)):
            chunks.append(chunk)
            remaining -= len(chunk)
        if remaining > 0:
            raise Refused("changed", f"shrank below the {self.size:,} bytes it had when "
                          "opened (being rewritten?)", self.path)
        if os.read(self.fd, 1):
            raise Refused("changed", f"grew past the {self.size:,} bytes it had when opened "
                          "(still being written?)", self.path)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def stream(self) -> io.BufferedReader:
        """A buffered reader that takes over the descriptor (closing it closes the file)."""
        fd, self.fd = self.fd, -1
        return os.fdopen(fd, "rb")

    def pread(self, length: int, offset: int) -> bytes:
        """``length`` bytes at ``offset`` (fewer at the end of the file)."""
        if offset < 0 or length < 0 or offset + length > self.cap:
            raise Refused("too_large", f"a read of {length:,} bytes at {offset:,} is out of "
                          "bounds", self.path)
        return os.pread(self.fd, length, offset)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> OpenFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_file(path: str | os.PathLike, cap: int, *, follow_symlinks: bool = False,
              expect: Identity | None = None, dir_fd: int | None = None) -> OpenFile:
    """Open ``path`` for reading through the door; the caller closes it (``with``).

    ``cap``: the most bytes a file of its kind may hold (``Refused`` ``too_large`` above it, before
    a byte is read); ``expect``: the identity a listing saw (``Refused`` ``changed`` when the
    descriptor's differs); ``dir_fd``: ``path`` is relative to that directory.
    Raises ``Refused`` or ``OSError`` (a missing or unreadable file).
    """
    guarded = getattr(path, "open_guarded", None)
    if guarded is not None:  # an object in a bucket (storage.ObjectPath): no descriptor
        return guarded(cap, None if expect is None else expect.size)
    path = os.fspath(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= os.O_NOFOLLOW
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks:
            raise Refused("link", "is a symbolic link (not followed)", path) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Refused("not_a_file", f"is not a regular file ({kind_of(info.st_mode)})", path)
        if info.st_size > cap:
            raise Refused("too_large", f"{info.st_size:,} bytes is more than the "
                          f"{cap:,} allowed for it (not read)", path)
        if expect is not None and (info.st_ino, info.st_size) != (expect.inode, expect.size):
            raise Refused("changed", "is not the file the listing saw (another inode or size)",
                          path)
    except BaseException:
        os.close(fd)
        raise
    return OpenFile(fd, path, info, cap)


def read_file(path: str | os.PathLike, cap: int, *, follow_symlinks: bool = False,
              expect: Identity | None = None) -> bytes:
    """Every byte of ``path`` through the door (see ``open_file``)."""
    with open_file(path, cap, follow_symlinks=follow_symlinks, expect=expect) as handle:
        return handle.read()


def chunks(handle: Any, end: int, start: int = 0, size: int | None = None) -> Iterator[bytes]:
    """The bytes of ``handle`` (an ``OpenFile``, an object's ``ObjectFile``, or a descriptor)
    from ``start`` to ``end`` in reads of at most ``size`` (``CHUNK``); fewer when the file
    ends first (the caller compares what it got with what it expected)."""
    read = handle.pread if hasattr(handle, "pread") else (
        lambda length, offset: os.pread(handle, length, offset))
    size = size or CHUNK
    while start < end and (data := read(min(size, end - start), start)):
        yield data
        start += len(data)


def sha256_of(handle: Any, end: int, start: int = 0) -> str:
    """The sha256 of the bytes ``chunks`` reads from ``handle`` between ``start`` and ``end``."""
    digest = hashlib.sha256()
    for data in chunks(handle, end, start):
        digest.update(data)
    return digest.hexdigest()


def open_beneath(root: str, relpath: str, cap: int) -> OpenFile:
    """Open ``root/relpath`` walking it one component at a time, no symlink anywhere on the way
    (``walk_folders``): a folder swapped for a link to somewhere else after the scan is refused
    ``link``.  Slower than ``open_file`` by one open a component; callers use it only when the
    fast path's identity check failed."""
    parts = relpath.split("/")
    if not relpath or any(part in ("", ".", "..") for part in parts):
        raise Refused("not_a_file", "is not a plain relative path", relpath)
    path = os.path.join(root, relpath)
    fd = walk_folders(os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)),
                      parts[:-1], path)
    try:
        try:
            handle = open_file(parts[-1], cap, dir_fd=fd)
        except Refused as exc:
            raise Refused(exc.reason, exc.detail, path) from None
        handle.path = path
        return handle
    finally:
        os.close(fd)


def walk_folders(fd: int, parts: list[str] | tuple[str, ...], path: str) -> int:
    """A descriptor of the folder ``parts`` below the open folder ``fd`` (taken over: closed
    here), opened one part at a time with ``O_NOFOLLOW`` (on a whole path it checks the last
    name only): a link or a non-folder on the way is refused ``link`` for ``path``, naming the
    folder from ``fd``; any other error is raised as it is."""
    try:
        for depth, part in enumerate(parts, 1):
            try:
                inner = os.open(part, FOLDER_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    folder = "/".join(parts[:depth])  # named from the root: unambiguous
                    raise Refused("link", f"folder {folder!r} on its path is a symbolic link "
                                  "or not a folder (not followed)", path) from None
                raise
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"
