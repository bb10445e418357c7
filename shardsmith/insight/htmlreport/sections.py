"""The sections of the report page, each from values already computed (no I/O here)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...dataset.changes import as_recorded
from ...dataset.manifest import ChangeCounts, Manifest, RejectEntry, SampleRecord
from ...text import human_bytes
from ..near_duplicates import MEMBERS_SHOWN, NearDuplicates
from ..versiondiff import VersionDiff
from . import page
from .pictures import Picture

HISTORY_SHOWN = 60  # versions in the history table, newest first
LISTED = 200  # rows of one list of the diff (it holds at most its ``examples``)


def class_name(manifest: Manifest, label: int) -> str:
    """The class of ``label`` (``(no label)`` for -1); not yet escaped."""
    if 0 <= label < len(manifest.classes):
        return manifest.classes[label]
    return "(no label)" if label == -1 else f"(label {label})"


def summary_section(directory: Path, manifest: Manifest,
                    counts: dict[tuple[int, str], int]) -> str:
    """The title and the key numbers."""
    totals = manifest.totals
    samples = sum(counts.values())
    items = [("version", page.number(manifest.version))]
    if totals.sources is not None:  # tiles: several samples an original
        items.append(("originals", page.number(totals.sources)))
    items.append(("samples", page.number(samples)))
    # a detection dataset's classes are its objects' (its images may have none)
    if manifest.classes or manifest.object_classes is None:
        items.append(("classes", page.number(len(manifest.classes))))
    if manifest.object_classes is not None:
        items.append(("object classes", page.number(len(manifest.object_classes))))
    items += [("rejects", page.number(len(manifest.rejects))),
             ("shards", page.number(len(manifest.shards))),
             ("of shards", page.text(human_bytes(totals.bytes_out)))]
    items += [(f"{split} samples", page.number(split_totals.samples))
              for split, split_totals in manifest.splits.items()]
    return (f"<header><h1>{page.text(directory)}</h1>"
            + page.paragraph(f"{page.text(manifest.format)} dataset, version "
                             f"{manifest.version}, written {page.text(manifest.created)}",
                             muted=True)
            + page.cards(items) + "</header>")


KINDS = ("added", "changed", "relabelled", "reannotated", "removed", "moved")


def history_section(manifest: Manifest,
                    counts: Mapping[int, tuple[ChangeCounts, ChangeCounts]]) -> str:
    """The versions, newest first: what each changed in originals (and samples, where an
    original made several), from ``counts`` (``dataset.changes.history_counts``); a version
    it lacks is shown as recorded, and said so."""
    versions = list(reversed(manifest.history))
    # moves to another split (splits.near_duplicates) get a column where a version made any
    kinds = KINDS if any(originals.moved for originals, _ in counts.values()) else KINDS[:-1]
    rows = []
    for entry in versions[:HISTORY_SHOWN]:
        note = entry.note or ""
        if entry.version in counts:
            originals, samples = counts[entry.version]
            cells = [_both(getattr(originals, kind) or 0, getattr(samples, kind) or 0)
                     for kind in kinds]
        else:
            cells = [page.number(entry.added), page.number(entry.changed), "-", "-",
                     page.number(entry.removed), "-"][: len(kinds)]
            note = "; ".join(filter(None, [note, as_recorded(entry)]))
        rows.append([page.number(entry.version), page.text(entry.created), *cells,
                     page.number(entry.rejected), page.number(len(entry.shards_added)),
                     page.number(len(entry.shards_removed)), page.text(note)])
    parts = [page.paragraph("Counts of originals; in brackets the samples, where an "
                            "original made several (tiles).", muted=True),
             page.table(["version", "written", "added", "changed", "relabelled",
                         "re-annotated", "removed", *(["moved"] if "moved" in kinds else []),
                         "rejected", "shards new", "shards gone", "note"], rows,
                        (True, False, *[True] * (len(kinds) + 3)))] if rows else \
        [page.paragraph("No history recorded.", muted=True)]
    if len(versions) > HISTORY_SHOWN:
        parts.append(page.paragraph(f"and {len(versions) - HISTORY_SHOWN:,} older versions "
                                    "(shardsmith log lists them all)", muted=True))
    return page.section("history", "Version history", parts)


def diff_section(diff: VersionDiff | str, manifest: Manifest) -> str:
    """What changed since the previous version, or why that is not known."""
    if isinstance(diff, str):
        return page.section("diff", "Changes since the previous version",
                            [page.paragraph(f"No diff: {page.text(diff)}", muted=True)])
    originals, samples = diff.counts, diff.sample_counts or diff.counts
    parts = [page.paragraph(f"Version {page.number(diff.old)} to {page.number(diff.new)}; "
                            "counts of originals, in brackets the samples where an original "
                            "made several", muted=True),
             page.cards([(_KIND_NAMES[name], _both(originals.get(name, 0),
                                                   samples.get(name, 0)))
                         for name in KINDS if name not in ("reannotated", "moved")
                         or originals.get(name)]
                        + [("rejects new", page.number(diff.rejects_new_count)),
                           ("rejects fixed", page.number(diff.rejects_fixed_count)),
                           ("rejects removed", page.number(diff.rejects_removed_count))])]
    for names, label in ((diff.classes_added, "Classes added"),
                         (diff.object_classes_added, "Object classes added")):
        if names:
            parts.append(page.paragraph(f"{label}: " + ", ".join(
                f"<b>{page.text(name)}</b>" for name in names)))
    parts += _count_changes(diff.before.counts, diff.after.counts, list(manifest.splits))
    parts += _object_changes(diff.before.objects, diff.after.objects)
    parts.append(_listed("New rejects", ["path", "reason", "detail"],
                         [[page.text(entry.get("path", "")), page.text(entry.get("reason", "")),
                           page.text(entry.get("detail", ""))] for entry in diff.rejects_new]))
    parts.append(_listed("Fixed rejects", ["path"],
                         [[page.text(path)] for path in diff.rejects_fixed]))
    parts.append(_listed("Rejects removed (source gone)", ["path"],
                         [[page.text(path)] for path in diff.rejects_removed]))
    for key in ("added", "removed", "changed", "reannotated"):
        parts.append(_listed(f"Originals {_KIND_NAMES[key]}",
                             ["path", "split", "class", "samples", "objects", "key"], [
            [page.text(entry.get("path", "")), page.text(entry.get("split", "")),
             page.text(_class(entry.get("class"))), page.number(entry.get("samples", 1)),
             _objects(entry), page.text(entry.get("key", ""))]
            for entry in getattr(diff, key)], originals.get(key)))
    parts.append(_listed("Originals relabelled", ["path", "from", "to", "objects", "key"], [
        [page.text(entry.get("path", "")), page.text(_class(entry.get("from"))),
         page.text(_class(entry.get("to"))), _objects(entry), page.text(entry.get("key", ""))]
        for entry in diff.relabelled], originals.get("relabelled")))
    parts.append(_listed("Originals moved to another split", ["path", "from", "to", "key"], [
        [page.text(entry.get("path", "")), page.text(entry.get("split_before", "")),
         page.text(entry.get("split", "")), page.text(entry.get("key", ""))]
        for entry in diff.moved], originals.get("moved")))
    return page.section("diff", "Changes since the previous version",
                        [part for part in parts if part])


_KIND_NAMES = {"added": "added", "changed": "changed", "relabelled": "relabelled",
               "reannotated": "re-annotated", "removed": "removed", "moved": "moved"}


def _both(originals: int, samples: int) -> str:
    """A count of originals, and in brackets its samples when they differ (tiles)."""
    if samples == originals:
        return page.number(originals)
    return f"{page.number(originals)} ({page.number(samples)})"


def _class(name: Any) -> str:
    """A class of the diff: ``(no class)`` for none (a detection dataset's images)."""
    return "(no class)" if name is None or name == "" else str(name)


def _objects(entry: dict) -> str:
    """A change's objects per object class, "scratch 3 → 0, crack 0 → 3" for the classes
    whose counts moved; "" when the change has none recorded."""
    before, after = entry.get("objects_before"), entry.get("objects_after")
    if before is None and after is None:
        return ""
    before, after = before or {}, after or {}
    moved = [f"{page.text(name)} {page.number(before.get(name, 0))} → "
             f"{page.number(after.get(name, 0))}" for name in dict.fromkeys([*before, *after])
             if before.get(name, 0) != after.get(name, 0)]
    return ", ".join(moved) or "unchanged"


def orphans_section(manifest: Manifest) -> str:
    """The annotation files the pack found matching no image (a few named), and the
    warnings about the annotation sources; "" for a dataset without objects."""
    report = manifest.annotation_sources
    if report is None:
        return ""
    if not report.orphans and not report.warnings:
        return page.section("orphans", "Annotation files", [page.paragraph(
            "Every annotation file matched an image.", muted=True)])
    parts = []
    if report.orphans:
        parts.append(_listed("Annotation files that match no image", ["path"],
                             [[page.text(path)] for path in report.orphan_paths],
                             report.orphans) or page.paragraph(
            f"{page.number(report.orphans)} annotation files match no image (the pack "
            "recorded no paths).", muted=True))
    parts += [page.paragraph(f"Warning: {page.text(warning)}") for warning in report.warnings]
    return page.section("orphans", f"Annotation files matching no image "
                        f"({report.orphans:,})", parts)


def _count_changes(old: dict[str, dict[str, int]], new: dict[str, dict[str, int]],
                   known_splits: list[str]) -> list[str]:
    """Samples per class and split before and after, for the classes whose counts moved."""
    splits = list(dict.fromkeys([*known_splits, *old, *new]))
    classes = list(dict.fromkeys(name for side in (old, new) for split in splits
                                 for name in side.get(split, {})))
    rows, unchanged = [], 0
    for name in classes:
        before = [old.get(split, {}).get(name, 0) for split in splits]
        after = [new.get(split, {}).get(name, 0) for split in splits]
        if before == after:
            unchanged += 1
            continue
        rows.append([page.text(_class(name))]
                    + [page.delta(b, a) for b, a in zip(before, after, strict=True)])
    if not rows:
        return [page.paragraph("No class changed its samples per split.", muted=True)]
    parts = ["<h3>Samples per class and split, now (change)</h3>",
             page.table(["class", *splits], rows, (False, *[True] * len(splits)))]
    if unchanged:
        parts.append(page.paragraph(f"{unchanged:,} classes unchanged.", muted=True))
    return parts


def _object_changes(old: dict[str, int], new: dict[str, int]) -> list[str]:
    names = list(dict.fromkeys([*old, *new]))
    if not names:
        return []
    rows = [[page.text(name), page.number(old.get(name, 0)),
             page.delta(old.get(name, 0), new.get(name, 0))] for name in names]
    return ["<h3>Objects per object class</h3>",
            page.table(["object class", "before", "now"], rows, (False, True, True))]


def _listed(title: str, head: list[str], rows: list[list[str]], total: Any = None) -> str:
    """A list of the diff folded under its title (open it to read; no script needed)."""
    if not rows:
        return ""
    count = total if isinstance(total, int) and total >= len(rows) else len(rows)
    more = f", the first {len(rows[:LISTED]):,} listed" if count > len(rows[:LISTED]) else ""
    return (f"<details><summary>{page.text(title)} ({count:,}{more})</summary>"
            + page.table(head, rows[:LISTED]) + "</details>")


def rejects_section(manifest: Manifest, rejects: Sequence[RejectEntry],
                    pictures: Sequence[Picture], note: str) -> str:
    """The rejects by reason, then a tile per reject shown: its original or a placeholder,
    its reason, path and detail."""
    if not manifest.rejects:
        return page.section("rejects", "Rejects", [page.paragraph("No rejects.", muted=True)])
    reasons = Counter(reject.reason for reject in manifest.rejects)
    parts = [page.table(["reason", "rejects"], [[page.text(reason), page.number(count)]
                                                for reason, count in reasons.most_common()],
                        (False, True))]
    if note:
        parts.append(page.paragraph(page.text(note), muted=True))
    parts.append(page.tiles(
        page.tile(picture.uri, picture.why_not,
                  [f'<span class="reason">{page.text(reject.reason)}</span>',
                   page.text(reject.path), f'<span class="muted">{page.text(reject.detail)}'
                   "</span>"])
        for reject, picture in zip(rejects, pictures, strict=True)))
    rest = len(manifest.rejects) - len(rejects)
    if rest > 0:
        parts.append(page.paragraph(f"and {rest:,} more rejects not shown (shardsmith inspect "
                                    "--rejects lists them all)", muted=True))
    return page.section("rejects", f"Rejects ({len(manifest.rejects):,})", parts)


def samples_section(manifest: Manifest, records: Sequence[SampleRecord],
                    pictures: Sequence[Picture], newest: bool, note: str) -> str:
    """A contact sheet of the new samples with their objects drawn."""
    heading = "Newest samples" if newest else "New samples"
    if not records:
        return page.section("samples", heading, [page.paragraph("No samples.", muted=True)])
    parts = [page.paragraph("No samples were added by this version (or its diff is not "
                            "known): the newest by source time." if newest else
                            "Samples added by this version, as packed"
                            + (", with their objects drawn." if manifest.object_classes
                               is not None else "."), muted=True)]
    if note:
        parts.append(page.paragraph(page.text(note), muted=True))
    parts.append(page.tiles(
        page.tile(picture.uri, picture.why_not,
                  [f"<b>{page.text(class_name(manifest, record.label))}</b> "
                   f'<span class="muted">{page.text(record.split)} '
                   f"{record.width}x{record.height}</span>", page.text(record.path)]
                  + ([f'<span class="reason">objects: {page.text(picture.why_not)}</span>']
                     if picture.uri and picture.why_not else []))
        for record, picture in zip(records, pictures, strict=True)))
    return page.section("samples", f"{heading} ({len(records):,} shown)", parts)


def timings_section(manifest: Manifest) -> str:
    """The last run's numbers as the pack recorded them."""
    run = manifest.run
    if not run:
        return page.section("timings", "Timings", [page.paragraph("No run recorded.",
                                                                  muted=True)])
    rows = [[page.text(key), _run_value(value)] for key, value in sorted(run.items())]
    totals = manifest.totals
    rows += [[page.text("bytes in"), page.text(human_bytes(totals.bytes_in))],
             [page.text("bytes out"), page.text(human_bytes(totals.bytes_out))]]
    return page.section("timings", "Timings of the last run",
                        [page.table(["", "value"], rows, (False, True))])


def _run_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return page.number(value)


def near_duplicates_section(found: NearDuplicates | str) -> str:
    """The clusters across splits that this version's new samples joined (``found``), or why
    there are none to show (a dataset without near-duplicate hashes)."""
    heading = "Near-duplicates across splits, new in this version"
    if isinstance(found, str):
        return page.section("near-duplicates", heading, [page.paragraph(page.text(found),
                                                                         muted=True)])
    leaking = [cluster for cluster in found.clusters if cluster.leakage]
    if not leaking:
        return page.section("near-duplicates", heading, [page.paragraph(
            f"No new sample joins a cluster across splits ({found.candidates:,} pairs with a "
            "new sample checked).", muted=True)])
    rows = []
    for cluster in leaking[:LISTED]:
        best = min(cluster.pairs, key=lambda pair: pair.score, default=None)
        rows.append([page.text(", ".join(cluster.splits)),
                     "<br>".join(page.text(f"{member.split}: {member.path}")
                                 for member, _ in cluster.shown()[:MEMBERS_SHOWN]),
                     page.text(str(best) if best is not None else "the same image")])
    return page.section("near-duplicates", f"{heading} ({len(leaking):,})", [
        page.paragraph("The same part in two splits: validation would measure memory. "
                       "shardsmith sheet --near-duplicates draws them.", muted=True),
        page.table(["splits", "originals", "nearest pair"], rows)])
