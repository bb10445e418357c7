"""Walk the source tree and list the originals to pack, in a deterministic order.

On a NAS every directory listing and every ``stat`` is a network round trip, so the walk goes
breadth first and lists the directories of one level, and stats their files, on a pool of
threads: the round trips overlap instead of adding up.  The result is sorted, so it is the
same whatever finished first.  The walk is iterative: depth is not limited by the stack.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .config import SourceConfig

SCAN_THREADS = 16
STAT_BATCH = 256
EXCLUDED_PATHS_KEPT = 1000  # per reason; the counts are always complete


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One original: its path relative to the source root (POSIX form) and what stat said."""

    relpath: str
    size: int
    mtime_ns: int
    label: int = -1


@dataclass(frozen=True)
class ScanResult:
    """Selected files in sorted order, the class list, and everything left out (with why)."""

    files: tuple[SourceFile, ...]
    classes: tuple[str, ...]
    excluded: Counter = field(default_factory=Counter)
    unreadable: tuple[tuple[str, str], ...] = ()
    excluded_paths: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Directory:
    path: str
    relpath: str  # "" for the root
    ancestors: frozenset  # (st_dev, st_ino) of the directories above: symlink loops


class _Walk:
    """The state of one scan.  Threads only list and stat; this object is updated by the
    calling thread alone, from their results."""

    def __init__(self, config: SourceConfig):
        self.config = config
        self.extensions = {"." + ext for ext in config.extensions}
        self.found: list[tuple[str, int, int]] = []
        self.excluded: Counter = Counter()
        self.excluded_paths: dict[str, list[str]] = {}
        self.unreadable: list[tuple[str, str]] = []

    def exclude(self, reason: str, relpath: str) -> None:
        self.excluded[reason] += 1
        kept = self.excluded_paths.setdefault(reason, [])
        if len(kept) < EXCLUDED_PATHS_KEPT:
            kept.append(relpath)

    def sort(self, directory: _Directory, listing: list[os.DirEntry] | OSError,
             subdirectories: list[_Directory], files: list[tuple[str, os.DirEntry]]) -> None:
        """Put each entry of a listing in its place: a directory to visit, a file to stat, or
        a reason it is left out."""
        if isinstance(listing, OSError):
            self.unreadable.append((directory.relpath or ".",
                                    f"cannot list directory: {listing.strerror}"))
            return
        for entry in sorted(listing, key=lambda e: e.name):  # the kept paths: deterministic
            relpath = f"{directory.relpath}/{entry.name}" if directory.relpath else entry.name
            if entry.name.startswith("."):
                self.exclude("hidden", relpath)
                continue
            try:
                if entry.is_symlink() and not self.config.follow_symlinks:
                    self.exclude("symlink", relpath)
                    continue
                is_dir, is_file = entry.is_dir(), entry.is_file()
            except OSError as exc:
                self.unreadable.append((relpath, f"cannot stat: {exc.strerror}"))
                continue
            if is_dir:
                subdirectories.append(_Directory(entry.path, relpath, directory.ancestors))
            elif not is_file:
                self.exclude("not a regular file", relpath)
            elif os.path.splitext(entry.name)[1].lower() not in self.extensions:
                self.exclude("extension", relpath)
            elif not _selected(relpath, self.config):
                self.exclude("include/exclude pattern", relpath)
            else:
                files.append((relpath, entry))

    def add_file(self, relpath: str, info: os.stat_result | OSError) -> None:
        if isinstance(info, OSError):
            self.unreadable.append((relpath, f"cannot stat: {info.strerror}"))
        elif stat.S_ISREG(info.st_mode):
            self.found.append((relpath, info.st_size, info.st_mtime_ns))
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


def scan(root: Path, config: SourceConfig, threads: int = SCAN_THREADS) -> ScanResult:
    """List the image files under ``root`` that the config selects.

    Hidden entries are skipped; symlinks are skipped unless ``follow_symlinks``.  Files
    that do not match the extension or glob filters are counted in ``excluded`` by reason
    (with the first paths of each reason), files and directories that cannot be read are
    returned in ``unreadable``.
    """
    walk = _Walk(config)
    root_info = os.stat(root)
    level = [_Directory(str(root), "", frozenset({(root_info.st_dev, root_info.st_ino)}))]
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="shardsmith-scan") as pool:
        while level:
            subdirectories: list[_Directory] = []
            files: list[tuple[str, os.DirEntry]] = []
            listings = pool.map(_list, (directory.path for directory in level))
            for directory, listing in zip(level, listings, strict=True):
                walk.sort(directory, listing, subdirectories, files)
            for batch in pool.map(_stat_batch, _batches(files, STAT_BATCH)):
                for relpath, info in batch:
                    walk.add_file(relpath, info)
            if config.follow_symlinks:  # only links can make a loop
                infos = pool.map(_stat, (directory.path for directory in subdirectories))
                entered = [walk.enter(directory, info)
                           for directory, info in zip(subdirectories, infos, strict=True)]
                subdirectories = [directory for directory in entered if directory is not None]
            level = subdirectories

    found = sorted(walk.found)
    if config.labels == "folders":
        for relpath, _, _ in found:
            if "/" not in relpath:
                walk.exclude("not in a class folder", relpath)
        found = [item for item in found if "/" in item[0]]
        classes = tuple(sorted({relpath.split("/", 1)[0] for relpath, _, _ in found}))
    else:
        classes = ()
    label_of = {name: index for index, name in enumerate(classes)}
    files = tuple(
        SourceFile(relpath, size, mtime_ns,
                   label_of.get(relpath.split("/", 1)[0], -1) if classes else -1)
        for relpath, size, mtime_ns in found
    )
    paths = {reason: sorted(kept) for reason, kept in sorted(walk.excluded_paths.items())}
    return ScanResult(files, classes, +walk.excluded, tuple(sorted(walk.unreadable)), paths)


def _list(path: str) -> list[os.DirEntry] | OSError:
    try:
        with os.scandir(path) as entries:
            return list(entries)
    except OSError as exc:
        return exc


def _stat(path: str) -> os.stat_result | OSError:
    try:
        return os.stat(path)
    except OSError as exc:
        return exc


def _stat_batch(batch: list[tuple[str, os.DirEntry]]) -> list[tuple[str, object]]:
    results = []
    for relpath, entry in batch:
        try:
            results.append((relpath, entry.stat()))  # follows a link only if one got this far
        except OSError as exc:
            results.append((relpath, exc))
    return results


def _batches(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _selected(relpath: str, config: SourceConfig) -> bool:
    if config.include and not any(fnmatch.fnmatchcase(relpath, p) for p in config.include):
        return False
    return not any(fnmatch.fnmatchcase(relpath, p) for p in config.exclude)
