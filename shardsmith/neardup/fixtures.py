"""Which samples share a fixture, and each fixture's background.

A fixture is what stays put while parts come and go: the plate, its clamps and its light.  A
dataset does not say which fixture an image was shot on, so the folder of its original stands
for it, with the sample's size (an image of another size is another camera) and, for a tile,
its place in the original (another part of the plate).  Its background is made from the frames
of its first ``BACKGROUND_SHOTS`` samples in the sample index's order (``hashing.
fixture_median``), so the same dataset gives the same background however it is read.

A folder of fewer than ``FEW_SHOTS`` samples (a re-exported handful, a retake folder) makes a
poor background, its parts' ghost in it: it takes the background of a fuller fixture that it
matches (the median pixel within ``SAME_PLATE`` grey levels), if one does.  Measured on a
re-exported folder of 12 shots of one fixture: 5 of 30 true pairs found with its own
background, all 30 with the borrowed one (tests/test_neardup_inspect.py).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping

import numpy as np
import xxhash

BACKGROUND_SHOTS = 255  # samples of a fixture its background is made from (docs/know-your-data)
FEW_SHOTS = 32  # a fixture of fewer samples borrows a matching fixture's background
SAME_PLATE = 6.0  # grey levels (the median pixel) within which two backgrounds are one plate
_TILE = re.compile(r"_r\d{3}c\d{3}$")  # a tile's key ends with its row and column

Fixture = tuple[str, int, int, str]


def fixture_of(path: str, width: int, height: int, key: str) -> Fixture:
    """The fixture of a sample: its original's folder, its size, a tile's row and column."""
    tile = _TILE.search(key)
    return posixpath.dirname(path), width, height, tile.group() if tile else ""


def borrowed(own: Mapping[Fixture, np.ndarray],
             counts: Mapping[Fixture, int]) -> dict[Fixture, np.ndarray]:
    """Each fixture's background: its ``own``, or for one of fewer than FEW_SHOTS samples
    (``counts``) the background of the fuller fixture of its size it matches, if any."""
    backgrounds = dict(own)
    full = [fixture for fixture in own if counts[fixture] >= FEW_SHOTS]
    for fixture, background in own.items():
        if counts[fixture] >= FEW_SHOTS:
            continue
        unlike = {other: float(np.median(np.abs(background.astype(np.int16) - own[other])))
                  for other in full if own[other].shape == background.shape}
        nearest = min(unlike, key=unlike.__getitem__, default=None)
        if nearest is not None and unlike[nearest] <= SAME_PLATE:
            backgrounds[fixture] = own[nearest]
    return backgrounds


def digest(background: np.ndarray) -> str:
    """8 hex digits that change when the background does: a hash made against another
    background is made again."""
    return f"{xxhash.xxh32_intdigest(background.tobytes()):08x}"
