"""TFRecord shards of ``tf.train.Example`` records, written without TensorFlow.

The Example protobuf is simple enough to serialise by hand (a map of named byte or int64
lists), which keeps TensorFlow's import cost (seconds and hundreds of MB) out of the packing
processes.  Framing: uint64 length, masked CRC32C of the length, payload, masked CRC32C of the
payload.  Each shard ``X.tfrecord`` gets a DALI-compatible index ``X.idx``: one
``offset size`` line per record.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import crc32c

from ..atomic import HashingFile
from . import FileInfo, ShardFormatError, ShardInfo, class_name

if TYPE_CHECKING:
    from ..imaging import Sample

_MASK_DELTA = 0xA282EAD8


def masked_crc(data: bytes) -> int:
    """TFRecord's masked CRC32C."""
    crc = crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame_record(payload: bytes) -> bytes:
    """One TFRecord: length, its CRC, payload, payload CRC."""
    length = struct.pack("<Q", len(payload))
    length_crc = struct.pack("<I", masked_crc(length))
    return b"".join((length, length_crc, payload, struct.pack("<I", masked_crc(payload))))


def _varint(value: int) -> bytes:
    value &= 0xFFFFFFFFFFFFFFFF  # negative int64 → two's complement, as protobuf does
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def encode_example(features: dict[str, bytes | int]) -> bytes:
    """Serialise a ``tf.train.Example`` whose features are single bytes or int64 values."""
    entries = []
    for name in sorted(features):  # sorted: same features → same bytes
        value = features[name]
        if isinstance(value, bytes):
            feature = _field(1, _field(1, value))  # Feature.bytes_list{value}
        else:
            feature = _field(3, _field(1, _varint(value)))  # Feature.int64_list{packed value}
        entries.append(_field(1, _field(1, name.encode()) + _field(2, feature)))
    return _field(1, b"".join(entries))  # Example.features{feature map}


def example_features(sample: Sample, classes: tuple[str, ...]) -> dict[str, bytes | int]:
    """The common image-classification feature keys."""
    return {
        "image/encoded": sample.jpeg,
        "image/format": b"jpeg",
        "image/class/label": sample.label,
        "image/class/text": class_name(classes, sample.label).encode(),
        "image/height": sample.height,
        "image/width": sample.width,
        "image/channels": sample.channels,
        "image/filename": sample.relpath.encode(),
        "image/key": sample.key.encode(),
    }


def iter_records(path: Path) -> Iterator[tuple[int, bytes]]:
    """Yield (offset, payload) of each record, checking both CRCs; raises ShardFormatError."""
    with open(path, "rb") as handle:
        offset = 0
        while True:
            header = handle.read(12)
            if not header:
                return
            if len(header) < 12:
                raise ShardFormatError(f"truncated record header at byte {offset}")
            length_bytes = header[:8]
            if struct.unpack("<I", header[8:])[0] != masked_crc(length_bytes):
                raise ShardFormatError(f"bad length CRC at byte {offset}")
            (length,) = struct.unpack("<Q", length_bytes)
            payload = handle.read(length)
            footer = handle.read(4)
            if len(payload) < length or len(footer) < 4:
                raise ShardFormatError(f"truncated record at byte {offset}")
            if struct.unpack("<I", footer)[0] != masked_crc(payload):
                raise ShardFormatError(f"bad data CRC in the record at byte {offset}")
            yield offset, payload
            offset += 16 + length


def _read_varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7


def _fields(data: bytes) -> Iterator[tuple[int, bytes | int]]:
    """(field number, value) of a protobuf message; values of length-delimited fields as bytes."""
    position = 0
    while position < len(data):
        tag, position = _read_varint(data, position)
        number, wire_type = tag >> 3, tag & 7
        if wire_type == 0:
            value, position = _read_varint(data, position)
        elif wire_type == 2:
            length, position = _read_varint(data, position)
            value, position = data[position : position + length], position + length
        else:
            raise ShardFormatError(f"unexpected protobuf wire type {wire_type}")
        yield number, value


def decode_example(payload: bytes) -> dict[str, bytes | int]:
    """Inverse of ``encode_example`` for single-valued bytes/int64 features."""
    features: dict[str, bytes | int] = {}
    for _, feature_map in _fields(payload):
        for _, entry in _fields(feature_map):
            entry_fields = dict(_fields(entry))
            name, feature = entry_fields[1].decode(), entry_fields[2]
            for kind, values in _fields(feature):
                inner = next(iter(_fields(values)), (None, b""))[1]
                if kind == 3:  # int64_list, packed
                    value, _ = _read_varint(inner, 0)
                    features[name] = value - (1 << 64) if value >= 1 << 63 else value
                else:
                    features[name] = inner
    return features


class TFRecordShardWriter:
    """Appends Examples to one TFRecord shard and records the DALI index alongside."""

    def __init__(self, directory: Path, name: str, split: str, classes: tuple[str, ...]):
        self.name, self.split, self.classes = name, split, classes
        self._file = HashingFile(directory / name)
        self._index_name = name.rsplit(".", 1)[0] + ".idx"
        self._index_lines: list[str] = []
        self.samples = 0

    @property
    def bytes_written(self) -> int:
        return self._file.bytes_written

    def record_size(self, sample: Sample) -> int:
        return len(sample.jpeg) + 512  # framing and metadata features are a few hundred bytes

    def add(self, sample: Sample) -> None:
        self._add_payload(encode_example(example_features(sample, self.classes)))

    def copy_from(self, shard: Path, keep: set[str] | None = None) -> int:
        """Append the records of another shard (those in ``keep``), bytes unchanged."""
        copied = 0
        for _, payload in iter_records(shard):
            if keep is None or decode_example(payload)["image/key"].decode() in keep:
                self._add_payload(payload)
                copied += 1
        return copied

    def _add_payload(self, payload: bytes) -> None:
        record = frame_record(payload)
        self._index_lines.append(f"{self._file.bytes_written} {len(record)}\n")
        self._file.write(record)
        self.samples += 1

    def close(self) -> ShardInfo:
        index = HashingFile(self._file.final.with_name(self._index_name))
        index.write("".join(self._index_lines).encode("ascii"))
        index_sha256 = index.publish()
        sha256 = self._file.publish()
        return ShardInfo(
            self.name,
            self.split,
            self.samples,
            self._file.bytes_written,
            sha256,
            FileInfo(self._index_name, index.bytes_written, index_sha256),
        )

    def discard(self) -> None:
        self._file.discard()
