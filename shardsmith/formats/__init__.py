"""Shard formats and the one writer that rolls samples into shards.

A format turns a sample into a ``Record`` (its exact bytes in the shard, encoded before any
roll-over decision), reads records of an existing shard back as raw bytes (for copying into a
rewritten or merged shard without re-encoding), and knows its file's trailer and the per-record
index written beside every shard.  ``ShardRoller`` is the only place that decides when a shard
is full: pack, increments and compaction all append records through it.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from ..atomic import HashingFile
from ..door import OpenFile, Refused, open_file
from ..errors import ShardFormatError
from ..manifest import FORMATS, FileEntry, ShardEntry, index_name, shard_name

if TYPE_CHECKING:
    from ..annotations.model import ObjectClasses
    from ..records import Sample


# Shards have no cap of their own kind: every read of one is bounded by the size the manifest
# gives it (and the size ``fstat`` gives), never by what the file claims inside.
SHARD_CAP = 1 << 62


def open_shard(path: str | Path) -> OpenFile:
    """Open a shard through the door (no link, no FIFO or device); a refusal is a
    ShardFormatError, a missing file an OSError."""
    try:
        return open_file(path, SHARD_CAP)
    except Refused as exc:
        raise ShardFormatError(exc.detail) from None


@dataclass(frozen=True, slots=True)
class Member:
    """A file inside a record: extension, offset of its header and of its data, data size."""

    extension: str
    header: int
    data: int
    size: int


@dataclass(frozen=True, slots=True)
class Record:
    """One sample as bytes in a shard; member offsets are relative to the record's start."""

    key: str
    data: bytes
    members: tuple[Member, ...] = ()


@dataclass(frozen=True, slots=True)
class Placed:
    """Where a record went in its shard: what the per-record index is made of."""

    offset: int
    size: int
    key: str
    members: tuple[Member, ...]


class ShardFormat(Protocol):
    name: str
    extension: str

    def encode(self, sample: Sample, classes: tuple[str, ...],
               object_classes: ObjectClasses | None = None) -> Record: ...

    def records(self, path: Path, size: int) -> Iterator[tuple[int, Record]]: ...

    def jpeg(self, record: Record) -> bytes: ...

    def label(self, record: Record) -> int: ...

    def trailer(self, size: int) -> bytes: ...

    def index_header(self, count: int) -> bytes: ...

    def index_line(self, placed: Placed) -> bytes: ...


def index_bytes(fmt: ShardFormat, placed: list[Placed]) -> bytes:
    """The whole per-record index of a shard holding ``placed``."""
    return fmt.index_header(len(placed)) + b"".join(fmt.index_line(p) for p in placed)


def shard_format(name: str) -> ShardFormat:
    """The format called ``name`` in the config and manifest (webdataset or tfrecord)."""
    if name == "webdataset":
        from .webdataset import WebDatasetFormat

        return WebDatasetFormat()
    if name == "tfrecord":
        from .tfrecord import TFRecordFormat

        return TFRecordFormat()
    raise ValueError(f"unknown shard format {name!r}")


def write_index(fmt: ShardFormat, directory: Path, shard: ShardEntry) -> ShardEntry:
    """Write the per-record index of an existing shard (one packed before indexes existed)."""
    placed = [Placed(offset, len(record.data), record.key, record.members)
              for offset, record in fmt.records(directory / shard.name, shard.bytes)]
    index = HashingFile(directory / index_name(shard.name))
    try:
        index.write(index_bytes(fmt, placed))
        sha256 = index.publish()
    except BaseException:
        index.discard()
        raise
    return replace(shard, index=FileEntry(index.final.name, index.bytes_written, sha256))


class ShardWriter:
    """One shard being written under a temporary name; ``close`` publishes it and its index.

    The index lines wait in an unnamed temporary file, not in memory: a shard of tiny samples
    holds a hundred thousand of them.
    """

    def __init__(self, fmt: ShardFormat, directory: Path, name: str, split: str):
        self.fmt, self.name, self.split = fmt, name, split
        self._file = HashingFile(directory / name)
        self._index_lines = tempfile.TemporaryFile()
        self.samples = 0

    def size_with(self, record: Record) -> int:
        """The size of the finished shard if ``record`` were the last one added."""
        size = self._file.bytes_written + len(record.data)
        return size + len(self.fmt.trailer(size))

    def append(self, record: Record) -> None:
        placed = Placed(self._file.bytes_written, len(record.data), record.key, record.members)
        self._file.write(record.data)
        self._index_lines.write(self.fmt.index_line(placed))
        self.samples += 1

    def close(self) -> ShardEntry:
        self._file.write(self.fmt.trailer(self._file.bytes_written))
        index = HashingFile(self._file.final.with_name(index_name(self.name)))
        try:
            index.write(self.fmt.index_header(self.samples))
            self._index_lines.seek(0)
            while chunk := self._index_lines.read(1 << 20):
                index.write(chunk)
            index_sha256 = index.publish()
        except BaseException:
            index.discard()
            raise
        sha256 = self._file.publish()  # the shard last: its name means "complete"
        self._index_lines.close()
        return ShardEntry(self.name, self.split, self.samples, self._file.bytes_written, sha256,
                          FileEntry(index_name(self.name), index.bytes_written, index_sha256))

    def discard(self) -> None:
        self._file.discard()
        self._index_lines.close()


@dataclass(frozen=True)
class ShardLimits:
    """When a shard is full: a byte target it never passes (unless one sample is larger), or
    a sample count."""

    bytes: int
    samples: int | None = None


class ShardRoller:
    """Appends records to the open shard of their split, starting a new one when it is full.

    The decision uses the record's real encoded size and the trailer it leaves, so a shard
    never grows past ``limits.bytes`` unless a single sample is larger than that.  Shard
    numbers come from ``numbers`` (next number per split), which only grows.
    """

    def __init__(self, fmt: ShardFormat, directory: Path, limits: ShardLimits,
                 numbers: Counter):
        self.fmt, self.directory, self.limits, self.numbers = fmt, directory, limits, numbers
        self.closed: list[ShardEntry] = []
        self._writer: ShardWriter | None = None

    def add(self, split: str, record: Record) -> tuple[str, ShardEntry | None]:
        """Append ``record``; returns its shard's name and the shard closed to make room."""
        closed = None
        if self._writer is not None and (self._writer.split != split or self._full(record)):
            closed = self.close()
        if self._writer is None:
            name = shard_name(split, self.numbers[split], FORMATS[self.fmt.name])
            self.numbers[split] += 1
            self._writer = ShardWriter(self.fmt, self.directory, name, split)
        self._writer.append(record)
        return self._writer.name, closed

    def _full(self, record: Record) -> bool:
        if self.limits.samples is not None:
            return self._writer.samples >= self.limits.samples
        return self._writer.size_with(record) > self.limits.bytes

    def close(self) -> ShardEntry | None:
        """Publish the open shard, if any; returns it."""
        writer, self._writer = self._writer, None
        if writer is None:
            return None
        try:
            entry = writer.close()
        except BaseException:
            writer.discard()
            raise
        self.closed.append(entry)
        return entry

    def discard(self) -> None:
        """Drop the open shard (an error or interrupt): nothing appears under its name."""
        if self._writer is not None:
            self._writer.discard()
            self._writer = None


def class_name(classes: tuple[str, ...], label: int) -> str:
    return classes[label] if 0 <= label < len(classes) else ""


def sample_metadata(sample: Sample, class_name: str,
                    object_classes: ObjectClasses | None = None) -> dict:
    """The per-sample metadata stored next to the image (WebDataset ``KEY.json``): with
    annotations, also the objects (``boxes`` x0, y0, x1, y1 in the sample's pixels, ``labels``
    as object class ids, ``label_names``, ``polygons`` as flat x, y rings, ``rle`` the instance
    masks as uncompressed COCO RLE or null), and for a tile where it lies in its original."""
    metadata = {
        "path": sample.relpath,
        "label": sample.label,
        "class": class_name,
        "split": sample.split,
        "width": sample.width,
        "height": sample.height,
        "channels": sample.channels,
        "original": {
            "width": sample.original_width,
            "height": sample.original_height,
            "mode": sample.original_mode,
            "format": sample.original_format,
            "bytes": sample.source_size,
        },
    }
    objects = sample.objects
    if objects is not None and object_classes is not None:
        metadata.update(
            boxes=[list(box) for box in objects.boxes],
            labels=[object_classes.id(name) for name in objects.names],
            label_names=list(objects.names),
            polygons=[[list(ring) for ring in rings] for rings in objects.polygons],
            rle=[None if counts is None else {"size": [sample.height, sample.width],
                                              "counts": list(counts)}
                 for counts in objects.rles],
        )
        if objects.mask_png is not None:
            metadata["mask"] = "mask.png"
    if sample.tile is not None:
        metadata["tile"] = sample.tile
    return metadata
