"""Format decoders: the fastest correct decoder per format, from the bytes a worker read.

Measured per ~20 MB original (scripts/bench_pack.py): JPEG is decoded by libjpeg-turbo's
scaled IDCT through simplejpeg, at the smallest DCT scale that still covers the target;
TIFF by tifffile (about 2.5x faster than OpenCV on 16-bit RGB, which OpenCV reads through an
RGBA strip reader); PNG, BMP and WebP by OpenCV.  Pillow handles what those decline (CMYK
JPEG, palette and exotic modes, unusual TIFF codecs) and explains errors.

Every decoder reads the bytes the worker read once (``originals.open_source``): those bytes
are also the ones hashed, so pixels and digest always describe the same content.  The memory a
decode will take is known from the header (``decode_peak_bytes``) and checked before decoding.
"""

from __future__ import annotations

import io
import logging
import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import cv2
import numpy as np
import simplejpeg
import tifffile
from PIL import Image, UnidentifiedImageError

from .errors import BadImage
from .text import cut, printable

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
DETAIL_CHARS = 120  # of a decoder's own message in a reject
# Gray and RGB TIFFs are read by tifffile; palette, CMYK, YCbCr and inverted ones by Pillow.
TIFFFILE_PHOTOMETRICS = (tifffile.PHOTOMETRIC.MINISBLACK, tifffile.PHOTOMETRIC.RGB)
# The inverse of the turn Pillow's TIFF load makes for each EXIF orientation
# (``ImageOps.exif_transpose``): its own turn but for 6 and 8, which undo each other.
PILLOW_UNDO = {
    2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM, 5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_90, 7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_270,
}


@contextmanager
def foreign_errors(what: str) -> Iterator[None]:
    """Whatever a third-party decoder raises inside this block becomes ``BadImage``.

    Decoders parsing untrusted bytes raise arbitrary exception types on hostile input, not
    only ``OSError``/``ValueError``: tifffile and Pillow were seen raising ``zlib.error``,
    ``ZeroDivisionError`` and ``TypeError`` on a few flipped bits.  Listing types would miss
    the next one and let one bad file kill the job, so at this edge every ``Exception`` that
    is not ours becomes a ``corrupt`` reject naming its type (errors as values at the image
    boundary).  ``BadImage`` passes unchanged.

    ``MemoryError`` is a ``too_large`` reject: our budget (``image.max_decoded_mb``, checked
    from the header) refuses what it can foresee first; a decoder that still asks for more
    than the machine has was misled by a hostile header, and its allocation failed cleanly,
    so the worker carries on.  ``KeyboardInterrupt`` and ``SystemExit`` are not
    ``Exception``s and stop the run as they should.
    """
    try:
        yield
    except BadImage:
        raise
    except MemoryError:
        raise BadImage("too_large", f"{what}: not enough memory to decode") from None
    except Exception as exc:  # see the docstring: any decoder error is a reject
        raise BadImage("corrupt", f"{what}: {foreign_detail(exc)}") from None


def foreign_detail(exc: BaseException) -> str:
    """``<ExceptionType>: <message>`` of a decoder's exception, printable and cut short."""
    message = printable(str(exc))
    kind = type(exc)
    name = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"
    return cut(f"{name}: {message}" if message else name, DETAIL_CHARS)


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
    except MemoryError:
        raise BadImage("too_large", "not enough memory to read the image header") from None
    except Exception as exc:  # any parser error on untrusted bytes is a reject
        raise BadImage("corrupt", f"unreadable image header: {foreign_detail(exc)}") from None


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
    except Exception:  # hostile EXIF raises anything; the decode judges
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
        with foreign_errors("unreadable TIFF tags"):  # a hostile tag holds any type
            bits = image.tag_v2.get(258, (8,))
            bits = bits if isinstance(bits, tuple) else (bits,)
            samples = image.tag_v2.get(277, len(bits))
            per_pixel = max(1, int(samples)) * math.ceil(int(max(bits)) / 8)
            photometric = image.tag_v2.get(262)
        copies = 1  # tifffile decodes strip by strip into its output
        if photometric not in TIFFFILE_PHOTOMETRICS:  # Pillow's load, then its RGB(A) copy
            per_pixel, copies = max(per_pixel, 4), 2
    else:
        per_pixel = 4 * (2 if "16" in image.mode else 1)
        copies = 2
    decoded = width * height * per_pixel
    return len(data) + decoded * (copies + (1 if rotated else 0))


def decode_pixels(data: bytes, image: Image.Image, need_w: int,
                  need_h: int) -> tuple[np.ndarray, bool]:
    """Decode at the smallest size >= (need_w, need_h) the codec offers, else full size.

    Returns (uint8 or uint16 array, True when colour channels are in BGR order).  Raises
    BadImage only: whatever a decoder raises on damaged bytes is a ``corrupt`` reject
    (``foreign_errors``).
    """
    with foreign_errors(f"cannot decode {image.format or 'image'} data"):
        return _decode_pixels(data, image, need_w, need_h)


def _decode_pixels(data: bytes, image: Image.Image, need_w: int,
                   need_h: int) -> tuple[np.ndarray, bool]:
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
            if page.photometric not in TIFFFILE_PHOTOMETRICS:
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
    turned = orientation(image) if image.format == "TIFF" else 1
    image.load()  # raises for truncated or corrupt data
    if turned != 1:
        # Pillow's TIFF load turns the pixels upright by the Orientation tag; callers turn
        # them from the stored orientation, which every other path here returns, so undo it
        # (a palette TIFF with orientation 6 came out turned twice: 180 degrees).
        image = image.transpose(PILLOW_UNDO[turned])
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
