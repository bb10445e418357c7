"""Format decoders: the fastest correct decoder per format, from the bytes a worker read.

Measured per ~20 MB original (scripts/bench_pack.py): JPEG is decoded by libjpeg-turbo's
scaled IDCT through simplejpeg, at the smallest DCT scale that still covers the target;
TIFF by tifffile (about 2.5x faster than OpenCV on 16-bit RGB, which OpenCV reads through an
RGBA strip reader); PNG, BMP and WebP by OpenCV.  Pillow handles what those decline (CMYK
JPEG, palette and exotic modes, unusual TIFF codecs) and explains errors.

Every decoder reads the bytes the worker read once (``originals.read_original``): those bytes
are also the ones hashed, so pixels and digest always describe the same content.  The memory a
decode will take is known from the header (``decode_peak_bytes``) and checked before decoding.
"""

from __future__ import annotations

import io
import logging
import math
import warnings

import cv2
import numpy as np
import simplejpeg
import tifffile
from PIL import Image, UnidentifiedImageError

from .errors import BadImage

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

PNG_CHANNELS = {0: 1, 2: 3, 3: 4, 4: 4, 6: 4}  # by colour type, as OpenCV returns them


def open_header(data: bytes) -> Image.Image:
    """Parse the header only (Pillow opens lazily); raises BadImage."""
    if not data:
        raise BadImage("empty", "zero-byte file")
    try:
        return Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        if data.startswith(IMAGE_SIGNATURES):
            raise BadImage("corrupt", "image header is damaged or cut short") from None
        raise BadImage("not_an_image", "not a recognised image format") from None
    except (OSError, ValueError, SyntaxError) as exc:
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


def jpeg_scale(width: int, height: int, need_w: int, need_h: int) -> tuple[int, int]:
    """The size libjpeg-turbo decodes to: the smallest n/8 scale covering (need_w, need_h)."""
    for eighths in range(1, 9):
        scaled = math.ceil(width * eighths / 8), math.ceil(height * eighths / 8)
        if scaled[0] >= need_w and scaled[1] >= need_h:
            return scaled
    return width, height


def decode_peak_bytes(image: Image.Image, data: bytes, need_w: int, need_h: int,
                      rotated: bool) -> int:
    """Memory the decode of ``image`` takes at its peak, from the header alone.

    The file's bytes, plus the decoded pixels (the reduced size for JPEG) at their real depth
    (a 16-bit RGBA PNG is 8 bytes a pixel), twice for OpenCV's decoders (measured: ``imdecode``
    peaks at twice its output), once more for the copy an EXIF rotation makes.
    """
    width, height = image.size
    if image.format == "JPEG":
        width, height = jpeg_scale(width, height, need_w, need_h)
        return len(data) + width * height * (4 if image.mode == "CMYK" else 3) * (
            2 if rotated else 1)
    if image.format == "PNG" and data[12:16] == b"IHDR":
        depth, colour_type = data[24], data[25]
        per_pixel = PNG_CHANNELS.get(colour_type, 4) * (2 if depth == 16 else 1)
        copies = 2
    elif image.format == "TIFF":
        bits = image.tag_v2.get(258, (8,))
        bits = bits if isinstance(bits, tuple) else (bits,)
        samples = image.tag_v2.get(277, len(bits))
        per_pixel = max(1, samples) * math.ceil(max(bits) / 8)
        copies = 1  # tifffile decodes strip by strip into its output
    else:
        per_pixel = 4 * (2 if "16" in image.mode else 1)
        copies = 2
    decoded = width * height * per_pixel
    return len(data) + decoded * (copies + (1 if rotated else 0))


def decode_pixels(data: bytes, image: Image.Image, need_w: int, need_h: int):
    """Decode at the smallest size >= (need_w, need_h) the codec offers, else full size.

    Returns (uint8 or uint16 array, True when colour channels are in BGR order).
    """
    if image.format == "JPEG":
        if image.mode in ("RGB", "L"):
            colorspace = "GRAY" if image.mode == "L" else "RGB"
            pixels = simplejpeg.decode_jpeg(
                data, colorspace=colorspace, min_width=need_w, min_height=need_h, strict=True
            )
            return (pixels[:, :, 0] if colorspace == "GRAY" else pixels), False
    elif image.format == "TIFF":
        pixels = _decode_tiff(data)
        if pixels is not None:
            return pixels, False
    else:
        pixels = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
        if pixels is not None and pixels.dtype in (np.uint8, np.uint16):
            if pixels.ndim == 3 and pixels.shape[2] == 1:
                pixels = pixels[:, :, 0]
            return pixels, pixels.ndim == 3
    return _decode_with_pillow(image, need_w, need_h), False


def _decode_tiff(data: bytes) -> np.ndarray | None:
    """First page of a TIFF as gray, RGB or RGBA uint8/uint16; None to let Pillow try."""
    try:
        with tifffile.TiffFile(io.BytesIO(data)) as tiff:
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
