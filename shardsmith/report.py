"""Human-readable summaries of what a command did (printed by the CLI)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .pipeline import PackResult
    from .stage import StageResult
    from .verify import VerifyReport


def _megabytes(count: int) -> str:
    return f"{count / 1e6:,.1f} MB"


def pack_summary(result: PackResult) -> str:
    """Seen / packed / rejected, bytes in → out, shards, time and rate."""
    manifest = result.manifest
    totals, run = manifest["totals"], manifest.get("run", {})
    version = manifest.get("version", 1)
    changes = (manifest.get("history") or [{}])[-1]
    if result.up_to_date:
        head = f"{result.output}: up to date, nothing to do (same settings, sources unchanged)"
    elif version > 1:
        head = (f"{result.output}: version {version}: {changes['added']} added, "
                f"{changes['changed']} changed, {changes['removed']} removed; "
                f"{manifest['run']['decoded']} images decoded, "
                f"{len(changes['shards_added'])} shards new, "
                f"{len(changes['shards_removed'])} rewritten or dropped")
    elif result.resumed_at:
        head = f"{result.output}: packed (resumed after {result.resumed_at} images)"
    else:
        head = f"{result.output}: packed"
    lines = [
        head,
        f"  files seen   {totals['seen']:>9,}   excluded {totals['excluded']:,}"
        + _excluded_detail(manifest.get("excluded", {})),
        f"  packed       {totals['packed']:>9,}   "
        + ", ".join(f"{n}: {s['samples']:,}" for n, s in manifest["splits"].items()),
        f"  rejected     {totals['rejected']:>9,}" + _reject_detail(manifest["rejects"]),
    ]
    bytes_in, bytes_out = totals["bytes_in"], totals["bytes_out"]
    ratio = f" ({bytes_in / bytes_out:,.1f}x smaller)" if bytes_out else ""
    lines.append(f"  bytes        {_megabytes(bytes_in)} -> {_megabytes(bytes_out)}{ratio}")
    lines.append(f"  shards       {len(manifest['shards']):>9,}   format {manifest['format']}")
    if run and not result.up_to_date:
        rate = run.get("images_per_second")
        lines.append(
            f"  time         {run['seconds']:>8.1f}s   "
            + (f"{rate:,.1f} images/s" if rate else "")
            + f" with {run['workers']} workers"
        )
    return "\n".join(lines)


def pack_report(result: PackResult) -> dict:
    """The machine-readable part of ``--report``: counts, rejects by reason, timing, version."""
    manifest = result.manifest
    return {
        "output": str(result.output),
        "status": "up_to_date" if result.up_to_date else "packed",
        "resumed_at": result.resumed_at,
        "totals": manifest["totals"],
        "splits": manifest["splits"],
        "rejects_by_reason": dict(Counter(r["reason"] for r in manifest["rejects"])),
        "reject_fraction": round(result.reject_fraction, 6),
        "shards": len(manifest["shards"]),
        "run": manifest.get("run"),
        "fingerprint": manifest["fingerprint"],
    }


def version_log(manifest: dict) -> str:
    """One line per dataset version: what it added, changed and removed."""
    lines = [f"{'version':>7}  {'created':<25} {'added':>7} {'changed':>7} {'removed':>7} "
             f"{'shards +':>8} {'shards -':>8}"]
    for entry in manifest.get("history", []):
        lines.append(
            f"{entry['version']:>7}  {entry['created']:<25} {entry['added']:>7,} "
            f"{entry['changed']:>7,} {entry['removed']:>7,} {len(entry['shards_added']):>8,} "
            f"{len(entry['shards_removed']):>8,}"
        )
    totals = manifest["totals"]
    lines.append(f"current: version {manifest.get('version', 1)}, {totals['packed']:,} samples "
                 f"in {len(manifest['shards']):,} shards")
    return "\n".join(lines)


def _excluded_detail(excluded: dict[str, int]) -> str:
    if not excluded:
        return ""
    return " (" + ", ".join(f"{why}: {n}" for why, n in Counter(excluded).most_common(3)) + ")"


def _reject_detail(rejects: list[dict]) -> str:
    if not rejects:
        return ""
    reasons = Counter(r["reason"] for r in rejects).most_common(4)
    return "   " + ", ".join(f"{reason}: {n}" for reason, n in reasons)


def reject_lines(rejects: list[dict], limit: int = 10) -> list[str]:
    """First few rejects, one line each: path and reason."""
    lines = [f"  {r['path']}: {r['reason']} ({r['detail']})" for r in rejects[:limit]]
    if len(rejects) > limit:
        lines.append(f"  ... and {len(rejects) - limit} more (see manifest.json)")
    return lines


def stage_summary(result: StageResult) -> str:
    """Shards copied / already present / removed, bytes, time and throughput."""
    rate = result.bytes_copied / result.seconds / 1e6 if result.seconds > 0 else 0.0
    lines = [
        f"{result.destination}: staged",
        f"  copied {result.copied} files ({_megabytes(result.bytes_copied)}), "
        f"{result.present} already present and verified, {result.removed} removed",
        f"  time   {result.seconds:.1f}s" + (f", {rate:,.0f} MB/s" if result.copied else
                                             " (nothing to copy)"),
    ]
    if result.stale:
        lines.append(f"  {len(result.stale)} staged shards are no longer listed "
                     "(--prune removes them)")
    return "\n".join(lines)


def verify_summary(report: VerifyReport) -> str:
    verdict = "OK" if report.ok else f"{len(report.problems)} problems"
    return (f"{report.directory}: {verdict}: {report.shards} shards, {report.samples:,} samples, "
            f"{_megabytes(report.bytes)}")
