"""A sample's metadata read back from either shard format, checked: ``ShardFormat.metadata``.

Both formats give the dict WebDataset stores in ``KEY.json`` (``base.sample_metadata``): the
WebDataset one parses it, the TFRecord one rebuilds it from the Example's features.  Shards are
untrusted input: every field a consumer indexes, allocates or loops by is checked here (types,
lengths, one entry per object in every list, RLE counts covering the sample's pixels exactly),
and anything else is a ShardFormatError saying what is wrong, never a KeyError or a mask of a
million by a million pixels halfway through an export.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ...annotations.limits import MAX_OBJECT_CLASSES, MAX_OBJECTS, MAX_POINTS
from ...annotations.rle import RleError, check_counts, counts_of
from ...errors import ShardFormatError

MAX_SIDE = 65_535  # a JPEG's largest side: no sample is larger
OBJECT_KEYS = ("boxes", "labels", "label_names", "polygons", "rle")
# a TFRecord box is normalised float32 times the size, rounded to 1e-3 px: its edge may sit
# that far past the sample's
BOX_SLACK = 0.01
# The finest steps the exports write a box in: the records and COCO's bbox keep 1/1000 px,
# COCO's area 1/1000 px^2, YOLO six decimals of the sample's side (1e-6 of 65,535 px is
# 0.066 px).  A box under half a step is written as 0 wide (or of no area).
BOX_STEP = 1e-3
AREA_STEP = 1e-3
YOLO_STEP = 1e-6
# the float noise of a side computed from two edges rounded to 1e-3 px (102.401 - 102.4 is
# 0.00099999999999 px): far under any step
_NOISE = 1e-9


def box_problem(box: Sequence[float], width: int, height: int) -> str | None:
    """What is wrong with the box ``x0, y0, x1, y1`` (finite numbers) of a ``width`` x
    ``height`` sample, or None: the one geometry check of an object (kept or cut) that export,
    the readers, the contact sheet and ``verify --decode`` hold every box to.  An inverted,
    empty or outside box is no object of ours (invariant 12): a model would be taught negative
    sizes; nor is one an export would write as 0 wide (``too_small``)."""
    x0, y0, x1, y1 = box
    if not (-BOX_SLACK <= x0 < x1 <= width + BOX_SLACK
            and -BOX_SLACK <= y0 < y1 <= height + BOX_SLACK):
        return (f"box {str([float(value) for value in box])[:80]} is not x0 < x1, y0 < y1 "
                f"inside its {width}x{height} pixels")
    if too_small(box, width, height):
        return (f"box {str([float(value) for value in box])[:80]} is smaller than an export "
                f"writes a box of its {width}x{height} pixels (it would be 0 wide, high or "
                "of no area)")
    return None


def too_small(box: Sequence[float], width: int, height: int, steps: float = 0.5) -> bool:
    """Whether a side or the area of ``box`` in a ``width`` x ``height`` sample is under
    ``steps`` of the step an export writes it in (``BOX_STEP``, ``AREA_STEP``, ``YOLO_STEP``
    of the sample's side).  Half a step (the default, ``box_problem``) rounds to 0; the pack
    keeps only boxes of a whole step (``steps=1``), so that a TFRecord's float32 edges (up to
    0.002 px off at 65,535 px) never read back under half of one."""
    x0, y0, x1, y1 = box
    across, down = x1 - x0, y1 - y0
    return (across < steps * max(BOX_STEP, width * YOLO_STEP) - _NOISE
            or down < steps * max(BOX_STEP, height * YOLO_STEP) - _NOISE
            or across * down < steps * AREA_STEP - _NOISE)


def rle_string(counts: tuple[int, ...] | list[int], height: int, width: int) -> bytes:
    """The COCO compressed RLE string of uncompressed ``counts`` (pycocotools' ``counts`` of
    ``mask.encode``).  From the counts, not the mask: 13 us an object for a 256 x 256 polygon
    mask of 503 runs, against 64 us for ``mask.encode`` of its pixels and 89 us for the same
    loop in Python (``timeit``, best of 5 x 2000)."""
    from pycocotools import mask as coco_mask

    rle = coco_mask.frPyObjects({"size": [height, width], "counts": list(counts)}, height,
                                width)
    return rle["counts"]


def rle_counts(text: bytes, height: int, width: int) -> list[int]:
    """Uncompressed counts of a compressed RLE string over ``height x width`` pixels, decoded
    in Python (pycocotools' C code crashes on a wrong size); ShardFormatError unless it decodes
    to counts covering the pixels exactly.  260 us for the 503 runs of a 256 x 256 polygon mask
    (``timeit``): a reader's cost, once a sample, not the packing workers'."""
    try:
        return check_counts(counts_of(text.decode("ascii"), height * width), height, width)
    except (UnicodeDecodeError, RleError) as exc:
        raise ShardFormatError(f"a compressed RLE that does not decode ({exc})") from None


def checked_metadata(meta: Any, key: str) -> dict:
    """``meta`` if it is sample metadata shardsmith writes, else ShardFormatError naming the
    sample and what is wrong."""
    try:
        _check(meta)
    except (ShardFormatError, RleError) as exc:
        raise ShardFormatError(f"sample {key}: metadata {exc}") from None
    return meta


def _check(meta: Any) -> None:
    if not isinstance(meta, dict):
        raise ShardFormatError("is not a JSON object")
    for name in ("path", "class"):
        _typed(meta, name, str)
    _typed(meta, "label", int)
    width, height = (_typed(meta, name, int) for name in ("width", "height"))
    if not (1 <= width <= MAX_SIDE and 1 <= height <= MAX_SIDE):
        raise ShardFormatError(f"says {width}x{height} pixels, not a JPEG's size")
    _typed(meta, "channels", int)
    for name, kind in (("split", str), ("original", dict), ("tile", dict), ("mask", str)):
        if name in meta:
            _typed(meta, name, kind)
    if any(name in meta for name in OBJECT_KEYS):
        _check_objects(meta, height, width)
    if "objects_cut" in meta:
        _check_cut(meta["objects_cut"], height, width)


def _check_objects(meta: dict, height: int, width: int) -> None:
    boxes, labels, names = (_typed(meta, name, list) for name in ("boxes", "labels",
                                                                  "label_names"))
    count = len(boxes)
    if count > MAX_OBJECTS:
        raise ShardFormatError(f"lists {count:,} objects, more than {MAX_OBJECTS:,}")
    for name in ("labels", "label_names", "polygons", "rle"):
        if name in meta and (not isinstance(meta[name], list) or len(meta[name]) != count):
            raise ShardFormatError(f"{name} is not a list of one entry per box ({count})")
    for box in boxes:
        if not isinstance(box, list) or len(box) != 4 or not all(map(_finite, box)):
            raise ShardFormatError(f"box {str(box)[:40]} is not 4 finite numbers")
        problem = box_problem(box, width, height)
        if problem is not None:
            raise ShardFormatError(problem)
    for label in labels:
        if type(label) is not int or not 1 <= label <= MAX_OBJECT_CLASSES:
            raise ShardFormatError(f"object class id {str(label)[:20]} is not from 1 to "
                                   f"{MAX_OBJECT_CLASSES}")
    if not all(isinstance(name, str) for name in names):
        raise ShardFormatError("label_names holds other values than strings")
    points = 0
    for rings in meta.get("polygons", ()):
        if not isinstance(rings, list) or not all(
                isinstance(ring, list) and len(ring) % 2 == 0 and all(map(_finite, ring))
                for ring in rings):
            raise ShardFormatError("a polygon is not a list of flat x, y rings of numbers")
        points += sum(len(ring) // 2 for ring in rings)
        if points > MAX_POINTS:
            raise ShardFormatError(f"has more than {MAX_POINTS:,} polygon points")
    for number, rle in enumerate(meta.get("rle", ())):
        if rle is None:
            continue
        if not isinstance(rle, dict) or rle.get("size") != [height, width]:
            raise ShardFormatError(f"object {number}: an RLE not over this {width}x{height} "
                                   "sample")
        check_counts(counts_of(rle.get("counts"), height * width), height, width)


def _check_cut(cut: Any, height: int, width: int) -> None:
    """The objects min_visible dropped: a list of ``{label, label_name, box[, rle]}``."""
    if not isinstance(cut, list) or len(cut) > MAX_OBJECTS:
        raise ShardFormatError(f"objects_cut is not a list of at most {MAX_OBJECTS:,} objects")
    for item in cut:
        if not isinstance(item, dict):
            raise ShardFormatError("objects_cut holds other values than objects")
        _typed(item, "label_name", str)
        label = _typed(item, "label", int)
        if not 1 <= label <= MAX_OBJECT_CLASSES:
            raise ShardFormatError(f"a cut object's class id {label} is not from 1 to "
                                   f"{MAX_OBJECT_CLASSES}")
        box = item.get("box")
        if not isinstance(box, list) or len(box) != 4 or not all(map(_finite, box)):
            raise ShardFormatError(f"cut box {str(box)[:40]} is not 4 finite numbers")
        problem = box_problem(box, width, height)
        if problem is not None:
            raise ShardFormatError(f"a cut object's {problem}")
        if "rle" in item:
            rle = item["rle"]
            if not isinstance(rle, dict) or rle.get("size") != [height, width]:
                raise ShardFormatError(f"a cut object's RLE is not over this {width}x{height} "
                                       "sample")
            check_counts(counts_of(rle.get("counts"), height * width), height, width)


def _typed(meta: dict, name: str, kind: type) -> Any:
    value = meta.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ShardFormatError(f"{name} is not {'an' if kind is int else 'a'} "
                               f"{kind.__name__}")
    return value


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) \
        and math.isfinite(value)
