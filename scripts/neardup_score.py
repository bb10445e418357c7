#!/usr/bin/env python3
"""Score ``shardsmith inspect --near-duplicates`` against a corpus's ground truth.

    scripts/neardup_score.py REPORT.json TRUTH.csv

REPORT.json is what ``inspect DATASET --near-duplicates --json`` printed for a dataset packed
from a tree of scripts/make_reshots.py; TRUTH.csv is that tree's truth (path, part, fixture).
Prints the recall and precision of the co-cluster relation (two samples in one cluster
against two shots of one part), as docs/know-your-data.md measures the design.
"""

from __future__ import annotations

import argparse
import json
import sys
from itertools import combinations
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from reshots import read_truth  # noqa: E402


def pairs_of(groups: list[list[str]]) -> set[tuple[str, str]]:
    """The pairs of different originals in one group (a tile's original is one original)."""
    return {(a, b) if a < b else (b, a) for group in groups
            for a, b in combinations(sorted(set(group)), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("report", type=Path)
    parser.add_argument("truth", type=Path)
    arguments = parser.parse_args()
    report = json.loads(arguments.report.read_text())
    found = pairs_of([[sample["path"] for sample in cluster["samples"]]
                      for cluster in report["clusters"]])
    by_part: dict[str, list[str]] = {}
    for path, part, _ in read_truth(arguments.truth):
        by_part.setdefault(part, []).append(path)
    truth = pairs_of(list(by_part.values()))
    right = len(found & truth)
    print(f"samples {report['samples']:,}, pairs checked {report['pairs_checked']:,}, "
          f"clusters {len(report['clusters']):,}")
    print(f"co-cluster recall {right / max(1, len(truth)):.3f} ({right:,} of {len(truth):,}), "
          f"precision {right / max(1, len(found)):.3f} ({right:,} of {len(found):,})")


if __name__ == "__main__":
    main()
