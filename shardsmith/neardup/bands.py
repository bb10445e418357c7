"""The compiled step of the candidate search (``search``): the pairs one band finds, put into
their owners' lists.

For each band, ``band_values`` gives each hash its band's value and ``buckets`` sorts the
targets by it into a table of where each value's bucket starts (NumPy's argsort and a binary
search where the targets are few); ``offer`` then walks, mask by mask (none, then each of
the probe's bits flipped), each owner's bucket of its band value with the mask flipped, and
puts every target within reach into the owner's list. Compiled by Numba: the same work in
NumPy passes cost a gather, a mask and a temporary array per step, and merges of pools of
millions of offers (a million crowded hashes searched and ranked: 74 s in NumPy, 35 to 41 s
compiled; docs/performance.md, "Near-duplicates: the search", "Compiled").

An owner's list is written by its owner's walk only, so the threads of a search take
disjoint ranges of owners and need no lock; a list ends as the ``cap`` least keys of the
pairs found for it, whatever the order they come in (a pair found again by a later band is
passed by: ``_found_before``), so the lists are the same whatever the threads.

Imported by ``search`` when it first searches: compiled on first use (3 s), cached on disk
after (0.5 to 0.6 s the first search in a process, Numba's import included) where a cache
can be written (``_compiled``).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

# key = distance << 31 | tie << 24 | neighbour (``search``'s layout)
_DISTANCE_SHIFT = 31
_TIE_SHIFT = 24


def _compiled(**options: object):  # noqa: ANN202 (a decorator)
    """``njit`` without the GIL, its machine code cached on disk beside the module (or in the
    user's cache, or NUMBA_CACHE_DIR) where one of them can be written; else compiled again
    in each process that searches (3 to 8 s): a read-only install with a read-only home is no
    reason to refuse to search."""

    def decorate(function):  # noqa: ANN001, ANN202
        try:
            return njit(nogil=True, cache=True, **options)(function)
        except RuntimeError:  # Numba: "cannot cache function ...: no locator available"
            return njit(nogil=True, **options)(function)

    return decorate


@intrinsic
def _popcount(typing_context, value):  # noqa: ANN001, ANN202 (Numba's signature)
    """Set bits of a uint64: one instruction (LLVM's ctpop)."""

    def generate(context, builder, signature, arguments):  # noqa: ANN001, ANN202
        function = builder.module.declare_intrinsic("llvm.ctpop", [ir.IntType(64)])
        return builder.call(function, arguments)

    return types.uint64(types.uint64), generate


@_compiled(inline="always")
def _insert(near: np.ndarray, reach: np.ndarray, row: int, key: int, distance: int) -> None:
    """``key`` into the sorted list ``row`` if it beats the last; ``reach[row]`` follows the
    last."""
    cap = near.shape[1]
    if key >= near[row, cap - 1]:
        return
    slot = cap - 1  # where it goes: after every smaller key
    while slot > 0 and near[row, slot - 1] > key:
        slot -= 1
    for moved in range(cap - 1, slot, -1):
        near[row, moved] = near[row, moved - 1]
    near[row, slot] = key
    reach[row] = min(near[row, cap - 1] >> _DISTANCE_SHIFT, distance)


@_compiled(inline="always")
def _found_before(apart: np.uint64, earlier: np.ndarray, probe: int) -> bool:
    """Whether a band searched before this one finds a pair (the XOR of its hashes): its
    bits under one of ``earlier``'s masks differ in at most ``probe``. Each pair reaches
    its lists once so, by the first band that finds it, and nothing is read from a list
    to tell (300,000 crowded hashes, lists of 20: 8.0 s, 10.3 s looking in the list for
    each pair within reach)."""
    for mask in earlier:
        if _popcount(apart & mask) <= probe:
            return True
    return False


@_compiled()
def offer(near: np.ndarray, reach: np.ndarray, owners: np.ndarray, owner_hashes: np.ndarray,
          owner_bands: np.ndarray, start: int, stop: int, masks: np.ndarray,
          target_bands: np.ndarray, targets: np.ndarray, target_hashes: np.ndarray,
          target_reach: np.ndarray, edges: np.ndarray, earlier: np.ndarray, probe: int,
          ties: np.ndarray, distance: int) -> tuple[np.ndarray, np.ndarray]:
    """Offer owners ``start`` to ``stop`` (rows ``owners`` of ``near``, their hashes and band
    values) every target whose band value is the owner's with a mask of ``masks`` flipped
    (``target_bands`` ascending; the bucket of value v is ``edges[v]`` to ``edges[v + 1]``
    where ``edges`` is given, else found by binary search) within the owner's ``reach``
    (uint8 a row: the distance of a full list's last, else ``distance``) and found by no
    band before (``_found_before``): its key goes into the sorted list if it beats the
    last. An owner is never its own neighbour. ``ties``: each row's second hash, or empty.

    ``target_reach``, where given (the targets' reaches, in their order), are targets whose
    own lists are offered the owner too, but not written here: a list is written by its own
    owner's walk alone. (rows, keys) of those pairs within the target's reach are returned,
    for ``insert``.

    The reaches, a byte a row, are what a pair is held against: the lists' rows lie anywhere
    in ``near`` (a million crowded hashes: 127 s reading each owner's last from its row)."""
    tied, both = len(ties) > 0, len(target_reach) > 0
    rows, keys, kept = np.empty(64, np.int64), np.empty(64, np.int64), 0
    for mask in masks:  # mask by mask: the looked-up values follow the owners' order, by blocks
        for position in range(start, stop):
            value = owner_bands[position] ^ mask
            if len(edges):
                low, high = edges[value], edges[value + 1]
            else:
                low = np.searchsorted(target_bands, value, "left")
                high = np.searchsorted(target_bands, value, "right")
            if low == high:
                continue
            own, row = owner_hashes[position], owners[position]
            owner_reach = reach[row]
            for place in range(low, high):
                apart = np.int64(_popcount(own ^ target_hashes[place]))
                if apart > owner_reach and (not both or apart > target_reach[place]):
                    continue  # most pairs: a popcount and a compare
                other = targets[place]
                if other == row or _found_before(own ^ target_hashes[place], earlier, probe):
                    continue
                key = apart << _DISTANCE_SHIFT
                if tied:
                    key |= np.int64(_popcount(ties[row] ^ ties[other])) << _TIE_SHIFT
                if apart <= owner_reach:
                    _insert(near, reach, row, key | other, distance)
                    owner_reach = reach[row]
                if both and apart <= target_reach[place]:
                    if kept == len(rows):
                        rows, keys = np.concatenate((rows, rows)), np.concatenate((keys, keys))
                    rows[kept], keys[kept], kept = other, key | row, kept + 1
    return rows[:kept], keys[:kept]


@_compiled()
def insert(near: np.ndarray, reach: np.ndarray, rows: np.ndarray, keys: np.ndarray,
           distance: int) -> None:
    """Each key into its row's sorted list if it beats the last (``offer``'s returned
    pairs, each once)."""
    for entry in range(len(rows)):
        _insert(near, reach, rows[entry], keys[entry], distance)


@_compiled()
def buckets(values: np.ndarray, edges: np.ndarray, order: np.ndarray) -> None:
    """Fill ``order`` (``values[order]`` ascending, stable) and ``edges`` (zeros of 2**width
    + 1: value v's bucket is ``edges[v]`` to ``edges[v + 1]`` of it) for band values: a
    counting sort (a million crowded hashes' band of 21 bits: 44 ms, NumPy's stable argsort
    135 ms)."""
    for value in values:
        edges[value + 1] += 1
    for value in range(len(edges) - 1):
        edges[value + 1] += edges[value]
    cursor = edges[:-1].copy()
    for item in range(len(values)):
        value = values[item]
        order[cursor[value]] = item
        cursor[value] += 1


@_compiled()
def band_values(hashes: np.ndarray, tables: np.ndarray) -> np.ndarray:
    """Each hash's band value: the OR of ``tables[k]`` at its byte k (int64; a table per
    byte gives that byte's bits of the band at their places in it): 8 reads from 16 KB a
    hash, 6.6 ms a million (27 in NumPy)."""
    values = np.zeros(len(hashes), np.int64)
    for item in range(len(hashes)):
        value = hashes[item]
        for byte in range(8):
            values[item] |= tables[byte, (value >> np.uint64(8 * byte)) & np.uint64(255)]
    return values
