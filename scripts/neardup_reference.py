#!/usr/bin/env python3
"""The reference the near-duplicate search is held to, and the plain clusters of the
measurement: every hash against every other (``candidates``), a union-find over pairs
(``clusters``). Not in the package: the product searches with ``shardsmith.neardup.search``
and clusters in ``shardsmith.insight.near_duplicates``; tests and scripts/neardup_curve.py
compare with these.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from shardsmith.neardup.hashing import DEFAULT_CAP, DEFAULT_DISTANCE, part_hashes

_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], np.uint8)


def part_hash(grey: np.ndarray, median: np.ndarray) -> int:
    """The first of ``part_hashes``: the window on the centroid of the image less its fixture."""
    return part_hashes(grey, median)[0]


def distances(hashes: np.ndarray, others: np.ndarray) -> np.ndarray:
    """Hamming distances (uint8) of each uint64 hash to each of ``others``: (len, len)."""
    xor = hashes[:, None] ^ others[None, :]
    return _POPCOUNT[xor.view(np.uint8).reshape(*xor.shape, 8)].sum(axis=-1, dtype=np.uint8)


def candidates(hashes: np.ndarray, distance: int = DEFAULT_DISTANCE, cap: int = DEFAULT_CAP,
               block: int = 256, ties: np.ndarray | None = None) -> list[tuple[int, int]]:
    """Pairs (i < j) where j is among the ``cap`` nearest of i within ``distance``, or i of j
    (nearest by distance, then by the distance of their ``ties``, then by index), by any
    column of ``hashes`` (uint64, one hash or ``part_hashes``' two a sample, each the other's
    ties, as the product searches them; ``ties`` is for one hash a sample only): the pairs to
    check. Exhaustive in blocks."""
    if ties is not None and np.asarray(hashes).ndim != 1:
        raise ValueError("ties are for one hash a sample: two are each other's")
    hashes = np.asarray(hashes, np.uint64).reshape(len(hashes), -1)
    if hashes.shape[1] == 2:
        tie_columns = [hashes[:, 1], hashes[:, 0]]
    else:
        tie_columns = [None if ties is None else np.asarray(ties, np.uint64)] * hashes.shape[1]
    pairs: set[tuple[int, int]] = set()
    for column, tie in zip(hashes.T, tie_columns, strict=True):
        for start in range(0, len(column), block):
            near = distances(column[start : start + block], column).astype(np.int16)
            rows = np.arange(len(near))
            near[rows, rows + start] = 99  # not itself
            key = near * 65
            if tie is not None:
                key += distances(tie[start : start + block], tie)
            order = np.argsort(key, axis=1, kind="stable")[:, :cap]
            within = np.take_along_axis(near, order, 1) <= distance
            for row, index in zip(*np.nonzero(within), strict=True):
                i, j = start + int(row), int(order[row, index])
                pairs.add((min(i, j), max(i, j)))
    return sorted(pairs)


def clusters(pairs: Iterable[tuple[int, int]], count: int) -> list[list[int]]:
    """Connected components of ``pairs`` over ``count`` items, those of two or more, each
    sorted, in order of their first member."""
    parent = list(range(count))

    def root(item: int) -> int:
        while parent[item] != item:
            parent[item] = parent[parent[item]]
            item = parent[item]
        return item

    for first, second in pairs:
        a, b = root(first), root(second)
        if a != b:
            parent[max(a, b)] = min(a, b)
    members: dict[int, list[int]] = {}
    for item in range(count):
        members.setdefault(root(item), []).append(item)
    return [group for group in members.values() if len(group) > 1]
