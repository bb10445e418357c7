"""WebDataset shards: plain POSIX tar, members ``KEY.jpg``, ``KEY.cls``, ``KEY.json`` and, with
mask annotations, ``KEY.mask.png`` (the class mask, lossless).

Headers are built with the standard library's ``tarfile`` (``import webdataset`` would pull in
torch where it is installed) with fixed fields, so equal input gives equal bytes.  Beside each
tar goes the index DALI's ``wds2idx`` writes (see ``index``), which also gives shardsmith's
own reader every sample's offsets.
"""

from __future__ import annotations

import json
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from ...errors import ShardFormatError
from .base import Member, Placed, Record, class_name, open_shard, sample_metadata
from .metadata import checked_metadata

if TYPE_CHECKING:
    from ...annotations.model import ObjectClasses
    from ..records import Sample

BLOCK = tarfile.BLOCKSIZE
RECORD_SIZE = tarfile.RECORDSIZE
MEMBER_EXTENSIONS = ("jpg", "cls", "json")  # every sample has these, in this order
OPTIONAL_EXTENSIONS = ("mask.png",)  # after them, when the sample has one
INDEX_VERSION = "v1.2"


def _padded(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def member_header(name: str, size: int) -> bytes:
    """A USTAR header with fixed owner, mode and mtime (deterministic bytes)."""
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "surrogateescape")


def check_member_name(name: str) -> tuple[str, str]:
    """(key, extension) of a member name; raises ShardFormatError for names that could escape a
    directory when extracted or that are not ``KEY.EXT``."""
    if "/" in name or "\\" in name or name.startswith(".") or ".." in name or "." not in name:
        raise ShardFormatError(f"unsafe or foreign member name {name!r}")
    key, extension = name.split(".", 1)
    return key, extension


class WebDatasetFormat:
    name = "webdataset"
    extension = ".tar"

    def encode(self, sample: Sample, classes: tuple[str, ...],
               object_classes: ObjectClasses | None = None) -> Record:
        metadata = sample_metadata(sample, class_name(classes, sample.label), object_classes)
        payloads = {
            "jpg": sample.jpeg,
            "cls": str(sample.label).encode("ascii"),
            "json": json.dumps(metadata, sort_keys=True, separators=(",", ":")).encode(),
        }
        if sample.objects is not None and sample.objects.mask_png is not None:
            payloads["mask.png"] = sample.objects.mask_png
        return _record(sample.key, payloads)

    def records(self, path: Path, size: int) -> Iterator[tuple[int, Record]]:
        """(offset, sample) of each sample of a tar, as raw bytes (headers and padded data)."""
        with open_shard(path) as shard, os.fdopen(os.dup(shard.fd), "rb") as handle:
            for key, members in _members(handle, min(size, shard.size)):
                start = members[0].header
                end = members[-1].data + _padded(members[-1].size)
                data = os.pread(shard.fd, end - start, start)
                if len(data) != end - start:
                    raise ShardFormatError(f"sample {key} is cut short")
                yield start, Record(key, data, tuple(
                    Member(m.extension, m.header - start, m.data - start, m.size)
                    for m in members))

    def label(self, record: Record) -> int:
        """The integer label (``KEY.cls``) of a record as ``records`` yields it."""
        data = _member(record, "cls")
        if data is None:
            raise ShardFormatError(f"sample {record.key} has no .cls")
        return parse_label(data)

    def jpeg(self, record: Record) -> bytes:
        """The image bytes of a record as ``records`` yields it."""
        data = _member(record, "jpg")
        if data is None:
            raise ShardFormatError(f"sample {record.key} has no .jpg")
        return data

    def metadata(self, record: Record) -> dict:
        """The sample's metadata (``KEY.json``), parsed and checked: ShardFormatError naming
        the sample when it is not JSON or not the metadata shardsmith writes."""
        data = _member(record, "json")
        if data is None:
            raise ShardFormatError(f"sample {record.key} has no .json")
        try:
            meta = json.loads(data)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise ShardFormatError(f"sample {record.key}: its .json does not parse "
                                   f"({str(exc)[:80]})") from None
        return checked_metadata(meta, record.key)

    def mask_png(self, record: Record) -> bytes | None:
        """The class mask PNG (``KEY.mask.png``), None without one."""
        return _member(record, "mask.png")

    def trailer(self, size: int) -> bytes:
        """Two zero blocks, then zeros to a whole tar record, as ``tarfile`` ends an archive."""
        end = size + 2 * BLOCK
        return bytes(2 * BLOCK + (-end % RECORD_SIZE))

    def index_header(self, count: int) -> bytes:
        """DALI's ``wds2idx`` index: ``v1.2 SAMPLES``, then a line per sample holding
        ``EXT OFFSET SIZE NAME`` for each member, OFFSET being where its data starts."""
        return f"{INDEX_VERSION} {count}\n".encode("ascii")

    def index_line(self, placed: Placed) -> bytes:
        return (" ".join(f"{m.extension} {placed.offset + m.data} {m.size} "
                         f"{placed.key}.{m.extension}" for m in placed.members)
                + "\n").encode("ascii")


def _member(record: Record, extension: str) -> bytes | None:
    for member in record.members:
        if member.extension == extension:
            return record.data[member.data : member.data + member.size]
    return None


def _record(key: str, payloads: dict[str, bytes]) -> Record:
    parts, members, position = [], [], 0
    for extension in MEMBER_EXTENSIONS + tuple(e for e in OPTIONAL_EXTENSIONS if e in payloads):
        payload = payloads[extension]
        header = member_header(f"{key}.{extension}", len(payload))
        parts += [header, payload, bytes(_padded(len(payload)) - len(payload))]
        members.append(Member(extension, position, position + BLOCK, len(payload)))
        position += BLOCK + _padded(len(payload))
    return Record(key, b"".join(parts), tuple(members))


def iter_members(path: Path, size: int | None = None) -> Iterator[tuple[str, list[Member]]]:
    """Per sample: (key, its members with absolute offsets), checking every member.

    The tar is opened through the door (no link, no FIFO).  Raises ShardFormatError for
    truncation, unsafe or foreign names, non-regular members and incomplete samples.
    """
    with open_shard(path) as shard, os.fdopen(os.dup(shard.fd), "rb") as handle:
        yield from _members(handle, shard.size if size is None else min(size, shard.size))


def _members(handle: BinaryIO, size: int) -> Iterator[tuple[str, list[Member]]]:
    try:
        with tarfile.open(fileobj=handle, mode="r:") as tar:
            key, members = None, []
            for info in tar:
                if not info.isfile():
                    raise ShardFormatError(f"member {info.name!r} is not a regular file")
                member_key, extension = check_member_name(info.name)
                if info.offset_data + info.size > size:
                    raise ShardFormatError(f"member {info.name} is cut short (truncated file)")
                if member_key != key:
                    if key is not None:
                        yield key, _complete(key, members)
                    key, members = member_key, []
                members.append(Member(extension, info.offset, info.offset_data, info.size))
            if key is not None:
                yield key, _complete(key, members)
    except (tarfile.TarError, EOFError) as exc:
        raise ShardFormatError(f"unreadable tar: {exc}") from None


MAX_LABEL_DIGITS = 18  # fits int64 with room: a label is a class index, a few digits at most


def parse_label(data: bytes | memoryview) -> int:
    """The integer of a ``.cls`` member: an optional minus and at most 18 digits; anything
    else (a 30-digit number, text) raises ShardFormatError."""
    text = bytes(data).strip()
    digits = text[1:] if text.startswith(b"-") else text
    if not digits.isdigit() or len(digits) > MAX_LABEL_DIGITS:
        raise ShardFormatError(f"label {bytes(data[:24])!r} is not a small integer")
    return int(text)


def _complete(key: str, members: list[Member]) -> list[Member]:
    missing = [ext for ext in MEMBER_EXTENSIONS if ext not in {m.extension for m in members}]
    if missing:
        raise ShardFormatError(f"sample {key} lacks {', '.join('.' + m for m in missing)}")
    return members
