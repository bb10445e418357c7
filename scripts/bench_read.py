#!/usr/bin/env python3
"""Reading benchmark for `make bench`: the readers against the decode floor, and the shards
against the originals, in one run.

    scripts/bench_read.py [--samples N] [--rounds R] [--seconds S] [--json FILE]

1. A corpus of N textured 800x600 JPEG originals (cached in .cache/bench/), packed once as
   224 px centre crops into WebDataset and TFRecord shards.  `shardsmith bench-read` runs on
   them R times (rows: decode floor, torch reader in-process, DataLoader and ShardLoader with
   one and all workers, DALI CPU fed by our plan and by its own reader, tf.data); the table
   gives each row's median samples/s and its median share of the floor measured in the same
   round, and DALI with our plan against DALI's own reader.
2. The 32 cached 8000x6000 originals of bench_pack.py, packed the same way: a loader over the
   originals with a cold page cache, against the torch reader over their shards.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from benchkit import (  # noqa: E402
    BUILD,
    CACHE,
    REPO,
    ensure_corpus,
    link_subset,
    parser,
    write_report,
)

SHARDSMITH = [sys.executable, "-m", "shardsmith.cli"]
QUIET_TF = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
TARGETS = {"torch reader in-process": 0.90, "ShardLoader, 1 worker": 0.60}
# DALI fed by our plan against DALI's own reader, same decode (share of the same round).
DALI_PAIR = ("DALI CPU, 1 thread, our plan", "DALI CPU, 1 thread, its own reader", 0.90)


def ensure_read_corpus(cache: Path, count: int) -> Path:
    root = cache / "read-800x600"
    present = sum(1 for _ in root.rglob("*.jpg")) if root.is_dir() else 0
    if present < count:
        print(f"generating {count} 800x600 originals in {root} ...", file=sys.stderr)
        subprocess.run([sys.executable, str(REPO / "scripts" / "make_sample_tree.py"), str(root),
                        "--count", str(count), "--width", "800", "--height", "600",
                        "--kinds", "jpg", "--quality", "92", "--seed", "11"],
                       check=True, stdout=subprocess.DEVNULL)
    return root


def pack(source: Path, output: Path, fmt: str) -> Path:
    subprocess.run([*SHARDSMITH, "pack", str(source), str(output), "--format", fmt, "--size",
                    "224", "--resize", "center_crop", "--shard-size", "32", "--quiet"],
                   check=True, stdout=subprocess.DEVNULL)
    return output


def bench_read(*args: str, seconds: float) -> list[dict]:
    out = BUILD / "read-round.json"
    subprocess.run([*SHARDSMITH, "bench-read", *args, "--seconds", str(seconds), "--json",
                    str(out)], check=True, env=QUIET_TF, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def _rate(results: list[dict], name: str) -> float:
    return next((row["samples_per_second"] for row in results if row["name"] == name), 0.0)


def main() -> None:
    arguments = parser(__doc__, "read", reps=None)
    arguments.add_argument("--samples", type=int, default=2400)
    arguments.add_argument("--rounds", type=int, default=3)
    arguments.add_argument("--seconds", type=float, default=6.0)
    options = arguments.parse_args()
    cache, build = CACHE, BUILD

    source = ensure_read_corpus(cache, options.samples)
    wds = pack(source, build / "read-wds", "webdataset")
    tfr = pack(source, build / "read-tfr", "tfrecord")
    rounds = []
    for number in range(options.rounds):
        print(f"round {number + 1} of {options.rounds} ...", file=sys.stderr)
        rounds.append(bench_read(str(wds), "--tfrecords", str(tfr), seconds=options.seconds))

    big_source = cache / "subsets" / "jpeg-32"
    link_subset(ensure_corpus(cache, "jpeg", 32), big_source, 32)
    big = pack(big_source, build / "read-big", "webdataset")
    print("originals, cold cache ...", file=sys.stderr)
    originals = bench_read(str(big), "--source", str(big_source), "--cold", seconds=20)

    rows = {}
    for results in rounds:
        floor = results[0]["samples_per_second"]
        for row in results:
            entry = rows.setdefault(row["name"], {"rates": [], "shares": [], "note": ""})
            entry["rates"].append(row["samples_per_second"])
            entry["shares"].append(row["samples_per_second"] / floor if floor else 0.0)
            entry["note"] = row["note"]
            entry["bytes"] = row["bytes_per_sample"]
    print(f"\n{options.samples} samples of 224 px, medians of {options.rounds} rounds "
          f"({options.seconds:g} s a row):")
    print(f"{'reader':<34}{'samples/s':>11}{'of floor':>10}{'bytes/sample':>14}")
    for name, entry in rows.items():
        if not any(entry["rates"]):
            print(f"{name:<34}  {entry['note']}")
            continue
        print(f"{name:<34}{statistics.median(entry['rates']):>11,.0f}"
              f"{statistics.median(entry['shares']):>10.0%}{entry['bytes']:>14,.0f}")
    by_name = {row["name"]: row for row in originals}
    cold = next(row for row in originals if row["name"].startswith("originals"))
    reader = by_name["torch reader in-process"]
    print(f"\n32 originals 8000x6000 (19 MB JPEG) -> 224 px: {cold['name']} "
          f"{cold['samples_per_second']:.2f} samples/s, {cold['bytes_per_sample'] / 1e6:.1f} MB "
          f"read per sample; torch reader over their shards {reader['samples_per_second']:,.0f} "
          f"samples/s ({reader['samples_per_second'] / cold['samples_per_second']:,.0f}x)")
    print("\ntargets:")
    for name, target in TARGETS.items():
        share = statistics.median(rows[name]["shares"])
        print(f"  {name}: {share:.0%} of the floor (target {target:.0%}): "
              f"{'met' if share >= target else 'NOT met'}")
    plan, own, target = DALI_PAIR
    ratios = [_rate(results, plan) / _rate(results, own) for results in rounds
              if _rate(results, own) > 0]
    if ratios:
        ratio = statistics.median(ratios)
        print(f"  {plan} / its own reader: {ratio:.2f} (target {target:.2f}): "
              f"{'met' if ratio >= target else 'NOT met'}")
    write_report(options.json, {"rounds": rounds, "originals": originals})


if __name__ == "__main__":
    main()
