"""The exact map from an original's pixels to a sample's, applied to boxes and polygons.

Every step the pixels go through is an axis-aligned scale and shift, or one of the eight EXIF
orientations, so the whole way from the upright original to a sample is one ``Placement``
(``x' = x * scale_x + offset_x``, the same for y) and a window: the part of the sample the
original covers.  ``imaging`` builds the placement from the very numbers it crops and
resizes with (the reduced DCT scale, the integer crop, the trim of the two-step area resize,
the letterbox offset), so annotations land where the pixels do.

The eight EXIF orientations are one table (``ORIENTATIONS``), read by ``orient_pixels`` for
pixels (the decoded image, a class mask, an RLE's pixels) and by ``orient_ring`` for points
(boxes, polygons): a stored pixel and a stored point are turned by the same steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .model import Box, Shape


@dataclass(frozen=True, slots=True)
class Orientation:
    """How one EXIF orientation turns the stored image upright, in this order: swap x and y
    (``transpose``), then mirror left-right (``mirror_x``), then top-bottom (``mirror_y``)."""

    transpose: bool
    mirror_x: bool
    mirror_y: bool


# EXIF 2.32, tag 0x0112: where the stored image's first row and column belong.
ORIENTATIONS: dict[int, Orientation] = {
    1: Orientation(transpose=False, mirror_x=False, mirror_y=False),  # as stored
    2: Orientation(transpose=False, mirror_x=True, mirror_y=False),  # mirrored
    3: Orientation(transpose=False, mirror_x=True, mirror_y=True),  # turned 180
    4: Orientation(transpose=False, mirror_x=False, mirror_y=True),  # flipped
    5: Orientation(transpose=True, mirror_x=False, mirror_y=False),  # transposed
    6: Orientation(transpose=True, mirror_x=True, mirror_y=False),  # turned 90 clockwise
    7: Orientation(transpose=True, mirror_x=True, mirror_y=True),  # transversed
    8: Orientation(transpose=True, mirror_x=False, mirror_y=True),  # turned 90 counter-clockwise
}
TRANSPOSING = tuple(number for number, turn in ORIENTATIONS.items() if turn.transpose)


def turn_of(orientation: int) -> Orientation:
    """The table's entry; a value outside 1..8 (``decoders.orientation`` never gives one) is
    taken as stored."""
    return ORIENTATIONS.get(orientation, ORIENTATIONS[1])


@dataclass(frozen=True)
class Placement:
    """Upright original → sample: ``x' = x * scale_x + offset_x``; ``window`` is the part of
    the sample (``size``, width and height) that shows the original."""

    scale_x: float
    scale_y: float
    offset_x: float
    offset_y: float
    window: Box
    size: tuple[int, int]

    def box(self, box: Box) -> Box:
        x0, y0, x1, y1 = box
        return (x0 * self.scale_x + self.offset_x, y0 * self.scale_y + self.offset_y,
                x1 * self.scale_x + self.offset_x, y1 * self.scale_y + self.offset_y)

    def points(self, ring: np.ndarray) -> np.ndarray:
        """A flat ``x, y, ...`` ring (float64 array) in sample pixels."""
        out = ring.copy()
        out[0::2] = ring[0::2] * self.scale_x + self.offset_x
        out[1::2] = ring[1::2] * self.scale_y + self.offset_y
        return out

    def shifted(self, left: float, top: float, size: tuple[int, int]) -> Placement:
        """The same original seen through a ``size`` window whose corner is at (left, top) of
        this sample (a tile cut from it)."""
        x0, y0, x1, y1 = self.window
        window = (max(0.0, x0 - left), max(0.0, y0 - top),
                  min(float(size[0]), x1 - left), min(float(size[1]), y1 - top))
        return Placement(self.scale_x, self.scale_y, self.offset_x - left,
                         self.offset_y - top, window, size)


def upright_size(width: int, height: int, orientation: int) -> tuple[int, int]:
    """The size of a stored ``width`` x ``height`` image once turned upright."""
    return (height, width) if turn_of(orientation).transpose else (width, height)


def orient_pixels(pixels: np.ndarray, orientation: int) -> np.ndarray:
    """Stored pixels (H x W, or H x W x channels) turned upright by ``ORIENTATIONS``."""
    if orientation == 1:
        return pixels
    turn = turn_of(orientation)
    if turn.transpose:
        pixels = pixels.swapaxes(0, 1)
    if turn.mirror_x:
        pixels = pixels[:, ::-1]
    if turn.mirror_y:
        pixels = pixels[::-1]
    return np.ascontiguousarray(pixels)


def orient_ring(ring: np.ndarray, orientation: int, width: int, height: int) -> np.ndarray:
    """Points stored in a ``width`` x ``height`` file turned upright by ``ORIENTATIONS``, the
    steps ``orient_pixels`` takes (continuous coordinates: a mirror maps x to ``width - x``)."""
    turn = turn_of(orientation)
    xs, ys = ring[0::2], ring[1::2]
    if turn.transpose:
        xs, ys, width, height = ys, xs, height, width
    if turn.mirror_x:
        xs = width - xs
    if turn.mirror_y:
        ys = height - ys
    out = np.empty_like(ring)
    out[0::2], out[1::2] = xs, ys
    return out


def orient_box(box: Box, orientation: int, width: int, height: int) -> Box:
    """A stored box turned upright: the bounds of its turned corners."""
    corners = orient_ring(np.array(box, np.float64), orientation, width, height)
    xs, ys = corners[0::2], corners[1::2]
    return float(xs.min()), float(ys.min()), float(xs.max()), float(ys.max())


def clip_box(box: Box, window: Box) -> Box | None:
    x0, y0, x1, y1 = (max(box[0], window[0]), max(box[1], window[1]),
                      min(box[2], window[2]), min(box[3], window[3]))
    return (x0, y0, x1, y1) if x0 < x1 and y0 < y1 else None


def box_area(box: Box) -> float:
    return max(0.0, box[2] - box[0]) * max(0.0, box[3] - box[1])


def ring_area(ring: np.ndarray) -> float:
    """Shoelace area of a flat ring."""
    xs, ys = ring[0::2], ring[1::2]
    return abs(float(np.dot(xs, np.roll(ys, -1)) - np.dot(ys, np.roll(xs, -1)))) / 2


def clip_ring(ring: np.ndarray, window: Box) -> np.ndarray:
    """Sutherland–Hodgman: the part of a polygon inside ``window`` (maybe fewer than 3 points)."""
    points = list(zip(ring[0::2].tolist(), ring[1::2].tolist(), strict=True))
    x_low, y_low, x_high, y_high = window
    edges = ((0, x_low, True), (0, x_high, False), (1, y_low, True), (1, y_high, False))
    for axis, limit, keep_above in edges:
        if not points:
            break
        clipped = []
        for at, current in enumerate(points):
            previous = points[at - 1]
            if _inside(current, axis, limit, keep_above):
                if not _inside(previous, axis, limit, keep_above):
                    clipped.append(_cross(previous, current, axis, limit))
                clipped.append(current)
            elif _inside(previous, axis, limit, keep_above):
                clipped.append(_cross(previous, current, axis, limit))
        points = clipped
    return np.array([value for point in points for value in point], np.float64)


def _inside(point: tuple[float, float], axis: int, limit: float, above: bool) -> bool:
    return point[axis] >= limit if above else point[axis] <= limit


def _cross(start: tuple[float, float], end: tuple[float, float], axis: int,
           limit: float) -> tuple[float, float]:
    t = (limit - start[axis]) / (end[axis] - start[axis])
    point = [start[0] + t * (end[0] - start[0]), start[1] + t * (end[1] - start[1])]
    point[axis] = limit
    return point[0], point[1]


@dataclass(frozen=True)
class Placed:
    """A shape in a sample's pixels: its visible box and polygons, and how much of it shows."""

    shape: Shape
    box: Box
    polygons: tuple[np.ndarray, ...]
    visible: float


def to_upright(shape: Shape, orientation: int, stored: tuple[int, int]) -> Shape:
    """A shape given in stored pixels, in upright pixels (as the decoded image is turned)."""
    if orientation == 1:
        return shape
    width, height = stored
    rings = tuple(tuple(orient_ring(np.array(ring, np.float64), orientation, width,
                                    height).tolist()) for ring in shape.polygons)
    return Shape(shape.name, orient_box(shape.box, orientation, width, height), rings,
                 shape.rle)


def place(shape: Shape, placement: Placement) -> Placed | None:
    """An upright shape in a sample: clipped to the window; None when nothing of it shows.

    ``visible`` is the share of the shape that shows: of its polygons' area when it has
    polygons, of its box otherwise.
    """
    full = placement.box(shape.box)
    if not shape.polygons:
        box = clip_box(full, placement.window)
        if box is None:
            return None
        return Placed(shape, box, (), box_area(box) / max(box_area(full), 1e-12))
    rings = [placement.points(np.array(ring, np.float64)) for ring in shape.polygons]
    total = sum(ring_area(ring) for ring in rings)
    clipped = [clip_ring(ring, placement.window) for ring in rings]
    clipped = [ring for ring in clipped if len(ring) >= 6 and ring_area(ring) > 0]
    if not clipped:
        return None
    xs = np.concatenate([ring[0::2] for ring in clipped])
    ys = np.concatenate([ring[1::2] for ring in clipped])
    box = (float(xs.min()), float(ys.min()), float(xs.max()), float(ys.max()))
    shown_area = sum(ring_area(ring) for ring in clipped)
    visible = shown_area / total if total > 0 else 1.0
    return Placed(shape, box, tuple(clipped), min(1.0, visible))


def rounded_box(box: Box) -> tuple[float, float, float, float]:
    """Boxes as stored: 1/1000 pixel is finer than any consumer needs, and keeps JSON short."""
    return tuple(round(value, 3) + 0.0 for value in box)  # type: ignore[return-value]


def rounded_ring(ring: np.ndarray) -> tuple[float, ...]:
    return tuple(round(float(value), 3) + 0.0 for value in ring)


def decode_scale(stored: tuple[int, int], decoded: tuple[int, int]) -> tuple[float, float]:
    """The scale a decode of ``stored`` (width, height) to ``decoded`` pixels applied: ``n/8``
    on both axes when it was a reduced DCT decode (libjpeg-turbo's scaled IDCT maps 8 pixels to
    ``n`` and rounds the size up), else the plain ratio of each axis."""
    if decoded == stored:  # a full decode; a side under 8 px also fits some n/8 (4 -> 7/8)
        return 1.0, 1.0
    for eighths in range(1, 8):
        if all(math.ceil(side * eighths / 8) == out
               for side, out in zip(stored, decoded, strict=True)):
            return eighths / 8, eighths / 8
    return decoded[0] / stored[0], decoded[1] / stored[1]
