"""Human-readable summaries of what a command did (printed by the CLI)."""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING

from ..text import human_bytes, plural, printable

if TYPE_CHECKING:
    from ..dataset.manifest import Manifest, RejectEntry
    from ..packing.pipeline import PackResult
    from ..storage import Location


def pack_summary(result: PackResult) -> str:
    """Seen / packed / rejected, bytes in → out, shards, time and rate."""
    manifest = result.manifest
    totals, run = manifest.totals, manifest.run
    change = manifest.history[-1] if manifest.history else None
    if result.up_to_date:
        head = f"{result.shown}: up to date, nothing to do (same settings, sources unchanged)"
    elif manifest.version > 1 and change is not None:
        copied = run.get("jpeg_copied", 0)
        from ..dataset.changes import change_line

        head = (f"{result.shown}: version {manifest.version}: {change_line(change)}; "
                f"{plural(run.get('decoded', 0), 'image')} decoded, "
                + (f"{copied:,} re-annotated with their JPEG bytes copied, " if copied else "")
                + f"{plural(len(change.shards_added), 'shard')} new, "
                f"{len(change.shards_removed):,} rewritten or dropped"
                + (f" ({change.note})" if change.note else ""))
    elif result.resumed_at:
        head = f"{result.shown}: packed (resumed after {plural(result.resumed_at, 'image')})"
    else:
        head = f"{result.shown}: packed"
    lines = [
        head,
        f"  files seen   {totals.seen:>9,}   excluded {totals.excluded:,}"
        + _excluded_detail(manifest.excluded),
        f"  packed       {totals.packed:>9,}   "
        + ", ".join(f"{name}: {split.samples:,}" for name, split in manifest.splits.items())
        + (f" (tiles of {plural(totals.sources, 'original')})"
           if totals.sources is not None else ""),
        f"  rejected     {totals.rejected:>9,}" + _reject_detail(manifest.rejects),
    ]
    ratio = ""
    if totals.bytes_in and totals.bytes_out:  # "0.6x smaller" reads as a gain: say larger
        ratio = (f" ({totals.bytes_in / totals.bytes_out:,.1f}x smaller)"
                 if totals.bytes_out <= totals.bytes_in
                 else f" ({totals.bytes_out / totals.bytes_in:,.1f}x larger)")
    lines.append(f"  bytes        {human_bytes(totals.bytes_in)} -> "
                 f"{human_bytes(totals.bytes_out)}{ratio}")
    lines.append(f"  shards       {len(manifest.shards):>9,}   format {manifest.format}")
    lines += annotation_source_lines(manifest)
    if run and not result.up_to_date:
        rate = run.get("images_per_second")
        lines.append(
            f"  time         {run.get('seconds', 0):>8.1f}s   "
            + (f"{rate:,.1f} images/s " if rate else "")
            + f"with {plural(run.get('workers', 1), 'worker')}"
        )
    return "\n".join(lines)


ORPHANS_NAMED = 3  # orphan annotation files the pack summary names (inspect names more)


def annotation_source_lines(manifest: Manifest) -> list[str]:
    """Orphan annotation files (a few named, then "and N more") and the warnings about the
    annotation sources, as the pack recorded them; nothing for a dataset without objects."""
    report = manifest.annotation_sources
    if report is None:
        return []
    named = min(ORPHANS_NAMED, len(report.orphan_paths))
    lines = [f"  orphans      {report.orphans:>9,}   annotation files that match no image"
             + (": " + ", ".join(printable(path) for path in report.orphan_paths[:named])
                + (f" and {report.orphans - named:,} more" if report.orphans > named else "")
                if report.orphan_paths else "")]
    lines += [f"  warning: {printable(warning)}" for warning in report.warnings]
    return lines


def reject_budget_exceeded(result: PackResult, allowed: float) -> str:
    """Why a pack exits with code 3: the dataset is there and complete, but more images were
    rejected than allowed; what to look at and which option changes the budget."""
    totals = result.manifest.totals
    candidates = (totals.packed if totals.sources is None else totals.sources) + totals.rejected
    state = ("nothing to do: the dataset is unchanged and complete" if result.up_to_date
             else "the dataset was written and is complete")
    needed = math.ceil(result.reject_fraction * 1000) / 1000
    return (f"{state} (version {result.manifest.version}, "
            f"{plural(totals.packed, 'sample')}), but {totals.rejected:,} of "
            f"{plural(candidates, 'image')} ({result.reject_fraction:.1%}) were rejected, more "
            f"than the allowed {allowed:.1%}: see `shardsmith inspect {result.shown} "
            f"--rejects`, then fix or remove those files, or allow it with "
            f"--max-reject-fraction {needed:g} (run.max_reject_fraction in the config)")


def run_record(result: PackResult) -> dict:
    """The machine-readable part of ``--report``: counts, rejects by reason, timing, version."""
    from ..schema import to_json

    manifest = result.manifest
    change = manifest.history[-1] if manifest.history and not result.up_to_date else None
    units = {"originals": to_json(change.originals), "samples": to_json(change.samples)} \
        if change is not None and change.originals is not None else None
    return {
        "output": result.shown,
        # what this version changed, in each unit (as ``log`` and ``diff`` count it)
        **({"changes": units} if units is not None else {}),
        "status": "up_to_date" if result.up_to_date else "packed",
        "version": manifest.version,
        "resumed_at": result.resumed_at,
        "totals": to_json(manifest.totals),
        "splits": to_json(manifest.splits),
        "rejects_by_reason": dict(Counter(r.reason for r in manifest.rejects)),
        "reject_fraction": round(result.reject_fraction, 6),
        # decoded counts decodes only: a re-annotated original whose JPEG bytes were copied
        # from the previous version is counted here instead
        "decoded": manifest.run.get("decoded", 0),
        "jpeg_copied": manifest.run.get("jpeg_copied", 0),
        "shards": len(manifest.shards),
        "run": manifest.run,
        "fingerprint": manifest.fingerprint,
    }


def version_log(manifest: Manifest, directory: Location | None = None) -> str:
    """One line per dataset version: what it added, changed and removed, in originals and
    (in brackets, where tiles make them differ) samples; an entry of an earlier release is
    counted again from its changes file where ``directory`` keeps it, else shown as
    recorded."""
    from ..dataset.changes import as_recorded, change_kinds, history_counts

    counts = history_counts(directory, manifest)
    # moves to another split (splits.near_duplicates) get a column where a version made any
    moves = any(originals.moved for originals, _ in counts.values())
    lines = [f"{'version':>7}  {'created':<25} {'added':>13} {'changed':>13} "
             f"{'relabelled':>13} {'re-annotated':>13} {'removed':>13} "
             + (f"{'moved':>13} " if moves else "")
             + f"{'rejected':>8} {'new shards':>10} {'gone shards':>11}"]
    for entry in manifest.history:
        notes = [entry.note] if entry.note else []
        if entry.version in counts:
            originals, samples = counts[entry.version]
            cells = [_cell(original, sample) for (_, original), (_, sample)
                     in zip(change_kinds(originals), change_kinds(samples), strict=True)]
        else:
            cells = [f"{entry.added:,}", f"{entry.changed:,}", "-", "-", f"{entry.removed:,}",
                     "-"]
            notes.append(as_recorded(entry))
        cells = cells if moves else cells[:-1]  # moved is the last kind
        lines.append(
            f"{entry.version:>7}  {entry.created:<25} "
            + " ".join(f"{cell:>13}" for cell in cells)
            + f" {entry.rejected:>8,} {len(entry.shards_added):>10,} "
            f"{len(entry.shards_removed):>11,}"
            + (f"  {printable('; '.join(notes))}" if notes else ""))
    totals = manifest.totals
    lines.append("counts: originals, (samples) where an original made several")
    lines.append(f"current: version {manifest.version}, "
                 + (f"{plural(totals.sources, 'original')} in " if totals.sources is not None
                    else "")
                 + f"{plural(totals.packed, 'sample')} in "
                 f"{plural(len(manifest.shards), 'shard')}")
    return "\n".join(lines)


def _cell(originals: int, samples: int) -> str:
    return f"{originals:,}" if originals == samples else f"{originals:,} ({samples:,})"


def _excluded_detail(excluded: dict[str, int]) -> str:
    if not excluded:
        return ""
    return " (" + ", ".join(f"{why}: {n}" for why, n in Counter(excluded).most_common(3)) + ")"


def _reject_detail(rejects: tuple[RejectEntry, ...]) -> str:
    if not rejects:
        return ""
    reasons = Counter(r.reason for r in rejects).most_common(4)
    return "   " + ", ".join(f"{reason}: {n}" for reason, n in reasons)


def reject_lines(rejects: tuple[RejectEntry, ...], limit: int = 10) -> list[str]:
    """First few rejects, one line each: path and reason."""
    lines = [f"  {printable(r.path)}: {r.reason} ({r.detail})" for r in rejects[:limit]]
    if len(rejects) > limit:
        lines.append(f"  ... and {len(rejects) - limit:,} more (see manifest.json)")
    return lines
