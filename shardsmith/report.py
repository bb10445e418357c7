"""Human-readable summaries of what a command did (printed by the CLI)."""

from __future__ import annotations

from collections import Counter

from .pipeline import PackResult


def _megabytes(count: int) -> str:
    return f"{count / 1e6:,.1f} MB"


def pack_summary(result: PackResult) -> str:
    """Seen / packed / rejected, bytes in → out, shards, time and rate."""
    manifest = result.manifest
    totals, run = manifest["totals"], manifest.get("run", {})
    if result.up_to_date:
        head = f"{result.output}: up to date, nothing to do (same settings, sources unchanged)"
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
