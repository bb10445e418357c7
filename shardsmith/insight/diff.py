"""``shardsmith diff``: what changed between two versions of a dataset, by source path.

Each version's ``changes-vN.jsonl`` (docs/format.md) says what it changed against the one
before; ``diff_versions`` composes the files of versions A+1..B.  A source path is followed
from its first change in that range to its last: added then removed is neither, removed then
added again is changed, relabelled back and forth is nothing, and so is moved to another split
and back (``splits.near_duplicates``).  The counts per split and class
come from the files' headers: the totals before version A+1 and after version B.

Memory: a sample change line is kept as a 16-byte path digest and 21 bytes of kind,
samples, classes and offset (a line that names the split it left, 12 more: its number and
the two splits), a reject line as its digest, kind and offset (the composition
is a sort of those arrays; one version needs no sort), and the examples are read again by
their offsets: one file of 1M lines peaks at 100 MB RSS, three composed (1.6M lines) at
143 MB, ~37 MB of it the interpreter (scripts/bench_diff.py).
"""

from __future__ import annotations

import hashlib
import tempfile
from array import array
from pathlib import Path
from typing import Any

import numpy as np

from ..dataset.changes import ChangeLine, ChangesFile, VersionTotals
from ..dataset.manifest import MANIFEST_NAME, Manifest, read_manifest
from ..dataset.remote import download
from ..door import MANIFEST_CAP, open_file
from ..errors import ManifestError
from ..schema import decode
from .versiondiff import DiffUnavailable, VersionDiff

__all__ = ["DiffUnavailable", "VersionDiff", "diff_versions"]
from ..storage import Location, is_url

NO_CLASS = -1  # a sample without a class; an absent sample has no class id at all


def diff_versions(directory: Location, old: int | None = None,
                  new: int | None = None, examples: int = 50) -> VersionDiff:
    """What changed from version ``old`` to version ``new`` of the dataset in ``directory``
    (defaults: the version before ``new``, and the current one), by source path, with the
    first ``examples`` paths of each kind.  Raises ManifestError for an unreadable manifest,
    DiffUnavailable when the versions cannot be compared."""
    if is_url(directory):
        return _remote_diff(directory, old, new, examples)
    directory = Path(directory)
    manifest = read_manifest(directory)
    old, new = _versions(directory, manifest, old, new)
    entries = {entry.version: entry for entry in manifest.changes}
    missing = [version for version in range(old + 1, new + 1) if version not in entries]
    if missing:
        raise DiffUnavailable(_not_kept(directory, manifest, missing[0]))
    files: list[ChangesFile] = []
    try:
        composer = _Composer()
        for version in range(old + 1, new + 1):
            files.append(_opened(directory, entries[version]))
            composer.read(len(files) - 1, files[-1])
        return composer.result(old, new, files, max(0, examples))
    finally:
        for opened in files:
            opened.close()


def _remote_diff(directory: Location, old: int | None, new: int | None,
                 examples: int) -> VersionDiff:
    """``diff_versions`` of a dataset in a bucket: its manifest and the changes files of the
    versions compared (no other) are copied to a private temporary folder, each within its
    cap, and compared there; messages name the URL, not the copy."""
    with tempfile.TemporaryDirectory(prefix="shardsmith-diff-") as scratch:
        folder = Path(scratch)
        try:
            download(directory / MANIFEST_NAME, folder / MANIFEST_NAME, MANIFEST_CAP)
        except FileNotFoundError:
            read_manifest(directory)  # says why, as every command does (no bucket, no manifest)
            raise
        try:
            manifest = read_manifest(folder)
            first, last = _versions(directory, manifest, old, new)
            for entry in manifest.changes:
                if first < entry.version <= last:
                    download(directory / entry.name, folder / entry.name, entry.bytes)
            return diff_versions(folder, first, last, examples)
        except ManifestError as exc:
            raise type(exc)(str(exc).replace(str(folder), str(directory))) from None
        except FileNotFoundError as exc:
            raise DiffUnavailable(f"{exc.filename}: missing (the manifest names it)") from None


def _versions(directory: Location, manifest: Manifest, old: int | None,
              new: int | None) -> tuple[int, int]:
    current = manifest.version
    if current < 2 and old is None:
        raise DiffUnavailable(f"{directory}: the dataset has one version only (v{current}): "
                              "nothing to compare yet")
    new = current if new is None else new
    old = new - 1 if old is None else old
    for version in (old, new):
        if not 1 <= version <= current:
            raise DiffUnavailable(f"{directory}: there is no version v{version} (versions "
                                  f"v1 to v{current})")
    if old == new:
        raise DiffUnavailable(f"{directory}: v{old} against v{new}: the same version, nothing "
                              "to compare")
    if old > new:
        raise DiffUnavailable(f"{directory}: v{old} is not older than v{new}: give the older "
                              "version first")
    return old, new


def _not_kept(directory: Location, manifest: Manifest, version: int) -> str:
    kept = [entry.version for entry in manifest.changes]
    if not kept and _lists_changes(directory):
        return (f"{directory}: no changes files: this dataset keeps none (its last pack had "
                "output.keep_changes 0; with 1 or more the next pack records its changes)")
    if not kept:
        return (f"{directory}: no changes files: the versions were packed by a release "
                "before shardsmith diff (the next pack records its changes)")
    if version < kept[0]:
        return (f"{directory}: the changes of v{version} are no longer kept (kept: "
                f"v{kept[0]} to v{kept[-1]}; output.keep_changes sets how many)")
    return f"{directory}: no changes file for v{version} (kept: " + \
        ", ".join(f"v{number}" for number in kept) + ")"


def _lists_changes(directory: Path) -> bool:
    """Whether the manifest has the ``changes`` list at all: a release that keeps changes
    files writes it even empty (``output.keep_changes: 0``); an older one leaves it out."""
    try:
        with open_file(directory / MANIFEST_NAME, MANIFEST_CAP) as handle:
            data = decode(handle.read(), MANIFEST_NAME)
    except (OSError, ValueError, ManifestError):
        return False
    return isinstance(data, dict) and "changes" in data


def _opened(directory: Path, entry) -> ChangesFile:
    try:
        opened = ChangesFile(directory, entry)
    except ManifestError as exc:
        raise DiffUnavailable(str(exc)) from None
    if opened.header.before is None:
        opened.close()
        raise DiffUnavailable(f"{opened.path}: damaged: version {entry.version} has no "
                              "totals of the version before it")
    return opened


# The kinds of sample change, and per kind: present before, present after, content changed,
# objects changed on the same pixels.
SAMPLE_KINDS = {"added": 0, "removed": 1, "changed": 2, "relabelled": 3, "reannotated": 4,
                "moved": 5}
RELABELLED = SAMPLE_KINDS["relabelled"]
_BEFORE = np.array([False, True, True, True, True, True])
_AFTER = np.array([True, False, True, True, True, True])
_CHANGED = np.array([False, False, True, False, False, False])
_REANNOTATED = np.array([False, False, False, False, True, False])


class _Composer:
    """The change lines of consecutive versions, as columns: per line a path digest, present
    before and after, changed, the class before and after, and where the line is; the splits
    before and after of the lines that name the split they left (the only changes of
    split)."""

    def __init__(self) -> None:
        self.digests = bytearray()
        self.kinds = array("b")  # SAMPLE_KINDS index of each sample line
        self.class_before, self.class_after = array("i"), array("i")
        self.where = array("q")  # file number << 40 | byte offset of each sample line
        self.samples = array("I")  # samples of each sample line (tiles of its original)
        self.class_ids: dict[str | None, int] = {None: NO_CLASS}
        self.class_names: list[str] = []
        self.move_lines, self.move_splits = array("i"), array("i")  # line; before, after
        self.split_ids: dict[str, int] = {}
        self.split_names: list[str] = []
        # reject lines as columns too (a line read whole is let go at once: 115 MB of them
        # took 531 MB when kept): path digest, rejected (not fixed), where the line is
        self.reject_digests = bytearray()
        self.reject_kinds = array("b")
        self.reject_where = array("q")
        self.headers: list[VersionTotals] = []
        self.files = 0  # changes files read
        # the last line of each relabelled path (sorted), and its class before the first;
        # the same of each moved path and its split before the first
        self.relabelled_lines = np.zeros(0, np.int64)
        self.relabelled_from = np.zeros(0, np.int32)
        self.moved_lines = np.zeros(0, np.int64)
        self.moved_from = np.zeros(0, np.int32)
        self.last_after: np.ndarray | None = None  # digests of the paths present after

    def read(self, number: int, changes: ChangesFile) -> None:
        if not self.headers:
            self.headers.append(changes.header.before)
        self.headers.append(changes.header.after)
        self.files += 1
        kinds, digests, where = self.kinds, self.digests, self.where
        class_before, class_after, class_id = self.class_before, self.class_after, \
            self._class_id
        samples = self.samples
        base = number << 40
        try:
            for offset, line in changes.lines(brief=True):
                kind = SAMPLE_KINDS.get(line.change)
                if kind is None:
                    self.reject_digests += _digest(line.path)
                    self.reject_kinds.append(line.change == "rejected")
                    self.reject_where.append(base | offset)
                    continue
                digests += _digest(line.path)
                kinds.append(kind)
                samples.append(1 if line.samples is None else line.samples)
                label = class_id(line.label)
                class_after.append(label)
                class_before.append(class_id(line.was or None) if kind == RELABELLED
                                    else label)
                if line.split_before is not None:
                    self.move_lines.append(len(kinds) - 1)
                    self.move_splits.extend((self._split_id(line.split_before),
                                             self._split_id(line.split)))
                where.append(base | offset)
        except ManifestError as exc:
            raise DiffUnavailable(str(exc)) from None

    def _split_id(self, name: str) -> int:
        number = self.split_ids.get(name)
        if number is None:
            number = self.split_ids[name] = len(self.split_names)
            self.split_names.append(name)
        return number

    def _class_id(self, name: str | None) -> int:
        number = self.class_ids.get(name)
        if number is None:
            number = self.class_ids[name] = len(self.class_names)
            self.class_names.append(name)
        return number

    def result(self, old: int, new: int, files: list[ChangesFile],
               examples: int) -> VersionDiff:
        kinds, samples = self._compose()
        if not len(kinds["moved"]):  # left out, as before moves were recorded
            del kinds["moved"], samples["moved"]
        counts = {kind: len(events) for kind, events in kinds.items()}
        shown = {kind: self._examples(kind, events[:examples], files)
                 for kind, events in kinds.items()}
        new_rejects, no_longer = self._rejects()
        # A reject no longer one is fixed when its source is a sample now, else it is gone.
        digests = np.frombuffer(self.reject_digests, "V16")
        present = np.isin(digests[no_longer], self.last_after) \
            if self.last_after is not None else np.zeros(len(no_longer), np.bool_)
        fixed, gone = no_longer[present], no_longer[~present]
        return VersionDiff(
            old, new, self.headers[0], self.headers[-1], counts, shown["added"],
            shown["removed"], shown["changed"], shown["relabelled"],
            [{"path": line.path, "reason": line.reason, "detail": line.detail or ""}
             for line in self._reject_lines(new_rejects[:examples], files)],
            [line.path for line in self._reject_lines(fixed[:examples], files)],
            len(new_rejects), len(fixed),
            [line.path for line in self._reject_lines(gone[:examples], files)], len(gone),
            sample_counts=samples, reannotated=shown["reannotated"],
            moved=shown.get("moved", []))

    def _rejects(self) -> tuple[np.ndarray, np.ndarray]:
        """The reject lines (their numbers among the reject lines, in the order their paths
        first appear) that tell a new reject, and those of a reject no longer one: a path's
        first line says what it was before (a ``fixed`` one was a reject), its last what it
        is after."""
        total = len(self.reject_kinds)
        if not total:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        rejected = np.frombuffer(self.reject_kinds, np.int8).astype(np.bool_)
        order, starts, ends = _grouped(self.reject_digests, total)
        first, last = order[starts], order[ends]
        before, after = ~rejected[first], rejected[last]
        by_first = np.argsort(first, kind="stable")
        first, last, before, after = first[by_first], last[by_first], before[by_first], \
            after[by_first]
        return last[after & ~before].astype(np.int64), last[before & ~after].astype(np.int64)

    def _reject_lines(self, numbers: np.ndarray, files: list[ChangesFile]) -> list[ChangeLine]:
        lines = []
        for number in numbers.tolist():
            where = self.reject_where[number]
            try:
                lines.append(files[where >> 40].line_at(where & ((1 << 40) - 1)))
            except ManifestError as exc:
                raise DiffUnavailable(str(exc)) from None
        return lines

    def _compose(self) -> tuple[dict[str, np.ndarray], dict[str, int]]:
        """Per kind, the line (its number among all) that tells each path's change, in
        file order: a path's first line holds its state before, its last its state after;
        and per kind the samples those paths count (their last line's: the tiles they had
        when removed, or have now)."""
        total = len(self.kinds)
        if not total:
            return {kind: np.zeros(0, np.int64) for kind in SAMPLE_KINDS}, \
                dict.fromkeys(SAMPLE_KINDS, 0)
        kinds = np.frombuffer(self.kinds, np.int8)
        before, after, changed = _BEFORE[kinds], _AFTER[kinds], _CHANGED[kinds]
        reannotated = _REANNOTATED[kinds]
        move_paths = np.frombuffer(self.move_lines, np.int32)
        if self.files == 1:  # one version: a line per path, nothing to compose
            first = last = np.arange(total, dtype=np.int32)
            touched_any, reannotated_any = changed, reannotated
        else:
            first, last, touched_any, reannotated_any, move_paths = self._paths(
                total, after, changed, reannotated, move_paths)
        was = np.frombuffer(self.class_before, np.int32)[first]
        now = np.frombuffer(self.class_after, np.int32)[last]
        present_before, present_after = before[first], after[last]
        self.last_after = np.frombuffer(self.digests, "V16")[last[present_after]]
        both = present_before & present_after
        relabelled = both & (was != now)
        by_line = np.argsort(last[relabelled], kind="stable")
        self.relabelled_lines = last[relabelled][by_line]
        self.relabelled_from = was[relabelled][by_line]
        moved = both & ~relabelled & ~touched_any & ~reannotated_any & \
            self._moved(len(first), last, move_paths)
        chosen = {
            "added": ~present_before & present_after,
            "removed": present_before & ~present_after,
            "changed": both & ~relabelled & touched_any,
            "relabelled": relabelled,
            "reannotated": both & ~relabelled & ~touched_any & reannotated_any,
            "moved": moved,
        }
        tiles = np.frombuffer(self.samples, np.uint32)[last]
        samples = {kind: int(tiles[paths].sum(dtype=np.int64)) for kind, paths in chosen.items()}
        return {kind: np.sort((first if kind == "removed" else last)[paths])
                for kind, paths in chosen.items()}, samples

    def _moved(self, paths: int, last: np.ndarray, move_paths: np.ndarray) -> np.ndarray:
        """Per path, whether it ends in another split than it started in: its split changes
        only on its lines that name the split they left (``move_paths``: the path of each,
        in file order), from the first one's split before to the last one's split after.  A
        sample moved by one version and back by another did not move."""
        moved = np.zeros(paths, np.bool_)
        if not len(move_paths):
            return moved
        by_path = np.argsort(move_paths, kind="stable")
        grouped = move_paths[by_path]
        heads = np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]])
        tails = np.r_[heads[1:], len(grouped)].astype(np.int64) - 1
        splits = np.frombuffer(self.move_splits, np.int32).reshape(-1, 2)
        split_from, split_to = splits[by_path[heads], 0], splits[by_path[tails], 1]
        moved[grouped[heads][split_from != split_to]] = True
        # the split before of each path, by its last line (sorted), for the examples
        lines = last[grouped[heads]]
        by_line = np.argsort(lines, kind="stable")
        self.moved_lines, self.moved_from = lines[by_line], split_from[by_line]
        return moved

    def _paths(self, total: int, after: np.ndarray, changed: np.ndarray,
               reannotated: np.ndarray, move_lines: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per path: its first line, its last, whether its content changed on the way (a
        changed line, or absent in between: removed, then added again, nothing says its
        content is the one it had), and whether its objects did (a re-annotated line); and
        the path of each of ``move_lines``."""
        order, starts, ends = _grouped(self.digests, total)
        first, last = order[starts], order[ends]
        touched = (changed | ~after)[order]
        touched[ends] = changed[last]
        if len(move_lines):  # where each line is in ``order``, for the few that moved
            position = np.empty(total, np.int32)
            position[order] = np.arange(total, dtype=np.int32)
            move_lines = np.searchsorted(starts, position[move_lines], side="right") - 1
            del position
        return first, last, np.logical_or.reduceat(touched, starts), \
            np.logical_or.reduceat(reannotated[order], starts), move_lines

    def _examples(self, kind: str, events: np.ndarray,
                  files: list[ChangesFile]) -> list[dict[str, Any]]:
        shown = []
        for event in events.tolist():
            try:
                where = self.where[event]
                line = files[where >> 40].line_at(where & ((1 << 40) - 1))
            except ManifestError as exc:
                raise DiffUnavailable(str(exc)) from None
            if kind == "relabelled":
                item = {"path": line.path, "key": line.key,
                        "from": self._class_name(int(self.relabelled_from[
                            np.searchsorted(self.relabelled_lines, event)])),
                        "to": line.label}
            else:
                item = {"path": line.path, "key": line.key, "split": line.split,
                        "class": line.label}
            if kind == "moved":  # the split of the first version (composed: not the last's)
                item["split_before"] = self.split_names[int(self.moved_from[
                    np.searchsorted(self.moved_lines, event)])]
            if line.samples is not None:
                item["samples"] = line.samples
            # the objects of this version's change (composed versions: of the last one)
            if line.objects_before is not None or line.objects_after is not None:
                item["objects_before"] = line.objects_before or {}
                item["objects_after"] = line.objects_after or {}
            shown.append(item)
        return shown

    def _class_name(self, number: int) -> str | None:
        return None if number == NO_CLASS else self.class_names[number]


def _grouped(digests: bytearray, total: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``total`` lines whose 16-byte path digests ``digests`` holds, grouped by path:
    their order sorted by digest (stable: file order kept within a path), and where each
    path's lines start and end in it.  int32 positions keep the sort's memory small."""
    columns = np.frombuffer(digests, "<u8").reshape(-1, 2)
    order = np.argsort(columns[:, 1], kind="stable").astype(np.int32)
    high = columns[order, 0]
    order = order[np.argsort(high, kind="stable")]
    del high
    same_path = np.ones(total, np.bool_)  # as the line before it, in sorted order
    same_path[0] = False
    for column in (0, 1):
        keys = columns[order, column]
        same_path[1:] &= keys[1:] == keys[:-1]
        del keys
    starts = np.flatnonzero(~same_path).astype(np.int32)
    del same_path
    ends = np.r_[starts[1:], total].astype(np.int32) - 1
    return order, starts, ends


def _digest(path: str) -> bytes:
    """16 bytes naming ``path``: surrogatepass encodes every str, a lone surrogate of a
    hostile changes file too, each code point to its own bytes (lossless: no two paths
    share an encoding)."""
    return hashlib.blake2b(path.encode("utf-8", "surrogatepass"), digest_size=16).digest()
