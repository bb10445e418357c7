"""Original → training-size baseline JPEG.  Runs in the worker processes.

The path is chosen for speed without losing fidelity:

* Decoding (``decoders``) never produces pixels we would throw away: JPEG originals are
  decoded at a reduced DCT scale that still leaves at least the target size.
* Resizing uses OpenCV ``INTER_AREA`` (area averaging: the right antialiasing for downscales),
  large reductions in two steps (an exact integer factor first, which is much faster).
* 16-bit data is resized at 16 bit and only then scaled to 8 bit (x·255/65535, rounded).
* Alpha is composited on the background after a premultiplied resize, which equals
  compositing at full resolution (area resizing is linear) on a fraction of the pixels.

``process`` never raises for a bad file: it returns a ``Reject`` with a reason.  Memory is
bounded per worker by ``image.max_decoded_mb``: an original holding more bytes than that is
refused before it is read (``originals.original_cap``), the rest is checked from the header
before decoding: the decode and what it is made into (the resized pixels, a letterbox canvas
or tile, the encoder's buffer, ``result_bytes``) count together.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable
from typing import NamedTuple

import cv2
import numpy as np
import simplejpeg

from .annotations.geometry import Placement, decode_scale
from .config import ImageConfig
from .decoders import decode_peak_bytes, decode_pixels, open_header, orientation
from .errors import BadImage
from .originals import UNCAPPED, open_source, original_cap, read_all, read_edges
from .plan import PlanItem
from .records import (
    CONTENT_PREFIX,
    Reject,
    Sample,
    Unchanged,
    content_digest,
    digest_as,
    edges_digest,
    edges_digest_of,
)

TRANSPOSING_ORIENTATIONS = (5, 6, 7, 8)
# Bytes a pixel of the resized content may take beside the decode: the resize's output (at most
# 4 channels at the original's depth) and one 8-bit copy (to 8 bits, to RGB order or from gray);
# with alpha, the premultiplied result composited in float32 (colour, transparency, their blend
# and its rounding: 40 more).
RESULT_COPY_BYTES_PER_PIXEL = 3
ALPHA_BYTES_PER_PIXEL = 40
ALPHA_MODES = ("RGBA", "RGBa", "LA", "La", "PA")


class Output(NamedTuple):
    """What one original becomes, in pixels: the resized ``content`` and the ``final`` image
    encoded from it (a letterbox canvas, a tile, or the content itself)."""

    content: tuple[int, int]
    final: tuple[int, int]


class Encoded(NamedTuple):
    jpeg: bytes
    width: int
    height: int
    channels: int
    original_width: int
    original_height: int
    original_mode: str
    original_format: str


class Geometry(NamedTuple):
    """Resize plan in upright coordinates: crop (x, y, w, h) of the source → ``size`` → canvas."""

    crop: tuple[int, int, int, int]
    size: tuple[int, int]
    canvas: tuple[int, int] | None


def process(item: PlanItem, root: str, config: ImageConfig, follow_symlinks: bool = False,
            digest_kind: str = "content") -> Sample | Reject | Unchanged:
    """Turn one original into a Sample, or a Reject saying why it could not be.

    The file is read once; its bytes are hashed and decoded.  When the item carries the digest
    of the sample already packed (its stat changed since), equal content returns ``Unchanged``
    and nothing is decoded; with ``digest_kind="edges"`` only its first and last 64 KiB are
    read for that check.
    """
    relpath = item.source.relpath
    try:
        read = read_source(item, root, follow_symlinks, digest_kind, original_cap(config))
        if isinstance(read, Unchanged):
            return read
        data, info, digest = read
        encoded = convert(data, config)
    except BadImage as exc:
        return Reject(relpath, exc.reason, exc.detail)
    except OSError as exc:  # the file system, not the image: permissions, NAS errors, gone
        return Reject(relpath, "unreadable", f"cannot read file: {exc.strerror or exc}")
    return Sample(
        key=item.key,
        relpath=relpath,
        split=item.split,
        label=item.source.label,
        source_size=info.st_size,
        source_mtime_ns=info.st_mtime_ns,
        source_digest=digest,
        **encoded._asdict(),
    )


def read_source(item: PlanItem, root: str, follow_symlinks: bool, digest_kind: str,
                cap: int = UNCAPPED) -> tuple[bytes, os.stat_result, str] | Unchanged:
    """The original's bytes, stat and digest; ``Unchanged`` when the item carries the digest
    of its packed sample and the content still has it.  Raises BadImage or OSError.

    One open (``originals.open_source``: the file the scan saw, never through a link, at most
    ``cap`` bytes, checked before reading); the edges check and the whole read share it.
    """
    relpath = item.source.relpath
    expected = item.expected_digest
    with open_source(root, relpath, follow_symlinks, cap, item.source.identity) as handle:
        info = handle.info
        if expected and not expected.startswith(CONTENT_PREFIX) and digest_kind == "edges":
            head, tail = read_edges(handle)
            if edges_digest_of(handle.size, head, tail) == expected:
                return Unchanged(relpath, expected, handle.size, info.st_mtime_ns)
        data = read_all(handle)
    digest = content_digest(data) if digest_kind == "content" else edges_digest(data)
    if expected:  # the digest just made serves when it is of the expected kind
        same_kind = expected.startswith(CONTENT_PREFIX) == digest.startswith(CONTENT_PREFIX)
        if (digest if same_kind else digest_as(expected, data)) == expected:
            return Unchanged(relpath, digest, info.st_size, info.st_mtime_ns)
    return data, info, digest


def convert(data: bytes, config: ImageConfig) -> Encoded:
    """Decode an original's bytes, orient, normalise, resize, encode; raises BadImage."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Pillow's warnings on damaged files: we reject instead
        pixels, header = decode(data, config)
    jpeg = encode_jpeg(pixels, config)
    height, width = pixels.shape[:2]
    channels = 1 if pixels.ndim == 2 else pixels.shape[2]
    return Encoded(jpeg, width, height, channels, *header)


def decode(data: bytes, config: ImageConfig) -> tuple[np.ndarray, tuple[int, int, str, str]]:
    """Decode and resize to the final uint8 pixels (H×W or H×W×3, RGB).

    Returns the pixels and (upright width, upright height, mode, format) of the original.
    """
    pixels, header, _ = decode_placed(data, config)
    return pixels, header


class Upright(NamedTuple):
    """An original decoded (maybe at a reduced DCT scale) and turned upright.

    ``scale`` is decoded pixels per original pixel (x, y); ``stored`` the file's own size and
    ``rotation`` its EXIF orientation.
    """

    pixels: np.ndarray
    bgr: bool
    header: tuple[int, int, str, str]
    rotation: int
    stored: tuple[int, int]
    scale: tuple[float, float]


def decode_placed(data: bytes, config: ImageConfig,
                  extra_bytes: int = 0) -> tuple[np.ndarray, tuple[int, int, str, str], Placement]:
    """``decode``, and where the upright original lands in the result (``Placement``: the
    map annotations follow).  ``extra_bytes``: memory the caller needs beside the decode."""

    def needed(width: int, height: int) -> tuple[int, int]:
        geometry = plan_geometry(width, height, config)
        crop_w, crop_h = geometry.crop[2:]
        return (math.ceil(geometry.size[0] * width / crop_w),
                math.ceil(geometry.size[1] * height / crop_h))

    def output(width: int, height: int) -> Output:
        geometry = plan_geometry(width, height, config)
        return Output(geometry.size, geometry.canvas or geometry.size)

    upright = decode_upright(data, config, needed, extra_bytes, output)
    width, height = upright.header[:2]
    geometry = plan_geometry(width, height, config)
    # OpenCV decodes colour as BGR(A); the channel swap waits for the small image.
    background = config.background[::-1] if upright.bgr else config.background
    pixels, used = _resize(upright.pixels, geometry, width, height, background)
    pixels = _to_output_color(pixels, upright.bgr, config)
    left = top = 0
    if geometry.canvas is not None:
        pixels, (left, top) = _letterbox(pixels, geometry.canvas, config)
    x0, y0, used_w, used_h = used
    content_w, content_h = geometry.size
    scale_x, scale_y = content_w / used_w, content_h / used_h
    placement = Placement(
        upright.scale[0] * scale_x, upright.scale[1] * scale_y,
        left - x0 * scale_x, top - y0 * scale_y,
        (float(left), float(top), float(left + content_w), float(top + content_h)),
        (pixels.shape[1], pixels.shape[0]))
    return np.ascontiguousarray(pixels), upright.header, placement


def decode_upright(data: bytes, config: ImageConfig,
                   needed: Callable[[int, int], tuple[int, int]],
                   extra_bytes: int = 0,
                   output: Callable[[int, int], Output] | None = None) -> Upright:
    """Decode ``data`` upright at the smallest size covering ``needed(width, height)`` (of the
    upright original); raises BadImage for bombs, over-budget and damaged files.

    ``output(width, height)``: what the caller makes of the upright original; its pixels
    (``result_bytes``) count against ``image.max_decoded_mb`` with the decode's, so an output
    larger than the budget (a 16384-pixel canvas or tile of a 40x30 original) is refused
    before anything is allocated.
    """
    with open_header(data) as image:
        stored_width, stored_height = image.size
        if stored_width * stored_height > config.max_pixels:
            raise BadImage(
                "too_large",
                f"{stored_width}x{stored_height} = {stored_width * stored_height / 1e6:.0f} MP "
                f"is over the limit of {config.max_pixels / 1e6:.0f} MP (image.max_pixels)",
            )
        rotation = orientation(image)
        transposed = rotation in TRANSPOSING_ORIENTATIONS
        width, height = (stored_height, stored_width) if transposed else image.size
        # Smallest decode that still covers the target after cropping, in stored orientation.
        need_w, need_h = needed(width, height)
        if transposed:
            need_w, need_h = need_h, need_w
        peak = decode_peak_bytes(image, data, need_w, need_h, rotation != 1) + extra_bytes
        made = output(width, height) if output is not None else None
        if made is not None:
            alpha = image.mode in ALPHA_MODES or "transparency" in image.info
            deep = "16" in image.mode or image.mode in ("I", "F")
            peak += result_bytes(made, config, alpha, 2 if deep else 1)
        if peak > config.max_decoded_mb * 2**20:
            making = f" and make its {made.final[0]}x{made.final[1]} output" if made else ""
            raise BadImage(
                "too_large",
                f"{stored_width}x{stored_height} {image.format} ({image.mode}) needs about "
                f"{peak / 2**20:,.0f} MiB to decode{making}, over the limit of "
                f"{config.max_decoded_mb:,} MiB a worker (image.max_decoded_mb)",
            )
        # BadImage only: any decoder error is a reject there (``decoders.foreign_errors``).
        pixels, bgr = decode_pixels(data, image, need_w, need_h)
        header = (width, height, image.mode, image.format or "unknown")

    decoded_stored = (pixels.shape[1], pixels.shape[0])
    scale = decode_scale((stored_width, stored_height), decoded_stored)
    pixels = _apply_orientation(pixels, rotation)
    return Upright(pixels, bgr, header, rotation, (stored_width, stored_height),
                   scale[::-1] if transposed else scale)


def result_bytes(output: Output, config: ImageConfig, alpha: bool, depth: int = 1) -> int:
    """Memory an image's output takes beside its decode: the resized content (4 channels of
    ``depth`` bytes at most) and the copies colour handling makes, then the final pixels and
    the JPEG encoder's buffer, which libjpeg-turbo sizes for the raw pixels at the worst."""
    per_pixel = 4 * depth + RESULT_COPY_BYTES_PER_PIXEL + (ALPHA_BYTES_PER_PIXEL if alpha else 0)
    channels = 1 if config.color == "gray" else 3
    content_w, content_h = output.content
    final_w, final_h = output.final
    return content_w * content_h * per_pixel + 2 * final_w * final_h * channels


def plan_geometry(width: int, height: int, config: ImageConfig) -> Geometry:
    """Where each resize mode crops and what size it produces (never upscales unless asked)."""
    target = config.size
    full = (0, 0, width, height)

    def scaled(scale: float, w: int, h: int) -> tuple[int, int]:
        if scale > 1 and not config.upscale:
            scale = 1.0
        return max(1, round(w * scale)), max(1, round(h * scale))

    if config.resize == "fit":
        return Geometry(full, scaled(target / max(width, height), width, height), None)
    if config.resize == "shorter":
        return Geometry(full, scaled(target / min(width, height), width, height), None)
    if config.resize == "center_crop":
        side = min(width, height)
        crop = ((width - side) // 2, (height - side) // 2, side, side)
        return Geometry(crop, scaled(target / side, side, side), None)
    if config.resize == "pad":
        size = scaled(target / max(width, height), width, height)
        return Geometry(full, size, (max(target, size[0]), max(target, size[1])))
    # stretch
    if config.upscale:
        return Geometry(full, (target, target), None)
    return Geometry(full, (min(width, target), min(height, target)), None)


def _apply_orientation(pixels: np.ndarray, orientation: int) -> np.ndarray:
    """Rotate/flip stored pixels upright according to the EXIF orientation tag."""
    if orientation == 2:
        pixels = pixels[:, ::-1]
    elif orientation == 3:
        pixels = pixels[::-1, ::-1]
    elif orientation == 4:
        pixels = pixels[::-1]
    elif orientation == 5:
        pixels = pixels.swapaxes(0, 1)
    elif orientation == 6:
        pixels = pixels.swapaxes(0, 1)[:, ::-1]
    elif orientation == 7:
        pixels = pixels.swapaxes(0, 1)[::-1, ::-1]
    elif orientation == 8:
        pixels = pixels.swapaxes(0, 1)[::-1]
    return np.ascontiguousarray(pixels) if orientation != 1 else pixels


def _resize(
    pixels: np.ndarray,
    geometry: Geometry,
    width: int,
    height: int,
    background: tuple[int, int, int],
) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """Crop (scaled to the decoded size), premultiply alpha, resize; returns uint8 or uint16,
    and the decoded pixels the result shows exactly: (x, y, width, height)."""
    decoded_h, decoded_w = pixels.shape[:2]
    crop_x, crop_y, crop_w, crop_h = geometry.crop
    x0 = y0 = 0
    if (crop_w, crop_h) != (width, height):
        scale_x, scale_y = decoded_w / width, decoded_h / height
        x0, y0 = round(crop_x * scale_x), round(crop_y * scale_y)
        x1 = min(decoded_w, x0 + max(1, round(crop_w * scale_x)))
        y1 = min(decoded_h, y0 + max(1, round(crop_h * scale_y)))
        pixels = pixels[y0:y1, x0:x1]
    trim_x, trim_y, used_w, used_h = _area_source(pixels.shape[1], pixels.shape[0],
                                                  geometry.size)
    used = (x0 + trim_x, y0 + trim_y, used_w, used_h)
    has_alpha = pixels.ndim == 3 and pixels.shape[2] in (2, 4)
    if has_alpha:
        pixels = _premultiply(pixels)
    pixels = _resize_to(pixels, geometry.size)
    if has_alpha:
        return _composite(pixels, background), used
    if pixels.dtype == np.uint16:
        return _to_8bit(pixels), used
    return pixels, used


def _resize_to(pixels: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Area-average down (cubic up) to ``size``.

    Large reductions go in two steps: an exact integer-factor area reduction, which OpenCV
    runs several times faster than a fractional one, then the fractional rest.  The integer
    step trims the < factor pixels that do not fill a whole block, evenly from both edges.
    """
    target_w, target_h = size
    height, width = pixels.shape[:2]
    if (width, height) == (target_w, target_h):
        return pixels
    if target_w > width or target_h > height:
        return cv2.resize(np.ascontiguousarray(pixels), size, interpolation=cv2.INTER_CUBIC)
    factor = min(width // target_w, height // target_h)
    if factor >= 2:
        left, top, used_w, used_h = _area_source(width, height, size)
        block = pixels[top : top + used_h, left : left + used_w]
        # A trimmed view, not a copy: OpenCV reads row-strided arrays as they are.
        pixels = cv2.resize(block, (width // factor, height // factor),
                            interpolation=cv2.INTER_AREA)
    if pixels.shape[1::-1] != (target_w, target_h):
        pixels = cv2.resize(pixels, size, interpolation=cv2.INTER_AREA)
    return pixels


def _area_source(width: int, height: int, size: tuple[int, int]) -> tuple[int, int, int, int]:
    """The part (x, y, width, height) of a ``width`` x ``height`` image that ``_resize_to``
    maps onto ``size``: all of it, less the pixels the integer-factor step trims."""
    target_w, target_h = size
    if target_w > width or target_h > height or (width, height) == size:
        return 0, 0, width, height
    factor = min(width // target_w, height // target_h)
    if factor < 2:
        return 0, 0, width, height
    trim_x, trim_y = width % factor, height % factor
    return trim_x // 2, trim_y // 2, width - trim_x, height - trim_y


def _premultiply(pixels: np.ndarray) -> np.ndarray:
    """Colour × alpha / 255 (rounded), in place and in row blocks: no full-size temporaries."""
    if pixels.dtype == np.uint16:
        pixels = _to_8bit(pixels)
    elif not pixels.flags.writeable:
        pixels = pixels.copy()
    for top in range(0, pixels.shape[0], 256):
        block = pixels[top : top + 256]
        colour = block[:, :, :-1].astype(np.uint16)
        colour *= block[:, :, -1:]
        colour += 127
        colour //= 255
        block[:, :, :-1] = colour
    return pixels


def _composite(premultiplied: np.ndarray, background: tuple[int, int, int]) -> np.ndarray:
    """Blend premultiplied colour over the background; output keeps the colour channel count."""
    colour = premultiplied[:, :, :-1].astype(np.float32)
    transparency = (255.0 - premultiplied[:, :, -1:].astype(np.float32)) / 255.0
    if colour.shape[2] == 1:
        bg = np.float32(_luma(background))
    else:
        bg = np.asarray(background, np.float32)
    out = np.clip(np.rint(colour + transparency * bg), 0, 255).astype(np.uint8)
    return out[:, :, 0] if out.shape[2] == 1 else out


def _to_8bit(pixels: np.ndarray) -> np.ndarray:
    """Scale the full 16-bit range to 8 bits, rounded (x·255/65535): not by saturation."""
    return cv2.convertScaleAbs(pixels, alpha=255.0 / 65535.0)


def _luma(rgb: tuple[int, int, int]) -> float:
    red, green, blue = rgb
    return 0.299 * red + 0.587 * green + 0.114 * blue


def _to_output_color(pixels: np.ndarray, bgr: bool, config: ImageConfig) -> np.ndarray:
    """RGB channel order, then the configured colour mode (rgb, gray or keep)."""
    if pixels.ndim == 3 and bgr:
        pixels = pixels[:, :, ::-1]
    if config.color == "gray":
        return pixels if pixels.ndim == 2 else cv2.cvtColor(
            np.ascontiguousarray(pixels), cv2.COLOR_RGB2GRAY
        )
    if pixels.ndim == 2 and config.color == "rgb":
        return np.repeat(pixels[:, :, None], 3, axis=2)
    return pixels


def _letterbox(pixels: np.ndarray, canvas: tuple[int, int],
               config: ImageConfig) -> tuple[np.ndarray, tuple[int, int]]:
    """``pixels`` centred on a ``canvas`` of the pad colour; returns it and the offset."""
    canvas_w, canvas_h = canvas
    height, width = pixels.shape[:2]
    fill = config.pad_color if pixels.ndim == 3 else round(_luma(config.pad_color))
    shape = (canvas_h, canvas_w) + pixels.shape[2:]
    out = np.empty(shape, np.uint8)
    out[...] = fill
    top, left = (canvas_h - height) // 2, (canvas_w - width) // 2
    out[top : top + height, left : left + width] = pixels
    return out, (left, top)


def encode_jpeg(pixels: np.ndarray, config: ImageConfig) -> bytes:
    """Baseline JPEG (libjpeg-turbo via simplejpeg), configured quality and subsampling."""
    if pixels.ndim == 2:
        return simplejpeg.encode_jpeg(
            pixels[:, :, None], quality=config.quality, colorspace="GRAY", colorsubsampling="Gray"
        )
    return simplejpeg.encode_jpeg(
        pixels, quality=config.quality, colorspace="RGB", colorsubsampling=config.subsampling
    )
