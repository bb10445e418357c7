"""The result of ``shardsmith diff`` (``insight.diff``): what changed from one version of a
dataset to another, as JSON (``diff --json``) and as the summary people read (the nightly
report draws its diff section from the values); every count of a change in its unit,
originals and samples."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..dataset.changes import VersionTotals
from ..errors import ManifestError
from ..text import plural, printable

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
    counts: dict[str, int]  # per kind of change (``SAMPLE_KINDS``): originals (source paths)
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
    # per kind: the samples of those originals (tiles: several an original)
    sample_counts: dict[str, int] = field(default_factory=dict)
    reannotated: list[dict[str, Any]] = field(default_factory=list)
    moved: list[dict[str, Any]] = field(default_factory=list)  # to another split

    @property
    def classes_added(self) -> list[str]:
        known = set(self.before.classes)
        return [name for name in self.after.classes if name not in known]

    @property
    def object_classes_added(self) -> list[str]:
        known = set(self.before.object_classes or ())
        return [name for name in self.after.object_classes or () if name not in known]

    def to_json(self) -> dict[str, Any]:
        """The diff as plain JSON (``diff --json``)."""
        return {
            "old": self.old, "new": self.new,
            "originals": dict(self.counts),
            "samples": dict(self.sample_counts or self.counts),
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
            "relabelled": self.relabelled, "reannotated": self.reannotated,
        } | ({"moved": self.moved} if self.counts.get("moved") else {})

    def summary(self) -> str:
        """A readable summary: the changes, the counts per split and class before and
        after, object counts, rejects, and the first few paths of each kind.  Every name,
        path, reason and detail comes from the dataset: escaped by ``_shown``, so a newline in
        one cannot forge a line."""
        counts = self.counts
        lines = [f"v{self.old} -> v{self.new}: {self.before.samples:,} -> "
                 f"{self.after.samples:,} samples",
                 f"  originals   {change_counts(counts)}"]
        if self.sample_counts and self.sample_counts != counts:
            lines.append(f"  samples     {change_counts(self.sample_counts)}")
        lines += [
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
                      f"{_shown(item['to'])}{_objects_shown(item)}"
                      for item in self.relabelled[:EXAMPLES_SHOWN]]
        if self.reannotated:
            lines.append(f"  re-annotated{_first(counts['reannotated'])}:")
            lines += [f"    {_shown(item['path'])}{_objects_shown(item)}"
                      for item in self.reannotated[:EXAMPLES_SHOWN]]
        if self.moved:
            lines.append(f"  moved to another split{_first(counts['moved'])}:")
            lines += [f"    {_shown(item['path'])}  {_shown(item.get('split_before', '?'))} -> "
                      f"{_shown(item['split'])}" for item in self.moved[:EXAMPLES_SHOWN]]
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


def change_counts(counts: dict[str, int]) -> str:
    """"2 added, 3 changed, 0 relabelled, 1 removed" (re-annotated too when there are), in
    the order of the pack's summary and ``shardsmith log``."""
    parts = [f"{counts.get(kind, 0):,} {kind}" for kind in ("added", "changed", "relabelled")]
    if counts.get("reannotated"):
        parts.append(f"{counts['reannotated']:,} re-annotated")
    parts.append(f"{counts.get('removed', 0):,} removed")
    if counts.get("moved"):
        parts.append(f"{counts['moved']:,} moved to another split")
    return ", ".join(parts)


def _objects_shown(item: dict[str, Any]) -> str:
    """"  objects scratch 1 -> 0, crack 0 -> 1" for a change with objects before and
    after, the classes whose counts moved; "" for none."""
    before, after = item.get("objects_before"), item.get("objects_after")
    if before is None and after is None:
        return ""
    moved = [f"{_shown(name)} {before.get(name, 0):,} -> {after.get(name, 0):,}"
             for name in _union(before, after) if before.get(name, 0) != after.get(name, 0)]
    return "  objects " + (", ".join(moved) if moved else "unchanged")


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
    return f" ({plural(count, 'original')}, first {EXAMPLES_SHOWN})" if count > EXAMPLES_SHOWN \
        else ""
