"""Walk the source tree and list the originals to pack, in a deterministic order."""

from __future__ import annotations

import fnmatch
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .config import SourceConfig


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


def scan(root: Path, config: SourceConfig) -> ScanResult:
    """List the image files under ``root`` that the config selects.

    Hidden entries are skipped; symlinks are skipped unless ``follow_symlinks``.  Files
    that do not match the extension or glob filters are counted in ``excluded`` by reason,
    directories that cannot be listed are returned in ``unreadable``.
    """
    extensions = {"." + ext for ext in config.extensions}
    excluded: Counter = Counter()
    unreadable: list[tuple[str, str]] = []
    found: list[tuple[str, os.stat_result]] = []

    def visit(directory: Path, rel_parts: tuple[str, ...], seen_dirs: frozenset) -> None:
        try:
            entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
        except OSError as exc:
            where = "/".join(rel_parts) or "."
            unreadable.append((where, f"cannot list directory: {exc.strerror}"))
            return
        for entry in entries:
            relpath = "/".join((*rel_parts, entry.name))
            if entry.name.startswith("."):
                excluded["hidden"] += 1
                continue
            if entry.is_symlink() and not config.follow_symlinks:
                excluded["symlink"] += 1
                continue
            try:
                is_dir = entry.is_dir()
                st = entry.stat()
            except OSError as exc:
                unreadable.append((relpath, f"cannot stat: {exc.strerror}"))
                continue
            if is_dir:
                identity = (st.st_dev, st.st_ino)
                if identity in seen_dirs:  # a symlink loop
                    excluded["symlink loop"] += 1
                    continue
                visit(Path(entry.path), (*rel_parts, entry.name), seen_dirs | {identity})
            elif not entry.is_file():
                excluded["not a regular file"] += 1
            elif os.path.splitext(entry.name)[1].lower() not in extensions:
                excluded["extension"] += 1
            elif not _selected(relpath, config):
                excluded["include/exclude pattern"] += 1
            else:
                found.append((relpath, st))

    root_stat = root.stat()
    visit(root, (), frozenset({(root_stat.st_dev, root_stat.st_ino)}))

    if config.labels == "folders":
        in_folder = [(rel, st) for rel, st in found if "/" in rel]
        excluded["not in a class folder"] += len(found) - len(in_folder)
        found = in_folder
        classes = tuple(sorted({rel.split("/", 1)[0] for rel, _ in found}))
    else:
        classes = ()
    label_of = {name: index for index, name in enumerate(classes)}
    files = tuple(
        SourceFile(
            relpath=rel,
            size=st.st_size,
            mtime_ns=st.st_mtime_ns,
            label=label_of.get(rel.split("/", 1)[0], -1) if classes else -1,
        )
        for rel, st in sorted(found)
    )
    return ScanResult(files, classes, +excluded, tuple(unreadable))


def _selected(relpath: str, config: SourceConfig) -> bool:
    if config.include and not any(fnmatch.fnmatchcase(relpath, p) for p in config.include):
        return False
    return not any(fnmatch.fnmatchcase(relpath, p) for p in config.exclude)
