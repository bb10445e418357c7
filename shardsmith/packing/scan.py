"""Walk the source tree and list the originals to pack, in a deterministic order.

On a NAS every directory listing and every ``stat`` is a network round trip, so the walk goes
breadth first and lists the directories of one level, and stats their files, on a pool of
threads: the round trips overlap instead of adding up.  The result is sorted, so it is the
same whatever finished first.  The walk is iterative: depth is not limited by the stack.

A file is stat'ed by its name in its folder, through a descriptor of the folder opened once
per batch (``O_PATH``: no open request reaches the filesystem), not by its path from the root:
the kernel then looks up one name instead of every folder on the way.  A mount that caches no
attributes (NFS ``noac``, a FUSE mount with ``attr_timeout=0``) answers each of those lookups
with a round trip: 2 requests a file instead of 3 through ``scripts/slowfs.py``.

Memory: the result is a ``SourceTable`` of columns (the paths, and NumPy arrays of sizes,
mtimes, inode numbers and labels), about 100 bytes a file instead of several Python objects
per file.

Each file's inode number and size travel to the worker that reads it (``SourceFile.identity``):
the worker opens the path and checks that the descriptor is that file.  A folder on the path
swapped for a symlink after the scan leads to another file, which fails the check; the worker
then walks the path again folder by folder without following links (``originals.open_source``).
"""

from __future__ import annotations

import bisect
import fnmatch
import hashlib
import itertools
import logging
import operator
import os
import stat
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple

import numpy as np

from ..annotations.sources import annotation_reason, object_etag, read_labels, read_shared
from ..config import SourceConfig
from ..door import Identity
from ..errors import ConfigError
from ..ordered import in_order
from ..storage import Location, StoreError, check_key, is_url

log = logging.getLogger(__name__)

SCAN_THREADS = 16
STAT_BATCH = 256
# A folder opened only to stat names in it: no read permission needed, no open request to a
# FUSE or network filesystem (Linux); elsewhere a plain read-only open of the folder.
_FOLDER_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | getattr(os, "O_DIRECTORY", 0) \
    | getattr(os, "O_CLOEXEC", 0)
_STAT_IN_FOLDER = os.stat in os.supports_dir_fd
EXCLUDED_PATHS_KEPT = 1000  # per reason; the counts are always complete


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One original: its path relative to the source root (POSIX form) and what stat said
    (``inode``: -1 when unknown)."""

    relpath: str
    size: int
    mtime_ns: int
    label: int = -1
    inode: int = -1

    @property
    def identity(self) -> Identity | None:
        """The inode and size the scan saw, for the worker's open to check; None if unknown."""
        return Identity(self.inode, self.size) if self.inode >= 0 else None


@dataclass(frozen=True, eq=False)
class SourceTable:
    """The selected originals as columns, sorted by path; ``table[i]`` is a ``SourceFile``."""

    relpaths: list[str]
    sizes: np.ndarray  # int64
    mtimes: np.ndarray  # int64, ns
    labels: np.ndarray  # int32, -1 without labels
    # int64 (8 bytes a file in the driver); st_dev is left out: it differs between NFS
    # clients, so a Dask worker on another host would refuse good files.  -1: unknown.
    inodes: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.inodes is None:
            object.__setattr__(self, "inodes", np.full(len(self.relpaths), -1, np.int64))

    def __len__(self) -> int:
        return len(self.relpaths)

    def __getitem__(self, index: int) -> SourceFile:
        return SourceFile(self.relpaths[index], int(self.sizes[index]), int(self.mtimes[index]),
                          int(self.labels[index]), int(self.inodes[index]))

    def __iter__(self) -> Iterator[SourceFile]:
        return (self[index] for index in range(len(self)))

    @classmethod
    def of(cls, files: Iterable[SourceFile]) -> SourceTable:
        """A table of the given files (sorted by path)."""
        rows = sorted(files, key=lambda source: source.relpath)
        return cls([row.relpath for row in rows],
                   np.array([row.size for row in rows], np.int64),
                   np.array([row.mtime_ns for row in rows], np.int64),
                   np.array([row.label for row in rows], np.int32),
                   np.array([row.inode for row in rows], np.int64))

    def index_of(self, relpath: str) -> int | None:
        """Where ``relpath`` is in the table (a binary search: no index to keep)."""
        index = bisect.bisect_left(self.relpaths, relpath)
        return index if index < len(self) and self.relpaths[index] == relpath else None


@dataclass(frozen=True)
class ScanResult:
    """Selected files in sorted order, the class list, and everything left out (with why)."""

    files: SourceTable
    classes: tuple[str, ...]
    excluded: Counter = field(default_factory=Counter)
    unreadable: tuple[tuple[str, str], ...] = ()
    excluded_paths: dict[str, list[str]] = field(default_factory=dict)
    # (path, detail) of images whose row in the labels file is malformed, and of rows that
    # name no image (under the labels file's name): rejected with ``bad_annotation``.
    bad_annotations: tuple[tuple[str, str], ...] = ()
    # An s3:// source: its annotation objects (key -> size, ETag), from the listing.
    annotation_objects: dict[str, tuple[int, str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Directory:
    path: str
    relpath: str  # "" for the root
    ancestors: frozenset  # (st_dev, st_ino) of the directories above: symlink loops


class _Walk:
    """The state of one scan.  Threads only list and stat; this object is updated by the
    calling thread alone, from their results."""

    def __init__(self, config: SourceConfig, split_folders: tuple[str, ...] = ()):
        self.config = config
        self.split_folders = set(split_folders)
        self.annotations = config.annotations if config.annotations.enabled else None
        self.extensions = {"." + ext for ext in config.extensions}
        self.relpaths: list[str] = []
        self.sizes, self.mtimes, self.inodes = array("q"), array("q"), array("q")
        self.excluded: Counter = Counter()
        self.excluded_paths: dict[str, list[str]] = {}
        self.unreadable: list[tuple[str, str]] = []
        self.annotation_objects: dict[str, tuple[int, str]] = {}

    def exclude(self, reason: str, relpath: str) -> None:
        self.excluded[reason] += 1
        kept = self.excluded_paths.setdefault(reason, [])
        if len(kept) < EXCLUDED_PATHS_KEPT:
            kept.append(relpath)

    def sort(self, directory: _Directory, listing: _Listing | OSError,
             subdirectories: list[_Directory], folders: list[_Folder]) -> None:
        """Put each entry of a listing in its place: a directory to visit, a file to stat, or
        a reason it is left out.  The files to stat go to ``folders`` with their folder."""
        if isinstance(listing, OSError):
            self.unreadable.append((directory.relpath or ".",
                                    f"cannot list directory: {listing.strerror}"))
            return
        names, kinds, errors = listing
        files: list[str] = []
        # Sorted: which paths are kept as examples does not depend on the listing order.
        for at in sorted(range(len(names)), key=names.__getitem__):
            name, kind = names[at], kinds[at : at + 1]
            relpath = f"{directory.relpath}/{name}" if directory.relpath else name
            if name.startswith("."):
                self.exclude("hidden", relpath)
                continue
            if kind == b"e":
                self.unreadable.append((relpath, f"cannot stat: {errors[name].strerror}"))
                continue
            if kind in b"lFD" and not self.config.follow_symlinks:
                self.exclude("symlink", relpath)
                continue
            reason = None if self.annotations is None else annotation_reason(
                relpath, kind in b"dD", self.annotations)
            if reason is not None:
                self.exclude(reason, relpath)
                continue
            if self.split_folders and not directory.relpath and kind in b"dD" and \
                    name not in self.split_folders:
                self.exclude("not in a split folder", relpath)
                continue
            if kind in b"dD":
                subdirectories.append(_Directory(os.path.join(directory.path, name), relpath,
                                                 directory.ancestors))
            elif kind not in b"fF":
                self.exclude("not a regular file", relpath)
            elif os.path.splitext(name)[1].lower() not in self.extensions:
                self.exclude("extension", relpath)
            elif not _selected(relpath, self.config):
                self.exclude("include/exclude pattern", relpath)
            else:
                files.append(relpath)
        if files:
            folders.append(_Folder(directory.path, files))

    def add_files(self, relpaths: list[str], stats: _Stats) -> None:
        for at, relpath in enumerate(relpaths):
            if relpath in stats.errors:
                self.unreadable.append((relpath, f"cannot stat: {stats.errors[relpath].strerror}"))
            elif stat.S_ISREG(stats.modes[at]):
                self.relpaths.append(relpath)
                self.sizes.append(stats.sizes[at])
                self.mtimes.append(stats.mtimes[at])
                self.inodes.append(stats.inodes[at])
            else:
                self.exclude("not a regular file", relpath)

    def enter(self, directory: _Directory, info: os.stat_result | OSError) -> _Directory | None:
        """The directory with itself among its ancestors, or None (a symlink loop)."""
        if isinstance(info, OSError):
            self.unreadable.append((directory.relpath, f"cannot stat: {info.strerror}"))
            return None
        identity = (info.st_dev, info.st_ino)
        if identity in directory.ancestors:
            self.exclude("symlink loop", directory.relpath)
            return None
        return _Directory(directory.path, directory.relpath, directory.ancestors | {identity})


def scan(root: Location, config: SourceConfig, threads: int = SCAN_THREADS,
         split_folders: tuple[str, ...] = ()) -> ScanResult:
    """List the image files under ``root`` that the config selects.

    Hidden entries are skipped; symlinks are skipped unless ``follow_symlinks``; annotation
    files and mask trees are left out (``annotation``).  Files that do not match the extension
    or glob filters are counted in ``excluded`` by reason (with the first paths of each
    reason), files and directories that cannot be read are returned in ``unreadable``.
    A store's root (``is_url``) is listed instead (``_list_objects``).
    With ``split_folders`` (``splits.folder``), the top folder is a split and the class
    folder is the one below it.  With ``labels: file``, the labels come from the labels file.
    """
    if is_url(root):
        return _finish(_list_objects(root, config, threads, split_folders), root, config,
                       split_folders)
    walk = _Walk(config, split_folders)
    root_info = os.stat(root)
    level = [_Directory(str(root), "", frozenset({(root_info.st_dev, root_info.st_ino)}))]
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="shardsmith-scan") as pool:
        while level:
            subdirectories: list[_Directory] = []
            folders: list[_Folder] = []
            listings = in_order(partial(pool.submit, _list),
                                [directory.path for directory in level], 2 * threads)
            for directory, listing in zip(level, listings, strict=True):
                walk.sort(directory, listing, subdirectories, folders)
            batches = _batches(folders, STAT_BATCH)
            stats = in_order(partial(pool.submit, _stat_batch), batches, 2 * threads)
            for batch, batch_stats in zip(batches, stats, strict=True):
                walk.add_files([relpath for folder in batch for relpath in folder.relpaths],
                               batch_stats)
            del folders, batches
            if config.follow_symlinks:  # only links can make a loop
                infos = pool.map(_stat, (directory.path for directory in subdirectories))
                entered = [walk.enter(directory, info)
                           for directory, info in zip(subdirectories, infos, strict=True)]
                subdirectories = [directory for directory in entered if directory is not None]
            level = subdirectories
    return _finish(walk, root, config, split_folders)


def _finish(walk: _Walk, root: Location, config: SourceConfig,
            split_folders: tuple[str, ...]) -> ScanResult:
    """The walk's files as a sorted table with labels, and what was left out."""
    depth = 1 if split_folders else 0
    table = _table(walk, config, depth)
    bad: list[tuple[str, str]] = []
    if config.labels == "file":
        table, classes, bad = _labels_from_file(table, walk, root, config)
    else:
        classes = tuple(sorted({path.split("/")[depth] for path in table.relpaths})) \
            if config.labels == "folders" else ()
        if classes:
            label_of = {name: index for index, name in enumerate(classes)}
            table.labels[:] = [label_of[path.split("/")[depth]] for path in table.relpaths]
    paths = {reason: sorted(kept) for reason, kept in sorted(walk.excluded_paths.items())}
    return ScanResult(table, classes, +walk.excluded, tuple(sorted(walk.unreadable)), paths,
                      tuple(bad), walk.annotation_objects)


def _labels_from_file(table: SourceTable, walk: _Walk, root: Location,
                      config: SourceConfig
                      ) -> tuple[SourceTable, tuple[str, ...], list[tuple[str, str]]]:
    """Labels from the labels file: images it does not name are left out (``not in the labels
    file``), images whose row is malformed are rejected; classes sorted by name."""
    where = config.annotations.labels
    rows = read_labels(read_shared(root, where, follow_symlinks=config.follow_symlinks), where)
    keep = np.zeros(len(table), bool)
    bad = [(where, problem) for problem in rows.problems]
    for at, relpath in enumerate(table.relpaths):
        if relpath in rows.labels:
            keep[at] = True
        elif relpath in rows.bad:
            bad.append((relpath, rows.bad[relpath]))
        else:
            walk.exclude("not in the labels file", relpath)
    present = set(table.relpaths)
    missing = sum(1 for relpath in rows.labels if relpath not in present)
    if missing:
        log.info("%s: %d rows name no image the scan selected (left out)", where, missing)
    relpaths = [relpath for relpath, taken in zip(table.relpaths, keep, strict=True) if taken]
    classes = tuple(sorted({rows.labels[relpath] for relpath in relpaths}))
    label_of = {name: index for index, name in enumerate(classes)}
    labels = np.array([label_of[rows.labels[relpath]] for relpath in relpaths], np.int32)
    return SourceTable(relpaths, table.sizes[keep], table.mtimes[keep], labels,
                       table.inodes[keep]), classes, bad


def _table(walk: _Walk, config: SourceConfig, depth: int = 0) -> SourceTable:
    """The found files as sorted columns (files outside class folders left out, with why);
    ``depth`` is the number of folders above the class folder (1 under split folders).

    The walk finds the files of a tree whose files all lie at one depth (the usual
    ``class/image`` layout) already in path order: then the columns are the walk's own
    buffers, neither sorted nor copied (a sort's index and copies cost ~70 bytes a file
    at the peak of a pack).
    """
    relpaths = walk.relpaths
    columns = [np.frombuffer(column, np.int64) if len(relpaths) else np.zeros(0, np.int64)
               for column in (walk.sizes, walk.mtimes, walk.inodes)]
    if not all(map(operator.le, relpaths, itertools.islice(relpaths, 1, None))):
        order = np.argsort(np.array(relpaths, dtype=object), kind="stable")
        relpaths = [relpaths[index] for index in order]
        columns = [column[order] for column in columns]
    sizes, mtimes, inodes = columns
    if config.labels == "folders":
        nested = np.fromiter((path.count("/") > depth for path in relpaths), bool,
                             len(relpaths))
        if not nested.all():
            for path in (path for path, keep in zip(relpaths, nested, strict=True) if not keep):
                walk.exclude("not in a class folder", path)
            relpaths = [path for path, keep in zip(relpaths, nested, strict=True) if keep]
            sizes, mtimes, inodes = sizes[nested], mtimes[nested], inodes[nested]
    return SourceTable(relpaths, sizes, mtimes, np.full(len(relpaths), -1, np.int32), inodes)


class _Listing(NamedTuple):
    """A directory's entries, compact: names, a kind byte each (f file, d dir, F and D a link
    to one, l another link, o anything else, e a stat error), and the errors by name."""

    names: list[str]
    kinds: bytes
    errors: dict[str, OSError]


def _list(path: str) -> _Listing | OSError:
    names, kinds, errors = [], bytearray(), {}
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                names.append(entry.name)
                try:
                    kinds += _kind(entry)
                except OSError as exc:
                    kinds += b"e"
                    errors[entry.name] = exc
    except OSError as exc:
        return exc
    return _Listing(names, bytes(kinds), errors)


def _kind(entry: os.DirEntry) -> bytes:
    if entry.is_symlink():
        if entry.is_dir():
            return b"D"
        return b"F" if entry.is_file() else b"l"
    if entry.is_dir(follow_symlinks=False):
        return b"d"
    return b"f" if entry.is_file(follow_symlinks=False) else b"o"


def _stat(path: str) -> os.stat_result | OSError:
    try:
        return os.stat(path)
    except OSError as exc:
        return exc


class _Stats(NamedTuple):
    """(mode, size, mtime, inode) of a batch of files as compact columns, and the errors by
    path."""

    modes: array
    sizes: array
    mtimes: array
    inodes: array
    errors: dict[str, OSError]


class _Folder(NamedTuple):
    """Files of one folder to stat: the folder's path (as walked) and their relative paths."""

    path: str
    relpaths: list[str]


def _stat_batch(folders: list[_Folder]) -> _Stats:
    """Stat each file by its name in its folder (one folder descriptor per folder of the
    batch); follows a link only if one got this far (``follow_symlinks``)."""
    stats = _Stats(array("q"), array("q"), array("q"), array("q"), {})
    for folder in folders:
        try:
            descriptor = os.open(folder.path, _FOLDER_FLAGS) if _STAT_IN_FOLDER else None
        except OSError:
            descriptor = None  # gone or refused: each path is stat'ed and fails on its own
        try:
            _stat_names(folder, descriptor, stats)
        finally:
            if descriptor is not None:
                os.close(descriptor)
    return stats


def _stat_names(folder: _Folder, descriptor: int | None, stats: _Stats) -> None:
    """Append what stat says of each file of ``folder`` to ``stats`` (by name through the
    folder's ``descriptor``, or by path without one)."""
    for relpath in folder.relpaths:
        name = relpath.rpartition("/")[2]
        try:
            info = os.stat(name, dir_fd=descriptor) if descriptor is not None \
                else os.stat(os.path.join(folder.path, name))
        except OSError as exc:
            stats.errors[relpath] = exc
            info = None
        stats.modes.append(info.st_mode if info else 0)
        stats.sizes.append(info.st_size if info else 0)
        stats.mtimes.append(info.st_mtime_ns if info else 0)
        # A 64-bit inode number above 2**63 (some FUSE and network mounts) does not fit the
        # column: kept as unknown, so that file is checked by the walk alone.
        stats.inodes.append(info.st_ino if info and info.st_ino < 1 << 63 else -1)


def _batches(folders: list[_Folder], size: int) -> list[list[_Folder]]:
    """The files of ``folders``, in order, as batches of at most ``size`` files (a big folder
    split over several batches, small ones sharing one)."""
    batches: list[list[_Folder]] = []
    batch: list[_Folder] = []
    room = size
    for folder in folders:
        start = 0
        while start < len(folder.relpaths):
            part = folder.relpaths[start : start + room]
            batch.append(_Folder(folder.path, part))
            start, room = start + len(part), room - len(part)
            if room == 0:
                batches.append(batch)
                batch, room = [], size
    if batch:
        batches.append(batch)
    return batches


def _selected(relpath: str, config: SourceConfig) -> bool:
    if config.include and not any(fnmatch.fnmatchcase(relpath, p) for p in config.include):
        return False
    return not any(fnmatch.fnmatchcase(relpath, p) for p in config.exclude)


def _list_objects(root: Location, config: SourceConfig, threads: int,
                  split_folders: tuple[str, ...]) -> _Walk:
    """The objects under the store's prefix ``root`` that the config selects, by the rules
    of ``scan``, from its listings alone (no object is read): one listing of the top level,
    then each top-level prefix listed in full on a pool of threads (``find``), so the round
    trips of a bucket's class folders overlap.  Size and ``LastModified`` (the mtime) come
    from the listing; the ETag goes in the ``inodes`` column (``object_tag``), so the sources
    fingerprint changes with it and the worker checks it is the object it reads.

    Memory: one top-level prefix's listing at a time per thread (s3fs pages it by 1,000
    keys) and the columns the scan keeps, as for a local tree."""
    walk = _Walk(config, split_folders)
    try:
        top = root.listing()
    except StoreError:
        raise  # the store failed, not the source's name: exit 1, rerun (docs/storage.md)
    except OSError as exc:
        raise ConfigError(f"source.path: {root}: cannot list it: {exc.strerror}") from None
    if not top:
        raise ConfigError(f"source.path: {root}: no object under this prefix")
    names, entries = set(), {}
    for name, entry in top.items():
        if entry.get("type") != "directory":
            entries[name] = entry
        elif name.startswith("."):
            walk.exclude("hidden", name)
        elif split_folders and name not in split_folders:
            walk.exclude("not in a split folder", name)
        else:
            names.add(name)

    # Each top-level prefix is listed as the keys that start with ``root/NAME/``, and only
    # those are kept: a key with an empty segment right under the root (``root//x.jpg``)
    # comes back as a common prefix that names the root itself once its trailing slash is
    # taken off, and listing that in full gave every key twice.  Its keys (``NAME`` empty)
    # are listed once, and each is unreadable (``_sort_object``).
    def listing(name: str) -> dict[str, dict] | OSError:
        try:
            return root.find(f"{name}/")
        except OSError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="shardsmith-list") as pool:
        found = [entries, *in_order(partial(pool.submit, listing), sorted(names), 2 * threads)]
        for name, objects in zip([None, *sorted(names)], found, strict=True):
            if isinstance(objects, StoreError):  # a prefix left out would read as removed
                raise objects
            if isinstance(objects, OSError):
                walk.unreadable.append((name, f"cannot list: {objects.strerror}"))
                continue
            under = "" if name is None else f"{name}/"
            for relpath, entry in objects.items():
                if entry.get("type", "file") == "file" and relpath.startswith(under):
                    _sort_object(walk, relpath, entry)
    return walk


def _sort_object(walk: _Walk, relpath: str, entry: dict) -> None:
    """Keep the object ``relpath`` as a file of the walk, or say why it is left out."""
    if relpath.endswith("/") or not relpath:  # the prefix's own key is "" here
        if not int(entry.get("size") or 0):
            return  # an empty "folder marker" (a console's "Create folder"): a folder
    if any(part.startswith(".") for part in relpath.split("/")):
        walk.exclude("hidden", relpath)
        return
    try:
        check_key(relpath, relpath)
    except ConfigError:
        walk.unreadable.append((relpath, "not a plain object key (an empty, '.' or '..' "
                                "segment, or a control character)"))
        return
    if walk.annotations is not None and annotation_reason(relpath, False, walk.annotations):
        walk.exclude("annotation", relpath)  # kept for the annotations' change detection
        walk.annotation_objects[relpath] = (int(entry.get("size") or 0), object_etag(entry))
        return
    if os.path.splitext(relpath)[1].lower() not in walk.extensions:
        walk.exclude("extension", relpath)
    elif not _selected(relpath, walk.config):
        walk.exclude("include/exclude pattern", relpath)
    else:
        walk.relpaths.append(relpath)
        walk.sizes.append(int(entry.get("size") or 0))
        walk.mtimes.append(object_mtime(entry))
        walk.inodes.append(object_tag(entry))


def object_mtime(entry: dict) -> int:
    """An object's ``LastModified`` (from a listing or a HEAD) in ns since the epoch."""
    modified = entry.get("LastModified")
    return int(modified.timestamp()) * 1_000_000_000 if modified is not None else 0


def object_tag(entry: dict) -> int:
    """63 bits of an object's ETag (the same for a listing and a HEAD of one version):
    the ``inodes`` column of an object, its identity for the worker.  -1 without one."""
    etag = object_etag(entry)
    if not etag:
        return -1
    return int.from_bytes(hashlib.blake2b(etag.encode(), digest_size=8).digest()) >> 1
