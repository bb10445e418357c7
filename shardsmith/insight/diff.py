"""``shardsmith diff``: what changed between two versions of a dataset, by source path.

Each version's ``changes-vN.jsonl`` (docs/format.md) says what it changed against the one
before; ``diff_versions`` composes the files of versions A+1..B.  A source path is followed
from its first change in that range to its last: added then removed is neither, removed then
added again is changed, relabelled back and forth is nothing.  The counts per split and class
come from the files' headers: the totals before version A+1 and after version B.

Memory: a change line is kept as a 16-byte path digest and 17 bytes of kind, classes and
offset (the composition is a sort of those arrays; one version needs no sort), and the
examples are read again by their offsets: one file of 1M lines peaks at 100 MB RSS, three
composed (1.6M lines) at 143 MB, ~37 MB of it the interpreter (scripts/bench_diff.py).
"""

from __future__ import annotations

import hashlib
import tempfile
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..dataset.changes import ChangeLine, ChangesFile, VersionTotals
from ..dataset.manifest import MANIFEST_NAME, Manifest, read_manifest
from ..dataset.remote import download
from ..door import MANIFEST_CAP, open_file
from ..errors import ManifestError
from ..schema import decode
from ..storage import ObjectPath
from ..text import plural, printable

NO_CLASS = -1  # a sample without a class; an absent sample has no class id at all
EXAMPLES_SHOWN = 10  # per kind in the readable summary


class DiffUnavailable(ManifestError):
    """The two versions cannot be compared: the dataset has one version, or a changes file
    between them is no longer kept, missing or damaged (the message says which)."""


@dataclass(frozen=True)
class VersionDiff:
    """What changed from version ``old`` to ``new`` (``to_json`` for the JSON form)."""

    old: int
    new: int
    before: VersionTotals
    after: VersionTotals
    counts: dict[str, int]  # added, removed, changed, relabelled (source paths)
    added: list[dict[str, Any]] = field(default_factory=list)
    removed: list[dict[str, Any]] = field(default_factory=list)
    changed: list[dict[str, Any]] = field(default_factory=list)
    relabelled: list[dict[str, Any]] = field(default_factory=list)
    rejects_new: list[dict[str, Any]] = field(default_factory=list)
    rejects_fixed: list[str] = field(default_factory=list)
    rejects_new_count: int = 0
    rejects_fixed_count: int = 0
    # rejects whose source is gone: removed, as the pack's summary counts them, not fixed
    rejects_removed: list[str] = field(default_factory=list)
    rejects_removed_count: int = 0

    @property
    def classes_added(self) -> list[str]:
        known = set(self.before.classes)
        return [name for name in self.after.classes if name not in known]

    @property
    def object_classes_added(self) -> list[str]:
        known = set(self.before.object_classes or ())
        return [name for name in self.after.object_classes or () if name not in known]

    def to_json(self) -> dict[str, Any]:
        """The diff as plain JSON (``diff --json``; the nightly report's diff section)."""
        return {
            "old": self.old, "new": self.new,
            "samples": dict(self.counts),
            "classes_added": self.classes_added,
            "object_classes_added": self.object_classes_added,
            "counts": {"old": self.before.counts, "new": self.after.counts},
            "objects": {"old": self.before.objects, "new": self.after.objects},
            "rejects": {"new": self.rejects_new, "fixed": self.rejects_fixed,
                        "removed": self.rejects_removed,
                        "new_count": self.rejects_new_count,
                        "fixed_count": self.rejects_fixed_count,
                        "removed_count": self.rejects_removed_count},
            "added": self.added, "removed": self.removed, "changed": self.changed,
            "relabelled": self.relabelled,
        }

    def summary(self) -> str:
        """A readable summary: the changes, the counts per split and class before and
        after, object counts, rejects, and the first few paths of each kind.  Every name,
        path, reason and detail comes from the dataset: escaped by ``_shown``, so a newline in
        one cannot forge a line."""
        counts = self.counts
        lines = [f"v{self.old} -> v{self.new}: {self.before.samples:,} -> "
                 f"{self.after.samples:,} samples",
                 f"  sources     {counts['added']:,} added, {counts['removed']:,} removed, "
                 f"{counts['changed']:,} changed, {counts['relabelled']:,} relabelled",
                 f"  rejects     {self.rejects_new_count:,} new, "
                 f"{self.rejects_fixed_count:,} fixed, "
                 f"{self.rejects_removed_count:,} removed "
                 f"({self.before.rejects:,} -> {self.after.rejects:,})"]
        if self.classes_added:
            lines.append(f"  classes added: {', '.join(map(_shown, self.classes_added))}")
        if self.object_classes_added:
            lines.append("  object classes added: "
                         f"{', '.join(map(_shown, self.object_classes_added))}")
        lines += _count_table(self.old, self.new, self.before.counts, self.after.counts)
        if self.before.objects or self.after.objects:
            lines.append("  objects:")
            for name in _union(self.before.objects, self.after.objects):
                old, new = self.before.objects.get(name, 0), self.after.objects.get(name, 0)
                lines.append(f"    {_shown(name):<20} {old:>9,} {new:>9,} "
                             f"{_signed(new - old)}".rstrip())
        for kind, examples in (("added", self.added), ("removed", self.removed),
                               ("changed", self.changed)):
            if examples:
                lines.append(f"  {kind}{_first(counts[kind])}:")
                lines += [f"    {_shown(item['path'])}  ({_shown(item['split'])}, "
                          f"{_shown(item['class'])})" for item in examples[:EXAMPLES_SHOWN]]
        if self.relabelled:
            lines.append(f"  relabelled{_first(counts['relabelled'])}:")
            lines += [f"    {_shown(item['path'])}  {_shown(item['from'])} -> "
                      f"{_shown(item['to'])}" for item in self.relabelled[:EXAMPLES_SHOWN]]
        if self.rejects_new:
            lines.append(f"  new rejects{_first(self.rejects_new_count)}:")
            lines += [f"    {_shown(item['path'])}  {_shown(item['reason'])}: "
                      f"{_shown(item['detail'])}" for item in self.rejects_new[:EXAMPLES_SHOWN]]
        for kind, paths, count in (("fixed", self.rejects_fixed, self.rejects_fixed_count),
                                   ("removed", self.rejects_removed,
                                    self.rejects_removed_count)):
            if paths:
                lines.append(f"  {kind} rejects{_first(count)}:")
                lines += [f"    {_shown(path)}" for path in paths[:EXAMPLES_SHOWN]]
        return "\n".join(lines)


def diff_versions(directory: Path | ObjectPath, old: int | None = None,
                  new: int | None = None, examples: int = 50) -> VersionDiff:
    """What changed from version ``old`` to version ``new`` of the dataset in ``directory``
    (defaults: the version before ``new``, and the current one), by source path, with the
    first ``examples`` paths of each kind.  Raises ManifestError for an unreadable manifest,
    DiffUnavailable when the versions cannot be compared."""
    if isinstance(directory, ObjectPath):
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


def _remote_diff(directory: ObjectPath, old: int | None, new: int | None,
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


def _versions(directory: Path | ObjectPath, manifest: Manifest, old: int | None,
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


def _not_kept(directory: Path | ObjectPath, manifest: Manifest, version: int) -> str:
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


# The kinds of sample change, and per kind: present before, present after, content changed.
SAMPLE_KINDS = {"added": 0, "removed": 1, "changed": 2, "relabelled": 3}
RELABELLED = SAMPLE_KINDS["relabelled"]
_BEFORE = np.array([False, True, True, True])
_AFTER = np.array([True, False, True, True])
_CHANGED = np.array([False, False, True, False])


class _Composer:
    """The change lines of consecutive versions, as columns: per line a path digest, present
    before and after, changed, the class before and after, and where the line is."""

    def __init__(self) -> None:
        self.digests = bytearray()
        self.kinds = array("b")  # SAMPLE_KINDS index of each sample line
        self.class_before, self.class_after = array("i"), array("i")
        self.where = array("q")  # file number << 40 | byte offset of each sample line
        self.class_ids: dict[str | None, int] = {None: NO_CLASS}
        self.class_names: list[str] = []
        self.rejects: dict[str, list[Any]] = {}  # path -> [before, after, line]
        self.headers: list[VersionTotals] = []
        self.files = 0  # changes files read
        # the last line of each relabelled path (sorted), and its class before the first
        self.relabelled_lines = np.zeros(0, np.int64)
        self.relabelled_from = np.zeros(0, np.int32)
        self.last_after: set[bytes] | None = None  # digests of the paths present after

    def read(self, number: int, changes: ChangesFile) -> None:
        if not self.headers:
            self.headers.append(changes.header.before)
        self.headers.append(changes.header.after)
        self.files += 1
        kinds, digests, where = self.kinds, self.digests, self.where
        class_before, class_after, class_id = self.class_before, self.class_after, \
            self._class_id
        base = number << 40
        try:
            for offset, line in changes.lines(brief=True):
                kind = SAMPLE_KINDS.get(line.change)
                if kind is None:
                    self._reject(line)
                    continue
                digests += _digest(line.path)
                kinds.append(kind)
                label = class_id(line.label)
                class_after.append(label)
                class_before.append(class_id(line.was or None) if kind == RELABELLED
                                    else label)
                where.append(base | offset)
        except ManifestError as exc:
            raise DiffUnavailable(str(exc)) from None

    def _class_id(self, name: str | None) -> int:
        number = self.class_ids.get(name)
        if number is None:
            number = self.class_ids[name] = len(self.class_names)
            self.class_names.append(name)
        return number

    def _reject(self, line: ChangeLine) -> None:
        rejected = line.change == "rejected"
        known = self.rejects.get(line.path)
        if known is None:
            self.rejects[line.path] = [not rejected, rejected, line]
        else:
            known[1:] = [rejected, line]

    def result(self, old: int, new: int, files: list[ChangesFile],
               examples: int) -> VersionDiff:
        kinds = self._compose()
        counts = {kind: len(events) for kind, events in kinds.items()}
        shown = {kind: self._examples(kind, events[:examples], files)
                 for kind, events in kinds.items()}
        new_rejects = [line for before, after, line in self.rejects.values()
                       if after and not before]
        no_longer = [path for path, (before, after, _) in self.rejects.items()
                     if before and not after]
        # A reject no longer one is fixed when its source is a sample now, else it is gone.
        present = self._present_after([_digest(path) for path in no_longer])
        fixed = [path for path, now in zip(no_longer, present, strict=True) if now]
        gone = [path for path, now in zip(no_longer, present, strict=True) if not now]
        return VersionDiff(
            old, new, self.headers[0], self.headers[-1], counts, shown["added"],
            shown["removed"], shown["changed"], shown["relabelled"],
            [{"path": line.path, "reason": line.reason, "detail": line.detail or ""}
             for line in new_rejects[:examples]],
            fixed[:examples], len(new_rejects), len(fixed), gone[:examples], len(gone))

    def _present_after(self, digests: list[bytes]) -> list[bool]:
        """Whether each path (by digest) is a sample after the last version read: its last
        sample line leaves it present (``_compose`` ran)."""
        if not digests or self.last_after is None:
            return [False] * len(digests)
        return [digest in self.last_after for digest in digests]

    def _compose(self) -> dict[str, np.ndarray]:
        """Per kind, the line (its number among all) that tells each path's change, in
        file order: a path's first line holds its state before, its last its state after."""
        total = len(self.kinds)
        if not total:
            return {kind: np.zeros(0, np.int64) for kind in SAMPLE_KINDS}
        kinds = np.frombuffer(self.kinds, np.int8)
        before, after, changed = _BEFORE[kinds], _AFTER[kinds], _CHANGED[kinds]
        if self.files == 1:  # one version: a line per path, nothing to compose
            first = last = np.arange(total, dtype=np.int32)
            touched_any = changed
        else:
            first, last, touched_any = self._paths(total, after, changed)
        was = np.frombuffer(self.class_before, np.int32)[first]
        now = np.frombuffer(self.class_after, np.int32)[last]
        present_before, present_after = before[first], after[last]
        self.last_after = {bytes(self.digests[16 * line : 16 * line + 16])
                           for line in last[present_after].tolist()}
        both = present_before & present_after
        relabelled = both & (was != now)
        by_line = np.argsort(last[relabelled], kind="stable")
        self.relabelled_lines = last[relabelled][by_line]
        self.relabelled_from = was[relabelled][by_line]
        return {
            "added": np.sort(last[~present_before & present_after]),
            "removed": np.sort(first[present_before & ~present_after]),
            "changed": np.sort(last[both & ~relabelled & touched_any]),
            "relabelled": np.sort(last[relabelled]),
        }

    def _paths(self, total: int, after: np.ndarray, changed: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per path: its first line, its last, and whether it changed on the way (a changed
        line, or absent in between: removed, then added again, nothing says its content is
        the one it had).  Lines of one path are found by sorting the digests (stable: file
        order kept within a path); int32 positions keep the sort's memory small."""
        digests = np.frombuffer(self.digests, "<u8").reshape(-1, 2)
        order = np.argsort(digests[:, 1], kind="stable").astype(np.int32)
        high = digests[order, 0]
        order = order[np.argsort(high, kind="stable")]
        del high
        same_path = np.ones(total, np.bool_)  # as the line before it, in sorted order
        same_path[0] = False
        for column in (0, 1):
            keys = digests[order, column]
            same_path[1:] &= keys[1:] == keys[:-1]
            del keys
        starts = np.flatnonzero(~same_path).astype(np.int32)
        del same_path
        ends = np.r_[starts[1:], total].astype(np.int32) - 1
        first, last = order[starts], order[ends]
        touched = (changed | ~after)[order]
        touched[ends] = changed[last]
        return first, last, np.logical_or.reduceat(touched, starts)

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
                shown.append({"path": line.path, "key": line.key,
                              "from": self._class_name(int(self.relabelled_from[
                                  np.searchsorted(self.relabelled_lines, event)])),
                              "to": line.label})
            else:
                shown.append({"path": line.path, "key": line.key, "split": line.split,
                              "class": line.label})
        return shown

    def _class_name(self, number: int) -> str | None:
        return None if number == NO_CLASS else self.class_names[number]


def _digest(path: str) -> bytes:
    """16 bytes naming ``path``: surrogatepass encodes every str, a lone surrogate of a
    hostile changes file too, each code point to its own bytes (lossless: no two paths
    share an encoding)."""
    return hashlib.blake2b(path.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def _shown(text: object) -> str:
    """A dataset's string (a class, path, split, reason) as the summary prints it: escaped
    (``text.printable``), ``-`` for none."""
    return printable(str(text)) if text else "-"


def _count_table(old: int, new: int, before: dict[str, dict[str, int]],
                 after: dict[str, dict[str, int]]) -> list[str]:
    lines = [f"  {'split':<10} {'class':<20} {'v' + str(old):>9} {'v' + str(new):>9}"]
    for split in _union(before, after):
        was, now = before.get(split, {}), after.get(split, {})
        for name in _union(was, now):
            old_count, new_count = was.get(name, 0), now.get(name, 0)
            lines.append(f"  {_shown(split):<10} {_shown(name):<20} {old_count:>9,} "
                         f"{new_count:>9,} "
                         f"{_signed(new_count - old_count)}".rstrip())
    return lines


def _union(first: dict, second: dict) -> list[str]:
    return list(first) + [name for name in second if name not in first]


def _signed(number: int) -> str:
    return f"{number:+,}" if number else ""


def _first(count: int) -> str:
    return f" ({plural(count, 'source')}, first {EXAMPLES_SHOWN})" if count > EXAMPLES_SHOWN \
        else ""
