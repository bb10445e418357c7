#!/usr/bin/env python3
"""Write a corpus of synthetic parts and their re-shots, with its ground truth.

    scripts/make_reshots.py OUT [--fixtures 3] [--parts 2000] [--reshots 200] [--seed 0]

OUT/fixtureF/pPPPPPP_sS.jpg: ``--parts`` distinct parts per fixture (shot 0), and ``--reshots``
re-shot pairs in all (shot 1 of the first parts of each fixture); OUT/truth.csv lists path,
part and fixture. What a shot and a re-shot are: scripts/reshots.py. Every file is a function
of (seed, fixture, part, shot); a rerun leaves existing files as they are.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from reshots import write_tree  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("out", type=Path)
    parser.add_argument("--fixtures", type=int, default=3)
    parser.add_argument("--parts", type=int, default=2000, help="distinct parts per fixture")
    parser.add_argument("--reshots", type=int, default=200, help="re-shot pairs in all")
    parser.add_argument("--seed", type=int, default=0)
    arguments = parser.parse_args()
    truth = write_tree(arguments.out, arguments.fixtures, arguments.parts, arguments.reshots,
                       arguments.seed)
    print(truth)


if __name__ == "__main__":
    main()
