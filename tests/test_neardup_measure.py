"""The re-shot generator and the near-duplicate measures it decides (scripts/reshots.py,
scripts/neardup_curve.py), and what shardsmith/neardup/hashing.py added for them: the fixture's
background without the parts' ghost, candidates from two hashes."""

from __future__ import annotations

import sys
from itertools import combinations
from pathlib import Path

import cv2
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import neardup_reference as reference  # noqa: E402
from neardup_curve import (  # noqa: E402
    CHOSEN_HASH,
    check_score,
    fixture_median,
    hashes_of,
    popcount,
    reduce,
    thumbnail,
)
from reshots import fixture_scene, read_truth, render, write_tree  # noqa: E402

from shardsmith.neardup import hashing as neardup  # noqa: E402


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


def _empty_fixture(seed: int, fixture: int) -> np.ndarray:
    """The fixture as the worker would hold it with no part on it (encoded like a shot)."""
    plate, light = fixture_scene(seed, fixture)
    pixels = np.clip(plate * light[..., None] + 0.5, 0, 255).astype(np.uint8)
    return reduce(cv2.imencode(".jpg", pixels, [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes())


def test_the_fixture_background_holds_no_ghost_of_the_parts() -> None:
    """Every part sits at one pose: a plain median keeps a ghost of them there, the tightest
    run of an eighth of the greys is the plate wherever an eighth of the shots show it."""
    scene = fixture_scene(3, 1)
    greys = [reduce(render(3, 1, part, 0, scene)) for part in range(127)]
    empty = _empty_fixture(3, 1).astype(np.int16)
    ghost = np.abs(fixture_median(greys).astype(np.int16) - empty) > 20
    left = np.abs(neardup.fixture_median(greys).astype(np.int16) - empty) > 20
    assert ghost.sum() > 1000  # the plain median's ghost: pixels 20 levels off the plate
    assert left.sum() < ghost.sum() / 3


def test_candidates_of_two_hashes_are_the_union_of_each_ones() -> None:
    hashes = np.random.default_rng(4).integers(0, 2**63, (300, 2), dtype=np.uint64)
    hashes[150:, 1] = hashes[:150, 1] ^ np.uint64(0b1011)  # near twins by the second hash only
    first, second = (set(reference.candidates(hashes[:, k], 24, 3, ties=hashes[:, 1 - k]))
                     for k in (0, 1))
    both = reference.candidates(hashes, 24, 3)
    assert both == sorted(first | second)
    twins = {(i, i + 150) for i in range(150)}
    assert twins <= set(both)
    assert len(twins & first) < 10  # found by the second hash, not the first


def test_part_hash_is_the_first_of_the_part_hashes() -> None:
    images, _ = _reduced_corpus(parts=3, reshots=0)
    median = neardup.fixture_median(images)
    for image in images:
        first, second, _ = neardup.part_hashes(image, median)
        assert reference.part_hash(image, median) == first
        assert bin(first).count("1") == bin(second).count("1") == 32
