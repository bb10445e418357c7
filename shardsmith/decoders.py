"""Format decoders: the fastest correct decoder per format, from bytes or from a path.

Measured per ~20 MB original (scripts/bench_pack.py): JPEG is decoded by libjpeg-turbo's
scaled IDCT through simplejpeg, at the smallest DCT scale that still covers the target;
TIFF by tifffile (about 2.5x faster than OpenCV on 16-bit RGB, which OpenCV reads through an
RGBA strip reader); PNG, BMP and WebP by OpenCV.  Pillow handles what those decline (CMYK
JPEG, palette and exotic modes, unusual TIFF codecs) and explains errors.

Non-JPEG originals are decoded straight from their path when one is given, so a worker holds
the decoded pixels but not also the file's bytes (a 48 MP 16-bit TIFF is 288 MB either way).
"""

from __future__ import annotations

import io
import logging
import os
import warnings

import cv2
import numpy as np
import simplejpeg
import tifffile
from PIL import Image, UnidentifiedImageError

# One thread per worker process: parallelism comes from processes, not from oversubscription.
cv2.setNumThreads(1)
cv2.ocl.setUseOpenCL(False)
# Decode failures become Rejects with a reason; the libraries' own chatter would only confuse.
cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_SILENT)
logging.getLogger("tifffile").setLevel(logging.CRITICAL)
# The pixel limit is ours (image.max_pixels); Pillow's 89 MP bomb warning must not decide.
Image.MAX_IMAGE_PIXELS = None
warnings.simplefilter("ignore", Image.DecompressionBombWarning)

EXIF_ORIENTATION = 0x0112
IMAGE_SIGNATURES = (b"\xff\xd8", b"\x89PNG", b"II*\x00", b"MM\x00*", b"BM", b"RIFF")

Source = bytes | str  # encoded bytes, or the path of the file


class BadImage(Exception):
    """Raised inside the image path; ``process`` turns it into a ``Reject``."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def open_header(source: Source) -> Image.Image:
    """Parse the header only (Pillow opens lazily); raises BadImage or OSError for I/O."""
    if isinstance(source, bytes):
        if not source:
            raise BadImage("empty", "zero-byte file")
        head, stream = source[:8], io.BytesIO(source)
    else:
        if os.path.getsize(source) == 0:
            raise BadImage("empty", "zero-byte file")
        with open(source, "rb") as handle:
            head = handle.read(8)
        stream = source
    try:
        return Image.open(stream)
    except UnidentifiedImageError:
        if head.startswith(IMAGE_SIGNATURES):
            raise BadImage("corrupt", "image header is damaged or cut short") from None
        raise BadImage("not_an_image", "not a recognised image format") from None
    except OSError as exc:
        if exc.errno is not None:
            raise  # a real I/O error: the file is unreadable, not corrupt
        raise BadImage("corrupt", f"unreadable image header: {exc}") from None
    except (ValueError, SyntaxError) as exc:
        raise BadImage("corrupt", f"unreadable image header: {exc}") from None


def orientation(image: Image.Image) -> int:
    """EXIF orientation 1..8 from the header, without decoding pixels."""
    try:
        if image.format == "PNG":
            # PngImageFile.getexif() decodes the whole image to look for a trailing eXIf
            # chunk; a chunk before the pixel data is already parsed into info["exif"].
            raw = image.info.get("exif")
            if not raw:
                return 1
            exif = Image.Exif()
            exif.load(raw)
        else:
            exif = image.getexif()
        value = exif.get(EXIF_ORIENTATION, 1)
    except (OSError, ValueError, SyntaxError, KeyError, TypeError):
        return 1  # unreadable EXIF is not worth rejecting an image over
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def decode_pixels(source: Source, image: Image.Image, need_w: int, need_h: int):
    """Decode at the smallest size >= (need_w, need_h) the codec offers, else full size.

    Returns (uint8 or uint16 array, True when colour channels are in BGR order).
    """
    if image.format == "JPEG":
        if image.mode in ("RGB", "L"):
            data = source if isinstance(source, bytes) else _read(source)
            colorspace = "GRAY" if image.mode == "L" else "RGB"
            pixels = simplejpeg.decode_jpeg(
                data, colorspace=colorspace, min_width=need_w, min_height=need_h, strict=True
            )
            return (pixels[:, :, 0] if colorspace == "GRAY" else pixels), False
    elif image.format == "TIFF":
        pixels = _decode_tiff(source)
        if pixels is not None:
            return pixels, False
    else:
        if isinstance(source, bytes):
            pixels = cv2.imdecode(np.frombuffer(source, np.uint8), cv2.IMREAD_UNCHANGED)
        else:
            pixels = cv2.imread(source, cv2.IMREAD_UNCHANGED)
        if pixels is not None and pixels.dtype in (np.uint8, np.uint16):
            if pixels.ndim == 3 and pixels.shape[2] == 1:
                pixels = pixels[:, :, 0]
            return pixels, pixels.ndim == 3
    return _decode_with_pillow(image, need_w, need_h), False


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _decode_tiff(source: Source) -> np.ndarray | None:
    """First page of a TIFF as gray, RGB or RGBA uint8/uint16; None to let Pillow try."""
    try:
        with tifffile.TiffFile(io.BytesIO(source) if isinstance(source, bytes) else source) as tiff:
            page = tiff.pages[0]
            if page.photometric not in (
                tifffile.PHOTOMETRIC.MINISBLACK, tifffile.PHOTOMETRIC.RGB
            ):
                return None  # palette, CMYK, YCbCr, inverted: Pillow knows those
            pixels = page.asarray(maxworkers=1)  # one thread per worker process
    except (ValueError, KeyError, IndexError, NotImplementedError, tifffile.TiffFileError):
        return None  # e.g. a compression tifffile cannot decode without imagecodecs
    if pixels.dtype not in (np.uint8, np.uint16):
        return None
    if pixels.ndim == 3 and pixels.shape[2] not in (1, 3, 4) or pixels.ndim > 3:
        return None
    if pixels.ndim == 3 and pixels.shape[2] == 1:
        pixels = pixels[:, :, 0]
    return pixels


def _decode_with_pillow(image: Image.Image, need_w: int, need_h: int) -> np.ndarray:
    """The general path: CMYK JPEG, palette images, and whatever OpenCV declined."""
    if image.format == "JPEG":
        image.draft(None, (need_w, need_h))
    image.load()  # raises for truncated or corrupt data
    mode = image.mode
    if mode in ("I;16", "I;16L", "I;16B", "I;16N", "I"):
        pixels = np.asarray(image)
        if pixels.size and (pixels.min() < 0 or pixels.max() > 65535):
            raise BadImage("unsupported", f"pixel values outside 16 bits in mode {mode}")
        return pixels.astype(np.uint16)
    if mode in ("1", "L"):
        return np.asarray(image.convert("L"))
    if mode == "LA" or mode == "PA" or (mode == "P" and "transparency" in image.info):
        return np.asarray(image.convert("RGBA"))
    if mode in ("RGBA", "RGBa"):
        return np.asarray(image.convert("RGBA"))
    if mode in ("RGB", "P", "CMYK", "YCbCr", "LAB", "HSV", "RGBX"):
        return np.asarray(image.convert("RGB"))
    raise BadImage("unsupported", f"unsupported pixel mode {mode}")
