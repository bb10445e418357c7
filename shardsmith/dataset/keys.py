"""Sample keys are unique in a dataset: a key twice (one copy in train, one in val, shards,
index and counts forged to agree) would leak a sample from training into validation, and every
layout names files by key, so one copy would overwrite the other.

Found by 8 bytes a key (a hash of each in an array, sorted once at the end), not a set of the
keys themselves (about 100 bytes a key): commands that stream the sample index keep their
memory nearly flat.  It costs 3 to 4% of the index's parse (200,000 lines on a busy 2-core
machine: 0.18 to 0.20 s against 4.8 to 6.4 s).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable

import numpy as np


class KeyTally:
    """The keys seen, as hashes; ``repeated`` says which hashes came twice (a real duplicate
    or, once in about 2**64 / n**2, two keys of one hash: the caller compares the keys)."""

    def __init__(self) -> None:
        self._hashes = array("q")

    def add(self, key: str) -> None:
        self._hashes.append(hash(key))

    def repeated(self) -> frozenset[int]:
        """The hashes added more than once."""
        if len(self._hashes) < 2:
            return frozenset()
        values = np.sort(np.frombuffer(self._hashes, np.int64))
        return frozenset(values[1:][values[1:] == values[:-1]].tolist())


def repeated_keys(pairs: Iterable[tuple[str, str]], hashes: frozenset[int]) -> dict[str, list[str]]:
    """Of ``(key, where)`` pairs, the keys whose hash is in ``hashes`` and that come more than
    once, each with where it was found (in order)."""
    found: dict[str, list[str]] = {}
    for key, where in pairs:
        if hash(key) in hashes:
            found.setdefault(key, []).append(where)
    return {key: places for key, places in found.items() if len(places) > 1}


# Where a repeated key's copies are, named in its one line: a forged index of 40,000 copies of
# one key made a 700 KB line before.
PLACES_SHOWN = 4


def duplicate_message(repeated: dict[str, list[str]], what: str) -> str:
    """One line naming the first duplicate key, where its copies are and how many keys come
    twice."""
    key, places = next(iter(repeated.items()))
    more = f" (and {len(repeated) - 1} more keys)" if len(repeated) > 1 else ""
    shown = ", ".join(places[:PLACES_SHOWN]) + (", ..." if len(places) > PLACES_SHOWN else "")
    return (f"sample key {key} is in {what} {len(places)} times ({shown}){more}: "
            "keys are unique in a dataset, so it is damaged or forged; it is refused "
            "(shardsmith verify lists the problems)")

