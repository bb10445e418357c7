"""TFRecord shards of ``tf.train.Example`` records, written without TensorFlow.

The Example protobuf is simple enough to serialise by hand (a map of named byte or int64
lists), which keeps TensorFlow's import cost (seconds and hundreds of MB) out of the packing
processes.  Framing: uint64 length, masked CRC32C of the length, payload, masked CRC32C of the
payload.  Each shard ``X.tfrecord`` gets a DALI-compatible index ``X.idx``: one
``offset size`` line per record.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import crc32c

from ...config import FORMATS
from ...errors import ManifestError, ShardFormatError
from ...text import shown
from .base import Placed, Record, Row, Span, checked_index, class_name, not_the_shard, open_shard
from .example_check import example_problems
from .metadata import checked_metadata, rle_counts, rle_string

if TYPE_CHECKING:
    from ...annotations.model import ObjectClasses
    from ...door import OpenFile
    from ..entries import ShardEntry
    from ..records import Sample

log = logging.getLogger(__name__)

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


class Floats(tuple):
    """A ``float_list`` feature (float32) of any length."""


class Ints(tuple):
    """An ``int64_list`` feature of any length."""


class ByteStrings(tuple):
    """A ``bytes_list`` feature of any length."""


Feature = bytes | int | Floats | Ints | ByteStrings


def encode_example(features: dict[str, Feature]) -> bytes:
    """Serialise a ``tf.train.Example``: single bytes or int64 values, or lists of floats,
    int64s or byte strings (``Floats``, ``Ints``, ``ByteStrings``)."""
    entries = []
    for name in sorted(features):  # sorted: same features → same bytes
        value = features[name]
        if isinstance(value, bytes):
            feature = _field(1, _field(1, value))  # Feature.bytes_list{value}
        elif isinstance(value, ByteStrings):
            feature = _field(1, b"".join(_field(1, item) for item in value))
        elif isinstance(value, Floats):  # Feature.float_list{packed value}
            packed = struct.pack(f"<{len(value)}f", *value)
            feature = _field(2, _field(1, packed) if value else b"")
        elif isinstance(value, Ints):  # Feature.int64_list{packed value}
            packed = b"".join(_varint(item) for item in value)
            feature = _field(3, _field(1, packed) if value else b"")
        else:
            feature = _field(3, _field(1, _varint(value)))  # Feature.int64_list{packed value}
        entries.append(_field(1, _field(1, name.encode()) + _field(2, feature)))
    return _field(1, b"".join(entries))  # Example.features{feature map}


def example_features(sample: Sample, classes: tuple[str, ...],
                     object_classes: ObjectClasses | None = None) -> dict[str, Feature]:
    """The common image-classification feature keys; with annotations also the TensorFlow
    Object Detection API's (boxes normalised to 0..1, class ids from 1, the class mask as PNG)
    and ``image/object/rle``, each object's instance mask as a COCO compressed RLE string (b""
    for a box-only object), and for a tile where it lies in its original."""
    features: dict[str, Feature] = {
        "image/encoded": sample.jpeg,
        "image/format": b"jpeg",
        "image/class/label": sample.label,
        "image/class/text": os.fsencode(class_name(classes, sample.label)),
        "image/height": sample.height,
        "image/width": sample.width,
        "image/channels": sample.channels,
        "image/filename": os.fsencode(sample.relpath),
        "image/key": sample.key.encode(),
    }
    objects = sample.objects
    if objects is not None and object_classes is not None:
        width, height = sample.width, sample.height
        features.update({
            "image/object/bbox/xmin": Floats(box[0] / width for box in objects.boxes),
            "image/object/bbox/ymin": Floats(box[1] / height for box in objects.boxes),
            "image/object/bbox/xmax": Floats(box[2] / width for box in objects.boxes),
            "image/object/bbox/ymax": Floats(box[3] / height for box in objects.boxes),
            "image/object/class/label": Ints(object_classes.id(name) for name in objects.names),
            "image/object/class/text": ByteStrings(name.encode() for name in objects.names),
            "image/object/rle": ByteStrings(
                b"" if counts is None else rle_string(counts, height, width)
                for counts in objects.rles),
        })
        if objects.cut:  # only then: a dataset without cuts keeps its bytes
            features.update({
                **{f"image/object/cut/bbox/{edge}": Floats(
                    item.box[at] / (width if at % 2 == 0 else height) for item in objects.cut)
                   for at, edge in enumerate(EDGES)},
                "image/object/cut/class/label": Ints(object_classes.id(item.name)
                                                     for item in objects.cut),
                "image/object/cut/class/text": ByteStrings(item.name.encode()
                                                           for item in objects.cut),
                "image/object/cut/rle": ByteStrings(
                    b"" if item.rle is None else rle_string(item.rle, height, width)
                    for item in objects.cut),
            })
        if objects.mask_png is not None:
            features["image/segmentation/class/encoded"] = objects.mask_png
            features["image/segmentation/class/format"] = b"png"
    if sample.tile is not None:
        tile = sample.tile
        features.update({"image/tile/row": tile["row"], "image/tile/column": tile["column"],
                         "image/tile/x": tile["x"], "image/tile/y": tile["y"],
                         "image/tile/scale": Floats((tile["scale"],))})
    return features


def iter_records(path: Path, size: int | None = None) -> Iterator[tuple[int, bytes]]:
    """Yield (offset, payload) of each record, checking both CRCs; raises ShardFormatError.

    The shard is opened through the door (no link, no FIFO: a ShardFormatError); reads at most
    ``size`` bytes (the manifest's count), so a damaged length field cannot make it read or
    allocate past the shard.
    """
    with open_shard(path) as shard:
        size = shard.size if size is None else min(size, shard.size)
        handle = os.fdopen(os.dup(shard.fd), "rb")
        with handle:
            yield from _framed(handle, size)


def _framed(handle: BinaryIO, size: int) -> Iterator[tuple[int, bytes]]:
    offset = 0
    while offset < size:
        header = handle.read(12)
        if len(header) < 12:
            raise ShardFormatError(f"truncated record header at byte {offset}")
        length_bytes = header[:8]
        if struct.unpack("<I", header[8:])[0] != masked_crc(length_bytes):
            raise ShardFormatError(f"bad length CRC at byte {offset}")
        (length,) = struct.unpack("<Q", length_bytes)
        if offset + 16 + length > size:
            raise ShardFormatError(f"the record at byte {offset} runs past the end")
        payload = handle.read(length)
        footer = handle.read(4)
        if len(payload) < length or len(footer) < 4:
            raise ShardFormatError(f"truncated record at byte {offset}")
        if struct.unpack("<I", footer)[0] != masked_crc(payload):
            raise ShardFormatError(f"bad data CRC in the record at byte {offset}")
        yield offset, payload
        offset += 16 + length


RECORD_OVERHEAD = 16  # length (8), its CRC (4), the payload's CRC (4)


def index_spans(data: bytes, shard_bytes: int) -> list[tuple[int, int]]:
    """(offset, size) of each record of a DALI TFRecord index (``OFFSET SIZE`` lines), which
    must tile the shard: the first record at 0, each next where the last ends, the last
    ending at ``shard_bytes``.  Raises ShardFormatError naming the line."""
    spans, end = [], 0
    for number, line in enumerate(data.decode("ascii", "replace").splitlines(), 1):
        fields = line.split()
        if len(fields) != 2 or not all(field.isdigit() for field in fields):
            raise ShardFormatError(f"index line {number} is not OFFSET SIZE")
        offset, size = int(fields[0]), int(fields[1])
        if offset != end or size < RECORD_OVERHEAD or offset + size > shard_bytes:
            raise ShardFormatError(f"index line {number} ({offset} {size}) does not follow "
                                   f"the record before it, which ends at byte {end}, within "
                                   f"the shard's {shard_bytes:,} bytes")
        spans.append((offset, size))
        end = offset + size
    if end != shard_bytes:
        raise ShardFormatError(f"the index's records end at byte {end:,}, the shard at "
                               f"{shard_bytes:,}")
    return spans


def check_framing(handle: OpenFile, spans: list[tuple[int, int]]) -> None:
    """ShardFormatError unless each record's length field is its span's size (less the
    framing) with a valid CRC: one 12-byte read a record, so that nothing downstream ever
    sees a length the index does not vouch for (TensorFlow's reader crashes on 2**40)."""
    for offset, size in spans:
        length = _checked_length(handle, offset, handle.size)
        if length + RECORD_OVERHEAD != size:
            raise ShardFormatError(f"the record at byte {offset} says {length:,} bytes, its "
                                   f"index {size - RECORD_OVERHEAD:,}")


def _checked_length(handle: OpenFile, offset: int, shard_bytes: int) -> int:
    header = handle.pread(12, offset)
    if len(header) < 12:
        raise ShardFormatError(f"truncated record header at byte {offset}")
    if struct.unpack("<I", header[8:])[0] != masked_crc(header[:8]):
        raise ShardFormatError(f"bad length CRC at byte {offset}")
    (length,) = struct.unpack("<Q", header[:8])
    if length > shard_bytes - offset - RECORD_OVERHEAD:
        raise ShardFormatError(f"the record at byte {offset} runs past the end")
    return length


def read_payload(handle: OpenFile, offset: int, size: int) -> bytes:
    """The payload of the record at ``offset`` (``size`` bytes with its framing), checked by
    ``record_payload``; raises ShardFormatError."""
    data = os.pread(handle.fd, size, offset)
    if len(data) != size:
        raise ShardFormatError(f"the record at byte {offset} is cut short")
    return record_payload(data, offset)


def record_payload(data: bytes | memoryview, offset: int = 0) -> bytes:
    """The payload of one whole framed record ``data`` (at byte ``offset`` of its shard, for
    messages): the one place that knows the 12-byte header and the 4-byte footer.  Its length
    field must be ``data``'s length less the framing, and both CRCs must hold; raises
    ShardFormatError otherwise."""
    if len(data) < RECORD_OVERHEAD:
        raise ShardFormatError(f"the record at byte {offset} is cut short")
    header = bytes(data[:12])
    if struct.unpack("<I", header[8:])[0] != masked_crc(header[:8]):
        raise ShardFormatError(f"bad length CRC at byte {offset}")
    (length,) = struct.unpack("<Q", header[:8])
    if length + RECORD_OVERHEAD != len(data):
        raise ShardFormatError(f"the record at byte {offset} says {length:,} bytes, its "
                               f"index {len(data) - RECORD_OVERHEAD:,}")
    payload = bytes(data[12:-4])
    if struct.unpack("<I", bytes(data[-4:]))[0] != masked_crc(payload):
        raise ShardFormatError(f"bad data CRC in the record at byte {offset}")
    return payload


KEY_FEATURE = b"image/key"
KEY_WINDOW = 4096  # bytes read at once around a record's image: its other features fit


def record_key(handle: OpenFile, offset: int, size: int) -> str:
    """The ``image/key`` of the record at ``offset`` (``size`` bytes with its framing), read
    around its image: the features before and after ``image/encoded`` (our writer sorts them
    by name), not the JPEG, in a read or two.  Its length field is checked, not the payload's
    CRC: a reader checks that, and this key, when it reads the sample.  Raises
    ShardFormatError."""
    length = _checked_length(handle, offset, offset + size)
    if length + RECORD_OVERHEAD != size:
        raise ShardFormatError(f"the record at byte {offset} says {length:,} bytes, its "
                               f"index {size - RECORD_OVERHEAD:,}")
    window = _Window(handle, offset + 12 + length)
    tag, position = window.varint(offset + 12)
    features, position = window.varint(position)
    end = position + features
    if tag != 0x0A or end > window.end:
        raise ShardFormatError(f"the record at byte {offset} is not a tf.train.Example")
    while position < end:  # the entries of the feature map: name (field 1), feature (2)
        tag, body = window.varint(position)
        entry, body = window.varint(body)
        name_tag, name_at = window.varint(body)
        name_length, name_at = window.varint(name_at)
        if tag != 0x0A or name_tag != 0x0A or body + entry > end \
                or name_at + name_length > body + entry:
            raise ShardFormatError(f"the record at byte {offset} is not a tf.train.Example")
        name = window.read(name_at, min(name_length, len(KEY_FEATURE) + 1))
        if name == KEY_FEATURE and name_length == len(KEY_FEATURE) and entry <= KEY_WINDOW:
            key = decode_example(_field(1, _field(1, window.read(body, entry)))).get("image/key")
            if isinstance(key, bytes):
                return key.decode("ascii", "replace")
        position = body + entry
    raise ShardFormatError(f"the record at byte {offset} has no image/key")


class _Window:
    """Reads of one record's bytes up to ``end``, served from the last ``KEY_WINDOW`` read."""

    def __init__(self, handle: OpenFile, end: int):
        self.handle, self.end, self.start, self.data = handle, end, 0, b""

    def read(self, position: int, count: int) -> bytes:
        if position + count > self.end:
            raise ShardFormatError("malformed tf.train.Example (a field runs past its record)")
        if not self.start <= position <= position + count <= self.start + len(self.data):
            self.start = position
            self.data = self.handle.pread(max(count, min(KEY_WINDOW, self.end - position)),
                                          position)
            if len(self.data) < count:
                raise ShardFormatError(f"the record is cut short at byte "
                                       f"{position + len(self.data)}")
        return self.data[position - self.start : position - self.start + count]

    def varint(self, position: int) -> tuple[int, int]:
        data = memoryview(self.read(position, min(MAX_VARINT_BYTES, self.end - position)))
        value, used = _read_varint(data, 0)
        return value, position + used


MAX_VARINT_BYTES = 10  # a 64-bit value takes at most ten 7-bit groups


def _read_varint(data: memoryview, position: int) -> tuple[int, int]:
    """(value, next position) of the varint at ``position``: at most ten bytes, so a record
    made of one endless varint costs ten steps, not a shift per byte of it."""
    if position < len(data) and data[position] < 0x80:  # one byte: most tags and lengths
        return data[position], position + 1
    value = 0
    for shift in range(0, 7 * MAX_VARINT_BYTES, 7):
        if position >= len(data):
            raise ShardFormatError("malformed tf.train.Example (a varint runs past its end)")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value & 0xFFFFFFFFFFFFFFFF, position
    raise ShardFormatError("malformed tf.train.Example (a varint longer than 10 bytes)")


def _fields(data: memoryview) -> Iterator[tuple[int, int, memoryview | int]]:
    """(field number, wire type, value) of a protobuf message: a length-delimited field's
    value as a view of ``data`` (no copy), a varint's as an int."""
    position = 0
    while position < len(data):
        tag, position = _read_varint(data, position)
        number, wire_type = tag >> 3, tag & 7
        if wire_type == 0:
            value, position = _read_varint(data, position)
        elif wire_type == 2:
            length, position = _read_varint(data, position)
            if length > len(data) - position:
                raise ShardFormatError("malformed tf.train.Example (a field runs past its "
                                       "message)")
            value, position = data[position : position + length], position + length
        elif wire_type == 5:  # fixed32 (an unpacked float)
            value, position = data[position : position + 4], position + 4
        elif wire_type == 1:  # fixed64
            value, position = data[position : position + 8], position + 8
        else:
            raise ShardFormatError(f"unexpected protobuf wire type {wire_type}")
        if position > len(data):
            raise ShardFormatError("malformed tf.train.Example (a field runs past its message)")
        yield number, wire_type, value


def _message(value: memoryview | int) -> memoryview:
    if isinstance(value, int):
        raise ShardFormatError("malformed tf.train.Example (a number where a message belongs)")
    return value


def _first_value(kind: int, values: memoryview) -> bytes | int | None:
    """The first value of a ``bytes_list`` (1) or ``int64_list`` (3), packed or not; the packed
    floats of a ``float_list`` (2); None for an empty list (an image without objects)."""
    for number, wire_type, value in _fields(values):
        if number != 1:
            continue
        if kind == 3:
            if wire_type == 0:
                integer = value
            else:
                packed = _message(value)
                if not len(packed):
                    continue
                integer, _ = _read_varint(packed, 0)
            return integer - (1 << 64) if integer >= 1 << 63 else integer
        return bytes(_message(value)) if kind == 1 or wire_type == 2 else None
    return None


def iter_features(payload: bytes) -> Iterator[tuple[str, int, memoryview]]:
    """(name, kind, list) of each feature of a serialized ``tf.train.Example``: kind 1 bytes,
    2 float, 3 int64, and the list message holding its values.

    One pass over the payload, each varint at most ten bytes: time and memory linear in its
    size.  Raises ShardFormatError when it is not a ``tf.train.Example``.
    """
    try:
        for number, _, feature_map in _fields(memoryview(payload)):
            if number != 1:
                continue
            for _, _, entry in _fields(_message(feature_map)):
                name, feature = None, None
                for entry_number, _, value in _fields(_message(entry)):
                    if entry_number == 1:
                        name = bytes(_message(value)).decode()
                    elif entry_number == 2:
                        feature = _message(value)
                if name is None or feature is None:
                    raise ShardFormatError("malformed tf.train.Example (a feature without a "
                                           "name or value)")
                for kind, _, values in _fields(feature):
                    if kind in (1, 2, 3):
                        yield name, kind, _message(values)
    except UnicodeDecodeError:
        raise ShardFormatError("malformed tf.train.Example (a feature name not UTF-8)") from None


def decode_example(payload: bytes) -> dict[str, bytes | int]:
    """Inverse of ``encode_example`` for single-valued bytes/int64 features (a list feature
    gives its first value; an empty list, as an image without objects has, none)."""
    features: dict[str, bytes | int] = {}
    for name, kind, values in iter_features(payload):
        first = _first_value(kind, values)
        if first is not None:
            features[name] = first
    return features


Values = list[bytes] | list[int] | list[float]


def feature_lists(payload: bytes) -> dict[str, Values]:
    """Every feature of a serialized ``tf.train.Example`` with all its values (bytes, int64
    or float32 lists, packed or not).  Raises ShardFormatError when it is not one."""
    features: dict[str, Values] = {}
    for name, kind, listed in iter_features(payload):
        features[name] = _values(kind, listed)
    return features


def _values(kind: int, listed: memoryview) -> Values:
    values: list = []
    for number, wire_type, value in _fields(listed):
        if number != 1:
            continue
        if kind == 1:
            values.append(bytes(_message(value)))
        elif kind == 2:
            data = bytes(_message(value)) if wire_type != 0 else b""
            if len(data) % 4:
                raise ShardFormatError(f"malformed tf.train.Example (a float list of "
                                       f"{len(data)} bytes)")
            values.extend(item for (item,) in struct.iter_unpack("<f", data))
        elif wire_type == 0:
            values.append(_signed(value))
        else:
            packed, position = _message(value), 0
            while position < len(packed):
                integer, position = _read_varint(packed, position)
                values.append(_signed(integer))
    return values


def _signed(integer: int) -> int:
    return integer - (1 << 64) if integer >= 1 << 63 else integer


MASK_PNG = "image/segmentation/class/encoded"
EDGES = ("xmin", "ymin", "xmax", "ymax")
TILE_PLACES = ("row", "column", "x", "y")


def example_metadata(features: dict[str, Values], key: str) -> dict:
    """WebDataset's ``KEY.json`` of a sample (``base.sample_metadata``) from its features.

    What a record does not hold is left out: ``split`` (the sample index has it), ``original``,
    a tile's ``original`` rectangle.  Boxes are the normalised float32 edges times the sample's
    size, rounded to 1e-3 px; ``polygons`` is empty per object; ``rle`` is there only when the
    record has ``image/object/rle`` (a pack of an older release has not), decoded to
    uncompressed counts.  Raises ShardFormatError naming the sample and the feature.
    """
    width, height = (_single(features, f"image/{name}", int, key)
                     for name in ("width", "height"))
    meta: dict[str, Any] = {
        "path": os.fsdecode(_single(features, "image/filename", bytes, key)),
        "label": _single(features, "image/class/label", int, key),
        "class": os.fsdecode(_single(features, "image/class/text", bytes, key)),
        "width": width,
        "height": height,
        "channels": _single(features, "image/channels", int, key),
    }
    checked_metadata(meta, key)  # the size is sound before anything is scaled or decoded by it
    if "image/object/class/label" in features:
        meta.update(_objects(features, width, height, key))
    if CUT_LABEL in features:
        meta["objects_cut"] = _cut_objects(features, width, height, key)
    if MASK_PNG in features:
        meta["mask"] = "mask.png"
    if "image/tile/row" in features:
        tile = {name: _single(features, f"image/tile/{name}", int, key) for name in TILE_PLACES}
        scale = _single(features, "image/tile/scale", float, key)
        # float32 keeps 7 significant digits: the configured scale (0.3, not 0.30000001)
        meta["tile"] = {**tile, "width": width, "height": height,
                        "scale": float(f"{scale:.7g}")}
    return checked_metadata(meta, key)


def _objects(features: dict[str, Values], width: int, height: int, key: str) -> dict:
    labels = features["image/object/class/label"]
    count = len(labels)
    lists = {name: features.get(name, []) for name in (
        *(f"image/object/bbox/{edge}" for edge in EDGES), "image/object/class/label",
        "image/object/class/text",
        *(("image/object/rle",) if "image/object/rle" in features else ()))}
    for name, values in lists.items():
        if len(values) != count:
            raise ShardFormatError(f"sample {key}: {name} holds {len(values)} values for "
                                   f"{count} objects")
    for name, kind in (("image/object/class/label", int), ("image/object/class/text", bytes),
                       ("image/object/rle", bytes)):
        if not all(type(value) is kind for value in lists.get(name, ())):
            raise ShardFormatError(f"sample {key}: {name} holds other values than "
                                   f"{kind.__name__}")
    edges = [lists[f"image/object/bbox/{edge}"] for edge in EDGES]
    if not all(isinstance(value, float) for values in edges for value in values):
        raise ShardFormatError(f"sample {key}: a box edge is not a float")
    scale = (width, height, width, height)
    try:
        names = [name.decode() for name in lists["image/object/class/text"]]
    except UnicodeDecodeError:
        raise ShardFormatError(f"sample {key}: an object class name is not UTF-8") from None
    objects: dict[str, Any] = {
        "boxes": [[round(value * size, 3) for value, size in zip(box, scale, strict=True)]
                  for box in zip(*edges, strict=True)],
        "labels": list(labels),
        "label_names": names,
        "polygons": [[] for _ in labels],
    }
    if "image/object/rle" in lists:
        try:
            objects["rle"] = [None if not text else {"size": [height, width],
                                                     "counts": rle_counts(text, height, width)}
                              for text in lists["image/object/rle"]]
        except ShardFormatError as exc:
            raise ShardFormatError(f"sample {key}: image/object/rle: {exc}") from None
    return objects


CUT_LABEL = "image/object/cut/class/label"


def _cut_objects(features: dict[str, Values], width: int, height: int, key: str) -> list:
    """``objects_cut`` of ``KEY.json`` from the ``image/object/cut/...`` features (the
    objects min_visible dropped); ShardFormatError when they do not pair up."""
    labels = features[CUT_LABEL]
    names = [f"image/object/cut/bbox/{edge}" for edge in EDGES]
    lists = [features.get(name, []) for name in names]
    texts = features.get("image/object/cut/class/text", [])
    rles = features.get("image/object/cut/rle", [])
    if not all(len(values) == len(labels) for values in (*lists, texts, rles)):
        raise ShardFormatError(f"sample {key}: the image/object/cut features do not hold one "
                               "value per object")
    if not (all(type(value) is int for value in labels)
            and all(type(value) is bytes for value in (*texts, *rles))
            and all(isinstance(value, float) for values in lists for value in values)):
        raise ShardFormatError(f"sample {key}: an image/object/cut feature holds values of "
                               "another type")
    scale = (width, height, width, height)
    found = []
    for label, text, rle, *edges in zip(labels, texts, rles, *lists, strict=True):
        try:
            item = {"label": label, "label_name": text.decode(),
                    "box": [round(value * size, 3) for value, size in zip(edges, scale,
                                                                          strict=True)]}
            if rle:
                item["rle"] = {"size": [height, width],
                               "counts": rle_counts(rle, height, width)}
        except UnicodeDecodeError:
            raise ShardFormatError(f"sample {key}: a cut object's class name is not "
                                   "UTF-8") from None
        except ShardFormatError as exc:
            raise ShardFormatError(f"sample {key}: image/object/cut/rle: {exc}") from None
        found.append(item)
    return found


def _single(features: dict[str, Values], name: str, kind: type, key: str) -> Any:
    """The one value of feature ``name``, of type ``kind``; ShardFormatError otherwise."""
    values = features.get(name)
    if values is None:
        raise ShardFormatError(f"sample {key}: the record has no {name}")
    if len(values) != 1 or type(values[0]) is not kind:
        raise ShardFormatError(f"sample {key}: {name} is not one {kind.__name__}")
    return values[0]


class TFRecordFormat:
    name = "tfrecord"
    extension = FORMATS[name]
    keys_in_shard = True
    shard_lists = ("txt",)
    index_required = True
    label_map = True  # with objects, the Object Detection API's ``label_map.pbtxt``
    # (the record's bytes, their features): the export asks for a record's metadata and then
    # its mask, a parse of the whole Example each (the test corpus's samples: 444 us a sample
    # for metadata, mask and JPEG, 308 us with one parse; one record's bytes held)
    _last: tuple[bytes, dict[str, Values]] | None = None

    def dali_samples(self, paths: list[str], indexes: list[str], **options: Any) -> tuple:
        """(JPEGs, labels) from DALI's own reader of these shards (``readers.dali``)."""
        import nvidia.dali.fn as fn
        import nvidia.dali.tfrecord as tfrec

        features = fn.readers.tfrecord(
            path=paths, index_path=indexes,
            features={"image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
                      "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1)},
            **options)
        return features["image/encoded"], features["image/class/label"]

    def record_problems(self, record: Record, size: tuple[int, int] | None,
                        object_classes: int) -> list[str]:
        """What a reader of the ``tf.train.Example`` trips on in ``record`` beyond its JPEG
        and metadata (``example_check``), a phrase each."""
        try:
            features = feature_lists(record_payload(record.data))
        except ShardFormatError as exc:
            return [str(exc)]
        return example_problems(features, size, object_classes)

    def _features(self, record: Record) -> dict[str, Values]:
        """``feature_lists`` of a framed record, parsed once for the record last asked about
        (the same bytes object: immutable, and held, so its identity is not reused).  The
        lists are read, never changed, by their users here."""
        last = self._last
        if last is not None and last[0] is record.data:
            return last[1]
        features = feature_lists(record_payload(record.data))
        self._last = (record.data, features)
        return features

    def encode(self, sample: Sample, classes: tuple[str, ...],
               object_classes: ObjectClasses | None = None) -> Record:
        features = example_features(sample, classes, object_classes)
        return Record(sample.key, frame_record(encode_example(features)))

    def with_split(self, record: Record, split: str) -> Record:
        """The record itself: a record holds no split (the sample index does)."""
        return record

    def records(self, path: Path, size: int) -> Iterator[tuple[int, Record]]:
        """(offset, record) of each framed record, unchanged, with its ``image/key``."""
        for offset, payload in iter_records(path, size):
            key = decode_example(payload).get("image/key", b"")
            if not isinstance(key, bytes):
                raise ShardFormatError("a record without an image/key")
            yield offset, Record(key.decode("ascii", "replace"), frame_record(payload))

    def jpeg(self, record: Record) -> bytes:
        """The image bytes of a framed record as ``records`` yields it."""
        value = decode_example(record_payload(record.data)).get("image/encoded")
        if not isinstance(value, bytes):
            raise ShardFormatError(f"record {record.key} has no image/encoded")
        return value

    def label(self, record: Record) -> int:
        """The ``image/class/label`` of a framed record as ``records`` yields it."""
        value = decode_example(record_payload(record.data)).get("image/class/label")
        if not isinstance(value, int):
            raise ShardFormatError(f"record {record.key} has no image/class/label")
        return value

    def metadata(self, record: Record) -> dict:
        """The sample's metadata as WebDataset's ``KEY.json`` holds it, rebuilt from the
        features (``example_metadata``); raises ShardFormatError when they are malformed."""
        return example_metadata(self._features(record), record.key)

    def mask_png(self, record: Record) -> bytes | None:
        """The class mask PNG (``image/segmentation/class/encoded``), None without one."""
        features = self._features(record)
        if MASK_PNG not in features:
            return None
        return _single(features, MASK_PNG, bytes, record.key)

    def sample_rows(self, directory: Path, shard: ShardEntry,
                    has_masks: bool) -> list[tuple[Row, str]]:
        """(row, key) of each record: its span from the DALI index, its key from around its
        image (``record_key``).  A record whose key does not read (the shard cut short, not
        a file, damaged) keeps its row without a key: a corrupt sample when read, replaced as
        any other, so that every copy of the dataset has the same epochs; one warning."""
        try:
            spans = index_spans(checked_index(directory, shard), shard.bytes)
        except ShardFormatError as exc:
            raise ManifestError(f"{shard.index.name}: {exc}") from None
        keys, unread = [""] * len(spans), []
        try:
            with open_shard(directory / shard.name) as handle:
                for number, (offset, size) in enumerate(spans):
                    try:
                        keys[number] = record_key(handle, offset, size)
                    except (ShardFormatError, OSError) as exc:
                        unread.append(exc)
        except (ShardFormatError, OSError) as exc:
            unread.append(exc)
        if unread:
            log.warning("%s: %s; its %d records without a key are read as corrupt samples",
                        shard.name, unread[0], keys.count(""))
        return [((offset, size) * 3 + ((offset, size) if has_masks else (-1, 0)), key)
                for (offset, size), key in zip(spans, keys, strict=True)]

    def check_first(self, handle: OpenFile, offset: int, key: str) -> None:
        """The record at ``offset`` holds ``image/key`` ``key``."""
        try:
            size = _checked_length(handle, offset, handle.size) + RECORD_OVERHEAD
            found = record_key(handle, offset, size)
        except ShardFormatError:
            found = ""
        if found != key:
            raise not_the_shard(handle, found, key)

    def sample_metadata(self, data: memoryview, key: str) -> Any:
        """The record's metadata: its metadata span is the whole record."""
        return self.sample_parts(data, ((0, len(data)),) * 3, key, True)[2]

    def sample_parts(self, data: memoryview, spans: tuple[Span, Span, Span], key: str,
                     with_meta: bool) -> tuple[Any, int, Any]:
        """The record's image, label and (``with_meta``) metadata (``example_metadata``),
        its CRCs checked and its ``image/key`` the one its row was read with."""
        features = feature_lists(record_payload(data))
        found = _single(features, "image/key", bytes, key).decode("ascii", "replace")
        if found != key:
            raise ShardFormatError(f"the record holds sample {shown(found)}")
        return (_single(features, "image/encoded", bytes, key),
                _single(features, "image/class/label", int, key),
                example_metadata(features, key) if with_meta else None)

    def trailer(self, size: int) -> bytes:
        return b""

    def index_header(self, count: int) -> bytes:
        """DALI's TFRecord index has no header: ``OFFSET SIZE`` of each record, a line each."""
        return b""

    def index_line(self, placed: Placed) -> bytes:
        return f"{placed.offset} {placed.size}\n".encode("ascii")
