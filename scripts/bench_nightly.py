#!/usr/bin/env python3
"""Benchmark of a nightly increment against a full rebuild, same files, same run.

    scripts/bench_nightly.py [--images N] [--new-percent P] [--reps R] [--json FILE]

On the cached 8000x6000 JPEG corpus of bench_pack.py: pack a tree of N originals, add P% new
ones, time the incremental `shardsmith pack` (a fresh process, as cron runs it; and count the
images it decoded), then a full rebuild of the grown tree into a fresh output.  All cores;
medians of --reps rounds.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from benchkit import ensure_corpus, files_of, parser, scratch_root, write_report  # noqa: E402


def run_pack(source: Path, output: Path) -> tuple[float, dict]:
    """`shardsmith pack` as cron runs it: a fresh process, worker start-up included."""
    command = [sys.executable, "-m", "shardsmith.cli", "pack", str(source), str(output),
               "--size", "512", "--shard-size", "4", "--quiet"]
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    return seconds, json.loads((output / "manifest.json").read_text())


def main() -> None:
    arguments = parser(__doc__, "nightly", cache=True)
    arguments.add_argument("--images", type=int, default=96)
    arguments.add_argument("--new-percent", type=float, default=5.0)
    args = arguments.parse_args()

    originals = files_of(ensure_corpus(args.cache, "jpeg", args.images))[: args.images]
    new = max(1, round(args.images * args.new_percent / (100 + args.new_percent)))
    increment_s, full_s, decoded = [], [], []
    for _ in range(args.reps):
        with tempfile.TemporaryDirectory(dir=scratch_root()) as scratch:
            scratch = Path(scratch)
            (scratch / "source" / "a").mkdir(parents=True)
            for path in originals[: args.images - new]:
                os.link(path, scratch / "source" / "a" / path.name)
            run_pack(scratch / "source", scratch / "nightly")
            for path in originals[args.images - new :]:
                os.link(path, scratch / "source" / "a" / path.name)
            seconds, manifest = run_pack(scratch / "source", scratch / "nightly")
            increment_s.append(seconds)
            decoded.append(manifest["run"]["decoded"])
            seconds, manifest = run_pack(scratch / "source", scratch / "rebuild")
            full_s.append(seconds)
    increment, full = statistics.median(increment_s), statistics.median(full_s)
    print(f"nightly increment: {args.images - new} packed originals + {new} new "
          f"({new / (args.images - new):.1%}), {os.cpu_count()} cores, median of {args.reps}")
    print(f"{'run':<22}{'seconds':>10}{'decoded':>10}")
    print(f"{'increment':<22}{increment:>10.2f}{statistics.median(decoded):>10.0f}")
    print(f"{'full rebuild':<22}{full:>10.2f}{args.images:>10}")
    print(f"increment is {full / increment:.1f}x faster than a full rebuild")
    write_report(args.json, {"images": args.images, "new": new,
                             "increment_seconds": increment_s, "full_seconds": full_s,
                             "decoded": decoded, "ratio": full / increment})


if __name__ == "__main__":
    main()
