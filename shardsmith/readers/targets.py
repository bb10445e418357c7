"""Detection targets from a sample's metadata (``KEY.json``), framework-free (NumPy).

torchvision's detection models take, per image, ``boxes`` (float N×4, x0 y0 x1 y1 in pixels),
``labels`` (int64 N; 0 is the background, so object class ids start at 1) and, for Mask
R-CNN, ``masks`` (uint8 N×H×W).  An instance's mask comes from its RLE (made at pack time,
from its polygon or RLE, by the same area rule as the class mask); an object annotated with a
box only gets its box filled.  The metadata is untrusted: anything malformed raises
``ValueError`` with what is wrong, which the readers report as a corrupt sample.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..annotations import rle as coco_rle
from ..dataset.formats.metadata import box_problem


def detection_target(meta: Any, height: int, width: int, with_masks: bool,
                     object_classes: int) -> dict[str, np.ndarray]:
    """``boxes``, ``labels`` and (``with_masks``) ``masks`` of one sample; each label is an
    object class id from 1 to ``object_classes`` (anything else would index past a model's
    outputs)."""
    if not isinstance(meta, dict):
        raise ValueError("its metadata is not an object")
    boxes_in, labels_in = meta.get("boxes", []), meta.get("labels", [])
    if not isinstance(boxes_in, list) or not isinstance(labels_in, list) or \
            len(boxes_in) != len(labels_in):
        raise ValueError("boxes and labels are not two lists of one length")
    check_class_ids(labels_in, object_classes)  # before NumPy, where 2**64 would not fit
    boxes = _checked_boxes(boxes_in, width, height, "")
    target = {"boxes": boxes, "labels": np.asarray(labels_in, np.int64).reshape(-1)}
    if with_masks:
        target["masks"] = _instance_masks(meta.get("rle"), boxes, height, width)
    if meta.get("objects_cut"):  # read only with keep_cut (readers.cut)
        target.update(_ignored(meta["objects_cut"], height, width, with_masks, object_classes))
    return target


def _checked_boxes(boxes_in: Any, width: int, height: int, whose: str) -> np.ndarray:
    """``boxes_in`` as float32 N x 4, each held to the one geometry check (``box_problem``);
    ValueError naming ``whose`` box it is otherwise."""
    try:
        boxes = np.asarray(boxes_in, np.float32).reshape(-1, 4)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{whose or 'a '}box is malformed ({exc})") from None
    if not np.isfinite(boxes).all():
        raise ValueError(f"{whose or 'a '}box is not finite")
    for box in boxes.tolist():
        problem = box_problem(box, width, height)
        if problem is not None:
            raise ValueError(f"{whose}{problem}")
    return boxes


def _ignored(cut: Any, height: int, width: int, with_masks: bool,
             object_classes: int) -> dict[str, np.ndarray]:
    """The objects min_visible dropped, as regions a loss should ignore: ``ignore_boxes``,
    ``ignore_labels`` and (``with_masks``) ``ignore_masks``."""
    if not isinstance(cut, list) or not all(isinstance(item, dict) for item in cut):
        raise ValueError("objects_cut is not a list of objects")
    labels_in = [item.get("label") for item in cut]
    check_class_ids(labels_in, object_classes)
    boxes = _checked_boxes([item.get("box") for item in cut], width, height, "a cut object's ")
    found = {"ignore_boxes": boxes, "ignore_labels": np.asarray(labels_in, np.int64)}
    if with_masks:
        found["ignore_masks"] = _instance_masks([item.get("rle") for item in cut], boxes,
                                                height, width)
    return found


def _instance_masks(rles: Any, boxes: np.ndarray, height: int, width: int) -> np.ndarray:
    masks = np.zeros((len(boxes), height, width), np.uint8)
    if rles is None:
        rles = [None] * len(boxes)
    if not isinstance(rles, list) or len(rles) != len(boxes):
        raise ValueError("rle is not a list with an entry per box")
    for number, (rle, box) in enumerate(zip(rles, boxes, strict=True)):
        if rle is None:
            x0, y0 = max(0, math.floor(box[0])), max(0, math.floor(box[1]))
            x1, y1 = min(width, math.ceil(box[2])), min(height, math.ceil(box[3]))
            masks[number, y0:y1, x0:x1] = 1
            continue
        if not isinstance(rle, dict) or rle.get("size") != [height, width] or \
                not isinstance(rle.get("counts"), list):
            raise ValueError(f"object {number}: an RLE not of this {width}x{height} image")
        try:
            runs = coco_rle.checked(coco_rle.counts_of(rle["counts"], height * width), height,
                                    width)
        except coco_rle.RleError as exc:
            raise ValueError(f"object {number}: {exc}") from None
        masks[number] = coco_rle.decode(runs, height, width)
    return masks


def check_class_ids(labels: Any, object_classes: int) -> None:
    """``ValueError`` unless every label is a whole number from 1 to ``object_classes``
    (checked in Python's integers: 2**62 must not wrap into range)."""
    for label in labels:
        if isinstance(label, bool) or not isinstance(label, int | np.integer) \
                or not 1 <= int(label) <= object_classes:
            raise ValueError(f"object class id {label!r} is not one of the dataset's "
                             f"{object_classes} object classes (ids 1 to {object_classes})")
