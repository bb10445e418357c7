"""The candidate pairs of the exhaustive search (scripts/neardup_reference.py) at a million
hashes: an index instead of every hash against every other, and a night's new hashes against
the rest.

Any uint64 hashes, NumPy 1.24 and no compiled code of our own:

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
  "Near-duplicates: the search"). ``THREADS`` threads share the bands and the lists:
  the same lists whatever their number and turns.
* ``ranked``: of each hash's nearest, those whose signatures are nearest (a longer, finer
  description of the same window than its 64 bits: docs/know-your-data.md, "Signatures").
* ``Index.add``: a night's new hashes against the index: the pairs of the new ones, exactly
  those the search over old and new together has that touch a new hash (an old hash takes a
  new one among its nearest only if it beats its ``cap`` nearest so far, kept in the index);
  pairs between old hashes that a new one pushes out of a list stay as they were checked.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from itertools import combinations

import numpy as np

MAX_HASHES = 1 << 24  # a sample index holding more is refused (a key's neighbour has 24 bits)
MAX_DISTANCE = 30  # bits; a key holds a distance in 5 bits
# threads of ``build`` and ``add``: each holds temporaries of its own (a million crowded
# hashes, when each held lists of its own too: 64 s in 623 MB with 1, 44 s in 731 to 807 MB
# with 2, 1,085 MB with 3)
THREADS = 2
# key = distance << 31 | tie << 24 | neighbour: the nearest first, of equal distance the
# nearest by the ties' hashes (7 bits, 0 to 64), then the lowest neighbour
_TIE_SHIFT = 24
_DISTANCE_SHIFT = 31
_OWNER_SHIFT = 36  # pooled entry = owner << 36 | key
_LOW = np.int64((1 << _TIE_SHIFT) - 1)
_NONE = np.int64((MAX_DISTANCE + 1) << _DISTANCE_SHIFT | ((1 << _DISTANCE_SHIFT) - 1))
_PAIR_SHIFT = 32  # a pair of items = i << 32 | j
_PAIR_LOW = np.int64((1 << _PAIR_SHIFT) - 1)
# pairs looked at in one step and entries gathered before they are merged into the lists:
# they bound the temporaries, whatever a bucket holds (a million crowded hashes, 2 threads:
# 44 s in 731 MB; with steps of 4M and 4M, 47 s in 1,157 MB)
_CHUNK = 1 << 20
_POOL = 1 << 21
_ROWS = 1 << 16  # lists merged at once
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


def _earlier(scheme: Scheme, partition: int, band: int) -> np.ndarray:
    """The bit masks (uint64) of the bands searched before ``band`` of ``partition``:
    the partitions in order, each band in order."""
    bands = [bits for before in range(partition) for bits in _partition(scheme, before)]
    bands += _partition(scheme, partition)[:band]
    return np.array([sum(1 << int(bit) for bit in bits) for bits in bands], np.uint64)


def _first_found(apart: np.ndarray, earlier: np.ndarray, probe: int) -> np.ndarray:
    """Which pairs (the XOR of their hashes) no band of ``earlier`` finds, the band that
    finds them now being the first: each pair is offered once, not once a band that finds
    it (200,000 crowded hashes: 141 million pairs looked at, 29 million close, 5 million
    of them distinct)."""
    left = np.arange(len(apart))
    for mask in earlier:
        if not len(left):
            break
        differ = apart[left] & mask
        if probe == 1:  # at most one bit: clearing the lowest set bit leaves none
            found = (differ & (differ - np.uint64(1))) == 0
        else:
            found = popcount(differ) <= probe
        left = left[~found]
    first = np.zeros(len(apart), bool)
    first[left] = True
    return first


def _masks(width: int, probe: int) -> list[int]:
    """Every mask of ``width`` bits with at most ``probe`` set, fewest first."""
    return [sum(1 << bit for bit in flipped) for count in range(probe + 1)
            for flipped in combinations(range(width), count)]


def _ranges(starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(which range, position) for every position of ranges [start, start + count)."""
    owner = np.repeat(np.arange(len(counts), dtype=np.int32), counts)  # int32: half the bytes
    return owner, _positions(starts, counts)


def _positions(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Every position of ranges [start, start + count), range after range (int32)."""
    ends = np.cumsum(counts, dtype=np.int64)
    total = int(ends[-1]) if len(ends) else 0
    shift = (ends - counts - starts).astype(np.int32)
    return np.arange(total, dtype=np.int32) - np.repeat(shift, counts)


def _chunks(counts: np.ndarray) -> list[slice]:
    """Slices of items whose pairs (``counts`` each) are about _CHUNK together."""
    if int(counts.sum()) <= _CHUNK:
        return [slice(0, len(counts))]
    edges = np.searchsorted(np.cumsum(counts), np.arange(_CHUNK, int(counts.sum()), _CHUNK))
    cuts = [0, *np.unique(edges + 1).tolist(), len(counts)]
    return [slice(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b > a]


class _Lists:
    """Each hash's ``cap`` nearest so far as keys (distance, tie, neighbour), ascending,
    shared by the threads of a search: each offers its pairs through an ``_Offers`` of its
    own and merges them in one batch of lists at a time (a lock). The lists' lasts and
    reaches are read without it: they only come nearer, so a read of an older value lets
    more pairs through, never fewer, and the lists end the same whatever the threads' turns.
    One set of lists, not one a thread to join at the end: a million hashes, lists of 20,
    160 MB less."""

    def __init__(self, near: np.ndarray, distance: int) -> None:
        self.near, self.distance = near, distance
        self.last = near[:, -1].copy()  # each list's last, packed: read once a pair offered
        self.reach = self._reach(self.last)
        self.lock = threading.Lock()
        self.merges = 0  # merges so far, any thread's: the lists came nearer

    def keep(self, rows: np.ndarray, block: np.ndarray) -> None:
        """The lists of ``rows`` with their entries in ``block`` (ascending keys, or _NONE;
        none of them in its list already: the search offers each pair once)."""
        with self.lock:
            merged = np.concatenate([self.near[rows], block], axis=1)
            merged.sort(axis=1)
            self.near[rows] = merged[:, : self.near.shape[1]]
            self.last[rows] = merged[:, self.near.shape[1] - 1]
            self.reach[rows] = self._reach(self.last[rows])

    def _reach(self, last: np.ndarray) -> np.ndarray:
        """The farthest a pair may be and still enter a list (uint8): the distance of a full
        list's last, else the search's distance."""
        return np.minimum(last >> _DISTANCE_SHIFT, self.distance).astype(np.uint8)


class _Offers:
    """One thread's pairs into the lists: kept if they beat a list's last, pooled, and
    merged in batches."""

    def __init__(self, lists: _Lists, ties: np.ndarray | None) -> None:
        self.lists, self.ties = lists, ties
        self.pool: list[np.ndarray] = []
        self.pooled = 0

    def offer_close(self, left: np.ndarray, right: np.ndarray, apart: np.ndarray) -> None:
        """Pairs (left, right) ``apart`` bits apart, within the distance."""
        left, right = left.astype(np.int64), right.astype(np.int64)
        apart = apart.astype(np.int64) << _DISTANCE_SHIFT
        if self.ties is not None:
            apart |= popcount(self.ties[left] ^ self.ties[right]).astype(np.int64) << _TIE_SHIFT
        for owner, other in ((left, right), (right, left)):
            key = apart | other
            beats = key < self.lists.last[owner]
            if beats.any():  # none is in its list already: each pair comes once
                self.pool.append(owner[beats] << _OWNER_SHIFT | key[beats])
                self.pooled += int(beats.sum())
        if self.pooled >= _POOL:
            self.merge()

    def merge(self) -> None:
        """Merge the pooled entries into the lists, ``_ROWS`` lists at a time: the
        temporaries are those of a batch, not of the pool. Each pair was offered once (a
        million crowded hashes: 19.4 s of merges in two partitions -> 10.1 s, where a merge
        dropped a pair offered again and sorted each list twice)."""
        if not self.pool:
            return
        entries = np.concatenate(self.pool)
        self.pool, self.pooled = [], 0
        entries.sort()
        owner = entries >> _OWNER_SHIFT
        starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
        rows = owner[starts]
        del owner
        starts = np.r_[starts, len(entries)]
        entries &= (np.int64(1) << _OWNER_SHIFT) - 1
        cap = self.lists.near.shape[1]
        for low in range(0, len(rows), _ROWS):
            high = min(low + _ROWS, len(rows))
            counts = np.diff(starts[low : high + 1])
            width = min(cap, int(counts.max()))  # an owner's cap first hold its cap best
            which, position = _ranges(starts[low:high], np.minimum(counts, width))
            block = np.full((high - low, width), _NONE)
            block[which, position - starts[low:high][which]] = entries[position]
            self.lists.keep(rows[low:high], block)
        with self.lists.lock:
            self.lists.merges += 1


def _bytes(hashes: np.ndarray) -> np.ndarray:
    """(8, len) uint8: byte k of each hash holds its bits 8k to 8k + 7."""
    return hashes.astype("<u8").view(np.uint8).reshape(-1, 8).T


def _band_values(hash_bytes: np.ndarray, bits: np.ndarray) -> np.ndarray:
    """The value of one band: the bits at ``bits`` packed in order (int32), a byte at a time
    through tables (8 lookups, not one operation per bit)."""
    tables = np.zeros((8, 256), np.int32)
    values = np.arange(256)
    for rank, bit in enumerate(bits):
        tables[bit // 8] |= ((values >> (bit % 8)) & 1) << rank
    band = np.zeros(hash_bytes.shape[1], np.int32)
    for byte in np.unique(bits // 8):
        band |= tables[byte][hash_bytes[byte]]
    return band


def _buckets(ordered: np.ndarray, width: int):  # noqa: ANN202 (a closure)
    """Where each key's bucket starts in ``ordered`` (sorted band values) and its size: a
    table of every value where they are many, a binary search where few."""
    if len(ordered) * 16 >= 1 << width:
        # bucket k is [edges[k], edges[k + 1]): two reads a key from one cache line
        edges = np.zeros((1 << width) + 1, np.int32)
        np.cumsum(np.bincount(ordered, minlength=1 << width), out=edges[1:])
        return lambda keys: (edges[keys], edges[keys + 1] - edges[keys])

    def search(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        by_key = np.argsort(keys)  # sorted needles search twice as fast (measured)
        starts, counts = np.empty(len(keys), np.int64), np.empty(len(keys), np.int64)
        starts[by_key] = np.searchsorted(ordered, keys[by_key], side="left")
        counts[by_key] = np.searchsorted(ordered, keys[by_key], side="right")
        return starts, counts - starts

    return search


def _all_pairs(hashes: np.ndarray, offers: _Offers, scheme: Scheme, offset: int,
               bands: Iterable[tuple[int, int]]) -> None:
    """Offer every pair of ``hashes`` (at positions offset + i) within reach whose first
    finding band (``_first_found``) is one of ``bands`` ((partition, band)): the bands
    before them are searched too, by this call or another."""
    hash_bytes = _bytes(hashes)
    for partition, band_index in bands:
        bits = _partition(scheme, partition)[band_index]
        earlier = _earlier(scheme, partition, band_index)
        band = _band_values(hash_bytes, bits)
        order = np.argsort(band).astype(np.int32)
        # a bucket's hashes side by side: its pairs read them in order (600,000 crowded
        # hashes: 31 s, 37 through the hash positions)
        ordered, in_order = band[order], hashes[order]
        bucket = _buckets(ordered, len(bits))
        filled = np.zeros(1 << len(bits), bool)
        # most keys find an empty bucket: a table of a quarter of the bytes says so first
        # (300,000 random hashes: 7.6 s, 9.0 without it)
        filled[ordered] = True
        # a pair farther than both its lists reach is dropped before it is offered (read
        # at each band and after each merge, any thread's: the lists only come nearer, so
        # it stays true; a million crowded hashes: 72 s, 79 without it)
        merges = -1
        for mask in _masks(len(bits), scheme.probe):
            if mask == 0:  # within a bucket: each later member of it
                starts, counts = bucket(ordered)
                positions = np.arange(len(order), dtype=np.int32)
                counts = starts + counts - positions - 1
                starts, sources = positions + 1, positions
            else:  # the bucket of band ^ mask, from the lower side only (each pair once);
                # in band order, so the keys ascend and the tables are read in order (9.0 s,
                # 12.2 in the hashes' order)
                lower = np.flatnonzero((ordered & (1 << (mask.bit_length() - 1))) == 0)
                keys = ordered[lower] ^ mask
                found = filled[keys]
                sources = lower[found].astype(np.int32)
                starts, counts = bucket(keys[found])
            for part in _chunks(counts):  # pairs of positions in band order
                if offers.lists.merges != merges:  # the band's first or the lists came nearer
                    merges = offers.lists.merges
                    reach = offers.lists.reach[order + offset]
                    farthest = reach.max(initial=0)
                # a source's hash repeated, not gathered pair by pair; the pairs beyond
                # the farthest any list reaches dropped before the reaches are gathered (a
                # partition of a million crowded hashes looks at 231 million pairs: 74
                # million within 14 bits, 17 million within reach; 7.3 s -> 5.6 s)
                repeats = counts[part]
                position = _positions(starts[part], repeats)
                source = np.repeat(sources[part], repeats)
                differ = np.repeat(in_order[sources[part]], repeats) ^ in_order[position]
                apart = popcount(differ)
                near = np.flatnonzero(apart <= farthest)
                close = near[apart[near] <= np.maximum(reach[source[near]],
                                                       reach[position[near]])]
                close = close[_first_found(differ[close], earlier, scheme.probe)]
                offers.offer_close(order[source[close]] + offset,
                                  order[position[close]] + offset, apart[close])


def _queried(queries: np.ndarray, hashes: np.ndarray, offers: _Offers, scheme: Scheme,
             offset: int, bands: Iterable[tuple[int, int]]) -> None:
    """Offer every pair (query at offset + q, hash) within reach whose first finding band is
    one of ``bands``, as ``_all_pairs``. Only the hashes whose band is looked up are sorted:
    a night's queries touch a small share of a million."""
    hash_bytes, query_bytes = _bytes(hashes), _bytes(queries)
    for partition, band_index in bands:
        bits = _partition(scheme, partition)[band_index]
        earlier = _earlier(scheme, partition, band_index)
        band, wanted = _band_values(hash_bytes, bits), _band_values(query_bytes, bits)
        masks = np.array(_masks(len(bits), scheme.probe), np.int32)
        keys = (wanted[:, None] ^ masks[None, :]).ravel()
        asker = np.repeat(np.arange(len(queries)), len(masks))
        marked = np.zeros(1 << len(bits), bool)
        marked[band] = True  # the buckets the hashes fill: most keys find none
        asker, keys = asker[marked[keys]], keys[marked[keys]]
        marked[:] = False
        marked[keys] = True  # the hashes in a bucket looked up
        hits = np.flatnonzero(marked[band])
        order = hits[np.argsort(band[hits])]
        starts, counts = _buckets(band[order], len(bits))(keys)
        for part in _chunks(counts):  # as in _all_pairs: within reach, found first here
            repeats = counts[part]
            found = order[_positions(starts[part], repeats)]
            asked = np.repeat(asker[part], repeats)
            differ = np.repeat(queries[asker[part]], repeats) ^ hashes[found]
            apart = popcount(differ)
            near = np.flatnonzero(apart <= offers.lists.distance)
            reach = offers.lists.reach
            close = near[apart[near] <= np.maximum(reach[asked[near] + offset],
                                                   reach[found[near]])]
            close = close[_first_found(differ[close], earlier, scheme.probe)]
            offers.offer_close(asked[close] + offset, found[close], apart[close])


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

        def search(offers: _Offers, bands: list[tuple[int, int]]) -> None:
            _queried(values[fresh], self.hashes, offers, self.scheme, old, bands)
            _all_pairs(values[fresh], offers, self.scheme, old, bands)

        near = _searched(near, ties, self.distance, self.scheme, threads, search)
        grown = replace(self, hashes=hashes, near=near, ties=ties,
                        first=np.concatenate([self.first, items + first[fresh]]),
                        group=np.concatenate([self.group, position[group]]))
        return grown, _pairs(near, grown.first, since=old)


def build(hashes: np.ndarray, distance: int = 18, cap: int = 8,
          scheme: Scheme = DEFAULT_SCHEME, threads: int = THREADS,
          ties: np.ndarray | None = None) -> Index:
    """The index of ``hashes`` (validated uint64): equal ones collapsed, each distinct hash's
    ``cap`` nearest within ``distance`` among the pairs the scheme finds; of equal distance,
    the nearest by ``ties`` (a second hash of each item, uint64) first. ``threads`` search
    the bands between them into one set of lists: the same lists whatever their
    number."""
    if not 0 <= distance <= MAX_DISTANCE or cap < 1:
        raise ValueError(f"distance must be 0 to {MAX_DISTANCE} and cap at least 1")
    values, first, group = _collapse(np.asarray(hashes, np.uint64))
    if len(values) > MAX_HASHES:
        raise ValueError(f"{len(values)} distinct hashes, more than the {MAX_HASHES} a key holds")
    if ties is not None:
        if len(ties) != len(hashes):
            raise ValueError(f"{len(ties)} ties for {len(hashes)} hashes")
        ties = np.asarray(ties, np.uint64)[first]

    def search(offers: _Offers, bands: list[tuple[int, int]]) -> None:
        _all_pairs(values, offers, scheme, 0, bands)

    near = _searched(np.full((len(values), cap), _NONE), ties, distance, scheme, threads,
                     search)
    return Index(values, first, group, near, distance, scheme, ties)


def _searched(near: np.ndarray, ties: np.ndarray | None, distance: int, scheme: Scheme,
              threads: int, search: Callable[[_Offers, list[tuple[int, int]]], None]
              ) -> np.ndarray:
    """``near`` grown in place by ``search`` over the scheme's bands, ``threads`` sharing
    them: band after band in order, each to the first thread free, so that the threads end
    together and the first bands fill the lists before the next are searched (a million
    crowded hashes, 2 threads: 79.5 million pairs offered a partition a thread, 75.3
    million a band a thread)."""
    bands = [(partition, band) for partition in range(scheme.partitions)
             for band in range(scheme.bands)]
    threads = max(1, min(threads, len(bands)))
    lists = _Lists(near, distance)
    stop, queue, taking = threading.Event(), iter(bands), threading.Lock()

    def searched() -> None:
        offers = _Offers(lists, ties)
        while not stop.is_set():  # else the caller was interrupted: it waits for no more
            with taking:
                unit = next(queue, None)
            if unit is None:
                break
            search(offers, [unit])
        offers.merge()

    pool = ThreadPoolExecutor(threads)  # NumPy lets go of the GIL on whole arrays
    try:
        for done in [pool.submit(searched) for _ in range(threads)]:
            done.result()
    finally:  # Ctrl-C left a million hashes' search 1.6 s after, 17.5 s without the stop
        stop.set()
        pool.shutdown()
    return near


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
