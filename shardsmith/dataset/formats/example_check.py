"""What ``verify --decode`` checks in a TFRecord's ``tf.train.Example`` beyond its JPEG: the
features the readers parse, as they parse them.

A reader takes ``image/class/label`` as one value, the object lists as parallel lists (the
k-th box is the k-th label), object ids as indexes into ``object_classes`` and the mask as a
PNG; a record that breaks one of these fails a training run far from the dataset, or trains
on nonsense.  Each is one named problem here instead.
"""

from __future__ import annotations

# Features our writer gives exactly one value, and that every reader parses as a scalar.
SINGLE = ("image/encoded", "image/format", "image/class/label", "image/class/text",
          "image/height", "image/width", "image/channels", "image/filename", "image/key",
          "image/segmentation/class/encoded", "image/segmentation/class/format",
          "image/tile/row", "image/tile/column", "image/tile/x", "image/tile/y",
          "image/tile/scale")
# The per-object lists, one entry per object each.
OBJECT_LISTS = ("image/object/bbox/xmin", "image/object/bbox/ymin", "image/object/bbox/xmax",
                "image/object/bbox/ymax", "image/object/class/label",
                "image/object/class/text", "image/object/rle")
MASK = "image/segmentation/class/encoded"
# Written as int64 lists: compared with numbers below, so anything else is reported first.
INTEGERS = ("image/class/label", "image/height", "image/width", "image/channels",
            "image/object/class/label", "image/tile/row", "image/tile/column", "image/tile/x",
            "image/tile/y")

def example_problems(features: dict, size: tuple[int, int] | None,
                     object_classes: int) -> list[str]:
    """What is wrong with the features of one record (``tfrecord.feature_lists`` of its
    payload), a phrase each (the caller names the
    shard and sample): ``size`` is the sample's (width, height) in the sample index,
    ``object_classes`` how many object classes the manifest names."""
    problems = []
    for name in INTEGERS:
        if any(not isinstance(value, int) for value in features.get(name, ())):
            problems.append(f"{name} holds other values than integers")
            features.pop(name)  # not compared below
    for name in SINGLE:
        if name in features and len(features[name]) != 1:
            problems.append(f"{name} holds {len(features[name])} values, not one")
    if size is not None:
        for name, expected in (("image/width", size[0]), ("image/height", size[1])):
            values = features.get(name)
            if values and values[0] != expected:
                problems.append(f"{name} is {values[0]}, the index says {expected}")
    lengths = {name: len(features[name]) for name in OBJECT_LISTS if name in features}
    if len(set(lengths.values())) > 1:
        problems.append("object lists of unequal length (" + ", ".join(
            f"{name.removeprefix('image/object/')} {length}"
            for name, length in lengths.items()) + ")")
    for label in features.get("image/object/class/label", ()):
        if not 1 <= label <= object_classes:
            problems.append(f"object label {label} is not one of the {object_classes} "
                            "object classes")
            break
    mask = features.get(MASK)
    if mask and isinstance(mask[0], bytes):
        from ...annotations.maskpng import MaskError, class_mask  # OpenCV only here

        # without the index's size, the record's own (an absent one is 0)
        width, height = size or ((features.get("image/width") or [0])[0],
                                 (features.get("image/height") or [0])[0])
        try:
            class_mask(mask[0], width, height)
        except MaskError as exc:
            problems.append(str(exc))
    return problems
