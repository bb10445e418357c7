"""One sample read by offset from its shard and checked: the shard access every reader of a
sample table shares (torch per-sample and batch mode, DALI's external source, Ultralytics).

Framework-free (NumPy only).  Everything read is untrusted: a member that cannot be read, a
label outside the classes, metadata that does not parse, a JPEG header that is not the size the
sample index records are a ``CorruptSampleError`` naming the shard and the sample's key, which
the caller replaces or raises (``Corruptions``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from ..dataset.formats import shard_format
from ..errors import ConfigError, CorruptSampleError, ShardFormatError
from .plan import SampleTable, ShardFiles
from .sample_jpeg import SampleJpegError, check_header, decode_sample
from .targets import detection_target

log = logging.getLogger(__name__)


class SampleReader:
    """Reads sample ``index`` of ``table``: its JPEG bytes and label in one ``pread``, and its
    metadata (``KEY.json``, or what a TFRecord's features hold of it) in the same read when
    asked; the table's format takes the parts out of the bytes read.  Each process opens the
    shards anew (``ShardFiles`` is not shared across a fork or a pickle)."""

    def __init__(self, table: SampleTable, classes: int, object_classes: int = 0,
                 largest: tuple[int, int] | None = None):
        self.table, self.classes, self.object_classes = table, classes, object_classes
        self.largest = largest  # no JPEG header may say more (12 GB from 16x16 pixels)
        self.with_masks = bool(len(table) and (table.mask_offset >= 0).any())
        self.fmt = shard_format(table.format)
        self.files = ShardFiles(table)

    def read(self, index: int) -> tuple[memoryview, int]:
        """The JPEG bytes and label of sample ``index``: one read covering both."""
        jpeg, label, _ = self._parts(index, False)
        return jpeg, label

    def read_meta(self, index: int) -> tuple[memoryview, int, Any]:
        """The JPEG bytes, label and metadata (``KEY.json``) of sample ``index``: one read."""
        return self._parts(index, True)

    def metadata(self, index: int) -> Any:
        """Sample ``index``'s metadata alone: a read of its metadata span, which is a tar's
        ``KEY.json`` without the image before it (what a pass over every sample's labels
        reads), a TFRecord's whole record."""
        table = self.table
        offset = int(table.meta_offset[index])
        if offset < 0:
            raise self.named(index, "has no .json")
        try:
            data = self.files.read(int(table.shard[index]), offset, int(table.meta_size[index]))
            return self.fmt.sample_metadata(memoryview(data), table.key(index) or "")
        except (OSError, ShardFormatError, ValueError, RecursionError) as exc:
            raise self.named(index, f"unreadable ({exc})") from None

    def _parts(self, index: int, with_meta: bool) -> tuple[Any, int, Any]:
        table = self.table
        shard, start = int(table.shard[index]), int(table.image_offset[index])
        spans = ((0, int(table.image_size[index])),
                 (int(table.label_offset[index]) - start, int(table.label_size[index])),
                 (int(table.meta_offset[index]) - start, int(table.meta_size[index])))
        if with_meta and int(table.meta_offset[index]) < 0:
            raise self.named(index, "has no .json")
        end = sum(spans[2 if with_meta else 1])
        try:
            data = memoryview(self.files.read(shard, start, end))
            jpeg, label, meta = self.fmt.sample_parts(data, spans, table.key(index) or "",
                                                      with_meta)
            self.check_label(label)
        except (OSError, ShardFormatError, ValueError, RecursionError) as exc:
            raise self.named(index, f"unreadable ({exc})") from None
        return jpeg, label, meta

    def check_label(self, label: int) -> None:
        """A label is a class index (or -1, unlabelled); anything else would index past a
        model's outputs, so it is a corrupt sample."""
        if not -1 <= label < self.classes:
            raise ShardFormatError(f"label {label} is not one of the {self.classes} classes")

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
        return f"{Path(table.paths[shard]).name}: sample {table.key(index) or '?'}"

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
