"""Samples put together: a batch decoded into one preallocated array, or samples one by one,
a corrupt one replaced by another (``samples.Corruptions``) so counts stay equal.

Framework-free (NumPy); the torch reader wraps what these give in tensors without a copy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..errors import CorruptSampleError
from .samples import Corruptions, SampleReader, replacements

COLORSPACES = {1: "GRAY", 3: "RGB"}


class BatchAssembler:
    """A batch of samples of one size decoded straight into an N×H×W×C array: no per-sample
    array, no collate.  With ``targets``, each sample's detection target instead of a label
    comes along."""

    def __init__(self, reader: SampleReader, image_size: tuple[int, int], channels: int,
                 targets: bool = False):
        self.reader, self.image_size, self.channels = reader, image_size, channels
        self.targets = targets

    def empty(self, count: int) -> np.ndarray:
        """A batch array for ``count`` samples, to decode into."""
        return np.empty((count, *self.image_size, self.channels), np.uint8)

    def decode(self, indices: np.ndarray, images: np.ndarray,
               corruptions: Corruptions) -> tuple[np.ndarray, list[Any]]:
        """Decode samples ``indices`` into ``images`` (at least that many rows); (labels,
        targets) come back, targets ``None`` each without ``targets``."""
        reader, size = self.reader, self.image_size
        colorspace = COLORSPACES[self.channels]
        labels = np.empty(len(indices), np.int64)
        targets: list[Any] = [None] * len(indices)
        bad = []
        for slot, index in enumerate(indices):
            index = int(index)
            try:
                if self.targets:
                    jpeg, labels[slot], meta = reader.read_meta(index)
                    targets[slot] = reader.target(index, meta, *size)
                else:
                    jpeg, labels[slot] = reader.read(index)
                # The batch's size, which every record of the selection has.
                reader.decode(index, jpeg, colorspace, expect=size, buffer=images[slot])
            except CorruptSampleError as exc:
                corruptions.add(exc)
                bad.append(slot)
        for slot, other in replacements(len(indices), bad, corruptions):
            images[slot], labels[slot], targets[slot] = images[other], labels[other], \
                targets[other]
        return labels, targets


def checked_jpegs(reader: SampleReader, indices: np.ndarray, corruptions: Corruptions,
                  expect: tuple[int, int] | None = None) -> tuple[list[memoryview], np.ndarray]:
    """The JPEG bytes and labels of samples ``indices``, each JPEG's header checked (exactly
    ``expect`` when given), for a decoder elsewhere (DALI, nvJPEG); a corrupt sample is
    replaced by another of the batch."""
    jpegs: list[Any] = [b""] * len(indices)
    labels = np.empty(len(indices), np.int64)
    bad = []
    for slot, index in enumerate(indices):
        index = int(index)
        try:
            jpegs[slot], labels[slot] = reader.read(index)
            reader.jpeg_shape(index, jpegs[slot], expect)
        except CorruptSampleError as exc:
            corruptions.add(exc)
            bad.append(slot)
    for slot, other in replacements(len(indices), bad, corruptions):
        jpegs[slot], labels[slot] = jpegs[other], labels[other]
    return jpegs, labels


def each_sample(indices: np.ndarray, item: Callable[[int], Any], corruptions: Corruptions,
                progress: Callable[[int], None] = lambda count: None,
                done: int = 0) -> Iterator[Any]:
    """``item(index)`` of each of ``indices`` after the first ``done``; a corrupt one is
    replaced by the last good one, else the next that reads.  ``progress(count)`` after each
    (how many of ``indices`` have been given)."""
    last_good = None
    for count, index in enumerate(indices[done:], done + 1):
        index = int(index)
        try:
            found = item(index)
            last_good = index
        except CorruptSampleError as exc:
            corruptions.add(exc)
            found = _replacement(indices, index, last_good, item)
        progress(count)
        yield found


def _replacement(indices: np.ndarray, index: int, last_good: int | None,
                 item: Callable[[int], Any]) -> Any:
    candidates = [last_good] if last_good is not None else []
    candidates += [int(other) for other in indices if other != index]
    for candidate in candidates:
        try:
            return item(candidate)
        except CorruptSampleError:
            continue
    raise CorruptSampleError("no sample of this worker's share decodes")
