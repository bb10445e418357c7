"""A class mask as PNG bytes (one byte a pixel, lossless): written, renumbered when a
dataset's object ids differ from an image's own, and read back from a shard, checked (the one
reader of a packed class mask: readers, sheet, export and verify).  Only numpy, OpenCV and
Pillow: no geometry."""

from __future__ import annotations

import io
import struct
import zlib

import cv2
import numpy as np
from PIL import PngImagePlugin

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def mask_png(mask: np.ndarray) -> bytes:
    """A class mask as a one-channel 8-bit PNG (lossless; fixed settings: same mask, same
    bytes)."""
    ok, data = cv2.imencode(".png", np.ascontiguousarray(mask, np.uint8),
                            [cv2.IMWRITE_PNG_COMPRESSION, 6])
    if not ok:  # pragma: no cover - OpenCV encodes any uint8 image
        raise ValueError("cannot encode the mask as PNG")
    return data.tobytes()


def remap_png(png: bytes, ids: list[int]) -> bytes:
    """A class mask PNG with value ``v`` replaced by ``ids[v - 1]`` (0 and 255, "ignore",
    stay)."""
    mask = cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_UNCHANGED)
    table = np.zeros(256, np.uint8)
    table[1 : len(ids) + 1] = ids
    table[255] = 255
    return mask_png(table[mask])


class MaskError(ValueError):
    """A packed class mask that cannot be used; the message says why."""


def class_mask(png: bytes, width: int, height: int) -> np.ndarray:
    """The class mask (uint8 ``height x width``: 0 background, k a class id, 255 ignore) of the
    PNG bytes of a ``width x height`` sample.  Its header is read first: a PNG of another size
    (a small file may claim any) or of another kind than one 8-bit channel is never decoded;
    MaskError says what is wrong."""
    if len(png) < 26 or png[:8] != PNG_SIGNATURE or png[12:16] != b"IHDR":
        raise MaskError("the class mask is not a PNG that decodes")
    size = struct.unpack(">II", png[16:24])
    if size != (width, height):
        raise MaskError(f"the class mask is {size[0]}x{size[1]}, the image {width}x{height}")
    if png[24:26] != b"\x08\x00":  # bit depth 8, colour type 0 (gray)
        raise MaskError("the class mask is not a one-channel 8-bit PNG")
    try:  # Pillow, not libpng: libpng writes its own error line to stderr beside ours
        if not _pixels_sound(png, width, height):
            raise ValueError
        with PngImagePlugin.PngImageFile(io.BytesIO(png)) as image:  # size checked above
            image.load()
            pixels = np.array(image)
    except (OSError, ValueError, SyntaxError, EOFError, zlib.error):
        raise MaskError("the class mask is not a PNG that decodes") from None
    if pixels.shape != (height, width) or pixels.dtype != np.uint8:
        raise MaskError("the class mask is not a PNG that decodes")
    return pixels


def _pixels_sound(png: bytes, width: int, height: int) -> bool:
    """Whether every chunk's CRC adds up, IEND ends the file and the IDAT chunks inflate to
    exactly the rows of a plain (not interlaced) PNG, each with a known filter: Pillow checks
    none of these (a short stream reads as a mask with zeros below)."""
    if png[26:29] != b"\0\0\0":  # deflate, adaptive filters, not interlaced
        return False
    at, idat = len(PNG_SIGNATURE), []
    while at + 12 <= len(png):
        end = at + 12 + struct.unpack_from(">I", png, at)[0]
        kind = png[at + 4 : at + 8]
        if end > len(png) or zlib.crc32(png[at + 4 : end - 4]) != \
                struct.unpack_from(">I", png, end - 4)[0]:
            return False
        if kind == b"IDAT":
            idat.append(png[at + 8 : end - 4])
        elif kind == b"IEND":
            inflate = zlib.decompressobj()
            rows = inflate.decompress(b"".join(idat), height * (width + 1) + 1)
            return end == len(png) and inflate.eof and len(rows) == height * (width + 1) \
                and max(rows[:: width + 1], default=0) <= 4
        at = end
    return False
