"""One sample's members read by offset from its shard and checked: the shard access every
reader of tars shares (torch per-sample and batch mode, DALI's external source).

Framework-free (NumPy only).  Everything read is untrusted: a member that cannot be read, a
label outside the classes, metadata that does not parse, a JPEG header that is not the size the
sample index records are a ``CorruptSampleError`` naming the shard and the sample's key, which
the caller replaces or raises (``Corruptions``).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from ..dataset.formats.webdataset import parse_label
from ..errors import ConfigError, CorruptSampleError, ShardFormatError
from .plan import SampleTable, ShardFiles
from .sample_jpeg import SampleJpegError, check_header, decode_sample
from .targets import detection_target

log = logging.getLogger(__name__)


class SampleReader:
    """Reads sample ``index`` of ``table``: its JPEG bytes and label in one ``pread``, and its
    metadata (``KEY.json``) in the same read when asked.  Each process opens the shards anew
    (``ShardFiles`` is not shared across a fork or a pickle)."""

    def __init__(self, table: SampleTable, classes: int, object_classes: int = 0,
                 largest: tuple[int, int] | None = None):
        self.table, self.classes, self.object_classes = table, classes, object_classes
        self.largest = largest  # no JPEG header may say more (12 GB from 16x16 pixels)
        self.with_masks = bool(len(table) and (table.mask_offset >= 0).any())
        self.files = ShardFiles(table)

    def read(self, index: int) -> tuple[memoryview, int]:
        """The JPEG bytes and label of sample ``index``: one read covering both members."""
        table = self.table
        shard, offset = int(table.shard[index]), int(table.image_offset[index])
        label_at = int(table.label_offset[index]) - offset
        span = label_at + int(table.label_size[index])
        try:
            data = memoryview(self.files.read(shard, offset, span))
            label = self.label(data[label_at:span])
        except (OSError, ShardFormatError, ValueError) as exc:
            raise self.named(index, f"unreadable ({exc})") from None
        return data[: int(table.image_size[index])], label

    def read_meta(self, index: int) -> tuple[memoryview, int, Any]:
        """The JPEG bytes, label and metadata (``KEY.json``) of sample ``index``: one read."""
        table = self.table
        shard, offset = int(table.shard[index]), int(table.image_offset[index])
        label_at, meta_at = (int(table.label_offset[index]) - offset,
                             int(table.meta_offset[index]) - offset)
        if meta_at < 0:
            raise self.named(index, "has no .json")
        span = meta_at + int(table.meta_size[index])
        try:
            data = memoryview(self.files.read(shard, offset, span))
            label = self.label(data[label_at : label_at + int(table.label_size[index])])
            meta = json.loads(bytes(data[meta_at:span]))
        except (OSError, ShardFormatError, ValueError, RecursionError) as exc:
            raise self.named(index, f"unreadable ({exc})") from None
        return data[: int(table.image_size[index])], label, meta

    def label(self, data: memoryview) -> int:
        """The label of a ``.cls`` member: a class index (or -1, unlabelled); anything else
        would index past a model's outputs, so it is a corrupt sample."""
        label = parse_label(data)
        if not -1 <= label < self.classes:
            raise ShardFormatError(f"label {label} is not one of the {self.classes} classes")
        return label

    def target(self, index: int, meta: Any, height: int, width: int) -> dict[str, np.ndarray]:
        """torchvision's detection target of sample ``index`` (``targets.detection_target``)."""
        try:
            return detection_target(meta, height, width, self.with_masks,
                                     self.object_classes)
        except ValueError as exc:
            raise self.named(index, f"bad annotations ({exc})") from None

    def jpeg_shape(self, index: int, jpeg: Any, expect: tuple[int, int] | None = None) \
            -> tuple[int, int]:
        """(height, width) from the JPEG's header once checked (``sample_jpeg.check_header``)."""
        try:
            return check_header(jpeg, expect, self.largest)[:2]
        except SampleJpegError as exc:
            raise self.named(index, str(exc)) from None

    def decode(self, index: int, jpeg: Any, colorspace: str,
               expect: tuple[int, int] | None = None,
               buffer: np.ndarray | None = None) -> np.ndarray:
        """The pixels of sample ``index`` (``sample_jpeg.decode_sample``), named when not."""
        try:
            return decode_sample(jpeg, colorspace, expect=expect, bound=self.largest,
                                 buffer=buffer)
        except SampleJpegError as exc:
            raise self.named(index, str(exc)) from None

    def where(self, index: int) -> str:
        """``SHARD: sample KEY`` for messages: the key the table has from the shard's index,
        so a shard cut short, or one that is a FIFO or a link, still names its samples."""
        table = self.table
        shard = int(table.shard[index])
        key = table.key(index)
        if key is None:  # a table made without keys: from the member's tar header
            key = self.files.member_name(shard, int(table.image_offset[index])).split(".", 1)[0]
        return f"{Path(table.paths[shard]).name}: sample {key}"

    def named(self, index: int, problem: str) -> CorruptSampleError:
        return CorruptSampleError(f"{self.where(index)}: {problem}")

    def close(self) -> None:
        self.files.close()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["files"] = ShardFiles(self.table)  # each process opens its own
        return state


class Corruptions:
    """What happens to a corrupt sample: ``"replace"`` (counted, named in one warning per
    epoch) or ``"raise"``."""

    def __init__(self, on_corrupt: str):
        if on_corrupt not in ("replace", "raise"):
            raise ConfigError(f"on_corrupt: expected 'replace' or 'raise', got {on_corrupt!r}")
        self.raises = on_corrupt == "raise"
        self.found: list[str] = []

    def add(self, exc: CorruptSampleError) -> None:
        """Record ``exc`` or, with ``on_corrupt="raise"``, raise it."""
        if self.raises:
            raise exc
        self.found.append(str(exc))

    def warn(self, epoch: int) -> None:
        """One warning naming the first five corrupt samples of the epoch, if any."""
        found = self.found
        if found:
            log.warning("epoch %d: %d corrupt samples replaced (%s%s)", epoch, len(found),
                        ", ".join(found[:5]), ", ..." if len(found) > 5 else "")


def replacements(count: int, bad: list[int], corruptions: Corruptions | None = None
                 ) -> list[tuple[int, int]]:
    """(slot, the good slot that stands in for it) for each ``bad`` slot of a batch of
    ``count``, good slots taken in turn; ``CorruptSampleError`` when none is good (naming
    the last corruption ``corruptions`` found)."""
    if not bad:
        return []
    broken = set(bad)
    good = [slot for slot in range(count) if slot not in broken]
    if not good:
        last = f": {corruptions.found[-1]}" if corruptions and corruptions.found else ""
        raise CorruptSampleError(f"every sample of a batch is corrupt{last}")
    return [(slot, good[number % len(good)]) for number, slot in enumerate(bad)]
