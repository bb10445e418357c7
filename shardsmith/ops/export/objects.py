"""A sample's objects as the trainers' formats want them: instance masks, polygons, RLE strings.

Everything here takes a sample's metadata (``ShardFormat.metadata``: boxes, labels, polygons,
uncompressed RLE) and returns values; nothing reads or writes a file.
"""

from __future__ import annotations

import cv2
import numpy as np
from pycocotools import mask as coco_mask

Ring = list[float]  # flat x, y, x, y, ... in the sample's pixels


def rle_mask(rle: dict, height: int, width: int) -> np.ndarray:
    """The bool mask (height x width) of an uncompressed COCO RLE ``{"size", "counts"}``;
    ValueError when its runs do not cover the sample exactly."""
    counts = rle.get("counts")
    if rle.get("size") != [height, width] or not isinstance(counts, list) \
            or not all(isinstance(run, int) and run >= 0 for run in counts) \
            or sum(counts) != height * width:
        raise ValueError(f"an object's RLE does not cover the {width}x{height} sample")
    values = np.arange(len(counts)) % 2
    return np.repeat(values.astype(bool), counts).reshape(width, height).T


def compressed(mask: np.ndarray) -> str:
    """The COCO compressed RLE string of a bool mask (what ``pycocotools.mask.encode`` gives)."""
    return coco_mask.encode(np.asfortranarray(mask.astype(np.uint8)))["counts"].decode("ascii")


def box_mask(box: list[float], height: int, width: int) -> np.ndarray:
    """The pixels whose centre lies inside ``box`` (x0, y0, x1, y1)."""
    x0, y0, x1, y1 = box
    mask = np.zeros((height, width), bool)
    columns = slice(max(0, int(np.ceil(x0 - 0.5))), max(0, int(np.ceil(x1 - 0.5))))
    rows = slice(max(0, int(np.ceil(y0 - 0.5))), max(0, int(np.ceil(y1 - 0.5))))
    mask[rows, columns] = True
    return mask


def traced_rings(mask: np.ndarray) -> list[Ring]:
    """The outlines of a mask's regions along pixel borders (so a 1-pixel-wide crack keeps its
    width): the mask's pixels are placed on the odd points of a grid of half pixels and
    dilated by one point, whose outer contours then run exactly on the pixel edges."""
    height, width = mask.shape
    grid = np.zeros((2 * height + 1, 2 * width + 1), np.uint8)
    grid[1::2, 1::2] = mask
    grid = cv2.dilate(grid, np.ones((3, 3), np.uint8))
    contours, _ = cv2.findContours(grid, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    rings = []
    for contour in contours:
        points = contour.reshape(-1, 2).astype(np.float64) / 2.0
        if len(points) >= 3:
            rings.append([float(value) for value in points.reshape(-1)])
    return rings


def joined(rings: list[Ring]) -> Ring:
    """Several rings as one: each next ring is entered from the point of the path so far that
    lies nearest to it, walked round, and left the same way (a zero-width bridge), as
    Ultralytics' own COCO converter joins the parts of one object."""
    path = np.asarray(rings[0], np.float64).reshape(-1, 2)
    for ring in rings[1:]:
        points = np.asarray(ring, np.float64).reshape(-1, 2)
        distance = ((path[:, None, :] - points[None, :, :]) ** 2).sum(-1)
        at, entry = np.unravel_index(int(np.argmin(distance)), distance.shape)
        turned = np.roll(points, -int(entry), axis=0)
        path = np.concatenate([path[: at + 1], turned, turned[:1], path[at:]])
    return [float(value) for value in path.reshape(-1)]


def box_ring(box: list[float]) -> Ring:
    x0, y0, x1, y1 = box
    return [x0, y0, x1, y0, x1, y1, x0, y1]


def object_ring(box: list[float], rings: list[Ring], mask: np.ndarray | None) -> Ring:
    """One polygon for one object: its own rings, else traced from its mask, else its box's
    corners; several rings joined into one."""
    usable = [ring for ring in rings if len(ring) >= 6]
    if not usable and mask is not None and mask.any():
        usable = traced_rings(mask)
    return joined(usable) if usable else box_ring(box)


def class_pixels(mask_png: bytes) -> np.ndarray:
    """The class mask (one byte a pixel) of a sample; ValueError when it does not decode."""
    pixels = cv2.imdecode(np.frombuffer(mask_png, np.uint8), cv2.IMREAD_UNCHANGED)
    if pixels is None or pixels.ndim != 2 or pixels.dtype != np.uint8:
        raise ValueError("its class mask is not a one-channel 8-bit PNG")
    return pixels


def fallback_masks(boxes: list[list[float]], labels: list[int],
                   classes: np.ndarray | None, height: int, width: int) -> list[np.ndarray | None]:
    """Instance masks of a sample whose shard stores none (a TFRecord of an older release):
    the class-mask pixels of each object's class inside its box."""
    masks: list[np.ndarray | None] = []
    for box, label in zip(boxes, labels, strict=True):
        if classes is None or classes.shape != (height, width):
            masks.append(None)
            continue
        inside = box_mask(box, height, width) & (classes == label)
        masks.append(inside if inside.any() else None)
    return masks


def anomaly_mask(classes: np.ndarray | None, boxes: list[list[float]],
                 masks: list[np.ndarray | None], height: int, width: int) -> np.ndarray:
    """255 where a defect is, 0 elsewhere: the class mask's object pixels (values 1..254;
    255 there means "ignore"), else each object's instance mask or, without one, its box."""
    if classes is not None:
        return np.where((classes >= 1) & (classes <= 254), 255, 0).astype(np.uint8)
    found = np.zeros((height, width), bool)
    for box, mask in zip(boxes, masks, strict=True):
        found |= mask if mask is not None else box_mask(box, height, width)
    return np.where(found, 255, 0).astype(np.uint8)


def png(mask: np.ndarray) -> bytes:
    ok, encoded = cv2.imencode(".png", mask)
    if not ok:  # pragma: no cover - OpenCV encodes every uint8 array
        raise ValueError("could not encode a mask as PNG")
    return encoded.tobytes()
