#!/usr/bin/env python3
"""How long ``shardsmith diff`` takes, and how much memory, on versions of 1M samples.

    scripts/bench_diff.py [--samples N] [--reps R] [--json FILE]

A tiny dataset is packed for a valid manifest; then the changes files of four versions of
N samples are synthesized through the pack's own writer (``packing.changes.write_changes``)
and named by the manifest: v1 adds N sources; v2 and v3 each add N/10, remove N/10, change
N/10, relabel N/100 (v3 removes some of v2's additions) and reject or fix a few; v4 changes
every source (a whole re-annotation: N lines, the largest single file).  Timed, each in a
fresh process (``python -m shardsmith diff ... --json``), the median of R runs with its peak
RSS (``wait4``): the last two versions (v3 -> v4: one file of N lines), and v1 -> v4 (three
files composed: ~1.6 N lines).  The issue's budget: <= 10 s and <= 200 MB for N = 1M.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from benchkit import BUILD, REPO, parser, write_report  # noqa: E402

sys.path.insert(0, str(REPO))
from shardsmith.dataset.changes import (  # noqa: E402
    CHANGES_FORMAT,
    ChangeLine,
    ChangesHeader,
    VersionTotals,
    json_line,
)
from shardsmith.packing.changes import write_changes  # noqa: E402

CLASSES = ("good", "scratch", "dent", "crack", "stain")
SPLITS = ("train", "val")
BUDGET_SECONDS, BUDGET_MB = 10.0, 200.0


def path_of(number: int) -> str:
    return f"line3/lot{number % 997:03d}/cam{number % 4}/img{number:08d}.png"


def key_of(number: int) -> str:
    return f"lot{number % 997:03d}_img{number:08d}_{number * 2654435761 % 16**12:012x}"


def sample(change: str, number: int, label: int, was: int | None = None) -> bytes:
    return json_line(ChangeLine(change, path_of(number), key_of(number),
                                SPLITS[number % 10 == 0], CLASSES[label],
                                None if was is None else CLASSES[was]))


def totals(samples: int, rejects: int) -> VersionTotals:
    per_class = samples // len(CLASSES)
    counts = {split: {name: per_class // 2 for name in CLASSES} for split in SPLITS}
    return VersionTotals(CLASSES, ("scratch", "dent"), samples, counts,
                         {"scratch": samples // 7, "dent": samples // 11}, rejects)


def increment(count: int, start: int, version: int):
    """v2 / v3: N/10 added (numbers from ``start``), removed, changed; N/100 relabelled."""
    tenth = count // 10
    for number in range(start, start + tenth):
        yield sample("added", number, number % 5)
    # v2 removes N/10 of v1's sources; v3 half of v2's additions and N/20 more of v1's
    removed = range(tenth) if version == 2 else \
        [*range(count, count + tenth // 2), *range(tenth, tenth + tenth // 2)]
    for number in removed:
        yield sample("removed", number, number % 5)
    for number in range(2 * tenth, 3 * tenth):
        yield sample("changed", number + version, (number + version) % 5)
    for number in range(3 * tenth, 3 * tenth + count // 100):
        yield sample("relabelled", number + version, (number + 1) % 5, number % 5)
    for number in range(50):
        yield json_line(ChangeLine("rejected", f"bad/{version}/{number}.png",
                                   reason="not_an_image", detail="not a recognised format"))


def synthesize(directory: Path, count: int) -> None:
    """The changes files of v1..v4, through the pack's writer, named by the manifest."""
    entries = [
        write_changes(directory, ChangesHeader(CHANGES_FORMAT, 1, totals(count, 0)),
                      (sample("added", number, number % 5) for number in range(count))),
        write_changes(directory, ChangesHeader(CHANGES_FORMAT, 2, totals(count, 50),
                                               totals(count, 0)),
                      increment(count, count, 2)),
        write_changes(directory, ChangesHeader(CHANGES_FORMAT, 3, totals(count, 100),
                                               totals(count, 50)),
                      increment(count, count + count // 10, 3)),
        write_changes(directory, ChangesHeader(CHANGES_FORMAT, 4, totals(count, 100),
                                               totals(count, 100)),
                      (sample("changed", number, number % 5) for number in range(count))),
    ]
    manifest = json.loads((directory / "manifest.json").read_text())
    manifest["version"] = 4
    manifest["changes"] = [{"version": e.version, "name": e.name, "bytes": e.bytes,
                            "sha256": e.sha256} for e in entries]
    (directory / "manifest.json").write_text(json.dumps(manifest))


def tiny_dataset(directory: Path) -> None:
    from PIL import Image

    from shardsmith import load_config, pack

    source = directory.parent / "diff-source"
    shutil.rmtree(source, ignore_errors=True)
    for number in range(3):
        (source / "good").mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (64, 48), (number * 40, 90, 120)).save(source / "good" / f"{number}.png")
    shutil.rmtree(directory, ignore_errors=True)
    pack(load_config(None, {"source.path": str(source), "output.path": str(directory),
                            "run.quiet": True, "run.workers": 1, "image.size": 32,
                            "output.keep_changes": 0}))


def timed(directory: Path, *versions: str) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system: what a shared machine's load does not
    inflate) and peak RSS (MB) of one ``shardsmith diff`` in a fresh process."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "shardsmith", "diff", str(directory),
                                *versions, "--json"], stdout=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise SystemExit(f"diff {' '.join(versions)} failed ({process.returncode})")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> None:
    arguments = parser(__doc__, "diff", reps=3)
    arguments.add_argument("--samples", type=int, default=1_000_000,
                           help="samples a version (default: %(default)s)")
    args = arguments.parse_args()
    directory = BUILD / "diff"
    tiny_dataset(directory)
    started = time.perf_counter()
    synthesize(directory, args.samples)
    print(f"synthesized v1..v4 of {args.samples:,} samples in "
          f"{time.perf_counter() - started:.1f} s "
          f"({sum(p.stat().st_size for p in directory.glob('changes-*')) / 1e6:.0f} MB)")
    rows = {}
    for name, versions in (("last two (v3 -> v4)", ()), ("v1 -> v4 composed", ("v1", "v4"))):
        runs = [timed(directory, *versions) for _ in range(args.reps)]
        seconds = statistics.median(run[0] for run in runs)
        cpu = statistics.median(run[1] for run in runs)
        peak = max(run[2] for run in runs)
        rows[name] = {"seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2),
                      "peak_rss_mb": round(peak, 1)}
        verdict = "within" if seconds <= BUDGET_SECONDS and peak <= BUDGET_MB else "OVER"
        print(f"  {name:<22} {seconds:6.2f} s ({cpu:.2f} s CPU)  {peak:6.1f} MB peak RSS  "
              f"({verdict} the {BUDGET_SECONDS:g} s / {BUDGET_MB:g} MB budget)")
    write_report(args.json, {"samples": args.samples, "reps": args.reps, "results": rows})


if __name__ == "__main__":
    main()
