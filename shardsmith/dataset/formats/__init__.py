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
from dataclasses import dataclass, replace
from pathlib import Path

from ...atomic import HashingFile, tmp_path_for
from ..entries import FileEntry, ShardEntry, index_name, shard_name
from .base import (  # the names every format shares, importable from the package too
    SHARD_CAP,
    Member,
    Placed,
    Record,
    ShardFormat,
    class_name,
    index_bytes,
    open_shard,
    sample_metadata,
)
from .tfrecord import TFRecordFormat
from .webdataset import WebDatasetFormat

__all__ = ["FORMATS", "SHARD_CAP", "Member", "Placed", "Record", "ShardFormat", "ShardLimits",
           "ShardRoller", "ShardWriter", "class_name", "index_bytes", "open_shard",
           "sample_metadata", "shard_format", "write_index"]


# Every shard format, by the name the config and the manifest give it (``config.FORMATS``).
FORMATS: dict[str, type[ShardFormat]] = {fmt.name: fmt for fmt in (WebDatasetFormat,
                                                                   TFRecordFormat)}


def shard_format(name: str) -> ShardFormat:
    """The format called ``name`` in the config and manifest (a new object: a format keeps
    what it parsed last)."""
    return FORMATS[name]()


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
        """Remove the shard's temporary file and its index's, by name: an interrupt may land
        after the index's file is created and before ``close`` holds it."""
        self._file.discard()
        tmp_path_for(self._file.final.with_name(index_name(self.name))).unlink(missing_ok=True)
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
            name = shard_name(split, self.numbers[split], self.fmt.extension)
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
