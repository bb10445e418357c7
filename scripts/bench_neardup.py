#!/usr/bin/env python3
"""Time scripts/neardup.py: candidates and clusters by the number of hashes, and the check.

    scripts/bench_neardup.py [--counts 5000,10000,20000] [--repeat 3]

Hashes are random 64-bit values with 32 bits set (the part hash's shape); the exhaustive
candidate search costs the same whatever the values are. Medians of ``--repeat`` runs, each
count's time also as a ratio to the smallest count's measured in the same run. The check is
timed on the candidate pairs of 63 parts and 8 re-shots of one fixture (scripts/reshots.py).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import neardup  # noqa: E402
from neardup_curve import reduce  # noqa: E402
from reshots import render  # noqa: E402


def _hashes(count: int, rng: np.random.Generator) -> np.ndarray:
    bits = np.argsort(rng.random((count, 64)), axis=1)[:, :32]
    values = np.zeros(count, np.uint64)
    for column in range(32):
        values |= np.uint64(1) << bits[:, column].astype(np.uint64)
    return values


def _median_seconds(action, repeat: int) -> float:
    timings = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        timings.append(time.perf_counter() - started)
    return float(np.median(timings))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--counts", default="5000,10000,20000")
    parser.add_argument("--repeat", type=int, default=3)
    arguments = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"{'hashes':>8}  {'candidates s':>12}  {'pairs':>7}  {'clusters s':>10}  {'ratio':>6}")
    baseline = None
    for count in (int(value) for value in arguments.counts.split(",")):
        hashes = _hashes(count, rng)
        pairs = neardup.candidates(hashes)
        search = _median_seconds(lambda h=hashes: neardup.candidates(h), arguments.repeat)
        cluster = _median_seconds(lambda p=pairs, c=count: neardup.clusters(p, c),
                                  arguments.repeat)
        baseline = baseline or search
        print(f"{count:8d}  {search:12.2f}  {len(pairs):7d}  {cluster:10.3f}  "
              f"{search / baseline:6.1f}")
    greys = [reduce(render(0, 0, part, shot)) for part in range(63)
             for shot in range(2 if part < 8 else 1)]
    median = neardup.fixture_median(greys[:63])
    views = [neardup.part_view(grey, median) for grey in greys]
    pairs = neardup.candidates(np.array([neardup.part_hash(g, median) for g in greys],
                                        np.uint64))
    timings = []
    for first, second in pairs:
        started = time.perf_counter_ns()
        neardup.check(views[first], views[second])
        timings.append(time.perf_counter_ns() - started)
    hash_timings = []
    for grey in greys:
        started = time.perf_counter_ns()
        neardup.part_hash(grey, median)
        hash_timings.append(time.perf_counter_ns() - started)
    print(f"check: median {np.median(timings) / 1e6:.2f} ms a pair ({len(pairs)} candidates of "
          f"{len(greys)} shots on one fixture); "
          f"part hash: median {np.median(hash_timings) / 1e6:.2f} ms an image")


if __name__ == "__main__":
    main()
