"""Shard formats behind one small writer interface.

A writer is opened on a final path, takes samples with ``add``, and on ``close`` publishes the
shard (and its companion files, e.g. a TFRecord index) atomically and returns a ``ShardInfo``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..imaging import Sample



class ShardFormatError(Exception):
    """A shard whose bytes do not parse as its format (truncated, bad CRC, bad member)."""


@dataclass(frozen=True)
class FileInfo:
    """A published file, as the manifest records it (name relative to the dataset root)."""

    name: str
    bytes: int
    sha256: str


@dataclass(frozen=True)
class ShardInfo:
    """A finished shard: its file, its split, how many samples, and companion files."""

    name: str
    split: str
    samples: int
    bytes: int
    sha256: str
    index: FileInfo | None = None


class ShardWriter(Protocol):
    samples: int
    bytes_written: int

    def add(self, sample: Sample) -> None: ...

    def record_size(self, sample: Sample) -> int: ...

    def copy_from(self, shard: Path, keep: set[str] | None = None) -> int: ...

    def close(self) -> ShardInfo: ...

    def discard(self) -> None: ...


def shard_extension(fmt: str) -> str:
    return {"webdataset": ".tar", "tfrecord": ".tfrecord"}[fmt]


def open_writer(
    fmt: str, directory: Path, name: str, split: str, classes: tuple[str, ...]
) -> ShardWriter:
    """Open a writer for ``directory/name`` in format ``fmt`` (webdataset or tfrecord)."""
    if fmt == "webdataset":
        from .webdataset import TarShardWriter

        return TarShardWriter(directory, name, split, classes)
    if fmt == "tfrecord":
        from .tfrecord import TFRecordShardWriter

        return TFRecordShardWriter(directory, name, split, classes)
    raise ValueError(f"unknown shard format {fmt!r}")


def class_name(classes: tuple[str, ...], label: int) -> str:
    return classes[label] if 0 <= label < len(classes) else ""


def sample_metadata(sample: Sample, class_name: str) -> dict:
    """The per-sample metadata stored next to the image (WebDataset ``KEY.json``)."""
    return {
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
