"""What every shard format shares: records, their members and places, the format protocol, how a
shard is opened, and the metadata stored beside each image."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ...door import OpenFile, Refused, open_file, read_file
from ...errors import ManifestError, ShardFormatError
from ...storage import StoreError
from ...text import shown

if TYPE_CHECKING:
    from ...annotations.model import ObjectClasses
    from ..entries import ShardEntry
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


# Where a sample lies in its shard, as a reader's sample table holds it: (offset, size) of
# its image, label, metadata and class mask (-1, 0 without one).  A tar member each in a
# WebDataset shard; in a TFRecord shard the whole record for each, since all are in it.
Row = tuple[int, int, int, int, int, int, int, int]
Span = tuple[int, int]


class ShardFormat(Protocol):
    name: str
    extension: str
    keys_in_shard: bool  # its index holds no keys: a reader holds the shards' to the sample index
    shard_lists: tuple[str, ...]  # the extensions of a split's shard lists, ``txt`` first
    index_required: bool  # a manifest naming a shard without its index is refused
    label_map: bool  # a dataset with objects has ``label_map.pbtxt`` beside its manifest

    def sample_rows(self, directory: Path, shard: ShardEntry,
                    has_masks: bool) -> list[tuple[Row, str]]:
        """(row, key) of each sample of ``shard``, from its index (checked against the
        manifest); what a reader plans its epochs from."""
        ...

    def check_first(self, handle: OpenFile, offset: int, key: str) -> None:
        """ShardFormatError unless the shard ``handle`` holds sample ``key`` at ``offset``
        (its first sample's row): a shard swapped for another is refused, not served."""
        ...

    def sample_metadata(self, data: memoryview, key: str) -> Any:
        """The metadata of sample ``key`` from ``data``, the bytes of its row's metadata span
        (a tar's ``KEY.json`` alone; a TFRecord's whole record, checked as ``sample_parts``
        checks it); ShardFormatError, ValueError when it does not read."""
        ...

    def sample_parts(self, data: memoryview, spans: tuple[Span, Span, Span], key: str,
                     with_meta: bool) -> tuple[Any, int, Any]:
        """(JPEG bytes, label, metadata or None) of sample ``key`` from ``data``, the bytes
        of its row's image through its label (``with_meta``: through its metadata) with the
        three spans relative to them; ShardFormatError, ValueError when they do not read."""
        ...

    def encode(self, sample: Sample, classes: tuple[str, ...],
               object_classes: ObjectClasses | None = None) -> Record: ...

    def records(self, path: Path, size: int) -> Iterator[tuple[int, Record]]: ...

    def jpeg(self, record: Record) -> bytes: ...

    def with_split(self, record: Record, split: str) -> Record:
        """``record`` as ``encode`` makes it for the same sample in ``split``: a sample moved
        to another split (``splits.near_duplicates``) is copied, not encoded again."""
        ...

    def label(self, record: Record) -> int: ...

    def metadata(self, record: Record) -> dict:
        """The sample's metadata as ``sample_metadata`` makes it (WebDataset's ``KEY.json``),
        checked; raises ShardFormatError when the record's is malformed."""
        ...

    def mask_png(self, record: Record) -> bytes | None:
        """The sample's class mask PNG, None when it has none."""
        ...

    def dali_samples(self, paths: list[str], indexes: list[str], **options: Any) -> tuple:
        """(JPEGs, labels) as DALI's own reader of the format gives them, with ``options``
        (nvidia.dali imported here: only a DALI pipeline calls this)."""
        ...

    def record_problems(self, record: Record, size: tuple[int, int] | None,
                        object_classes: int) -> list[str]:
        """What a consumer's own parser of the format trips on in ``record`` beyond its JPEG
        and metadata (``verify --decode``), a phrase each; ``size`` is the sample's (width,
        height) in the sample index."""
        ...

    def trailer(self, size: int) -> bytes: ...

    def index_header(self, count: int) -> bytes: ...

    def index_line(self, placed: Placed) -> bytes: ...


def checked_index(directory: Path, shard: ShardEntry) -> bytes:
    """The per-record index of ``shard``, read through the door and held to the manifest's
    size and sha256; ManifestError otherwise."""
    entry = shard.index
    try:
        data = read_file(directory / entry.name, entry.bytes)
    except Refused as exc:
        raise ManifestError(f"{entry.name}: the index is {exc.detail} (the manifest says "
                            f"{entry.bytes:,} bytes); `shardsmith stage` or `pack` repairs "
                            "it") from None
    except StoreError:
        raise  # the store failed, not the index: exit 1 (docs/storage.md)
    except OSError as exc:
        raise ManifestError(f"{entry.name}: cannot read the index: {exc.strerror}") from None
    if len(data) != entry.bytes or hashlib.sha256(data).hexdigest() != entry.sha256:
        raise ManifestError(f"{entry.name}: the index differs from the manifest (size or "
                            "sha256); `shardsmith stage` or `pack` repairs it")
    return data


def not_the_shard(handle: OpenFile, found: str, key: str) -> ShardFormatError:
    """The error of a shard whose first sample is not the one its index names."""
    return ShardFormatError(
        f"{os.path.basename(handle.path)}: holds {shown(found) if found else 'no member'} "
        f"where its index has {shown(key)}: not the shard the index describes (a shard "
        "of another split or version copied over it?)")


def index_bytes(fmt: ShardFormat, placed: list[Placed]) -> bytes:
    """The whole per-record index of a shard holding ``placed``."""
    return fmt.index_header(len(placed)) + b"".join(fmt.index_line(p) for p in placed)


def class_name(classes: tuple[str, ...], label: int) -> str:
    return classes[label] if 0 <= label < len(classes) else ""


def sample_metadata(sample: Sample, class_name: str,
                    object_classes: ObjectClasses | None = None) -> dict:
    """The per-sample metadata stored next to the image (WebDataset ``KEY.json``): with
    annotations, also the objects (``boxes`` x0, y0, x1, y1 in the sample's pixels, ``labels``
    as object class ids, ``label_names``, ``polygons`` as flat x, y rings, ``rle`` the instance
    masks as uncompressed COCO RLE or null; ``objects_cut`` the objects min_visible dropped,
    each a ``label``, ``label_name``, clipped ``box`` and, with pixels, ``rle``: only when
    there are any), and for a tile where it lies in its original."""
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
        if objects.cut:
            metadata["objects_cut"] = [
                {"label": object_classes.id(item.name), "label_name": item.name,
                 "box": list(item.box)}
                | ({} if item.rle is None else {"rle": {"size": [sample.height, sample.width],
                                                        "counts": list(item.rle)}})
                for item in objects.cut]
    if sample.tile is not None:
        metadata["tile"] = sample.tile
    return metadata
