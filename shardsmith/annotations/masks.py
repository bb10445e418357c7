"""Masks in a sample's pixels: reduced so that labels never blend and a defect never vanishes.

A sample pixel covers an area of the original.  Per class, it is marked when any original
pixel of that class overlaps that area with a positive share (a one-pixel crack in an 8000
pixel wide original still marks the 512 pixel wide sample's pixels it crosses); where several
classes overlap one pixel, the class with most original pixels there wins (ties: the lower
id).  The counts come from prefix sums over the original's rows and columns, block by block,
inside each class's bounding box: memory stays a few megabytes beyond the mask itself.

Instances (a polygon, an RLE, a connected region of a PNG mask) are reduced the same way and
stored as uncompressed COCO RLE over the sample (column-major runs, starting with zeros), which
``pycocotools.mask.frPyObjects`` reads as well as shardsmith's readers.
"""

from __future__ import annotations

import math

import cv2
import numpy as np

from .geometry import Placement

EPSILON = 1e-9  # of a pixel: an area that only touches a pixel's edge does not overlap it
ROW_BLOCK = 1024  # original rows summed at once
POLYGON_SHIFT = 8  # fractional bits of polygon vertices when rasterised


def _ranges(first: int, count: int, scale: float, offset: float,
            limit: int) -> tuple[np.ndarray, np.ndarray]:
    """For sample pixels ``first .. first + count - 1`` along one axis: the original pixels
    ``[low, high)`` that overlap each of them, clipped to ``[0, limit)``."""
    edges = (np.arange(first, first + count + 1, dtype=np.float64) - offset) / scale
    low = np.floor(edges[:-1] + EPSILON).astype(np.int64)
    high = np.ceil(edges[1:] - EPSILON).astype(np.int64)
    return np.clip(low, 0, limit), np.clip(high, 0, limit)


def _counts(binary: np.ndarray, columns: tuple[np.ndarray, np.ndarray],
            rows: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """How many pixels of ``binary`` fall in each sample pixel whose original ranges are
    ``columns`` x ``rows`` (relative to ``binary``)."""
    col_low, col_high = columns
    row_low, row_high = rows
    out = np.zeros((len(row_low), len(col_low)), np.int32)
    filled = np.flatnonzero(row_high > row_low)
    if not len(filled) or not np.any(col_high > col_low):
        return out
    start, end = int(filled[0]), int(filled[-1]) + 1
    while start < end:
        stop = start + 1
        while stop < end and row_high[stop] - row_low[start] <= ROW_BLOCK:
            stop += 1
        top, bottom = int(row_low[start]), int(row_high[stop - 1])
        across = np.zeros((bottom - top, binary.shape[1] + 1), np.int32)
        np.cumsum(binary[top:bottom], axis=1, dtype=np.int32, out=across[:, 1:])
        per_column = across[:, col_high] - across[:, col_low]
        down = np.zeros((bottom - top + 1, len(col_low)), np.int32)
        np.cumsum(per_column, axis=0, out=down[1:])
        out[start:stop] = down[row_high[start:stop] - top] - down[row_low[start:stop] - top]
        start = stop
    return out


def _window_pixels(placement: Placement) -> tuple[int, int, int, int]:
    """The sample pixels the original can reach: its window rounded out to whole pixels."""
    width, height = placement.size
    x0, y0, x1, y1 = placement.window
    return (max(0, math.floor(x0)), max(0, math.floor(y0)),
            min(width, math.ceil(x1)), min(height, math.ceil(y1)))


def reduce_patch(patch: np.ndarray, origin: tuple[int, int], placement: Placement,
                 full: tuple[int, int]) -> tuple[np.ndarray, tuple[int, int]]:
    """Per sample pixel, how many pixels of the binary ``patch`` (at ``origin`` in an upright
    original of ``full`` size) it covers, for the sample pixels the patch can reach only:
    (int32 counts, their top-left corner in the sample)."""
    wx0, wy0, wx1, wy1 = _window_pixels(placement)
    left, top = origin
    height, width = patch.shape
    # One pixel of margin: rounding can only widen the reach, and empty ranges count zero.
    x0 = max(wx0, math.floor(left * placement.scale_x + placement.offset_x) - 1)
    y0 = max(wy0, math.floor(top * placement.scale_y + placement.offset_y) - 1)
    x1 = min(wx1, math.ceil((left + width) * placement.scale_x + placement.offset_x) + 1)
    y1 = min(wy1, math.ceil((top + height) * placement.scale_y + placement.offset_y) + 1)
    if x1 <= x0 or y1 <= y0 or not patch.size:
        return np.zeros((0, 0), np.int32), (0, 0)
    col_low, col_high = _ranges(x0, x1 - x0, placement.scale_x, placement.offset_x, full[0])
    row_low, row_high = _ranges(y0, y1 - y0, placement.scale_y, placement.offset_y, full[1])
    columns = (np.clip(col_low - left, 0, width), np.clip(col_high - left, 0, width))
    rows = (np.clip(row_low - top, 0, height), np.clip(row_high - top, 0, height))
    return _counts(patch, columns, rows), (x0, y0)


def class_mask(mask: np.ndarray, placement: Placement) -> np.ndarray:
    """The upright original's class mask (uint8) in the sample's pixels, by the rule above."""
    width, height = placement.size
    identity = (placement.scale_x == 1 and placement.scale_y == 1
                and float(placement.offset_x).is_integer()
                and float(placement.offset_y).is_integer())
    if identity:
        return _shifted(mask, int(placement.offset_x), int(placement.offset_y), (width, height))
    best = np.zeros((height, width), np.uint8)
    best_count = np.zeros((height, width), np.int32)
    present = np.flatnonzero(np.bincount(mask.ravel(), minlength=256)[1:]) + 1
    for value in present.tolist():
        found = binary_patch(mask == value)
        if found is None:
            continue
        counts, (x0, y0) = reduce_patch(*found, placement, mask.shape[::-1])
        region = (slice(y0, y0 + counts.shape[0]), slice(x0, x0 + counts.shape[1]))
        better = counts > best_count[region]
        best[region][better] = value
        best_count[region][better] = counts[better]
    return best


def _shifted(mask: np.ndarray, dx: int, dy: int, size: tuple[int, int]) -> np.ndarray:
    """``mask`` moved by (dx, dy) onto a ``size`` canvas (a tile of a full-resolution image)."""
    width, height = size
    out = np.zeros((height, width), mask.dtype)
    x0, y0 = max(0, dx), max(0, dy)
    x1, y1 = min(width, dx + mask.shape[1]), min(height, dy + mask.shape[0])
    if x1 > x0 and y1 > y0:
        out[y0:y1, x0:x1] = mask[y0 - dy : y1 - dy, x0 - dx : x1 - dx]
    return out


def polygon_patch(rings: tuple[tuple[float, ...], ...],
                  full: tuple[int, int]) -> tuple[np.ndarray, tuple[int, int]]:
    """Rasterise upright polygons at the original's resolution, in their bounding box only:
    (binary patch, its top-left corner).  A pixel is inside when its centre is."""
    points = [np.array(ring, np.float64).reshape(-1, 2) for ring in rings]
    stacked = np.concatenate(points)
    left = max(0, math.floor(stacked[:, 0].min()))
    top = max(0, math.floor(stacked[:, 1].min()))
    right = min(full[0], math.ceil(stacked[:, 0].max()))
    bottom = min(full[1], math.ceil(stacked[:, 1].max()))
    patch = np.zeros((max(0, bottom - top), max(0, right - left)), np.uint8)
    if patch.size:
        scale = 1 << POLYGON_SHIFT
        fixed = [np.round((ring - (left + 0.5, top + 0.5)) * scale).astype(np.int32)
                 for ring in points]
        cv2.fillPoly(patch, fixed, 1, lineType=cv2.LINE_8, shift=POLYGON_SHIFT)
        if not patch.any():  # thinner than a pixel's centre: the pixels its outline crosses
            cv2.polylines(patch, fixed, True, 1, lineType=cv2.LINE_8, shift=POLYGON_SHIFT)
    return patch, (left, top)


def binary_patch(binary: np.ndarray) -> tuple[np.ndarray, tuple[int, int]] | None:
    """A full-size binary mask cut to its bounding box; None when it is empty."""
    rows, cols = np.flatnonzero(binary.any(axis=1)), np.flatnonzero(binary.any(axis=0))
    if not len(rows):
        return None
    top, left = int(rows[0]), int(cols[0])
    return (np.ascontiguousarray(binary[top : int(rows[-1]) + 1, left : int(cols[-1]) + 1],
                                 np.uint8), (left, top))


def rle_encode(binary: np.ndarray) -> tuple[int, ...]:
    """Uncompressed COCO RLE counts of a binary image (column-major, first run of zeros)."""
    flat = np.asarray(binary, np.uint8).T.ravel()
    if not flat.size:
        return ()
    changes = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    bounds = np.concatenate(([0], changes, [flat.size]))
    runs = np.diff(bounds).tolist()
    return tuple(runs if flat[0] == 0 else [0, *runs])
