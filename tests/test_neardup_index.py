"""The candidate search at scale (shardsmith/neardup/search.py): the pairs of the exhaustive
search (scripts/neardup_reference.py), a night's new hashes, equal hashes collapsed,
untrusted arrays refused."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

import neardup_reference as reference  # noqa: E402

from shardsmith.neardup import bands, search  # noqa: E402
from shardsmith.neardup.search import (  # noqa: E402
    DEFAULT_SCHEME,
    EXACT_SCHEME,
    Refused,
    Scheme,
    build,
    clusters,
    popcount,
    validated,
)


def _tied_hashes(seed: int, count: int) -> np.ndarray:
    """Hashes crowding as a fixture's do, with equal distances and equal hashes: copies of a
    few random bases with 0 to 6 bits flipped, and some values of 12 bits (many ties)."""
    rng = np.random.default_rng(seed)
    bases = rng.integers(0, 2**63, 12, dtype=np.int64).astype(np.uint64) * np.uint64(2)
    hashes = bases[rng.integers(0, len(bases), count)]
    for _ in range(6):
        bit = np.uint64(1) << rng.integers(0, 64, count).astype(np.uint64)
        hashes ^= np.where(rng.random(count) < 0.5, bit, np.uint64(0))
    small = rng.random(count) < 0.3
    hashes[small] = rng.integers(0, 1 << 12, int(small.sum())).astype(np.uint64)
    return hashes


def _exhaustive(hashes: np.ndarray, first: np.ndarray, distance: int, cap: int,
                ties: np.ndarray | None = None) -> np.ndarray:
    """reference.candidates over the distinct hashes, as pairs of their first items."""
    pairs = np.array(reference.candidates(hashes[first], distance, cap,
                                          ties=None if ties is None else ties[first]),
                     np.int64).reshape(-1, 2)
    return np.unique(np.sort(first[pairs], axis=1), axis=0).reshape(-1, 2)


def _within(pairs: np.ndarray, hashes: np.ndarray, bits: int) -> np.ndarray:
    return pairs[popcount(hashes[pairs[:, 0]] ^ hashes[pairs[:, 1]]) <= bits]


@pytest.mark.parametrize(("seed", "distance", "cap"), [(0, 18, 8), (1, 6, 3), (2, 30, 1)])
def test_an_index_certain_within_the_distance_gives_exactly_the_exhaustive_pairs(
        seed: int, distance: int, cap: int) -> None:
    hashes = _tied_hashes(seed, 400)
    index = build(hashes, distance, cap, EXACT_SCHEME)
    assert len(index.hashes) < len(hashes)  # equal hashes were there, and collapsed
    expected = _exhaustive(hashes, index.first, distance, cap)
    assert len(expected) > 100
    assert np.array_equal(index.pairs(), expected)


def _scheme_lists(hashes: np.ndarray, ties: np.ndarray, scheme: Scheme, distance: int,
                  cap: int) -> np.ndarray:
    """What an index's lists must be, every pair looked at: the keys (distance, tie,
    neighbour) of each distinct hash's ``cap`` nearest within ``distance`` among the pairs
    some band of some partition finds (at most ``probe`` of its bits differ)."""
    values, first = np.unique(hashes, return_index=True)
    order = np.argsort(first)  # distinct hashes in order of first occurrence, as the index's
    values, tie_values = values[order], ties[first[order]]
    apart = values[:, None] ^ values[None, :]
    found = np.zeros(apart.shape, bool)
    for partition in range(scheme.partitions):
        for bits in search._partition(scheme, partition):
            mask = np.uint64(sum(1 << int(bit) for bit in bits))
            found |= popcount(apart & mask) <= scheme.probe
    distances = popcount(apart).astype(np.int64)
    keys = (distances << search._DISTANCE_SHIFT
            | popcount(tie_values[:, None] ^ tie_values[None, :]).astype(np.int64)
            << search._TIE_SHIFT | np.arange(len(values))[None, :])
    keys = np.where(found & (distances <= distance) & ~np.eye(len(values), dtype=bool), keys,
                    search._NONE)
    return np.sort(keys, axis=1)[:, :cap]


@pytest.mark.parametrize(("scheme", "tables"), [
    (DEFAULT_SCHEME, False), (Scheme(partitions=5, bands=4, probe=2), False),
    (DEFAULT_SCHEME, True)])  # each band's buckets in a table, as above 32,768 hashes
def test_the_lists_are_the_nearest_of_the_pairs_the_scheme_finds_built_or_grown(
        monkeypatch: pytest.MonkeyPatch, scheme: Scheme, tables: bool) -> None:
    """Crowded hashes share bands in many partitions: each pair found reaches a list once
    (a later band that finds it again passes it by), and each list ends as the nearest of
    the pairs the scheme finds, whether the index was built at once or grown by a night's
    hashes, by one thread or several."""
    if tables:
        monkeypatch.setattr(search, "_TABLE_SHARE", 1 << 22)
    hashes, ties = _tied_hashes(3, 600), _tied_hashes(9, 600)
    expected = _scheme_lists(hashes, ties, scheme, 18, 8)
    assert (expected[:, -1] != search._NONE).mean() > 0.5  # most lists full: a choice made
    for threads in (1, 3):
        index = build(hashes, 18, 8, scheme, threads=threads, ties=ties)
        assert np.array_equal(index.near, expected)
        old = build(hashes[:450], 18, 8, scheme, threads=threads, ties=ties[:450])
        grown, _ = old.add(hashes[450:], threads=threads, new_ties=ties[450:])
        assert np.array_equal(grown.near, expected)


@pytest.mark.parametrize("tied", [False, True])
def test_threads_sharing_the_hashes_give_the_lists_of_one_whole_or_grown(
        tied: bool) -> None:
    hashes = _tied_hashes(6, 800)
    ties = _tied_hashes(10, 800) if tied else None
    new_ties = None if ties is None else ties[700:]
    one = build(hashes, 18, 8, threads=1, ties=ties)
    assert len(one.pairs()) > 500
    old = build(hashes[:700], 18, 8, threads=1, ties=None if ties is None else ties[:700])
    grown, pairs = old.add(hashes[700:], threads=1, new_ties=new_ties)
    for threads in (2, 5):
        assert np.array_equal(build(hashes, 18, 8, threads=threads, ties=ties).near, one.near)
        shared, shared_pairs = old.add(hashes[700:], threads=threads, new_ties=new_ties)
        assert np.array_equal(shared.near, grown.near)
        assert np.array_equal(shared_pairs, pairs)
    if tied:  # the ties changed the lists: a thread without them would not give these
        assert not np.array_equal(one.near, build(hashes, 18, 8, threads=1).near)


def test_the_default_index_has_the_exhaustive_pairs_within_its_certain_bits_and_only_near_ones(
        ) -> None:
    hashes = _tied_hashes(3, 600)
    index = build(hashes, 18, 8)
    expected = _exhaustive(hashes, index.first, 18, 8)
    found = index.pairs()
    certain = DEFAULT_SCHEME.certain
    assert len(_within(expected, hashes, certain)) > 100
    assert np.array_equal(_within(found, hashes, certain), _within(expected, hashes, certain))
    assert (popcount(hashes[found[:, 0]] ^ hashes[found[:, 1]]) <= 18).all()


def test_more_partitions_find_more_of_the_farther_pairs() -> None:
    rng = np.random.default_rng(4)
    hashes = rng.integers(0, 2**63, 3000, dtype=np.int64).astype(np.uint64)
    expected = {tuple(pair) for pair in _exhaustive(hashes, np.arange(3000), 18, 8).tolist()}
    recall = [len(expected & {tuple(p) for p in build(hashes, 18, 8, scheme).pairs().tolist()})
              / len(expected) for scheme in (Scheme(partitions=2), Scheme(partitions=16))]
    assert recall[0] < recall[1] < 1


@pytest.mark.parametrize("scheme", [EXACT_SCHEME, DEFAULT_SCHEME])
def test_a_nights_new_hashes_give_the_pairs_of_the_whole_set_that_touch_them(
        scheme: Scheme) -> None:
    hashes = _tied_hashes(5, 700)
    hashes[650] = hashes[3]  # a new hash equal to an old one joins its group
    hashes[660] = hashes[655]  # and two equal new ones are one
    whole = build(hashes, 18, 8, scheme)
    old = build(hashes[:600], 18, 8, scheme)
    grown, new_pairs = old.add(hashes[600:])
    pairs = whole.pairs()
    assert np.array_equal(new_pairs, pairs[(pairs >= 600).any(axis=1)])
    assert len(new_pairs) > 20
    assert np.array_equal(grown.pairs(), pairs)
    assert np.array_equal(grown.group, whole.group)
    assert np.array_equal(grown.first, whole.first)


def test_of_equal_distance_the_nearest_by_the_ties_come_first() -> None:
    """Each sample's two hashes: of the many at one distance by the first, the lists keep
    those nearest by the second (a re-shot is near by both), exactly, and so does ``add``."""
    hashes = _tied_hashes(7, 500)
    ties = _tied_hashes(8, 500)
    ties[250:300] = ties[200:250] ^ np.uint64(1)  # near twins by the ties
    index = build(hashes, 18, 3, EXACT_SCHEME, ties=ties)
    expected = _exhaustive(hashes, index.first, 18, 3, ties)
    assert np.array_equal(index.pairs(), expected)
    untied = build(hashes, 18, 3, EXACT_SCHEME).pairs()
    assert len({tuple(p) for p in expected.tolist()} ^ {tuple(p) for p in untied.tolist()}) > 50
    old = build(hashes[:420], 18, 3, EXACT_SCHEME, ties=ties[:420])
    grown, new_pairs = old.add(hashes[420:], new_ties=ties[420:])
    assert np.array_equal(grown.pairs(), expected)
    assert np.array_equal(new_pairs, expected[(expected >= 420).any(axis=1)])
    with pytest.raises(ValueError, match="ties"):
        old.add(hashes[420:])


def test_the_nearest_by_signature_are_kept_of_a_hashs_listed_nearest() -> None:
    """``ranked``: of each distinct hash's listed nearest, the ``cap`` whose signatures are
    nearest (the sum of the two halves' cosines; of equal sums the nearer in the list), none
    of its own group, as a plain loop over the lists finds them, in chunks of any size."""
    hashes = _tied_hashes(9, 400)
    rng = np.random.default_rng(10)
    signatures = rng.integers(-127, 128, (400, 126)).astype(np.int8)
    signatures[:20] = 0  # windows without an edge: no cosine, the list's order
    signatures[300:320] = signatures[200:220] // 2  # equal cosines: the list's order decides
    groups = rng.integers(0, 150, 400)
    index = build(hashes, 18, 12, EXACT_SCHEME)
    expected = set()
    for row, keys in enumerate(index.near.tolist()):
        owner, scored = int(index.first[row]), []
        for place, key in enumerate(keys):
            _, neighbour = search.entries(np.array([key]))
            if key == search._NONE or groups[index.first[neighbour[0]]] == groups[owner]:
                continue
            other = int(index.first[neighbour[0]])
            alike = 0.0
            for part in (slice(0, 63), slice(63, 126)):
                a, b = signatures[owner, part].astype(float), signatures[other, part].astype(float)
                size = (a @ a) * (b @ b)
                alike += (a @ b) / np.sqrt(size) if size else 0.0
            scored.append((-alike, place, other))
        expected |= {(min(owner, other), max(owner, other)) for _, _, other in sorted(scored)[:4]}
    for rows in (7, 1 << 11):
        pairs = search.ranked(index, signatures, 4, groups, rows=rows)
        assert {tuple(pair) for pair in pairs.tolist()} == expected
    unranked = {tuple(pair) for pair in build(hashes, 18, 4, EXACT_SCHEME).pairs().tolist()}
    assert len(expected ^ unranked) > 100  # the signatures chose others than the distance


def test_a_keys_fields_do_not_overlap() -> None:
    """The farthest pair kept (MAX_DISTANCE bits, a tie of 64, the last neighbour) stays
    under an empty place, and each field under the next one's bits."""
    largest = (search.MAX_DISTANCE << search._DISTANCE_SHIFT | 64 << search._TIE_SHIFT
               | search.MAX_HASHES - 1)
    assert largest < search._NONE < 2**63
    assert search.MAX_HASHES <= 1 << search._TIE_SHIFT
    assert 127 << search._TIE_SHIFT < 1 << search._DISTANCE_SHIFT
    assert (bands._DISTANCE_SHIFT, bands._TIE_SHIFT) == (search._DISTANCE_SHIFT,
                                                          search._TIE_SHIFT)
    distances, neighbours = search.entries(np.array([largest, search._NONE]))
    assert distances.tolist() == [search.MAX_DISTANCE, search.MAX_DISTANCE + 1]
    assert neighbours[0] == search.MAX_HASHES - 1


def test_ties_of_another_length_are_refused() -> None:
    hashes = _tied_hashes(11, 50)
    with pytest.raises(ValueError, match="49 ties for 50"):
        build(hashes, 18, 8, ties=hashes[:49])
    with pytest.raises(ValueError, match="9 ties for 10"):
        build(hashes[:40], 18, 8, ties=hashes[:40]).add(hashes[40:], new_ties=hashes[:9])


def test_more_distinct_hashes_than_a_key_holds_are_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search, "MAX_HASHES", 50)
    hashes = _tied_hashes(9, 400)
    with pytest.raises(ValueError, match="more than the 50"):
        build(hashes, 18, 8)
    build(np.repeat(hashes[:50], 8), 18, 8)  # 400 hashes, 50 distinct or fewer: searched
    with pytest.raises(ValueError, match="more than the 50"):
        build(hashes[:40], 18, 8).add(hashes[40:60])


def test_a_hundred_thousand_identical_hashes_are_one_cluster_of_them_all() -> None:
    hashes = np.full(100_000, 0xDEADBEEF12345678, np.uint64)
    hashes[[10, 20]] = [1, 3]  # two others, one bit apart, far from the rest
    index = build(hashes, 18, 8)
    assert len(index.hashes) == 3
    assert index.pairs().tolist() == [[10, 20]]
    groups = clusters(index, np.array([[10, 20]]))
    assert [len(members) for members in groups] == [99_998, 2]
    assert groups[1].tolist() == [10, 20]
    assert 10 not in groups[0] and (np.diff(groups[0]) > 0).all()


def test_equal_hashes_join_the_cluster_of_their_first_item() -> None:
    hashes = np.array([5, 9, 5, 1 << 40, 9, 5], np.uint64)
    index = build(hashes, 18, 8)
    assert index.first.tolist() == [0, 1, 3]
    for verified in ([[0, 1]], [[2, 4]]):  # a pair of any members joins the groups
        assert [members.tolist() for members in clusters(index, np.array(verified))] == [
            [0, 1, 2, 4, 5]]
    assert [members.tolist() for members in clusters(index, np.zeros((0, 2)))] == [
        [0, 2, 5], [1, 4]]


@pytest.mark.parametrize(("values", "reason"), [
    (np.zeros((3, 2), np.uint64), "dimensions"),
    (np.array([1.0, np.nan]), "not finite"),
    (np.array([1.5, 2.0]), "not integers"),
    (np.array([3, -1], np.int64), "negative"),
    (np.array(["ab", "cd"]), "not integers"),
    ([1, 2.0], "integers"),
    ([1, True], "integers"),
    ([1, 1 << 64], "outside"),
    ([-1], "outside"),
    (None, "not a sequence"),
    (np.arange(11, dtype=np.uint64), "more than"),
    (list(range(11)), "more than"),
])
def test_malformed_hashes_are_refused_with_a_reason(values: object, reason: str) -> None:
    refused = validated(values, limit=10)
    assert isinstance(refused, Refused)
    assert reason in refused.reason


def test_well_formed_hashes_are_taken_as_uint64() -> None:
    for values, expected in (([0, 2**64 - 1], [0, 2**64 - 1]),
                             (np.array([0, 7], np.int64), [0, 7]),
                             (np.array([1, 2], np.uint32), [1, 2])):
        array = validated(values)
        assert isinstance(array, np.ndarray) and array.dtype == np.uint64
        assert array.tolist() == expected


def test_pairs_are_made_distinct_and_sorted_as_rows() -> None:
    pairs = np.array([[3, 4], [2**31 - 1, 0], [1, 2], [3, 4], [0, 2**31 - 1], [1, 2], [3, 5]])
    assert search.unique_pairs(pairs).tolist() == [
        [0, 2**31 - 1], [1, 2], [3, 4], [3, 5], [2**31 - 1, 0]]
    assert search.unique_pairs(np.zeros((0, 2), np.int64)).shape == (0, 2)


def test_popcount_counts_every_bit_with_numpy_2_and_without() -> None:
    values = np.array([0, 1, 2**64 - 1, 0x8000000000000001, 0xF0F0], np.uint64)
    assert popcount(values).tolist() == [0, 1, 64, 2, 8]
    many = np.random.default_rng(0).integers(0, 2**64 - 1, 5000, np.uint64, endpoint=True)
    expected = [bin(value).count("1") for value in many.tolist()]
    assert search._popcount_by_table(many).tolist() == expected
    assert popcount(many).tolist() == expected


def test_without_a_writable_cache_the_search_compiles_in_the_process(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Numba refuses to cache where neither the package's folder nor the user's cache can be
    written (a read-only install, a read-only home): the step is compiled without it."""
    asked: list[dict] = []

    def njit(**options):  # noqa: ANN003, ANN202 (Numba's decorator, as it answers there)
        asked.append(options)
        if options.get("cache"):
            raise RuntimeError("cannot cache function 'f': no locator available for file 'f'")
        return lambda function: function

    monkeypatch.setattr(bands, "njit", njit)
    compiled = bands._compiled(inline="always")(lambda value: value + 1)
    assert compiled(1) == 2
    assert asked == [{"nogil": True, "cache": True, "inline": "always"},
                     {"nogil": True, "inline": "always"}]


def test_an_index_whose_arrays_disagree_is_refused_before_the_compiled_step() -> None:
    """The compiled step checks no bounds: an index saved and loaded by hand with lists of
    other rows than its hashes, or ties of another length, is refused."""
    hashes = _tied_hashes(7, 100)
    index = build(hashes, 18, 8, ties=hashes)
    with pytest.raises(ValueError, match="one row a distinct hash"):
        search.Index(index.hashes, index.first, index.group, index.near[:-10], 18,
                     DEFAULT_SCHEME, index.ties)
    with pytest.raises(ValueError, match="one row a distinct hash"):
        search.Index(index.hashes, index.first, index.group, index.near, 18, DEFAULT_SCHEME,
                     index.ties[:-1])
    with pytest.raises(ValueError, match="one row a distinct hash"):
        search.Index(index.hashes.astype(np.int64), index.first, index.group, index.near, 18,
                     DEFAULT_SCHEME, index.ties)
