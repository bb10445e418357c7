"""``inspect``: what a dataset holds, as text for people and as one JSON document for scripts.

Built from the manifest and a ``census`` of the sample index: samples per class and split
(with each class's split fractions), shards, output sizes, rejects and excluded files with
their paths, identical originals (and those that sit in two splits: leakage), groups per
split, and warnings; with ``quality`` also the PSNR/SSIM figure of ``quality.py``.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..dataset.changes import change_line
from ..dataset.manifest import Manifest, read_manifest
from ..dataset.normal import CUT_REASON
from ..errors import ConfigError, ManifestError
from ..schema import to_json
from ..storage import is_url, location
from ..text import human_bytes, plural, printable
from .census import (
    Census,
    DuplicateSet,
    ObjectCensus,
    Spread,
    packed_config,
    require_split,
    take_census,
)
from .named_source import Originals
from .picks import interleave
from .quality import QualityFigure, measure_quality, quality_json, quality_lines

log = logging.getLogger(__name__)

IMBALANCE_RATIO = 10.0  # largest class over smallest, beyond which inspect warns
SHOWN = 20  # rejects, excluded paths and duplicate sets listed without --rejects/--excluded
COPIES_SHOWN = 6  # paths of one duplicate set in the text report (--json has all)


@dataclass(frozen=True)
class Inspection:
    """Everything ``inspect`` reports about one dataset directory."""

    directory: Path
    manifest: Manifest
    census: Census
    warnings: tuple[str, ...]
    configured: dict[str, float]
    quality: QualityFigure | None = None


def inspect_dataset(directory: str | Path, split: str | None = None,
                    imbalance: float = IMBALANCE_RATIO, quality: int = 0, seed: int = 0,
                    quiet: bool = True,
                    originals: Originals | None = None) -> Inspection:
    """Read the manifest and sample index of ``directory`` (and ``quality`` originals, under
    the source the user named: ``originals``); ``directory`` may be an ``s3://`` URL."""
    directory = location(directory)
    if quality and is_url(directory):
        raise ConfigError("--quality reads the shards of a dataset on disk: stage "
                          f"{directory} first and inspect the copy")
    manifest = read_manifest(directory)
    require_split(manifest, split)
    census = take_census(directory, manifest, split, per_class=quality, seed=seed)
    try:
        configured = dict(packed_config(manifest).splits)
    except ManifestError:
        configured = {}
    figure = measure_quality(directory, manifest, interleave(census.picks, quality), quiet,
                             originals) if quality else None
    return Inspection(directory, manifest, census, tuple(warnings_of(census, imbalance)),
                      configured, figure)


def object_lines(objects: ObjectCensus, manifest: Manifest, indent: str = "  ") -> list[str]:
    """The object census for people: samples with and without objects, a line per class with
    its objects per split, dropped objects, samples packed before objects were counted."""
    splits = list(manifest.splits)
    names = manifest.object_classes or ()
    ids = sorted({number for number, _ in objects.per_class} | set(range(1, len(names) + 1)))
    width = max([len(printable(_object_name(names, number))) for number in ids] + [24])
    lines = [f"objects  {objects.objects:,} in "
             + plural(sum(objects.with_objects.values()), "sample")
             + f"; {plural(sum(objects.without_objects.values()), 'sample')} without objects"
             + (f"; {plural(sum(objects.only_cut.values()), 'sample')} with only {CUT_REASON}"
                if objects.only_cut else ""),
             f"{indent}{'id':>5}  {'class':<{width}}" + "".join(f"{split:>12}" for split in splits)
             + f"{'total':>10}"]
    for number in ids:
        cells = [objects.per_class.get((number, split), 0) for split in splits]
        lines.append(f"{indent}{number:>5}  {printable(_object_name(names, number)):<{width}}"
                     + "".join(f"{cell:>12,}" for cell in cells) + f"{sum(cells):>10,}")
    for title, counts in (("with objects", objects.with_objects),
                          ("without objects", objects.without_objects),
                          *((("cut defect only", objects.only_cut),)
                            if objects.only_cut else ())):
        lines.append(f"{indent}{'':>5}  {'samples ' + title:<{width}}"
                     + "".join(f"{counts.get(split, 0):>12,}" for split in splits)
                     + f"{sum(counts.values()):>10,}")
    not_recorded = "not recorded (packed before they were counted)"
    by_class = ", ".join(f"{printable(_object_name(names, number))} {count:,}"
                         for number, count in sorted(objects.cut_per_class.items()))
    lines.append(f"{indent}dropped by min_visible: " + (
        f"{objects.dropped:,}" if objects.dropped is not None else not_recorded)
        + (f" ({by_class})" if by_class else ""))
    lines.append(f"{indent}a mask and a box of one defect, merged: " + (
        f"{objects.merged:,}" if objects.merged is not None else not_recorded))
    if objects.uncounted:
        lines.append(f"{indent}{plural(objects.uncounted, 'sample')} packed before objects were "
                     "counted: not in these numbers")
    return lines


def object_json(objects: ObjectCensus, manifest: Manifest) -> dict[str, Any]:
    """The object census as JSON: per class (id, name, per split, total)."""
    names = manifest.object_classes or ()
    ids = sorted({number for number, _ in objects.per_class} | set(range(1, len(names) + 1)))
    splits = list(manifest.splits)
    return {
        "objects": objects.objects,
        "samples_with_objects": dict(objects.with_objects),
        "samples_without_objects": dict(objects.without_objects),
        "samples_with_only_a_cut_defect": dict(objects.only_cut),
        "classes": [{
            "id": number, "name": _object_name(names, number),
            "objects": {split: objects.per_class.get((number, split), 0) for split in splits},
            "total": sum(objects.per_class.get((number, split), 0) for split in splits),
        } for number in ids],
        "dropped_by_min_visible": objects.dropped,
        "cut_objects_per_class": {_object_name(names, number): count
                                  for number, count in sorted(objects.cut_per_class.items())},
        "merged_mask_and_box": objects.merged,
        "samples_not_counted": objects.uncounted,
    }


def _object_name(names: tuple[str, ...], number: int) -> str:
    return names[number - 1] if 0 < number <= len(names) else f"(class {number})"


def annotation_sources_json(manifest: Manifest) -> dict[str, Any] | None:
    """Orphan annotation files and warnings about the sources, as the pack recorded them."""
    report = manifest.annotation_sources
    if report is None:
        return None
    return {"orphans": report.orphans, "orphan_paths": list(report.orphan_paths),
            "warnings": list(report.warnings)}


def warnings_of(census: Census, imbalance: float | None = IMBALANCE_RATIO) -> list[str]:
    """What deserves a look before training: missing classes, imbalance (unless ``imbalance``
    is None), leakage."""
    found: list[str] = []
    labelled = [label for label in census.labels if label >= 0]
    splits = [name for name in census.splits if census.split_total(name)]
    for label in labelled:
        name = census.class_name(label)
        if not census.class_total(label):
            found.append(f"class {name} has no samples")
            continue
        missing = [s for s in splits if not census.counts.get((label, s))]
        for split in missing:
            found.append(f"class {name} has no samples in split {split}")
    totals = [census.class_total(label) for label in labelled if census.class_total(label)]
    if imbalance is not None and len(totals) > 1 and max(totals) > imbalance * min(totals):
        largest = max(labelled, key=census.class_total)
        smallest = min((label for label in labelled if census.class_total(label)),
                       key=census.class_total)
        found.append(f"imbalance: {census.class_name(largest)} has "
                     f"{max(totals) / min(totals):,.1f}x the samples of "
                     f"{census.class_name(smallest)} (over {imbalance:g}x)")
    leaks = census.leaks
    if leaks:
        found.append(f"leakage: {plural(len(leaks), 'set')} of identical originals "
                     "in more than one split")
    if census.groups_in_several_splits:
        found.append(f"leakage: {plural(len(census.groups_in_several_splits), 'group')} "
                     "in more than one split")
    ungrouped = sum(census.ungrouped.values())
    if census.group_pattern and ungrouped:
        found.append(f"{plural(ungrouped, 'sample')} match no group of splits.group (each is "
                     "a group of its own)")
    return found


@dataclass(frozen=True)
class PackFindings:
    """What ``pack`` adds under its summary, and the same for its ``--report`` JSON."""

    lines: tuple[str, ...]
    report: dict[str, Any]


def pack_findings(directory: Path, manifest: Manifest) -> PackFindings:
    """The pack summary's findings: duplicates, groups per split, warnings (imbalance, which
    defect data always has, is left to ``inspect``), then the objects.  They are left out
    (with a log warning) when the version was replaced meanwhile by another pack, which holds
    the lock, not this one."""
    try:
        census = take_census(directory, manifest)
    except ManifestError as exc:
        log.warning("no duplicate, group or object summary: %s", exc)
        return PackFindings((), {})
    lines: list[str] = []
    if census.duplicates:
        lines.append(f"  duplicates   {_duplicates_head(census.duplicates)}")
    if census.group_pattern:
        lines.append("  groups       " + ", ".join(
            f"{name}: {census.groups.get(name, 0):,}" for name in census.splits))
    warnings = warnings_of(census, imbalance=None)
    lines += [f"  warning: {warning}" for warning in warnings]
    if census.duplicates or warnings:
        lines.append(f"  (shardsmith inspect {printable(str(directory))} shows the details)")
    report: dict[str, Any] = {"findings": {
        "duplicate_sets": len(census.duplicates),
        "duplicate_sets_across_splits": len(census.leaks),
        "groups": dict(census.groups), "warnings": warnings}}
    if census.objects is not None:
        report["objects"] = object_json(census.objects, manifest)
        lines += ["  " + line for line in object_lines(census.objects, manifest)]
    return PackFindings(tuple(lines), report)


def inspection_text(inspection: Inspection, all_rejects: bool = False,
                    all_excluded: bool = False) -> str:
    """The report for people."""
    manifest, census = inspection.manifest, inspection.census
    created = manifest.history[-1].created if manifest.history else manifest.created
    lines = [
        f"{printable(str(inspection.directory))}: {manifest.format}, version "
        f"{manifest.version} (schema {manifest.schema_version}), last change "
        f"{created or 'unknown'}, fingerprint {manifest.fingerprint[:12]}",
        f"  source {printable(manifest.source) or 'not recorded'}"
        + (f"; showing split {census.split} only" if census.split else ""),
    ]
    if manifest.version > 1 and manifest.history:  # the same words as pack and log
        lines.append(f"  version {manifest.history[-1].version} changed "
                     f"{change_line(manifest.history[-1])}")
    if manifest.totals.sources is not None:
        lines.append(f"  {plural(manifest.totals.packed, 'sample')} cut from "
                     f"{plural(manifest.totals.sources, 'original')}")
    lines.append("")
    lines += _class_table(inspection)
    lines += ["", *_shard_lines(manifest, census.split)]
    lines += ["", *_image_lines(census)]
    if census.group_pattern:
        lines += ["", f"groups (splits.group {census.group_pattern})  " + ", ".join(
            f"{name}: {plural(census.groups.get(name, 0), 'group')}" for name in census.splits)]
        for group in census.groups_in_several_splits[:SHOWN]:
            lines.append(f"  in more than one split: {printable(group)}")
    if inspection.census.objects is not None:
        lines += ["", *object_lines(inspection.census.objects, manifest)]
    if manifest.annotation_sources is not None:
        lines += ["", *_annotation_source_lines(manifest)]
    lines += ["", *_duplicate_lines(census)]
    lines += ["", *_reject_lines(manifest, all_rejects)]
    lines += ["", *_excluded_lines(manifest, all_excluded)]
    if inspection.quality is not None:
        lines += ["", *quality_lines(inspection.quality, census.class_name)]
    if inspection.warnings:
        lines += ["", "warnings"] + [f"  ! {warning}" for warning in inspection.warnings]
    return "\n".join(lines)


def _class_table(inspection: Inspection) -> list[str]:
    census = inspection.census
    names = [census.class_name(label) for label in census.labels]
    name_width = max([len(name) for name in names] + [12])
    header = f"  {'label':>5}  {'class':<{name_width}}" + "".join(
        f"{split:>16}" for split in census.splits) + f"{'total':>10}"
    lines = [f"samples per class and split ({plural(census.samples, 'sample')})", header]
    for label, name in zip(census.labels, names, strict=True):
        total = census.class_total(label)
        cells = "".join(_cell(census.counts.get((label, split), 0), total)
                        for split in census.splits)
        lines.append(f"  {label:>5}  {name:<{name_width}}{cells}{total:>10,}")
    cells = "".join(_cell(census.split_total(split), census.samples) for split in census.splits)
    lines.append(f"  {'':>5}  {'all':<{name_width}}{cells}{census.samples:>10,}")
    if inspection.configured and census.split is None and len(census.splits) > 1:
        cells = "".join(f"{inspection.configured.get(split, 0):>16.0%}"
                        for split in census.splits)
        lines.append(f"  {'':>5}  {'configured':<{name_width}}{cells}")
    return lines


def _cell(count: int, total: int) -> str:
    share = f"({count / total:.0%})" if total else ""
    return f"{count:>9,} {share:>6}"


def _spread(spread: Spread | None, unit: str = "") -> str:
    if spread is None:
        return "none"
    show = human_bytes if unit == "bytes" else (lambda value: f"{value:,.0f}")
    return (f"min {show(spread.minimum)}  median {show(spread.median)}  "
            f"max {show(spread.maximum)}")


def _shard_lines(manifest: Manifest, split: str | None) -> list[str]:
    shards = [shard for shard in manifest.shards if split is None or shard.split == split]
    per_split = Counter(shard.split for shard in shards)
    lines = [f"shards  {plural(len(shards), 'shard')} ({manifest.format}): "
             + ", ".join(f"{name}: {count:,}" for name, count in per_split.items())]
    if shards:
        lines.append(f"  bytes per shard    {_spread(Spread.of(s.bytes for s in shards), 'bytes')}"
                     f"  (all: {human_bytes(sum(s.bytes for s in shards))})")
        lines.append(f"  samples per shard  {_spread(Spread.of(s.samples for s in shards))}")
    return lines


def _image_lines(census: Census) -> list[str]:
    sizes = ", ".join(f"{width}x{height} ({count:,})"
                      for width, height, count in census.common_sizes)
    return [
        f"images  most common sizes: {sizes or 'none'}",
        f"  width              {_spread(census.widths)}",
        f"  height             {_spread(census.heights)}",
        f"  bytes per sample   {_spread(census.jpeg_bytes, 'bytes')}"
        + (f"  (mean {human_bytes(census.jpeg_bytes.mean)})" if census.jpeg_bytes else ""),
    ]


def _duplicates_head(duplicates: tuple[DuplicateSet, ...]) -> str:
    files = sum(len(duplicate.copies) for duplicate in duplicates)
    leaks = sum(1 for duplicate in duplicates if duplicate.leaks)
    return (f"{plural(len(duplicates), 'set')} of identical originals ({files:,} files)"
            + (f", {leaks:,} in more than one split (leakage)" if leaks else ""))


def _duplicate_lines(census: Census) -> list[str]:
    if not census.duplicates:
        lines = ["duplicates  none (same content digest)"]
    else:
        lines = [f"duplicates  {_duplicates_head(census.duplicates)}"]
        shown = census.duplicates[:SHOWN]
        for duplicate in shown:
            mark = "LEAK " if duplicate.leaks else "     "
            copies = duplicate.copies[:COPIES_SHOWN]
            lines.append(f"  {mark}" + ", ".join(f"{split}: {printable(path)}"
                                                 for split, path in copies)
                         + (f" and {len(duplicate.copies) - len(copies):,} more copies"
                            if len(copies) < len(duplicate.copies) else ""))
        if len(shown) < len(census.duplicates):
            lines.append(f"  ... and {len(census.duplicates) - len(shown):,} more sets "
                         "(--json lists all)")
    if census.undigested:
        lines.append(f"  {plural(census.undigested, 'sample')} carry no content digest "
                     "(packed with run.change_detection edges or by an earlier version): not "
                     "compared")
    return lines


def _annotation_source_lines(manifest: Manifest) -> list[str]:
    report = manifest.annotation_sources
    if report is None:
        return []
    lines = [f"orphan annotation files  {report.orphans:,} (match no image)"]
    lines += [f"  {printable(path)}" for path in report.orphan_paths]
    if report.orphans > len(report.orphan_paths):
        lines.append(f"  ... and {report.orphans - len(report.orphan_paths):,} more (the first "
                     f"{len(report.orphan_paths)} are recorded)")
    lines += [f"  ! {printable(warning)}" for warning in report.warnings]
    return lines


def _reject_lines(manifest: Manifest, show_all: bool) -> list[str]:
    rejects = sorted(manifest.rejects, key=lambda reject: (reject.reason, reject.path))
    reasons = Counter(reject.reason for reject in rejects)
    lines = [f"rejects  {len(rejects):,}" + (" (" + ", ".join(
        f"{reason}: {count:,}" for reason, count in reasons.most_common()) + ")"
        if rejects else "")]
    shown = rejects if show_all else rejects[:SHOWN]
    width = max((len(reject.reason) for reject in shown), default=0)
    for reject in shown:
        lines.append(f"  {reject.reason:<{width}}  {printable(reject.path)}  ({reject.detail})")
    if len(shown) < len(rejects):
        lines.append(f"  ... and {len(rejects) - len(shown):,} more (--rejects lists all)")
    return lines


def _excluded_lines(manifest: Manifest, show_all: bool) -> list[str]:
    excluded = Counter(manifest.excluded)
    lines = [f"excluded  {sum(excluded.values()):,}" + (" (" + ", ".join(
        f"{reason}: {count:,}" for reason, count in excluded.most_common()) + ")"
        if excluded else "")]
    if excluded and not manifest.excluded_paths:
        lines.append("  paths not recorded (packed by an earlier version: the next pack that "
                     "changes something records them)")
    width = max((len(reason) for reason in excluded), default=0)
    for reason, count in excluded.most_common():
        paths = manifest.excluded_paths.get(reason, ())
        shown = paths if show_all else paths[:SHOWN]
        for path in shown:
            lines.append(f"  {reason:<{width}}  {printable(path)}")
        if count > len(shown) and paths:
            more = count - len(shown)
            lines.append(f"  ... {more:,} more {reason}" + (
                " (--excluded lists all that were recorded)" if len(shown) < len(paths)
                else f" (the first {len(paths):,} of each reason are recorded)"))
    return lines


def inspection_json(inspection: Inspection) -> dict[str, Any]:
    """The same report as one JSON-ready document."""
    manifest, census = inspection.manifest, inspection.census
    document: dict[str, Any] = {
        "dataset": str(inspection.directory),
        "format": manifest.format,
        "version": manifest.version,
        "schema_version": manifest.schema_version,
        "last_change": (manifest.history[-1].created if manifest.history
                        else manifest.created),
        "originals": manifest.totals.sources if manifest.totals.sources is not None
        else manifest.totals.packed,
        "fingerprint": manifest.fingerprint,
        "source": manifest.source,
        "split": census.split,
        "samples": census.samples,
        "classes": [{
            "label": label,
            "name": census.class_name(label),
            "samples": {split: census.counts.get((label, split), 0) for split in census.splits},
            "total": census.class_total(label),
            "fractions": {split: _ratio(census.counts.get((label, split), 0),
                                        census.class_total(label)) for split in census.splits},
        } for label in census.labels],
        "splits": {split: {
            "samples": census.split_total(split),
            "configured_fraction": inspection.configured.get(split),
            "shards": sum(1 for shard in manifest.shards if shard.split == split),
            **({"groups": census.groups.get(split, 0),
                "samples_in_no_group": census.ungrouped.get(split, 0)}
               if census.group_pattern else {}),
        } for split in census.splits},
        "shards": _shard_json(manifest, census.split),
        "images": {
            "width": _spread_json(census.widths),
            "height": _spread_json(census.heights),
            "jpeg_bytes": _spread_json(census.jpeg_bytes),
            "common_sizes": [{"width": w, "height": h, "samples": n}
                             for w, h, n in census.common_sizes],
        },
        "rejects": {
            "count": len(manifest.rejects),
            "by_reason": dict(Counter(r.reason for r in manifest.rejects).most_common()),
            "items": [{"path": r.path, "reason": r.reason, "detail": r.detail}
                      for r in sorted(manifest.rejects, key=lambda r: (r.reason, r.path))],
        },
        "excluded": {
            "count": sum(manifest.excluded.values()),
            "by_reason": dict(manifest.excluded),
            "paths": {reason: list(paths) for reason, paths in manifest.excluded_paths.items()},
        },
        "duplicates": {
            "sets": [{"digest": d.digest, "leak": d.leaks,
                      "copies": [{"split": s, "path": p} for s, p in d.copies]}
                     for d in census.duplicates],
            "samples_without_content_digest": census.undigested,
        },
        "groups": ({"pattern": census.group_pattern, "per_split": dict(census.groups),
                    "in_several_splits": list(census.groups_in_several_splits)}
                   if census.group_pattern else None),
        "warnings": list(inspection.warnings),
    }
    if inspection.census.objects is not None:
        document["objects"] = object_json(inspection.census.objects, manifest)
    if manifest.annotation_sources is not None:
        document["annotation_sources"] = annotation_sources_json(manifest)
    last = manifest.history[-1] if manifest.history else None
    if last is not None and last.originals is not None and last.samples is not None:
        document["last_version_change"] = {"version": last.version,
                                           "originals": to_json(last.originals),
                                           "samples": to_json(last.samples)}
    if inspection.quality is not None:
        document["quality"] = quality_json(inspection.quality, census.class_name)
    return document


def _ratio(count: int, total: int) -> float | None:
    return round(count / total, 4) if total else None


def _spread_json(spread: Spread | None) -> dict[str, float] | None:
    if spread is None:
        return None
    return {"min": spread.minimum, "median": spread.median, "max": spread.maximum,
            "mean": round(spread.mean, 2)}


def _shard_json(manifest: Manifest, split: str | None) -> dict[str, Any]:
    shards = [shard for shard in manifest.shards if split is None or shard.split == split]
    return {
        "count": len(shards),
        "bytes": sum(s.bytes for s in shards),
        "bytes_per_shard": _spread_json(Spread.of(s.bytes for s in shards)),
        "samples_per_shard": _spread_json(Spread.of(s.samples for s in shards)),
    }
