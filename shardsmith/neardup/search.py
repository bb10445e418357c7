"""The candidate pairs of the exhaustive search (scripts/neardup_reference.py) at a million
hashes: an index instead of every hash against every other, and a night's new hashes against
the rest.

Any uint64 hashes; the step that looks at the pairs is compiled (``bands``, by Numba):

* ``validated``: hashes read from a sample index are untrusted; a bad array is a ``Refused``
  value with one line, never an exception.
* Equal hashes are collapsed first: the search runs on the distinct hashes, each standing for
  the items that share it by its first one (``Index.first``), so a million identical images
  are one distinct hash, searched in no time. A group of equal hashes is one cluster whatever
  the check says (``clusters``), and dense like any cluster over ``DENSE_SIZE`` members:
  checking each member would cost 2.8 ms each, 47 minutes for a million.
* The search (multi-index hashing over several partitions of the bits): each ``Scheme``
  partition splits the 64 bits into ``bands`` bands of bit positions; a pair is found when, in
  some partition, one of its bands differs by at most ``probe`` bits (each band's value, with
  every mask of up to ``probe`` bits flipped, looked up among the others'). By pigeonhole every
  pair within ``Scheme.certain`` bits is found; farther pairs are found by chance, the more
  the more partitions. Each hash's ``cap`` nearest within ``distance`` are then chosen among
  the pairs found (each offered once, by the first band that finds it), by (distance, tie,
  index) as ``candidates`` does, where the tie is the distance of a second hash of the two
  items if one is given (a sample's other part hash: hashes are 64 bits, so many lie at one
  distance): the same pairs as the exhaustive search up to ``certain`` bits, and a recall
  measured beyond it (scripts/bench_neardup.py; why this scheme: docs/performance.md,
  "Near-duplicates: the search"). Band after band, each hash looks up its own pairs and
  fills its own list, so ``THREADS`` threads take ranges of hashes without a lock: the
  same lists whatever their number and turns.
* ``ranked``: of each hash's nearest, those whose signatures are nearest (a longer, finer
  description of the same window than its 64 bits: docs/know-your-data.md, "Signatures").
* ``Index.add``: a night's new hashes against the index: the pairs of the new ones, exactly
  those the search over old and new together has that touch a new hash (an old hash takes a
  new one among its nearest only if it beats its ``cap`` nearest so far, kept in the index);
  pairs between old hashes that a new one pushes out of a list stay as they were checked.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from itertools import combinations

import numpy as np

MAX_HASHES = 1 << 24  # a sample index holding more is refused (a key's neighbour has 24 bits)
MAX_DISTANCE = 30  # bits; a key holds a distance in 5 bits
THREADS = 2  # threads of ``build`` and ``add``, each walking its own owners' lists
# key = distance << 31 | tie << 24 | neighbour: the nearest first, of equal distance the
# nearest by the ties' hashes (7 bits, 0 to 64), then the lowest neighbour (``bands`` makes
# them: the same shifts)
_TIE_SHIFT = 24
_DISTANCE_SHIFT = 31
_LOW = np.int64((1 << _TIE_SHIFT) - 1)
_NONE = np.int64((MAX_DISTANCE + 1) << _DISTANCE_SHIFT | ((1 << _DISTANCE_SHIFT) - 1))
_PAIR_SHIFT = 32  # a pair of items = i << 32 | j
_PAIR_LOW = np.int64((1 << _PAIR_SHIFT) - 1)
_ROWS = 1 << 16  # lists made pairs at once
_TABLE_SHARE = 64  # a band's buckets get a table where its hashes are 1/64 of its values
_BITWISE_COUNT = getattr(np, "bitwise_count", None)  # NumPy 2: 4M values in 6 ms, the table 80
_POP16 = np.array([bin(value).count("1") for value in range(1 << 16)], np.uint8)
# odd multipliers, one a partition: bit p goes to (p * m + 17 * partition) mod 64, so each
# partition cuts the bits into bands another way; fixed numbers, the same on every machine
_MULTIPLIERS = (1, 23, 45, 13, 59, 5, 37, 27, 11, 53, 19, 41, 3, 61, 29, 9, 47, 21, 35, 55)


@dataclass(frozen=True)
class Refused:
    """Hashes that cannot be searched, and why (one line)."""

    reason: str


@dataclass(frozen=True)
class Scheme:
    """How the index cuts the bits: ``partitions`` ways, each in ``bands`` bands, a band
    looked up with up to ``probe`` bits flipped."""

    partitions: int = 16
    bands: int = 3
    probe: int = 1

    @property
    def certain(self) -> int:
        """Bits within which every pair is found (pigeonhole over one partition's bands)."""
        return self.bands * (self.probe + 1) - 1


DEFAULT_SCHEME = Scheme()
EXACT_SCHEME = Scheme(partitions=1, bands=31, probe=0)  # every pair within 30 bits: tests


def popcount(values: np.ndarray) -> np.ndarray:
    """Set bits of each uint64 (uint8): NumPy 2's ``bitwise_count``, else a 16-bit table."""
    if _BITWISE_COUNT is not None:
        return _BITWISE_COUNT(values)
    return _popcount_by_table(values)


def _popcount_by_table(values: np.ndarray) -> np.ndarray:
    low = np.uint64(0xFFFF)
    total = _POP16[values & low]
    for shift in (16, 32, 48):
        total += _POP16[(values >> np.uint64(shift)) & low]
    return total


def validated(values: object, limit: int = MAX_HASHES) -> np.ndarray | Refused:
    """``values`` as a 1-D uint64 array, or why not: integers of 0 to 2**64 - 1 only (an array
    of unsigned or non-negative signed integers, or a sequence of ints), at most ``limit``."""
    if isinstance(values, np.ndarray):
        array = values
    else:
        try:
            length = len(values)  # type: ignore[arg-type]
        except TypeError:
            return Refused(f"hashes are a {type(values).__name__}, not a sequence")
        if length > limit:
            return Refused(f"{length} hashes, more than the {limit} allowed")
        if not all(type(value) is int for value in values):  # type: ignore[attr-defined]
            return Refused("hashes must be integers (no floats, strings or booleans)")
        if any(value < 0 or value >> 64 for value in values):  # type: ignore[attr-defined]
            return Refused("a hash is outside 0 to 2**64 - 1")
        return np.array(values, np.uint64).reshape(-1)
    if array.ndim != 1:
        return Refused(f"hashes have {array.ndim} dimensions, not 1")
    if len(array) > limit:
        return Refused(f"{len(array)} hashes, more than the {limit} allowed")
    if array.dtype.kind == "u":
        return array.astype(np.uint64)
    if array.dtype.kind == "i":
        if len(array) and int(array.min()) < 0:
            return Refused("a hash is negative")
        return array.astype(np.uint64)
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        return Refused("hashes are floats, some not finite")
    return Refused(f"hashes are {array.dtype}, not integers")


def _collapse(hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct hashes in order of first occurrence, each one's first item, each item's
    distinct hash): one sort, whatever repeats."""
    values, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    position = np.empty(len(order), np.int64)
    position[order] = np.arange(len(order))
    return values[order], first[order].astype(np.int64), position[inverse.reshape(-1)]


def _partition(scheme: Scheme, partition: int) -> list[np.ndarray]:
    """The bit positions of each band of one partition."""
    slot = (np.arange(64) * _MULTIPLIERS[partition % len(_MULTIPLIERS)]
            + 17 * partition) % 64
    bounds = np.linspace(0, 64, scheme.bands + 1).round().astype(int)
    return [np.flatnonzero((slot >= low) & (slot < high))
            for low, high in zip(bounds[:-1], bounds[1:], strict=True)]


def _masks(width: int, probe: int) -> list[int]:
    """Every mask of ``width`` bits with at most ``probe`` set, fewest first."""
    return [sum(1 << bit for bit in flipped) for count in range(probe + 1)
            for flipped in combinations(range(width), count)]


def _band_tables(bits: np.ndarray) -> np.ndarray:
    """(8, 256) int64: for byte k of a hash, its bits of the band at their places in the
    band's value (``bits``: the band's bit positions, in order)."""
    tables = np.zeros((8, 256), np.int64)
    values = np.arange(256)
    for rank, bit in enumerate(bits):
        tables[bit // 8] |= ((values >> (bit % 8)) & 1) << rank
    return tables


def _bands(scheme: Scheme) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every band the scheme searches, partition after partition: its bit positions, and
    the bit masks (uint64) of the bands before it."""
    bands = [bits for partition in range(scheme.partitions)
             for bits in _partition(scheme, partition)]
    masks = np.array([sum(1 << int(bit) for bit in bits) for bits in bands], np.uint64)
    return [(bits, masks[:number]) for number, bits in enumerate(bands)]


class _Walk:
    """The compiled step (``bands.offer``) of one search, its owners shared among ``threads``
    threads (Numba lets go of the GIL): each takes ranges of owners, whose lists only it
    writes."""

    def __init__(self, near: np.ndarray, ties: np.ndarray | None, distance: int,
                 scheme: Scheme, threads: int) -> None:
        from . import bands  # Numba: imported and compiled when a search first runs

        self.offer, self.insert, self.buckets = bands.offer, bands.insert, bands.buckets
        self.band_values = bands.band_values
        self.near, self.distance = near, distance
        self.reach = np.minimum(near[:, -1] >> _DISTANCE_SHIFT, distance).astype(np.uint8)
        self.ties = np.empty(0, np.uint64) if ties is None else ties
        self.masks = {width: np.array(_masks(width, scheme.probe), np.int64)
                      for width in {len(bits) for bits, _ in _bands(scheme)}}
        self.probe = scheme.probe
        # the walks run in the pool even with one thread: a Ctrl-C meets the caller waiting,
        # not Numba's return of a tuple (a SystemError where it ran on the main thread)
        self.threads = max(1, threads)
        self.pool = ThreadPoolExecutor(self.threads)

    def order(self, values: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
        """(order, edges) of band values of ``width`` bits: ``values[order]`` ascending, and
        where each value's bucket starts in it: a table (two reads a look-up; a counting
        sort, ``bands.buckets``) where there are ``_TABLE_SHARE`` times fewer values than it
        has places or more, else an empty one (the compiled step searches the values: a
        table of 2**21 places costs milliseconds to make, a look-up among 10,000 values 14
        steps)."""
        if len(values) * _TABLE_SHARE < 1 << width:
            return np.argsort(values, kind="stable"), np.empty(0, np.int32)
        order, edges = np.empty(len(values), np.int64), np.zeros((1 << width) + 1, np.int32)
        self.buckets(values, edges, order)
        return order, edges

    def __call__(self, owners: np.ndarray, owner_hashes: np.ndarray, owner_bands: np.ndarray,
                 targets: np.ndarray, target_hashes: np.ndarray, target_bands: np.ndarray,
                 width: int, earlier: np.ndarray, both: bool = False,
                 edges: np.ndarray | None = None) -> None:
        """Offer each owner (in band order, for the look-ups to ascend) the targets its band
        finds, but those a band before it finds (``earlier``'s masks); ``both``: and each
        target the owner (the targets are other hashes than the owners). ``edges``: the
        targets are in band order already, and these are their buckets (``order``)."""
        if not len(owners) or not len(targets):
            return
        if edges is None:
            order, edges = self.order(target_bands, width)
            targets, target_hashes = targets[order], target_hashes[order]
            target_bands = target_bands[order]
        arguments = (self.masks[width], target_bands, targets, target_hashes,
                     self.reach[targets] if both else self.reach[:0], edges, earlier,
                     self.probe, self.ties, self.distance)

        def walk(piece: slice) -> tuple[np.ndarray, np.ndarray]:
            return self.offer(self.near, self.reach, owners, owner_hashes, owner_bands,
                              piece.start, piece.stop, *arguments)

        # ranges of a sixteenth of a thread's share: a crowded range does not hold up the rest
        cuts = np.linspace(0, len(owners), 16 * self.threads + 1).astype(int)
        pieces = [slice(low, high) for low, high in zip(cuts[:-1], cuts[1:], strict=True)
                  if high > low]
        offered = list(self.pool.map(walk, pieces))
        if both:  # the targets' lists, once the owners' walks have read their reaches
            self.insert(self.near, self.reach, np.concatenate([rows for rows, _ in offered]),
                        np.concatenate([keys for _, keys in offered]), self.distance)

    def close(self) -> None:
        self.pool.shutdown(cancel_futures=True)


def _pairs(near: np.ndarray, first: np.ndarray, since: int = 0) -> np.ndarray:
    """(k, 2) int64 item pairs (i < j, sorted) of the lists, those touching a distinct hash at
    ``since`` or after only. ``_ROWS`` lists at a time: the temporaries are a batch's, and a
    night's pairs are picked out before they are gathered (10,000 new of a million, lists of
    20: ``Index.add``'s traced peak 842 -> 439 MB)."""
    codes = []
    for start in range(0, len(near), _ROWS):
        keys = near[start : start + _ROWS]
        listed = keys != _NONE
        if since > start:
            owners = np.arange(start, start + len(keys))[:, None]
            listed &= ((keys & _LOW) >= since) | (owners >= since)
        row, column = np.nonzero(listed)
        a, b = first[start + row], first[keys[row, column] & _LOW]
        codes.append(np.minimum(a, b) << _PAIR_SHIFT | np.maximum(a, b))
    return _distinct(np.concatenate(codes) if codes else np.empty(0, np.int64))


def ranked(index: Index, signatures: np.ndarray, cap: int, groups: np.ndarray | None = None,
           rows: int = 1 << 11) -> np.ndarray:
    """``Index.pairs`` of each distinct hash's ``cap`` nearest by signature among its listed
    nearest: the sum of the cosines of its items' signatures (int8, ``hashing.SIGNATURE``
    bytes an item, two halves, one a hash), of equal sums the nearer in the list; none of
    its own group (``groups``, an item's: the tiles of one original, all alike, would fill
    the list and be dropped as one image's).  The dot products are exact (int8 products
    summed in float32 stay under 2**24), the cosines IEEE arithmetic: the same pairs on
    every CPU.  ``rows`` lists at a time (~10 MB); only the ``cap`` kept of each list are
    held (at a million hashes and lists of 20: 40 MB, where a copy of the lists was 160).
    The int8 bytes are multiplied as float32 by ``einsum`` without a float copy of them,
    each signature's size once (a million lists of 20: 13.4 s -> 5.2 s)."""
    near = index.near
    kept = np.empty((len(near), min(cap, near.shape[1])), np.int64)
    signatures = np.asarray(signatures, np.int8)
    half = signatures.shape[1] // 2
    parts = (slice(0, half), slice(half, None))
    sizes = np.empty((len(near), 2))  # each distinct hash's halves' squared lengths
    for start in range(0, len(near), 1 << 16):
        own = np.take(signatures, index.first[start : start + (1 << 16)], axis=0)
        for side, part in enumerate(parts):
            sizes[start : start + len(own), side] = _dots("nd,nd->n", own[:, part],
                                                          own[:, part])
    for start in range(0, len(near), rows):
        keys = near[start : start + rows]
        owners = index.first[start : start + len(keys)]
        listed = keys != _NONE
        neighbour = np.where(listed, keys & _LOW, 0)
        if groups is not None:
            listed &= groups[index.first[neighbour]] != groups[owners][:, None]
        own = np.take(signatures, owners, axis=0)
        theirs = np.take(signatures, index.first[neighbour].ravel(), axis=0).reshape(
            *keys.shape, -1)
        alike = np.zeros(keys.shape)
        for side, part in enumerate(parts):
            dots = _dots("rkd,rd->rk", theirs[:, :, part], own[:, part])
            both = sizes[start : start + len(keys), side, None] * sizes[neighbour, side]
            alike += np.divide(dots, np.sqrt(both), out=np.zeros(keys.shape), where=both > 0)
        order = np.argsort(np.where(listed, -alike, np.inf), axis=1,
                           kind="stable")[:, : kept.shape[1]]
        kept[start : start + len(keys)] = np.where(
            np.take_along_axis(listed, order, axis=1), np.take_along_axis(keys, order, axis=1),
            _NONE)
    return _pairs(kept, index.first)


def _dots(subscripts: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sums of products of int8 values in float32, as float64: exact whatever the order
    while a sum holds at most 1,024 products (128 * 128 * 1,024 = 2**24; a signature's half
    holds 63)."""
    return np.einsum(subscripts, a, b, dtype=np.float32, casting="unsafe").astype(np.float64)


def entries(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distance, neighbour) of each of an ``Index.near`` row's keys; an empty place has a
    distance over MAX_DISTANCE."""
    keys = np.asarray(keys, np.int64)
    return keys >> _DISTANCE_SHIFT, keys & _LOW


def unique_pairs(pairs: np.ndarray) -> np.ndarray:
    """The distinct rows of (k, 2) item pairs (items 0 to 2**31 - 1: a pair is one int64),
    sorted."""
    pairs = np.asarray(pairs, np.int64).reshape(-1, 2)
    return _distinct(pairs[:, 0] << _PAIR_SHIFT | pairs[:, 1])


def _distinct(codes: np.ndarray) -> np.ndarray:
    """The pairs of ``codes`` (a << 32 | b), each once, sorted. A sort of numbers, not of rows
    (8 million pairs: 0.3 s, where NumPy 2.4's np.unique took 10 s as numbers, 13 s as rows);
    a million random hashes' pairs: 0.8 s and 334 MB, where they took 12.9 s and 586 MB."""
    codes.sort()
    codes = codes[np.r_[True, codes[1:] != codes[:-1]]] if len(codes) else codes
    return np.stack([codes >> _PAIR_SHIFT, codes & _PAIR_LOW], axis=1)


@dataclass(frozen=True)
class Index:
    """The distinct hashes of a set of items, the items each stands for and each one's
    ``cap`` nearest within ``distance`` among the pairs the scheme finds."""

    hashes: np.ndarray  # distinct, in order of first occurrence (uint64)
    first: np.ndarray  # the first item of each (int64)
    group: np.ndarray  # each item's distinct hash (int64)
    near: np.ndarray  # (distinct, cap) keys (distance, tie, neighbour), ascending
    distance: int
    scheme: Scheme
    ties: np.ndarray | None = None  # the tie-breaking hash of each distinct one's first item

    def __post_init__(self) -> None:
        """The compiled step checks no bounds: arrays that disagree (an index saved and
        loaded by hand) are refused here, not read or written past their ends."""
        rows = len(self.hashes)
        if self.hashes.dtype != np.uint64 or self.near.dtype != np.int64 \
                or self.near.ndim != 2 or len(self.near) != rows or len(self.first) != rows \
                or (self.ties is not None and (len(self.ties) != rows
                                               or self.ties.dtype != np.uint64)):
            raise ValueError("an index's hashes, first items, lists and ties must be one row "
                             "a distinct hash (uint64 hashes and ties, int64 lists)")

    def pairs(self) -> np.ndarray:
        """All candidate pairs of items (i < j, sorted; first items of their hash)."""
        return _pairs(self.near, self.first)

    def add(self, new_hashes: np.ndarray, threads: int = THREADS,
            new_ties: np.ndarray | None = None) -> tuple[Index, np.ndarray]:
        """The index with ``new_hashes`` (and their ``new_ties``, if it was built with ties)
        appended (items len(group) on), and the candidate pairs that touch a new distinct
        hash: those of ``build`` over all, exactly."""
        if (self.ties is None) != (new_ties is None):
            raise ValueError("an index built with ties takes new hashes with ties, and only it")
        if new_ties is not None and len(new_ties) != len(new_hashes):
            raise ValueError(f"{len(new_ties)} ties for {len(new_hashes)} hashes")
        items = len(self.group)
        by_value = np.argsort(self.hashes, kind="stable")
        values, first, group = _collapse(np.asarray(new_hashes, np.uint64))
        ordered = self.hashes[by_value]
        where = np.searchsorted(ordered, values).clip(max=max(len(ordered) - 1, 0))
        known = ordered[where] == values if len(ordered) else np.zeros(len(values), bool)
        fresh = np.flatnonzero(~known)
        old = len(self.hashes)
        if old + len(fresh) > MAX_HASHES:
            raise ValueError(f"{old + len(fresh)} distinct hashes, more than the {MAX_HASHES} "
                             "a key holds")
        position = np.empty(len(values), np.int64)
        position[known] = by_value[where[known]]
        position[fresh] = old + np.arange(len(fresh))
        hashes = np.concatenate([self.hashes, values[fresh]])
        ties = None if new_ties is None else np.concatenate(
            [self.ties, np.asarray(new_ties, np.uint64)[first[fresh]]])
        near = np.concatenate([self.near, np.full((len(fresh), self.near.shape[1]), _NONE)])

        new = values[fresh]
        rows = old + np.arange(len(fresh))
        walk = _Walk(near, ties, self.distance, self.scheme, threads)
        try:
            for bits, earlier in _bands(self.scheme):
                width = len(bits)
                tables = _band_tables(bits)
                old_bands = walk.band_values(self.hashes, tables)
                new_bands = walk.band_values(new, tables)
                # what each new hash looks up: its band with each mask flipped; the old
                # hashes there (most are in no bucket a new one looks into)
                masks = walk.masks[width]
                looks = (new_bands[:, None] ^ masks[None, :]).ravel()
                looked = np.zeros(1 << width, bool)
                looked[looks] = True
                hits = np.flatnonzero(looked[old_bands])
                # each new hash's pairs with the old hashes it finds, into both lists (an old
                # hash takes a new one only if it beats its nearest so far)
                by_band, _ = walk.order(new_bands, width)
                owners = (rows[by_band], new[by_band], new_bands[by_band])
                walk(*owners, hits, self.hashes[hits], old_bands[hits], width, earlier,
                     both=True)
                # and the new hashes among themselves, as ``build``
                walk(*owners, rows, new, new_bands, width, earlier)
        finally:
            walk.close()
        grown = replace(self, hashes=hashes, near=near, ties=ties,
                        first=np.concatenate([self.first, items + first[fresh]]),
                        group=np.concatenate([self.group, position[group]]))
        return grown, _pairs(near, grown.first, since=old)


def build(hashes: np.ndarray, distance: int = 18, cap: int = 8,
          scheme: Scheme = DEFAULT_SCHEME, threads: int = THREADS,
          ties: np.ndarray | None = None) -> Index:
    """The index of ``hashes`` (validated uint64): equal ones collapsed, each distinct hash's
    ``cap`` nearest within ``distance`` among the pairs the scheme finds; of equal distance,
    the nearest by ``ties`` (a second hash of each item, uint64) first. ``threads`` share
    the hashes of each band: the same lists whatever their number."""
    if not 0 <= distance <= MAX_DISTANCE or cap < 1:
        raise ValueError(f"distance must be 0 to {MAX_DISTANCE} and cap at least 1")
    values, first, group = _collapse(np.asarray(hashes, np.uint64))
    if len(values) > MAX_HASHES:
        raise ValueError(f"{len(values)} distinct hashes, more than the {MAX_HASHES} a key holds")
    if ties is not None:
        if len(ties) != len(hashes):
            raise ValueError(f"{len(ties)} ties for {len(hashes)} hashes")
        ties = np.asarray(ties, np.uint64)[first]

    near = np.full((len(values), cap), _NONE)
    walk = _Walk(near, ties, distance, scheme, threads)
    try:
        for bits, earlier in _bands(scheme):
            band = walk.band_values(values, _band_tables(bits))
            # each hash looks up the others, all in band order: the buckets they look into
            # ascend, and a bucket's hashes lie side by side
            order, edges = walk.order(band, len(bits))
            in_order = (order, values[order], band[order])
            walk(*in_order, *in_order, len(bits), earlier, edges=edges)
    finally:
        walk.close()
    return Index(values, first, group, near, distance, scheme, ties)


def clusters(index: Index, verified: np.ndarray) -> list[np.ndarray]:
    """Connected components of the ``verified`` pairs of items, every item of an equal-hash
    group in one component with the others; those of two or more items, each sorted, in
    order of their first item."""
    parent = np.arange(len(index.hashes))
    hashed = index.group[np.asarray(verified, np.int64).reshape(-1, 2)]
    for a, b in hashed.tolist():
        while parent[a] != a:
            parent[a] = a = parent[parent[a]]
        while parent[b] != b:
            parent[b] = b = parent[parent[b]]
        if a != b:
            parent[max(a, b)] = min(a, b)
    while True:  # flatten: every distinct hash points at its component's root
        above = parent[parent]
        if (above == parent).all():
            break
        parent = above
    label = parent[index.group]
    order = np.argsort(label, kind="stable")
    cuts = np.flatnonzero(np.diff(label[order])) + 1
    return [members for members in np.split(order, cuts) if len(members) > 1]
