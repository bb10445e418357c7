"""The pictures of the report, as ``data:`` URIs of small JPEGs: rejected originals and new
samples with their objects drawn.

A rejected original is read only under the source the user names (``named_source``: never
the one an untrusted manifest records), its path checked first (``originals.original_path``)
and opened through the door one folder at a time with no link followed
(``originals.read_under_root``), or through the storage layer's door for an ``s3://``
source; it is decoded by the pack's own decoders
(``decoders.open_header``, ``decode_pixels`` at the smallest scale that covers a thumbnail),
within the dataset's pixel limit and decode budget.  An original that is missing, refused,
too large, unreadable or undecodable is a reason instead of a picture: never a failure.

A new sample is read from its shard (what a model will see) and its boxes and class mask
outlines drawn over it (``objects_drawn``), as on the contact sheet.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageFont

from ...config import ImageConfig
from ...dataset.manifest import Manifest, RejectEntry, SampleRecord
from ...decoders import decode_peak_bytes, decode_pixels, open_header
from ...door import MIB
from ...errors import BadImage, CorruptSampleError, ManifestError
from ...packing.originals import original_cap
from ..named_source import MAX_ORIGINAL_BYTES, NOT_READ, Originals
from ..objects_drawn import PackedObjects, draw_objects, read_objects
from ..picks import read_packed, sample_picture

THUMB = 160  # pixels: the longer side of a picture in the page
JPEG_QUALITY = 80  # a 160 px thumbnail is about 6 kB at 80 (base64: 8 kB)



@dataclass(frozen=True)
class Picture:
    """A picture as a ``data:`` URI, or None and why there is none."""

    uri: str | None
    why_not: str = ""


def data_uri(picture: Image.Image) -> str:
    """``picture`` as a ``data:image/jpeg;base64,...`` URI."""
    buffer = io.BytesIO()
    picture.convert("RGB").save(buffer, "JPEG", quality=JPEG_QUALITY, optimize=True)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def reject_pictures(originals: Originals, rejects: list[RejectEntry],
                    limits: ImageConfig) -> tuple[list[Picture], str]:
    """A picture (or why not) per reject, and a note when the originals are not read (no
    source named, or the named one out of reach)."""
    if originals.root is None:
        return [Picture(None, "original not read") for _ in rejects], originals.why_not
    return [reject_picture(originals, reject, limits) for reject in rejects], ""


def reject_picture(originals: Originals, reject: RejectEntry, limits: ImageConfig) -> Picture:
    """The rejected original ``reject.path`` under the named source, reduced; or why not."""
    if reject.reason in NOT_READ:
        return Picture(None, NOT_READ[reject.reason])
    try:
        data = originals.read(reject.path, min(MAX_ORIGINAL_BYTES, original_cap(limits)))
    except ManifestError:
        return Picture(None, "path refused (not under the source)")
    except FileNotFoundError:
        return Picture(None, "original missing")
    except (OSError, BadImage):
        return Picture(None, "original unreadable")
    try:
        return Picture(data_uri(_decoded_original(data, limits)))
    except BadImage as exc:
        return Picture(None, f"does not decode ({exc.reason})")


def _decoded_original(data: bytes, limits: ImageConfig) -> Image.Image:
    """The original's pixels at thumbnail size; BadImage when it does not decode, or would
    take more pixels or memory than the dataset allows an original."""
    header = open_header(data)
    width, height = header.size
    if width * height > limits.max_pixels:
        raise BadImage("too_large", "more pixels than image.max_pixels")
    if decode_peak_bytes(header, data, THUMB, THUMB, False) > limits.max_decoded_mb * MIB:
        raise BadImage("too_large", "more memory than image.max_decoded_mb")
    pixels, bgr = decode_pixels(data, header, THUMB, THUMB)
    picture = Image.fromarray(_rgb8(pixels, bgr))
    picture.thumbnail((THUMB, THUMB), Image.Resampling.LANCZOS)
    return picture


def _rgb8(pixels: np.ndarray, bgr: bool) -> np.ndarray:
    """8-bit RGB of what a decoder gives: gray, RGB, RGBA (or BGR/BGRA), 8 or 16 bits."""
    if pixels.dtype == np.uint16:
        pixels = (pixels >> 8).astype(np.uint8)
    if pixels.ndim == 2:
        return np.ascontiguousarray(np.stack([pixels] * 3, axis=-1))
    pixels = pixels[:, :, :3]
    return np.ascontiguousarray(pixels[:, :, ::-1] if bgr else pixels)


def sample_pictures(directory: Path, manifest: Manifest,
                    records: list[SampleRecord]) -> tuple[list[Picture], str]:
    """A picture per sample, read from its shard, its objects drawn when the dataset has
    them; and a note when a shard does not read (every sample of it then has a reason)."""
    note = ""
    try:
        packed = read_packed(directory, manifest, records)
        objects = read_objects(directory, manifest, records) \
            if manifest.object_classes is not None else None
    except (CorruptSampleError, ManifestError) as exc:
        packed, objects, note = {}, None, str(exc)
    classes = tuple(manifest.object_classes or ())
    font = ImageFont.load_default(size=11)
    pictures = []
    for record in records:
        jpeg = packed.get(record.key)
        picture = sample_picture(jpeg, record, THUMB)
        if picture is None:
            pictures.append(Picture(None, "not readable from its shard (shardsmith verify)"
                                    if jpeg is not None or not note else "shard unreadable"))
            continue
        picture.thumbnail((THUMB, THUMB), Image.Resampling.LANCZOS)
        found = objects.get(record.key) if objects is not None else None
        if isinstance(found, PackedObjects):
            draw_objects(picture, found, record.key, (record.width, record.height), classes,
                         font)
        pictures.append(Picture(data_uri(picture),
                                found if isinstance(found, str) else ""))
    return pictures, note
