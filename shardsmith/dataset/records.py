"""What the image path hands to the writer, and how the content of an original is fingerprinted.

Nothing here imports an image library: the driver compares digests without loading OpenCV.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import xxhash

from ..annotations.model import Objects

EDGE_BYTES = 64 * 1024
CONTENT_PREFIX = "xxh3:"


@dataclass(frozen=True, slots=True)
class Sample:
    """A packed sample: the encoded JPEG and everything the shard metadata records."""

    key: str
    relpath: str
    split: str
    label: int
    jpeg: bytes
    width: int
    height: int
    channels: int
    original_width: int
    original_height: int
    original_mode: str
    original_format: str
    source_size: int
    source_mtime_ns: int
    source_digest: str
    objects: Objects | None = None  # with box, polygon or mask annotations
    tile: dict[str, Any] | None = None  # where a tile lies in its original (image.tiles)
    annotation_digest: str | None = None  # of the annotations the sample was made from


@dataclass(frozen=True, slots=True)
class Reject:
    """A source file that could not become a sample, and why (``reason`` is a short code)."""

    relpath: str
    reason: str
    detail: str


@dataclass(frozen=True, slots=True)
class Rederived:
    """An original whose objects and masks were derived again while its pixels stay as
    packed: each of ``samples`` has no JPEG yet (``jpeg`` empty, ``channels`` 0); the writer
    copies its JPEG bytes from the sample of the same key in the previous version's shard
    named in ``shards`` (one a sample)."""

    samples: tuple[Sample, ...]
    shards: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Unchanged:
    """A source whose stat changed but whose bytes did not: nothing to decode."""

    relpath: str
    source_digest: str
    source_size: int
    source_mtime_ns: int


def content_digest(data: bytes) -> str:
    """XXH3-128 of every byte: ~20 GB/s on one core, so it costs nothing next to decoding."""
    return CONTENT_PREFIX + xxhash.xxh3_128_hexdigest(data)


def edges_digest(data: bytes) -> str:
    """The size and the first and last 64 KiB (sha256): reads 128 KiB instead of the whole file.

    It misses an edit in the middle of an uncompressed image of the same size; it exists for
    NAS trees where reading every touched file again costs too much (``run.change_detection``).
    """
    tail_start = max(EDGE_BYTES, len(data) - EDGE_BYTES)
    tail = data[tail_start : tail_start + EDGE_BYTES] if len(data) > EDGE_BYTES else b""
    return edges_digest_of(len(data), data[:EDGE_BYTES], tail)


def edges_digest_of(size: int, head: bytes, tail: bytes) -> str:
    """``edges_digest`` from the parts ``originals.read_edges`` reads."""
    digest = hashlib.sha256(str(size).encode())
    digest.update(head)
    digest.update(tail)
    return digest.hexdigest()[:32]


def digest_as(kind_of: str, data: bytes) -> str:
    """The digest of ``data`` of the same kind as the stored digest ``kind_of``."""
    return content_digest(data) if kind_of.startswith(CONTENT_PREFIX) else edges_digest(data)
