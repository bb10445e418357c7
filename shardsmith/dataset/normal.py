"""Is this sample normal?  The one rule every consumer asks: the pack's background draw
(``tiles.keep: annotated``), every export layout (anomalib's normal and good images, YOLO's
background images, COCO's images without annotations), the readers' sample tables and
``inspect``'s counts.

A sample is normal when it shows no defect at all: no object kept, no object dropped by
``source.annotations.min_visible`` (a crack cut at a tile's border is still a crack in its
pixels), and no "ignore" pixel (255) in its class mask, the mark such a dropped object leaves
where it has pixels.  Its image class is another matter (anomalib's ``--normal``), asked
apart by the layout that has one.

A sample index of a release before the dropped objects were recorded one by one
(``SampleRecord.objects_cut``) still counts them (``objects_dropped``); one older still counts
nothing, and there only the class mask's 255 pixels tell a cut (a box-only cut leaves none).
"""

from __future__ import annotations

from typing import Any

from ..annotations.model import ObjectClasses, Objects
from .manifest import SampleRecord

IGNORE = 255  # the class mask's value for the pixels of an object dropped by min_visible
CUT_REASON = "a defect cut below min_visible"  # why a sample is left out, in summaries


def is_normal(objects: int, cut: int, ignore_pixels: bool = False) -> bool:
    """The rule: no object kept (``objects``), none dropped by min_visible (``cut``) and no
    "ignore" pixel in the class mask."""
    return objects == 0 and cut == 0 and not ignore_pixels


def record_is_normal(record: SampleRecord) -> bool:
    """The rule from a sample index line (no shard read): its object counts, its dropped
    objects (listed, or counted by an index of an earlier release)."""
    return is_normal(sum(record.objects or ()), cut_count(record))


def cut_count(record: SampleRecord) -> int:
    """How many objects min_visible dropped from the sample, as far as its index line says."""
    if record.objects_cut is not None:
        return len(record.objects_cut)
    return record.objects_dropped or 0


def objects_are_normal(objects: Objects | None) -> bool:
    """The rule for a sample's objects as the worker cuts them (the background draw)."""
    if objects is None:
        return True
    return is_normal(len(objects), objects.dropped, objects.marked)


def cut_fields(objects: Objects, classes: ObjectClasses, height: int,
               width: int) -> dict[str, Any]:
    """The sample index field of the objects min_visible dropped from a sample (their class
    ids, clipped boxes and compressed RLEs); none when nothing was dropped, so a dataset
    without cuts keeps its index bytes."""
    if not objects.cut:
        return {}
    from .formats.metadata import rle_string  # pycocotools only where a cut has pixels

    return {"objects_cut": [
        {"label": classes.id(item.name), "box": list(item.box)}
        | ({} if item.rle is None
           else {"rle": rle_string(item.rle, height, width).decode("ascii")})
        for item in objects.cut]}
