"""Original → training-size baseline JPEGs.  Runs in the worker processes.

One path for every sample: decode (reduced) → orient → resize per mode (crop, area resize,
alpha, 16 → 8 bit) → colour → letterbox → cut into windows → encode.  The pixels the windows
are cut from are a ``Frame``; a resize mode gives one window (the whole frame: a grid of one
tile), ``image.tiles`` the tiles of ``tiling.grid``.  ``annotated`` carries objects and masks
through the same frame's ``Placement`` and the same windows.

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
from PIL import Image

from ..annotations.geometry import TRANSPOSING, Placement, decode_scale, orient_pixels
from ..config import ImageConfig
from ..dataset.records import (
    CONTENT_PREFIX,
    Reject,
    Sample,
    Unchanged,
    content_digest,
    digest_as,
    edges_digest,
    edges_digest_of,
)
from ..decoders import decode_peak_bytes, decode_pixels, open_header, orientation
from ..errors import BadImage
from ..tiling import Tile, TileSettings, grid, scaled_size
from .originals import UNCAPPED, open_source, original_cap, read_all, read_edges
from .plan import PlanItem

TRANSPOSING_ORIENTATIONS = TRANSPOSING  # the orientations that swap width and height
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


class Layout(NamedTuple):
    """What an upright original becomes: ``geometry`` (crop → size → canvas), decoded at
    ``need`` pixels or more, cut into windows of ``window`` pixels (the canvas or the resized
    image itself for a resize mode, a tile's side for tiles)."""

    geometry: Geometry
    need: tuple[int, int]
    window: tuple[int, int]


class Frame(NamedTuple):
    """An original made into the uint8 pixels (H×W or H×W×3, RGB) its samples are cut from.

    ``header``: (upright width, upright height, mode, format) of the original;
    ``placement``: where the upright original lands in ``pixels`` (the map annotations
    follow); ``windows``: the samples' rectangles in ``pixels``, grid order (one, the whole
    frame, without tiles), each encoded at ``window`` (width, height) pixels.
    """

    pixels: np.ndarray
    header: tuple[int, int, str, str]
    placement: Placement
    windows: tuple[Tile, ...]
    window: tuple[int, int]


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
    """Decode and resize to the final uint8 pixels (H×W or H×W×3, RGB): the one window of
    the frame.  Returns the pixels and (upright width, upright height, mode, format) of the
    original."""
    frame = decode_frame(data, config)
    return window_pixels(frame, frame.windows[0], config), frame.header


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


def layout(width: int, height: int, config: ImageConfig,
           tiles: TileSettings | None = None) -> Layout:
    """The ``Layout`` of an upright ``width`` x ``height`` original: by the resize mode, or,
    with ``tiles``, the whole original scaled by ``tiles.scale`` and cut into tiles."""
    if tiles is None:
        geometry = plan_geometry(width, height, config)
        crop_w, crop_h = geometry.crop[2:]
        need = (math.ceil(geometry.size[0] * width / crop_w),
                math.ceil(geometry.size[1] * height / crop_h))
        return Layout(geometry, need, geometry.canvas or geometry.size)
    geometry = Geometry((0, 0, width, height), scaled_size(width, height, tiles.scale), None)
    need = math.ceil(width * tiles.scale), math.ceil(height * tiles.scale)
    return Layout(geometry, need, (tiles.size, tiles.size))


class FramePlan(NamedTuple):
    """Where an upright original lands in its frame, known without a pixel: the
    ``placement`` annotations follow, the ``windows`` (grid order) and their ``window`` size,
    and the decoded pixels the resize shows exactly (``used``: x, y, width, height)."""

    placement: Placement
    windows: tuple[Tile, ...]
    window: tuple[int, int]
    used: tuple[int, int, int, int]


def plan_frame(upright: tuple[int, int], decoded: tuple[int, int], config: ImageConfig,
               tiles: TileSettings | None = None) -> FramePlan:
    """The ``FramePlan`` of an upright original of ``upright`` (width, height) pixels decoded
    upright at ``decoded`` pixels: a function of header facts (size, EXIF orientation, decode
    scale) and the config only, so objects and masks can be derived again without decoding
    (``decode_frame`` cuts the pixels by this very plan)."""
    width, height = upright
    geometry = layout(width, height, config, tiles).geometry
    x0, y0, used_w, used_h = used = _used_source(decoded, geometry, width, height)
    content_w, content_h = geometry.size
    left = top = 0
    frame_w, frame_h = geometry.size
    if geometry.canvas is not None:  # the letterbox: the resized image centred on the canvas
        frame_w, frame_h = geometry.canvas
        left, top = (frame_w - content_w) // 2, (frame_h - content_h) // 2
    scale_x, scale_y = content_w / used_w, content_h / used_h
    decode_x, decode_y = decode_scale(upright, decoded)  # n/8 after a reduced DCT decode
    placement = Placement(
        decode_x * scale_x, decode_y * scale_y, left - x0 * scale_x, top - y0 * scale_y,
        (float(left), float(top), float(left + content_w), float(top + content_h)),
        (frame_w, frame_h))
    if tiles is None:
        return FramePlan(placement, (Tile(0, 0, 0, 0, frame_w, frame_h),), (frame_w, frame_h),
                         used)
    return FramePlan(placement, tuple(grid(frame_w, frame_h, tiles)), (tiles.size, tiles.size),
                     used)


def decode_frame(data: bytes, config: ImageConfig, extra_bytes: int = 0,
                 tiles: TileSettings | None = None) -> Frame:
    """Decode, orient, resize, colour and letterbox an original into the ``Frame`` its
    samples are cut from; raises BadImage.  ``extra_bytes``: memory the caller needs beside
    the decode; ``tiles``: cut it into tiles (None: one window, the whole frame)."""
    upright = decode_upright(data, config,
                             lambda width, height: layout(width, height, config, tiles),
                             extra_bytes)
    width, height = upright.header[:2]
    geometry = layout(width, height, config, tiles).geometry
    decoded = (upright.pixels.shape[1], upright.pixels.shape[0])
    plan = plan_frame((width, height), decoded, config, tiles)
    # OpenCV decodes colour as BGR(A); the channel swap waits for the small image.
    background = config.background[::-1] if upright.bgr else config.background
    pixels = resize(upright.pixels, geometry, width, height, background)[0]
    pixels = to_output_color(pixels, upright.bgr, config)
    if geometry.canvas is not None:
        left, top = int(plan.placement.window[0]), int(plan.placement.window[1])
        pixels = pad(pixels, (left, top), geometry.canvas, pad_fill(pixels, config))
    return Frame(np.ascontiguousarray(pixels), upright.header, plan.placement, plan.windows,
                 plan.window)


def window_pixels(frame: Frame, tile: Tile, config: ImageConfig) -> np.ndarray:
    """The pixels of one window of ``frame``, ``frame.window`` in size (padded with
    ``image.pad_color`` at its right and bottom where the frame ends first)."""
    return cut_window(frame.pixels, tile, frame.window, pad_fill(frame.pixels, config))


def cut_window(pixels: np.ndarray, tile: Tile, size: tuple[int, int],
               fill: int | tuple[int, ...]) -> np.ndarray:
    """``tile``'s rectangle of ``pixels`` (an image or a class mask) as a contiguous
    ``size`` (width, height) array, filled with ``fill`` right and bottom of the rectangle."""
    part = pixels[tile.y : tile.y + tile.height, tile.x : tile.x + tile.width]
    if part.shape[:2] == (size[1], size[0]):
        return np.ascontiguousarray(part)
    return pad(part, (0, 0), size, fill)


def pad(pixels: np.ndarray, at: tuple[int, int], size: tuple[int, int],
        fill: int | tuple[int, ...]) -> np.ndarray:
    """``pixels`` at ``at`` (left, top) of a new ``size`` (width, height) array of ``fill``."""
    width, height = size
    out = np.empty((height, width) + pixels.shape[2:], pixels.dtype)
    out[...] = fill
    left, top = at
    out[top : top + pixels.shape[0], left : left + pixels.shape[1]] = pixels
    return out


def pad_fill(pixels: np.ndarray, config: ImageConfig) -> int | tuple[int, int, int]:
    """``image.pad_color`` for ``pixels``: the colour, or its luma rounded for gray pixels."""
    return config.pad_color if pixels.ndim == 3 else round(luma(config.pad_color))


def decode_upright(data: bytes, config: ImageConfig, plan: Callable[[int, int], Layout],
                   extra_bytes: int = 0) -> Upright:
    """Decode ``data`` upright at the smallest size covering ``plan(width, height).need``
    (of the upright original); raises BadImage for bombs, over-budget and damaged files.

    What ``plan`` makes of the upright original counts against ``image.max_decoded_mb`` with
    the decode (``result_bytes``), so an output larger than the budget (a 16384-pixel canvas
    or tile of a 40x30 original) is refused before anything is allocated.
    """
    with open_header(data) as image:
        stored_width, stored_height = stored_size(image)
        if stored_width * stored_height > config.max_pixels:
            raise BadImage(
                "too_large",
                f"{stored_width}x{stored_height} = {stored_width * stored_height / 1e6:.0f} MP "
                f"is over the limit of {config.max_pixels / 1e6:.0f} MP (image.max_pixels)",
            )
        rotation = orientation(image)
        transposed = rotation in TRANSPOSING
        width, height = (stored_height, stored_width) if transposed else \
            (stored_width, stored_height)
        planned = plan(width, height)
        # Smallest decode that still covers the target after cropping, in stored orientation.
        need_w, need_h = planned.need
        if transposed:
            need_w, need_h = need_h, need_w
        made = Output(planned.geometry.size, planned.window)
        peak = budget_bytes(image, data, len(data), (need_w, need_h), rotation, made,
                            config) + extra_bytes
        if peak > config.max_decoded_mb * 2**20:
            raise BadImage(
                "too_large",
                f"{stored_width}x{stored_height} {image.format} ({image.mode}) needs about "
                f"{peak / 2**20:,.0f} MiB to decode and make its {made.final[0]}x"
                f"{made.final[1]} output, over the limit of {config.max_decoded_mb:,} MiB a "
                "worker (image.max_decoded_mb)",
            )
        # BadImage only: any decoder error is a reject there (``decoders.foreign_errors``).
        pixels, bgr = decode_pixels(data, image, need_w, need_h)
        header = (width, height, image.mode, image.format or "unknown")

    decoded_stored = (pixels.shape[1], pixels.shape[0])
    scale = decode_scale((stored_width, stored_height), decoded_stored)
    pixels = orient_pixels(pixels, rotation)
    return Upright(pixels, bgr, header, rotation, (stored_width, stored_height),
                   scale[::-1] if transposed else scale)


def budget_bytes(image: Image.Image, data: bytes, size: int, need: tuple[int, int],
                 rotation: int, made: Output, config: ImageConfig) -> int:
    """The memory that ``image.max_decoded_mb`` bounds, from the header alone: decoding the
    ``size``-byte original whose first bytes (or all of them) are ``data`` at ``need``
    (stored orientation) and making ``made`` of it (``result_bytes``)."""
    alpha = image.mode in ALPHA_MODES or "transparency" in image.info
    deep = "16" in image.mode or image.mode in ("I", "F")
    return (decode_peak_bytes(image, data, *need, rotation != 1) + size - len(data)
            + result_bytes(made, config, alpha, 2 if deep else 1))


def stored_size(image: Image.Image) -> tuple[int, int]:
    """The (width, height) of the pixels as stored in the file, which every decoder here
    returns.  Pillow reports a TIFF whose orientation turns it (5 to 8) at its upright size
    (its own ``load`` turns the pixels); tifffile reads them as stored, so a TIFF taken at
    Pillow's size was resized squeezed and its masks refused as the wrong size."""
    if image.format == "TIFF":
        width, height = image.tag_v2.get(256), image.tag_v2.get(257)  # checked by Pillow's open
        if isinstance(width, int) and isinstance(height, int):
            return width, height
    return image.size


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


def resize(
    pixels: np.ndarray,
    geometry: Geometry,
    width: int,
    height: int,
    background: tuple[int, int, int],
) -> tuple[np.ndarray, tuple[int, int, int, int]]:
    """Crop (scaled to the decoded size), premultiply alpha, resize, composite, 16 → 8 bit;
    returns uint8 pixels and the decoded pixels they show exactly: (x, y, width, height)."""
    x0, y0, x1, y1 = _crop_source((pixels.shape[1], pixels.shape[0]), geometry, width, height)
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


def _crop_source(decoded: tuple[int, int], geometry: Geometry, width: int,
                 height: int) -> tuple[int, int, int, int]:
    """The decoded pixels (x0, y0, x1, y1) the crop of ``geometry`` keeps, the crop scaled to
    the decoded size."""
    decoded_w, decoded_h = decoded
    crop_x, crop_y, crop_w, crop_h = geometry.crop
    if (crop_w, crop_h) == (width, height):
        return 0, 0, decoded_w, decoded_h
    scale_x, scale_y = decoded_w / width, decoded_h / height
    x0, y0 = round(crop_x * scale_x), round(crop_y * scale_y)
    return (x0, y0, min(decoded_w, x0 + max(1, round(crop_w * scale_x))),
            min(decoded_h, y0 + max(1, round(crop_h * scale_y))))


def _used_source(decoded: tuple[int, int], geometry: Geometry, width: int,
                 height: int) -> tuple[int, int, int, int]:
    """The decoded pixels (x, y, width, height) that ``resize`` shows exactly: the crop, less
    what the integer-factor step trims."""
    x0, y0, x1, y1 = _crop_source(decoded, geometry, width, height)
    trim_x, trim_y, used_w, used_h = _area_source(x1 - x0, y1 - y0, geometry.size)
    return x0 + trim_x, y0 + trim_y, used_w, used_h


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
        bg = np.float32(luma(background))
    else:
        bg = np.asarray(background, np.float32)
    out = np.clip(np.rint(colour + transparency * bg), 0, 255).astype(np.uint8)
    return out[:, :, 0] if out.shape[2] == 1 else out


def _to_8bit(pixels: np.ndarray) -> np.ndarray:
    """Scale the full 16-bit range to 8 bits, rounded (x·255/65535): not by saturation."""
    return cv2.convertScaleAbs(pixels, alpha=255.0 / 65535.0)


def luma(rgb: tuple[int, int, int]) -> float:
    """The gray level of an RGB colour (ITU-R BT.601 weights, as OpenCV's RGB2GRAY)."""
    red, green, blue = rgb
    return 0.299 * red + 0.587 * green + 0.114 * blue


def to_output_color(pixels: np.ndarray, bgr: bool, config: ImageConfig) -> np.ndarray:
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


def encode_jpeg(pixels: np.ndarray, config: ImageConfig) -> bytes:
    """Baseline JPEG (libjpeg-turbo via simplejpeg), configured quality and subsampling."""
    if pixels.ndim == 2:
        return simplejpeg.encode_jpeg(
            pixels[:, :, None], quality=config.quality, colorspace="GRAY", colorsubsampling="Gray"
        )
    return simplejpeg.encode_jpeg(
        pixels, quality=config.quality, colorspace="RGB", colorsubsampling=config.subsampling
    )
