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
            "objects_merged": objects.merged}
