"""Reading an original: once, as a regular file, never through a link swapped in after the scan.

The scan saw a regular file; by the time a worker opens it, it may be a symlink to somewhere
outside the source tree, a FIFO (whose ``open`` would block forever) or a device, or one of the
folders on its path may have been swapped for a symlink.  Every original comes in through the
door (``door.open_file``): ``O_NOFOLLOW | O_NONBLOCK`` and checks on the open descriptor, so a
link fails to open and a FIFO opens at once and is refused by ``fstat``.

``O_NOFOLLOW`` guards the last name only.  For the folders above it, the worker checks that the
descriptor is the file the scan saw (its inode number and size, ``SourceFile.identity``); only
when it is not does it walk the path again one folder at a time without following links
(``door.open_beneath``), and only a refused walk rejects the file.  A walk that opens is a file
legitimately replaced or edited since the scan: that descriptor is used.  The inode does not
decide on its own because FUSE mounts without stable inode numbers and CIFS ``noserverino``
renumber them; ``st_dev`` is not compared at all (it differs between NFS clients, and Dask
workers on other hosts read the same tree).  The common case costs no extra system call.

Size: an original is refused ``too_large`` before a byte is read when it holds more bytes than
its decode budget (``image.max_decoded_mb``, ``original_cap``).  That never refuses a file the
decoder would take: the decode check counts the file's bytes plus its decoded pixels, so a file
over the budget fails it anyway, only after being read whole (a 1.5 GB sparse ``.jpg`` cost
1.6 GB of memory, a 2.6 GB one 5.4 GB).  And no supported format packs more pixels into a file
than it holds decoded (compressed formats hold fewer bytes; BMP and uncompressed TIFF are the
1:1 cases), so the cap is never the tighter limit on an image that fits the budget.

The bytes read are the bytes that are hashed and decoded, so a rewrite between two opens cannot
pair new pixels with an old digest.
"""

from __future__ import annotations

import errno
import functools
import os
from collections.abc import Callable, Mapping
from typing import Any

from ..config import ImageConfig
from ..dataset.records import EDGE_BYTES
from ..door import MIB, Identity, OpenFile, Refused, open_beneath, open_file
from ..errors import BadImage, ConfigError, ManifestError
from ..storage import BACKENDS, Location, is_url, location
from ..text import shown
from .scan import object_mtime, object_tag

UNCAPPED = 1 << 62
# The fast open found no file (or a non-folder) where the scan saw one: a folder on the way may
# have been swapped for a link to a folder that lacks it, which the walk names.
_WALK_AGAIN_ERRNOS = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)


def original_cap(config: ImageConfig) -> int:
    """The most bytes an original may hold: its decode budget (see the module docstring)."""
    return config.max_decoded_mb * MIB


def open_source(root: str, relpath: str, follow_symlinks: bool, cap: int = UNCAPPED,
                expect: Identity | None = None) -> OpenFile | ObjectOriginal:
    """Open the original ``root/relpath`` that the scan saw as ``expect`` (inode and size).

    Without ``follow_symlinks``, a descriptor that is not that file, or a refusal, has the
    path walked again folder by folder (``open_beneath``): a symlink on the way rejects it
    ``not_a_file`` naming the folder; a walk that opens returns that descriptor (the file was
    replaced or edited).  ``expect`` None (unknown) always walks.  With ``follow_symlinks``
    links are allowed anywhere and nothing is compared.  ``cap``: ``original_cap``, refused
    ``too_large`` before reading.  Raises BadImage or OSError.
    """
    budget = cap if cap != UNCAPPED else 0
    if is_url(root):
        return open_object(root, relpath, cap, expect)
    path = os.path.join(root, relpath)
    try:
        if follow_symlinks:
            return open_file(path, cap, follow_symlinks=True)
        if expect is not None:
            try:
                return open_file(path, cap, expect=expect)
            except Refused as exc:
                if exc.reason == "link":  # the file itself is a link: that is the whole story
                    raise
            except OSError as exc:
                if exc.errno not in _WALK_AGAIN_ERRNOS:
                    raise
        return open_beneath(root, relpath, cap)
    except Refused as exc:
        raise _as_bad_image(exc, budget) from None


class ObjectStat:
    """The fields of a stat an object has: its size, and its ``LastModified`` as the answer
    that gave its bytes said it (asked of the store by a HEAD when nothing was read yet), so
    the time recorded is that of the bytes read."""

    __slots__ = ("st_size", "_original")

    def __init__(self, size: int, original: ObjectOriginal):
        self.st_size = size
        self._original = original

    @property
    def st_mtime_ns(self) -> int:
        return self._original.mtime_ns()


class ObjectOriginal:
    """An original in a store, opened through the door (``open_guarded``, a handle like
    ``storage.ObjectFile``): ``info`` as a stat says it, and reads within its size (``fd``
    is -1: no descriptor).

    On S3, opened from the listing (``ObjectPath.open_listed``), no request is made until the
    first read, and every answer is checked against what the listing saw (size; ETag as
    ``tag``, -1 when unknown): the worker's read of an original is one GET, not a HEAD and a
    GET."""

    __slots__ = ("handle", "info", "size", "path", "fd", "tag")

    def __init__(self, handle: Any, tag: int = -1):
        self.handle = handle
        self.size = handle.size
        self.path = handle.path
        self.fd = -1
        self.tag = tag
        self.info = ObjectStat(handle.size, self)

    def read(self) -> bytes:
        return self._checked(self.handle.read)

    def pread(self, length: int, offset: int) -> bytes:
        return self._checked(self.handle.pread, length, offset)

    def mtime_ns(self) -> int:
        """``LastModified`` of the object whose bytes were read; a HEAD when none were."""
        if "LastModified" not in self.handle.head:
            info = self.handle.location.info()
            if int(info.get("size") or 0) != self.size:
                raise BadImage("unreadable", "is not the object the listing saw (another "
                               "size: rewritten since)")
            self.handle.head = dict(info)
            self._check_tag()
        return object_mtime(self.handle.head)

    def _checked(self, read: Callable[..., bytes], *args: int) -> bytes:
        try:
            data = read(*args)
        except Refused as exc:
            raise _as_bad_image(exc) from None
        self._check_tag()
        return data

    def _check_tag(self) -> None:
        if self.tag < 0:
            return
        found = object_tag(self.handle.head)
        if found < 0:  # not a rewrite: the store answers without the header
            raise BadImage("unreadable", "the store gave no ETag with the object, so it "
                           "cannot be told from one rewritten since the listing (which gave "
                           "one)")
        if found != self.tag:
            raise BadImage("unreadable", "is not the object the listing saw (another ETag: "
                           "rewritten since)")

    def close(self) -> None:
        self.handle.close()

    def __enter__(self) -> ObjectOriginal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# The worker's store client per source URL and storage options: one a process, not one an
# object (an s3 client holds a connection pool; making one costs ~30 ms).
_OBJECT_ROOTS: dict[tuple, Location] = {}
_STORAGE: dict[str, str] = {}


def use_storage(options: Mapping[str, str], backends: Mapping[str, Callable] = BACKENDS
                ) -> None:
    """The storage options (``storage:``) of the job this worker process runs, and the
    storage backends of its driver: a worker process starts with the built-in ones only, and
    one registered in the driver at run time (a script's, a test's) comes with the task."""
    _STORAGE.clear()
    _STORAGE.update(options)
    if any(BACKENDS.get(scheme) is not make for scheme, make in backends.items()):
        BACKENDS.update(backends)  # a closure sent by value is a new one each task
        _OBJECT_ROOTS.clear()  # locations the backend it replaces made


def object_root(url: str) -> Location:
    """The location of a source URL (its backend's), with this process's client for it."""
    key = (url, tuple(sorted(_STORAGE.items())))
    root = _OBJECT_ROOTS.get(key)
    if root is None:
        root = _OBJECT_ROOTS[key] = location(url, _STORAGE)
    return root


def open_object(root: str, relpath: str, cap: int = UNCAPPED,
                expect: Identity | None = None) -> ObjectOriginal:
    """Open the original ``relpath`` under the store's source ``root`` through the door:
    refused ``too_large`` over ``cap`` before a byte is read, ``unreadable`` when it is not
    the object the listing saw (another size or ETag: rewritten since); OSError when it is
    gone or the store cannot be reached.  Reads are ranged GETs, by this process alone.

    With the listing's ``expect`` (its size and ETag), nothing is asked at the open: the
    first read is the first request, and its answer is checked (``ObjectPath.open_listed``,
    where the backend has it).  Otherwise a HEAD gives the size and ETag first, as for any
    object."""
    budget = cap if cap != UNCAPPED else 0
    try:
        location = object_root(root) / relpath
    except ConfigError as exc:
        raise BadImage("not_a_file", str(exc)) from None
    try:
        # an empty object has no range to ask for; a backend without ``open_listed`` a HEAD
        if expect is not None and expect.size > 0 and hasattr(location, "open_listed"):
            return ObjectOriginal(location.open_listed(expect.size, cap), expect.inode)
        handle = open_file(location, cap, expect=expect)
    except Refused as exc:
        raise _as_bad_image(exc, budget) from None
    original = ObjectOriginal(handle, -1 if expect is None else expect.inode)
    original._check_tag()
    return original


def open_original(path: str, follow_symlinks: bool, cap: int = UNCAPPED) -> OpenFile:
    """Open an original through the door, last name only (no identity: ``open_source`` is the
    guarded open of a scanned file); raises BadImage (``not_a_file``, ``too_large``) or
    OSError."""
    try:
        return open_file(path, cap, follow_symlinks=follow_symlinks)
    except Refused as exc:
        raise _as_bad_image(exc) from None


def open_regular(path: str, follow_symlinks: bool,
                 cap: int = UNCAPPED) -> tuple[int, os.stat_result]:
    """(fd, its stat) of a regular file opened through the door (refused ``too_large`` over
    ``cap`` bytes); the caller closes the fd."""
    handle = open_original(path, follow_symlinks, cap)
    fd, handle.fd = handle.fd, -1
    return fd, handle.info


def _as_bad_image(exc: Refused, budget: int = 0) -> BadImage:
    """The reject a refusal of the door makes; ``budget``: the cap was ``original_cap``."""
    if exc.reason == "link":
        if exc.detail.startswith("folder"):  # a folder on the way (``open_beneath``)
            return BadImage("not_a_file", f"{exc.detail}; source.follow_symlinks is false")
        return BadImage("not_a_file", "is a symbolic link now (source.follow_symlinks is false)")
    if exc.reason == "changed":
        return BadImage("unreadable", exc.detail)
    if exc.reason == "too_large":
        if budget:
            return BadImage("too_large", f"holds more bytes than the {budget // MIB:,} MiB a "
                            "worker may use to decode it (image.max_decoded_mb): not read")
        return BadImage("too_large", exc.detail)
    return BadImage("not_a_file", exc.detail)


def read_all(handle: OpenFile) -> bytes:
    """Every byte of an opened original; BadImage (``unreadable``) when it grew while read."""
    try:
        return handle.read()
    except Refused as exc:
        raise _as_bad_image(exc) from None


def read_edges(handle: OpenFile) -> tuple[bytes, bytes]:
    """(first 64 KiB, last 64 KiB) of an opened original: with its size, the parts
    ``edges_digest_of`` takes."""
    size = handle.size
    read = handle.pread if handle.fd < 0 else functools.partial(os.pread, handle.fd)
    head = read(EDGE_BYTES, 0)
    tail = read(EDGE_BYTES, max(EDGE_BYTES, size - EDGE_BYTES)) if size > EDGE_BYTES else b""
    return head, tail


def check_relpath(relpath: str) -> None:
    """ManifestError unless ``relpath`` (from a manifest or sample index: untrusted) is a
    plain relative path: no leading ``/``, no empty, ``.`` or ``..`` component, no NUL."""
    if (not relpath or relpath.startswith("/") or "\0" in relpath
            or any(part in ("", ".", "..") for part in relpath.split("/"))):
        raise ManifestError(f"the path {shown(relpath)} is not a plain relative path under the "
                            "source (refused)")


def original_path(root: str, relpath: str) -> str:
    """``root/relpath`` for a relative path read from a manifest or sample index (untrusted).

    Refused (ManifestError): an absolute path, an empty, ``.`` or ``..`` component, a NUL, or
    a path whose real location (symlinks resolved) is not under ``root`` (a real path).
    """
    check_relpath(relpath)
    path = os.path.realpath(os.path.join(root, relpath))
    if os.path.commonpath([root, path]) != root or path == root:
        raise ManifestError(f"the path {shown(relpath)} leads out of the source {root} "
                            "(refused)")
    return path


def read_under_root(root: str, relpath: str, max_bytes: int) -> bytes:
    """The bytes of the original ``relpath`` under ``root`` (checked by ``original_path``).

    Its real path is opened one folder at a time from ``root`` with no link followed
    (``door.open_beneath``), so a folder swapped for a link between the check and the open is
    refused too; raises BadImage (not a regular file, larger than ``max_bytes``) or OSError.
    """
    inside = os.path.relpath(original_path(root, relpath), root)
    try:
        with open_beneath(root, inside, max_bytes) as handle:
            return handle.read()
    except Refused as exc:
        raise _as_bad_image(exc) from None
