"""WebDataset shards: plain POSIX tar, members ``KEY.jpg``, ``KEY.cls``, ``KEY.json`` and, with
mask annotations, ``KEY.mask.png`` (the class mask, lossless).

Headers are built with the standard library's ``tarfile`` (``import webdataset`` would pull in
torch where it is installed) with fixed fields, so equal input gives equal bytes.  Beside each
tar goes the index DALI's ``wds2idx`` writes (see ``index``), which also gives shardsmith's
own reader every sample's offsets.
"""

from __future__ import annotations

import json
import logging
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...config import FORMATS
from ...door import chunks
from ...errors import ManifestError, ShardFormatError
from .base import (
    Member,
    Placed,
    Record,
    Row,
    Span,
    checked_index,
    class_name,
    not_the_shard,
    open_shard,
    sample_metadata,
)
from .metadata import checked_metadata

if TYPE_CHECKING:
    from ...annotations.model import ObjectClasses
    from ...door import OpenFile
    from ..entries import ShardEntry
    from ..records import Sample

log = logging.getLogger(__name__)

BLOCK = tarfile.BLOCKSIZE
RECORD_SIZE = tarfile.RECORDSIZE
MEMBER_EXTENSIONS = ("jpg", "cls", "json")  # every sample has these, in this order
OPTIONAL_EXTENSIONS = ("mask.png",)  # after them, when the sample has one
INDEX_VERSION = "v1.2"
MAGIC = b"ustar\0"  # a USTAR header's, as ``member_header`` writes it
ZERO = bytes(BLOCK)
REGULAR = (b"0", b"\0")


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
    extension = FORMATS[name]
    keys_in_shard = False
    shard_lists = ("txt", "json")  # and the index webdataset's ``wids`` reads
    index_required = False  # shards packed before indexes existed have none
    label_map = False

    def dali_samples(self, paths: list[str], indexes: list[str], **options: Any) -> tuple:
        """(JPEGs, labels) from DALI's own reader of these shards (``readers.dali``)."""
        import nvidia.dali.fn as fn

        jpegs, labels = fn.readers.webdataset(paths=paths, index_paths=indexes,
                                              ext=["jpg", "cls"],
                                              missing_component_behavior="error", **options)
        return jpegs, fn.pad(labels, fill_value=0)  # ASCII digits, dense for the batch

    def record_problems(self, record: Record, size: tuple[int, int] | None,
                        object_classes: int) -> list[str]:
        """None: a sample's members are its JPEG, label and metadata, each checked alone."""
        return []

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
        with open_shard(path) as shard:
            for key, members, data in _walk(shard, min(size, shard.size)):
                start = members[0].header
                yield start, Record(key, data, tuple(
                    Member(m.extension, m.header - start, m.data - start, m.size)
                    for m in members))

    def with_split(self, record: Record, split: str) -> Record:
        """The record with ``split`` in its ``KEY.json``, the other members as they are."""
        payloads = {member.extension: _member(record, member.extension)
                    for member in record.members}
        metadata = self.metadata(record)
        metadata["split"] = split
        payloads["json"] = json.dumps(metadata, sort_keys=True, separators=(",", ":")).encode()
        return _record(record.key, payloads)

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

    def sample_rows(self, directory: Path, shard: ShardEntry,
                    has_masks: bool) -> list[tuple[Row, str]]:
        """(row, key) of each sample: from the ``wds2idx`` index, each line checked (one that
        could escape a directory or leaves the shard is skipped with a warning naming it), or,
        for a tar packed before indexes existed, from its headers."""
        if shard.index is None:
            return _scan_rows(directory / shard.name, shard)
        data = checked_index(directory, shard)
        lines = data.decode("ascii", "replace").splitlines()
        header = lines[0].split() if lines else []
        if len(header) != 2 or header[0] != INDEX_VERSION or not header[1].isdigit() \
                or int(header[1]) != len(lines) - 1:
            raise ManifestError(f"{shard.index.name}: not a {INDEX_VERSION} index of "
                                f"{len(lines) - 1} samples")
        rows = []
        for number, line in enumerate(lines[1:], 2):
            try:
                rows.append(_members_row(line.split(), shard.bytes))
            except (ValueError, ShardFormatError) as exc:
                log.warning("%s line %d: skipped (%s)", shard.index.name, number, exc)
        return rows

    def check_first(self, handle: OpenFile, offset: int, key: str) -> None:
        """The tar header before ``offset`` names ``KEY.jpg``."""
        header = os.pread(handle.fd, BLOCK, offset - BLOCK) if offset >= BLOCK else b""
        found = _header_name(header) if len(header) == BLOCK else ""
        if found != f"{key}.jpg":
            raise not_the_shard(handle, found, f"{key}.jpg")

    def sample_metadata(self, data: memoryview, key: str) -> Any:
        """``KEY.json``, parsed."""
        return json.loads(bytes(data))

    def sample_parts(self, data: memoryview, spans: tuple[Span, Span, Span], key: str,
                     with_meta: bool) -> tuple[Any, int, Any]:
        """The members ``KEY.jpg``, ``KEY.cls`` and (``with_meta``) ``KEY.json``, parsed."""
        (image_at, image_size), (label_at, label_size), (meta_at, meta_size) = spans
        label = parse_label(data[label_at : label_at + label_size])
        meta = json.loads(bytes(data[meta_at : meta_at + meta_size])) if with_meta else None
        return data[image_at : image_at + image_size], label, meta

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
    """Per sample: (key, its members with absolute offsets), checking every member (``_walk``).

    The tar is opened through the door (no link, no FIFO).
    """
    with open_shard(path) as shard:
        for key, members, _ in _walk(shard, shard.size if size is None
                                     else min(size, shard.size)):
            yield key, members


def _octal(field: bytes) -> int | None:
    text = field.split(b"\0", 1)[0].strip()
    # what is left once the octal digits are taken out: 1 us a field, 2.8 us a byte at a
    # time (timeit; six fields a sample, 60,000 in an export of 10,000 samples)
    if not text or text.translate(None, b"01234567"):
        return None
    return int(text, 8)


def _member_of(header: bytes, offset: int) -> tuple[str, int]:
    """(name, data size) of the plain USTAR header of a regular file at ``offset``, as our
    writer makes them; ShardFormatError for anything else."""
    checksum, size = _octal(header[148:156]), _octal(header[124:136])
    if header[257:263] != MAGIC or checksum is None or size is None \
            or checksum != sum(header) - sum(header[148:156]) + 8 * 32:
        raise ShardFormatError(f"unreadable tar: no USTAR header at byte {offset:,}")
    name = _header_name(header)
    if header[156:157] not in REGULAR:
        raise ShardFormatError(f"member {name!r} is not a regular file")
    if header[345:500].strip(b"\0"):  # a name prefix: a folder, or another writer's long name
        raise ShardFormatError(f"unsafe or foreign member name {name!r} (with a prefix)")
    return name, size


def _walk(shard: OpenFile, size: int) -> Iterator[tuple[str, list[Member], bytes]]:
    """(key, its members with absolute offsets, its bytes from its first header to its last
    member's padding) of each sample of the tar ``shard``'s first ``size`` bytes, checking
    every member.  Raises ShardFormatError for a header that does not read, a member that is
    not a regular file or has an unsafe or foreign name, one cut short, and a sample that is
    incomplete or in two runs.

    The tar is read once, in order, in ``door.chunks`` (a multiple of BLOCK: a header never
    straddles two), and a header is a slice of the bytes in hand (``tarfile`` builds an object
    a member and checks its fields in Python: 0.45 ms a sample, the largest cost of an export
    after creating its files)."""
    reads = chunks(shard, size)
    held, start = bytearray(), 0  # the bytes read and not yet given, from ``start`` on
    key, members, seen, offset = None, [], set(), 0
    while True:
        while offset + BLOCK > start + len(held) and (data := next(reads, b"")):
            held += data
        header = bytes(held[offset - start : offset - start + BLOCK])
        if header == ZERO or not header:  # the trailer, or the end of a tar without one
            break
        if len(header) < BLOCK:
            raise ShardFormatError(f"cut short in a header at byte {offset:,}")
        name, length = _member_of(header, offset)
        member_key, extension = check_member_name(name)
        if offset + BLOCK + length > size:
            raise ShardFormatError(f"member {name} is cut short (truncated file)")
        if member_key != key:
            if key is not None:
                yield key, _complete(key, members), bytes(held[: offset - start])
                del held[: offset - start]
                start = offset
            if member_key in seen:
                raise ShardFormatError(f"sample {member_key} is in two runs of members")
            key, members = member_key, []
            seen.add(key)
        members.append(Member(extension, offset, offset + BLOCK, length))
        offset += BLOCK + _padded(length)
    if key is None:  # our writer never writes a shard without a sample; tarfile refused 0 bytes
        raise ShardFormatError("unreadable tar: it holds no sample (empty, or zero blocks)")
    data = bytes(held[: offset - start])
    if len(data) != offset - start:
        raise ShardFormatError(f"sample {key} is cut short")
    yield key, _complete(key, members), data


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


def _members_row(fields: list[str], shard_bytes: int) -> tuple[Row, str]:
    """(offset, size) of image, label, metadata and mask of one index line: EXT OFFSET SIZE
    NAME ... (-1, 0 for a member the sample does not have), and the sample's key."""
    if len(fields) % 4:
        raise ValueError("fields do not come in fours")
    found, names = {}, {}
    for at in range(0, len(fields), 4):
        extension, offset, size, name = fields[at : at + 4]
        check_member_name(name)
        if not offset.isdigit() or not size.isdigit():
            raise ValueError(f"member {name}: offset and size are not whole numbers")
        offset, size = int(offset), int(size)
        if offset < BLOCK or offset + size > shard_bytes or offset % BLOCK:
            raise ValueError(f"member {name} lies outside the shard")
        found[extension], names[extension] = (offset, size), name
    if "jpg" not in found or "cls" not in found:
        raise ValueError("a sample without .jpg or .cls")
    if found["cls"][0] < found["jpg"][0]:
        raise ValueError(".cls before .jpg")
    return _row(found), names["jpg"].split(".", 1)[0]


def _row(found: dict[str, tuple[int, int]]) -> Row:
    absent = (-1, 0)
    return (*found["jpg"], *found["cls"], *found.get("json", absent),
            *found.get("mask.png", absent))


def _scan_rows(path: Path, shard: ShardEntry) -> list[tuple[Row, str]]:
    rows = []
    try:
        for key, members in iter_members(path, shard.bytes):
            rows.append((_row({member.extension: (member.data, member.size)
                               for member in members}), key))
    except (ShardFormatError, OSError) as exc:
        log.warning("%s: %s; its samples after that point are skipped", shard.name, exc)
    return rows


def _header_name(header: bytes) -> str:
    return header[:100].split(b"\0", 1)[0].decode("ascii", "replace")
