"""The work of the near-duplicate passes that runs in worker processes: a fixture's
background, samples' hashes and pairs' checks, each from JPEG bytes the driver sends.

Apart from ``packing.nearhash`` (the driver's side) so that a worker imports only this and
``hashing`` to run it: importing the driver's module took 0.15 s a worker, 1.4% of packing 96
originals of 19 MB.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TypeVar

import numpy as np

from . import hashing

T = TypeVar("T")


def frame_or_none(jpeg: bytes | None) -> np.ndarray | None:
    """The hash frame of JPEG bytes; None for none, or for bytes that give no frame."""
    if jpeg is None:
        return None
    try:
        return hashing.frame(jpeg)
    except ValueError:
        return None


def background_task(task: tuple[list[bytes | None], bool]
                    ) -> tuple[np.ndarray | None, list[tuple[int, int, bytes] | None]]:
    """A fixture's background from the JPEG bytes of its first samples (a worker's task),
    and when asked, the part hashes of those samples against it (a fixture that keeps its
    own background: its first samples are then decoded once, not twice)."""
    shots, hashes = task
    frames = list(map(frame_or_none, shots))
    present = [frame for frame in frames if frame is not None]
    if not present:
        return None, []
    # a stored JPEG of another size than its line says (an altered shard) is left out, as
    # one that does not decode: the frames of the fixture's size are the most
    shapes = [frame.shape for frame in present]
    shape = max(shapes, key=shapes.count)
    background = hashing.fixture_median([frame for frame in present if frame.shape == shape])
    return background, ([_against(hashing.part_hashes, frame, background) for frame in frames]
                        if hashes else [])


def _against(make: Callable[[np.ndarray, np.ndarray], T], frame: np.ndarray | None,
             background: np.ndarray) -> T | None:
    """``make(frame, background)``; None for no frame, or one of another size than its
    fixture's (a sample that cannot be read, a stored JPEG of another size than its line)."""
    if frame is None or frame.shape != background.shape:
        return None
    return make(frame, background)


def hash_task(work: list[tuple[bytes | None, np.ndarray]]
              ) -> list[tuple[int, int, bytes] | None]:
    """The part hashes and signature of samples, each from its JPEG bytes and its fixture's
    background."""
    return [_against(hashing.part_hashes, frame_or_none(jpeg), background)
            for jpeg, background in work]


def check_task(task: tuple[list[tuple[bytes | None, np.ndarray, bool]], list[tuple[int, int]]]
               ) -> tuple[list[hashing.Checked], list[int]]:
    """The check of pairs of samples (each from its JPEG bytes, its background and whether
    it is a tile: a part its tile cuts is no part), and the samples that could not be read
    (their pairs score UNLIKE)."""
    work, pairs = task
    features: dict[int, np.ndarray] = {}  # by background: a task's samples share a few
    views = []
    for jpeg, background, tile in work:
        if id(background) not in features:
            features[id(background)] = hashing.fixture_features(background)
        view = partial(hashing.part_view, whole=tile, features=features[id(background)])
        views.append(_against(view, frame_or_none(jpeg), background))
    checks = [hashing.Checked(hashing.UNLIKE) if views[a] is None or views[b] is None
              else hashing.check(views[a], views[b]) for a, b in pairs]
    return checks, [at for at, view in enumerate(views) if view is None]
