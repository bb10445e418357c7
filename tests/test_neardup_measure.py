"""The re-shot generator and the near-duplicate measures it decides (scripts/reshots.py,
scripts/neardup_curve.py)."""

from __future__ import annotations

import sys
from itertools import combinations
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from neardup_curve import (  # noqa: E402
    CHOSEN_HASH,
    check_score,
    fixture_median,
    hashes_of,
    popcount,
    reduce,
    thumbnail,
)
from reshots import read_truth, render, write_tree  # noqa: E402


def _reduced_corpus(parts: int, reshots: int) -> tuple[list[np.ndarray], list[str]]:
    images, names = [], []
    for part in range(parts):
        for shot in range(2 if part < reshots else 1):
            images.append(reduce(render(7, 0, part, shot)))
            names.append(f"p{part}")
    return images, names


def test_the_generator_gives_the_same_tree_twice(tmp_path: Path) -> None:
    first = write_tree(tmp_path / "a", fixtures=2, parts=3, reshots=2, seed=5)
    second = write_tree(tmp_path / "b", fixtures=2, parts=3, reshots=2, seed=5)
    rows = read_truth(first)
    assert rows == read_truth(second)
    assert len(rows) == 2 * 3 + 2
    for path, _, _ in rows:
        assert (tmp_path / "a" / path).read_bytes() == (tmp_path / "b" / path).read_bytes()
    assert render(5, 0, 0, 1) != render(5, 0, 0, 0)  # a re-shot is not a copy
    assert render(6, 0, 0, 0) != render(5, 0, 0, 0)  # the seed matters


def test_the_chosen_hash_puts_reshots_nearer_than_different_parts() -> None:
    images, names = _reduced_corpus(parts=14, reshots=6)
    median = fixture_median(images)
    hashes = np.array([hashes_of(image, median)[CHOSEN_HASH] for image in images], np.uint64)
    same, different = [], []
    for i, j in combinations(range(len(images)), 2):
        distance = int(popcount(hashes[[i]] ^ hashes[[j]])[0])
        (same if names[i] == names[j] else different).append(distance)
    assert len(same) == 6
    assert np.mean(same) < np.mean(different) - 4


def test_the_check_accepts_a_reshot_and_refuses_another_part() -> None:
    images, _ = _reduced_corpus(parts=2, reshots=1)  # part 0 twice, then part 1
    median = fixture_median(images)
    original, reshot, other = (thumbnail(image, median) for image in images)
    assert check_score(original, reshot) < check_score(original, other)
