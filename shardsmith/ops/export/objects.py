"""A sample's objects as the trainers' formats want them: instance masks and RLE strings
(polygons: ``annotations/polygons.py``).

Everything here takes a sample's metadata (``ShardFormat.metadata``: boxes, labels, polygons,
uncompressed RLE) and returns values; nothing reads or writes a file.
"""

from __future__ import annotations

import cv2
import numpy as np
from pycocotools import mask as coco_mask

from ...annotations import rle as coco_rle


def rle_mask(rle: dict, height: int, width: int) -> np.ndarray:
    """The bool mask (height x width) of a COCO RLE ``{"size", "counts"}``; ValueError when
    its runs do not cover the sample exactly."""
    if rle.get("size") != [height, width]:
        raise ValueError(f"an object's RLE is not over the {width}x{height} sample")
    runs = coco_rle.checked(coco_rle.counts_of(rle.get("counts"), height * width), height,
                            width)
    return coco_rle.decode(runs, height, width).view(bool)


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


def fallback_masks(boxes: list[list[float]], labels: list[int],
                   classes: np.ndarray | None, height: int, width: int) -> list[np.ndarray | None]:
    """Instance masks of a sample whose shard stores none (a TFRecord of an older release):
    the class-mask pixels of each object's class inside its box."""
    if classes is None:
        return [None] * len(boxes)
    found = (box_mask(box, height, width) & (classes == label)
             for box, label in zip(boxes, labels, strict=True))
    return [inside if inside.any() else None for inside in found]


def anomaly_mask(classes: np.ndarray | None, boxes: list[list[float]],
                 masks: list[np.ndarray | None], height: int, width: int) -> np.ndarray:
    """255 where a defect is, 0 elsewhere: every marked pixel of the class mask (a class, or
    255 "ignore": an object cut below min_visible is a defect all the same), and each object's
    instance mask or, without one (a box-only object, kept or cut), its box."""
    found = np.zeros((height, width), bool) if classes is None else classes > 0
    for box, mask in zip(boxes, masks, strict=True):
        found |= mask if mask is not None else box_mask(box, height, width)
    return np.where(found, 255, 0).astype(np.uint8)


def png(mask: np.ndarray) -> bytes:
    ok, encoded = cv2.imencode(".png", mask)
    if not ok:  # pragma: no cover - OpenCV encodes every uint8 array
        raise ValueError("could not encode a mask as PNG")
    return encoded.tobytes()
