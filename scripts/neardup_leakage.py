#!/usr/bin/env python3
"""How many shots of one part a packed dataset holds in different splits.

    scripts/neardup_leakage.py DATASET TRUTH.csv

DATASET was packed from a tree of scripts/make_reshots.py whose truth (path, part, fixture) is
TRUTH.csv. Prints the true pairs (two shots of one part) and those whose samples sit in
different splits: what ``splits.near_duplicates: together`` is for (docs/performance.md,
"Near-duplicates kept in one split"), and the samples per split.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from itertools import combinations
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from reshots import read_truth  # noqa: E402

from shardsmith.dataset.manifest import iter_sample_index, read_manifest  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("truth", type=Path)
    arguments = parser.parse_args()
    manifest = read_manifest(arguments.dataset)
    split = {record.path: record.split
             for record in iter_sample_index(arguments.dataset, manifest)}
    by_part: dict[str, list[str]] = {}
    for path, part, _ in read_truth(arguments.truth):
        if path in split:
            by_part.setdefault(part, []).append(path)
    pairs = [pair for paths in by_part.values() for pair in combinations(paths, 2)]
    across = sum(split[a] != split[b] for a, b in pairs)
    counts = Counter(split.values())
    print(f"version {manifest.version}: {across:,} of {len(pairs):,} true pairs across splits "
          f"({across / max(1, len(pairs)):.3f}); samples "
          + ", ".join(f"{name} {counts[name]:,}" for name in sorted(counts)))


if __name__ == "__main__":
    main()
