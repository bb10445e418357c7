"""The probe and the dry run for people (tables) and for programs (one JSON document)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..text import human_bytes, plural, printable
from .predict import CPU, READ, WRITER, ShardEstimate

if TYPE_CHECKING:
    from . import ProbeReport
    from .annotations import AnnotationCheck
    from .dryrun import DryRun
    from .headers import HeaderSurvey
    from .memory import MemoryEstimate, MemoryTerm


def duration(seconds: float) -> str:
    """``12.3 s``, ``4 min 05 s``, ``2 h 10 min``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


def probe_table(report: ProbeReport) -> str:
    """The whole probe as a readable report, the prediction last."""
    tree, listing, reads = report.tree, report.listing, report.reads
    path, writer = report.image_path, report.writer
    mean = tree.bytes / tree.files if tree.files else 0
    settings = report.settings
    lines = [
        f"probe of {printable(report.source)}: {plural(tree.files, 'original')}, "
        f"{human_bytes(tree.bytes)} (mean {human_bytes(mean)})"
        + (f", {plural(len(report.classes), 'class', 'classes')}" if report.classes else "")
        + f"; sample of {len(report.sampled)} (seed {report.seed})",
        f"job: {settings['format']}, {settings['size']} px {settings['resize']}, quality "
        f"{settings['quality']}; {plural(report.prediction.cores, 'worker core')}",
        *([f"note: {report.note}"] if report.note else []),
        "",
        f"{'listing':<30}{'folders/s':>11}{'files/s':>11}{'seconds':>10}",
    ]
    for name, rate in ((f"serial walk ({plural(listing.serial.threads, 'thread')})",
                        listing.serial),
                       (f"parallel scan ({plural(listing.parallel.threads, 'thread')})",
                        listing.parallel)):
        note = ""
        if not rate.complete and rate.files_per_second > 0:
            note = (f"  (stopped there; the whole tree ~ "
                    f"{duration(tree.files / rate.files_per_second)})")
        lines.append(f"  {name:<28}{rate.directories_per_second:>11,.1f}"
                     f"{rate.files_per_second:>11,.0f}{rate.seconds:>10.2f}{note}")
    lines += [f"  parallel / serial: {listing.speedup:.1f}x", "",
              "cold reads of the sample", f"  {reads.note}",
              f"  {'readers':>7}{'MB/s':>10}{'files/s':>10}{'p50 ms':>10}{'p99 ms':>10}"]
    for level in reads.levels:
        lines.append(f"  {level.readers:>7}{level.mb_per_second:>10,.1f}"
                     f"{level.files_per_second:>10,.1f}{level.p50_ms:>10,.1f}"
                     f"{level.p99_ms:>10,.1f}")
    if reads.unreadable:
        lines.append(f"  {plural(len(reads.unreadable), 'sampled file')} could not be read, "
                     f"e.g. {printable(reads.unreadable[0][0])}: {reads.unreadable[0][1]}")
    lines += ["", f"image path per core, {plural(path.processes, 'process', 'processes')} "
              f"converting at once ({settings['size']} px, quality {settings['quality']})",
              f"  {'original':<10}{'images':>8}{'ms/image':>10}{'images/s':>10}"]
    for name, cost in path.formats.items():
        lines.append(f"  {name:<10}{cost.images:>8}{cost.ms_per_image:>10,.1f}"
                     f"{_per_second(cost.ms_per_image):>10,.2f}")
    rejected = ", ".join(f"{reason} {count}" for reason, count in path.rejected.items())
    lines.append(f"  {'all':<10}{path.images:>8}{path.ms_per_image:>10,.1f}"
                 f"{_per_second(path.ms_per_image):>10,.2f}"
                 + (f"  (rejected in the sample: {rejected})" if rejected else ""))
    lines += [f"  output {human_bytes(path.record_bytes_per_sample)} per sample in the shards "
              f"(JPEG {human_bytes(path.jpeg_bytes_per_sample)})",
              f"single writer: {writer.mb_per_second:,.0f} MB/s, "
              f"{writer.samples_per_second:,.0f} samples/s ({settings['format']} framing, "
              f"sha256, fsync; written in {printable(writer.directory)})", ""]
    lines += prediction_lines(report)
    return "\n".join(lines)


def prediction_lines(report: ProbeReport) -> list[str]:
    """The prediction and the training side: what the probe is for."""
    p, feed, path = report.prediction, report.training, report.image_path
    per_core = _per_second(path.ms_per_image)
    best = next((level for level in report.reads.levels
                 if level.readers == p.best_readers), None)
    lines = [f"prediction for the whole tree, {plural(p.cores, 'worker')} on as many cores: "
             f"{p.binding}"]
    if p.read_bound is not None and best is not None:
        lines.append(f"  {'read bound':<14}{p.read_bound:>10,.1f} images/s  "
                     f"({best.mb_per_second:,.1f} MB/s with {plural(best.readers, 'reader')})"
                     + ("  <- binds" if p.binding == READ else ""))
    lines += [
        f"  {'CPU bound':<14}{p.cpu_bound:>10,.1f} images/s  ({p.cores} x {per_core:,.2f} "
        "per core)" + ("  <- binds" if p.binding == CPU else ""),
        f"  {'writer bound':<14}{p.writer_bound:>10,.1f} images/s  (one driver)"
        + ("  <- binds" if p.binding == WRITER else ""),
        f"  {'pack':<14}{p.images_per_second:>10,.1f} images/s  (each worker reads, then "
        "converts)",
        f"  {'time':<14}{duration(p.seconds):>10}  (scan {duration(p.scan_seconds)}), "
        + shard_line(p.output),
        f"  {'workers':<14}" + _workers_advice(report),
    ]
    if not report.reads.cold:
        lines.append("  caution: the reads were not cold, so the read bound is optimistic")
    lines += [
        "",
        f"training, a DataLoader with {plural(feed.cores, 'worker')} on this machine",
        f"  {'from the originals':<22}{feed.originals_per_second:>10,.1f} images/s  "
        f"(full decode {report.loader.originals_ms_per_image:,.0f} ms/image/core; "
        + (f"reads allow {p.read_bound:,.1f})" if p.read_bound is not None else "no reads)"),
        f"  {'from staged shards':<22}{feed.shards_per_second:>10,.1f} images/s  "
        f"(decode {report.loader.shards_ms_per_image:,.2f} ms/image/core, local disk)",
    ]
    if feed.gpu_demand:
        lines.append(f"  a GPU consuming {feed.gpu_demand:,.0f} images/s would be busy "
                     f"{_share(feed.originals_gpu_utilisation)} of the time from the "
                     f"originals, {_share(feed.shards_gpu_utilisation)} from the shards")
    return lines


def _share(fraction: float | None) -> str:
    if fraction is None:
        return "-"
    return f"{fraction:.2%}" if fraction < 0.01 else f"{fraction:.0%}"


def _workers_advice(report: ProbeReport) -> str:
    p = report.prediction
    if p.workers > p.cores:
        return (f"--workers {p.workers}: more workers than cores, so that more reads are in "
                "flight")
    if p.workers == p.cores:
        return f"--workers {p.workers} (all of them)"
    waits = {READ: "the reads", CPU: "the cores", WRITER: "the single writer"}[p.binding]
    return f"--workers {p.workers}: enough to keep up with {waits}; more would wait"


def shard_line(output: ShardEstimate) -> str:
    shards = sum(output.shards.values())
    per_split = ", ".join(f"{split} {count:,}" for split, count in output.shards.items())
    return (f"~{human_bytes(output.output_bytes)} in ~{plural(shards, 'shard')} ({per_split})")


def _per_second(milliseconds: float) -> float:
    return 1000.0 / milliseconds if milliseconds > 0 else 0.0


def probe_json(report: ProbeReport) -> dict[str, Any]:
    """One JSON document: the measurements with their derived rates, and the predictions."""
    tree, listing, reads, path = report.tree, report.listing, report.reads, report.image_path
    p, feed, writer = report.prediction, report.training, report.writer

    def walk(rate) -> dict[str, Any]:
        return {"directories": rate.directories, "files": rate.files,
                "seconds": round(rate.seconds, 4), "threads": rate.threads,
                "complete": rate.complete,
                "directories_per_second": round(rate.directories_per_second, 2),
                "files_per_second": round(rate.files_per_second, 2)}

    return {
        "source": report.source,
        "note": report.note,
        "files": tree.files,
        "bytes": tree.bytes,
        "classes": list(report.classes),
        "excluded": report.excluded,
        "unreadable": report.unreadable,
        "sample": {"size": len(report.sampled), "seed": report.seed,
                   "paths": list(report.sampled)},
        "settings": report.settings,
        "cores": p.cores,
        "listing": {"serial": walk(listing.serial), "parallel": walk(listing.parallel),
                    "speedup": round(listing.speedup, 3)},
        "reads": {
            "cold": reads.cold,
            "note": reads.note,
            "levels": [{"readers": level.readers, "files": level.files, "bytes": level.bytes,
                        "seconds": round(level.seconds, 4),
                        "mb_per_second": round(level.mb_per_second, 3),
                        "files_per_second": round(level.files_per_second, 3),
                        "p50_ms": round(level.p50_ms, 3), "p99_ms": round(level.p99_ms, 3)}
                       for level in reads.levels],
            "best_readers": p.best_readers,
            "unreadable": [{"path": path_, "detail": detail}
                           for path_, detail in reads.unreadable],
        },
        "image_path": {
            "images": path.images,
            "ms_per_image": round(path.ms_per_image, 3),
            "processes": path.processes,
            "formats": {name: {"images": cost.images, "ms_per_image": round(cost.ms_per_image, 3)}
                        for name, cost in path.formats.items()},
            "rejected": path.rejected,
            "original_bytes_per_image": round(path.original_bytes_per_image),
            "jpeg_bytes_per_sample": round(path.jpeg_bytes_per_sample),
            "record_bytes_per_sample": round(path.record_bytes_per_sample),
        },
        "writer": {"samples": writer.samples, "bytes": writer.bytes,
                   "seconds": round(writer.seconds, 4),
                   "mb_per_second": round(writer.mb_per_second, 2),
                   "samples_per_second": round(writer.samples_per_second, 1),
                   "directory": writer.directory},
        "prediction": {
            "binding": p.binding,
            "images_per_second": round(p.images_per_second, 3),
            "bounds": {"read": _rounded(p.read_bound), "cpu": _rounded(p.cpu_bound),
                       "writer": _rounded(p.writer_bound)},
            "seconds": round(p.seconds, 2),
            "scan_seconds": round(p.scan_seconds, 3),
            "workers": p.workers,
            "output_bytes": p.output.output_bytes,
            "shards": p.output.shards,
            "output_basis": p.output.basis,
        },
        "training": {
            "cores": feed.cores,
            "originals_images_per_second": round(feed.originals_per_second, 3),
            "shards_images_per_second": round(feed.shards_per_second, 1),
            "originals_ms_per_image_per_core": round(report.loader.originals_ms_per_image, 2),
            "shards_ms_per_image_per_core": round(report.loader.shards_ms_per_image, 4),
            "gpu_demand": feed.gpu_demand,
            "gpu_utilisation": None if feed.gpu_demand is None else {
                "originals": round(feed.originals_gpu_utilisation, 4),
                "shards": round(feed.shards_gpu_utilisation, 4)},
        },
    }


def _rounded(value: float | None) -> float | None:
    if value is None or math.isinf(value):
        return None
    return round(value, 3)


def dry_run_table(result: DryRun) -> str:
    """Counts per class and split, bytes in, expected shards (and the probe's estimate)."""
    tree = result.tree
    splits = list(tree.by_split)
    classes = sorted({name for counts in tree.by_split.values() for name in counts})
    lines = [f"dry run: {printable(result.source)} -> {printable(result.output)} "
             "(nothing written)",
             f"  {plural(tree.files, 'original')} to pack, {human_bytes(tree.bytes)} in"
             + (f"; left out: {_left_out(result.excluded)}" if result.excluded else "")
             + (f"; {result.unreadable:,} unreadable" if result.unreadable else ""),
             "",
             f"  {'class':<24}" + "".join(f"{split:>12}" for split in splits) + f"{'total':>12}"]
    for name in classes:
        row = [tree.by_split[split].get(name, 0) for split in splits]
        lines.append(f"  {printable(name or '(no class)'):<24}"
                     + "".join(f"{count:>12,}" for count in row) + f"{sum(row):>12,}")
    totals = tree.split_totals()
    lines += [f"  {'total':<24}" + "".join(f"{totals[split]:>12,}" for split in splits)
              + f"{tree.files:>12,}", "",
              f"  shards: {shard_line(result.shards)}" if result.shards.shards else
              f"  shards: {result.shards.basis}"]
    if result.shards.shards:
        lines.append(f"          at {human_bytes(result.shards.bytes_per_sample)} per sample, "
                     f"{result.shards.basis}")
    if result.existing:
        lines.append(f"  output: {result.existing}")
    if result.changes:
        lines.append(f"  changes: {result.changes}")
    if result.annotations is not None:
        lines += annotation_check_lines(result.annotations)
    if result.survey is not None:
        lines += header_lines(result)
    lines += memory_lines(result.memory, "predicted", "from the headers read")
    if result.worst_case is not None:
        lines += memory_lines(result.worst_case, "worst case", "what the limits allow")
    if result.probe is not None:
        lines += [""] + prediction_lines(result.probe)
    return "\n".join(lines)


def annotation_check_lines(check: AnnotationCheck) -> list[str]:
    """The dry run's annotation check: how many originals, problems, orphans, warnings."""
    lines = [f"  annotations: read for {check.checked:,} of {plural(check.originals, 'original')} "
             f"(seeded sample, seed {check.seed}) against their headers: "
             + (plural(check.problem_count, "problem") if check.problem_count else "no problem")]
    lines += [f"    {printable(problem)}" for problem in check.problems]
    if check.problem_count > len(check.problems):
        lines.append(f"    ... and {check.problem_count - len(check.problems):,} more")
    sources = check.sources
    if sources is not None:
        lines.append(f"    {plural(sources.orphans, 'annotation file')} match no image"
                     + (": " + ", ".join(printable(path) for path in sources.orphan_paths[:3])
                        + (f" and {sources.orphans - 3:,} more" if sources.orphans > 3 else "")
                        if sources.orphan_paths else ""))
        lines += [f"    warning: {printable(warning)}" for warning in sources.warnings]
    return lines


def annotation_check_json(check: AnnotationCheck) -> dict[str, Any]:
    sources = check.sources
    return {"originals": check.originals, "checked": check.checked, "seed": check.seed,
            "problems": list(check.problems), "problem_count": check.problem_count,
            "orphans": sources.orphans if sources else 0,
            "orphan_paths": list(sources.orphan_paths) if sources else [],
            "warnings": list(sources.warnings) if sources else []}


def header_lines(result: DryRun) -> list[str]:
    """The headers read, what a pack would reject, and whether that is within its budget."""
    survey, rejects = result.survey, result.rejects
    refused = {**survey.sample_rejects}
    for reason, count in survey.other_rejects.items():
        refused[reason] = refused.get(reason, 0) + count
    largest = f" and the {plural(survey.largest, 'largest file')}" if survey.largest else ""
    lines = [f"  headers: read for {survey.sampled:,} of {plural(survey.originals, 'original')} "
             f"(seeded sample, seed {survey.seed}){largest}: "
             + (f"{plural(survey.rejected, 'original')} a pack would reject ("
                + _left_out(refused) + ")" if refused else "none a pack would reject")]
    lines += [f"    {printable(example)}" for example in survey.examples]
    if rejects is not None:
        lines.append(f"  rejects, predicted: {rejects.rejects:,} of "
                     f"{plural(rejects.candidates, 'original')} ({rejects.fraction:.1%}), "
                     f"allowed {rejects.allowed:.1%} (run.max_reject_fraction)"
                     + ("" if rejects.fraction <= rejects.allowed else ": too many"))
    return lines


def memory_lines(memory: MemoryEstimate, kind: str, basis: str) -> list[str]:
    """The memory of the pack (``kind``: predicted or worst case): the total, then each
    process and its terms."""
    lines = [f"  memory, {kind}: {human_bytes(memory.total_bytes)} for the process tree "
             f"({basis})"]
    parts = [("driver", memory.driver_bytes, memory.driver)]
    if memory.workers:
        parts.append((f"each of {plural(memory.workers, 'worker')}", memory.worker_bytes,
                      memory.per_worker))
    if memory.helpers is not None:
        parts.append((memory.helpers.name, memory.helpers.bytes, (memory.helpers,)))
    for name, total, terms in parts:
        lines.append(f"    {name:<22}{human_bytes(total):>10}")
        lines += [f"      {term.name:<20}{human_bytes(term.bytes):>10}  {term.basis}"
                  for term in terms]
    if memory.note:
        lines.append(f"    {memory.note}")
    return lines


def memory_json(memory: MemoryEstimate) -> dict[str, Any]:
    """The worst case as numbers, with every term and its basis."""

    def terms(found: tuple[MemoryTerm, ...]) -> list[dict[str, Any]]:
        return [{"name": term.name, "bytes": term.bytes, "basis": term.basis} for term in found]

    return {
        "total_bytes": memory.total_bytes,
        "driver_bytes": memory.driver_bytes,
        "workers": memory.workers,
        "worker_bytes": memory.worker_bytes,
        "helpers_bytes": memory.helpers.bytes if memory.helpers is not None else 0,
        "driver": terms(memory.driver),
        "worker": terms(memory.per_worker),
        "helpers": terms((memory.helpers,)) if memory.helpers is not None else [],
        "note": memory.note,
    }


def header_json(survey: HeaderSurvey) -> dict[str, Any]:
    """The headers read: how many, the refusals, the heaviest original."""
    heaviest = survey.heaviest
    return {"originals": survey.originals, "sampled": survey.sampled,
            "largest": survey.largest, "seed": survey.seed,
            "sample_rejects": survey.sample_rejects, "other_rejects": survey.other_rejects,
            "examples": list(survey.examples),
            "samples_per_original": round(survey.mean_samples, 3),
            "heaviest": None if heaviest is None else {
                "path": heaviest.relpath, "bytes": heaviest.budget_bytes,
                "what": heaviest.what}}


def _left_out(excluded: dict[str, int]) -> str:
    return ", ".join(f"{count:,} {reason}" for reason, count in excluded.items())


def dry_run_json(result: DryRun) -> dict[str, Any]:
    """The dry run for ``--report``."""
    return {
        "source": result.source,
        "output": result.output,
        "files": result.tree.files,
        "bytes_in": result.tree.bytes,
        "counts": result.tree.by_split,
        "splits": result.tree.split_totals(),
        "excluded": result.excluded,
        "unreadable": result.unreadable,
        "shards": result.shards.shards,
        "output_bytes": result.shards.output_bytes,
        "bytes_per_sample": round(result.shards.bytes_per_sample),
        "shard_estimate_basis": result.shards.basis,
        "existing_output": result.existing,
        "changes": result.changes,
        "memory": memory_json(result.worst_case or result.memory),  # the worst case
        "memory_predicted": memory_json(result.memory),
        "headers": header_json(result.survey) if result.survey is not None else None,
        "rejects_predicted": None if result.rejects is None else {
            "rejects": result.rejects.rejects, "candidates": result.rejects.candidates,
            "fraction": round(result.rejects.fraction, 6), "sampled": result.rejects.sampled,
            "found_in_sample": result.rejects.found, "certain": result.rejects.certain,
            "allowed": result.rejects.allowed},
        "refusal": result.refusal,
        "probe": probe_json(result.probe) if result.probe is not None else None,
        "annotations": annotation_check_json(result.annotations)
        if result.annotations is not None else None,
    }
