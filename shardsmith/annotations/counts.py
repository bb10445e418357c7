"""A sample's objects counted per class, as its sample index line records them (``inspect``
and the pack summary add them up without opening a shard)."""

from __future__ import annotations

from typing import Any

from .model import ObjectClasses, Objects


def object_counts(objects: Objects, classes: ObjectClasses) -> dict[str, Any]:
    """The sample index fields of ``objects``: ``objects`` (per class id ``k``, the count at
    ``k - 1``, up to the last class present) and, where the image path counts them,
    ``objects_dropped`` (objects a crop or tile showed too little of: min_visible) and
    ``objects_merged`` (a mask and a box of one defect, made one object: merge_iou)."""
    ids = [classes.id(name) for name in objects.names]
    counts = [0] * max(ids, default=0)
    for number in ids:
        counts[number - 1] += 1
    return {"objects": counts, "objects_dropped": objects.dropped,
            "objects_merged": objects.merged,
            "objects_box_only": box_only_counts(objects, classes)}


def box_only_counts(objects: Objects, classes: ObjectClasses) -> list[int]:
    """Per class id ``k``, at ``k - 1``, the objects of ``objects`` that have a box and no
    pixels (no polygon, no instance mask), up to the last class that has one: what decides
    whether an export may call the objects masks (``dataset/task.py``)."""
    counts: list[int] = []
    for index, name in enumerate(objects.names):
        rings = objects.polygons[index] if index < len(objects.polygons) else ()
        rle = objects.rles[index] if index < len(objects.rles) else None
        if rle is not None or any(len(ring) >= 6 for ring in rings):
            continue
        number = classes.id(name)
        counts.extend([0] * (number - len(counts)))
        counts[number - 1] += 1
    return counts
