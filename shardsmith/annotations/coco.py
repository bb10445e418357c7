"""A COCO instances file → one compact record per image of the tree.  Runs in the driver, once.

The document is untrusted: ``file_name`` must stay inside the source tree (``coco_root`` is
put in front of it), numbers must be numbers, categories must exist, an RLE must have the
image's size.  An image with a malformed entry gets a record that says so (the worker rejects
it with ``bad_annotation``, naming the annotation); an entry that names no image of the tree
is counted; a ``file_name`` that leads out of the tree is refused and reported under the COCO
file's name.  A file that is not a COCO document at all is an ``AnnotationError``.
"""

from __future__ import annotations

import json
import logging
import math
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..jsonmodel import shown
from .model import AnnotationError
from .sources import safe_relpath

log = logging.getLogger(__name__)


@dataclass
class CocoIndex:
    """Per image of the tree, its record (compact JSON bytes); the category names in id
    order; problems that belong to no image (reported under the file's name)."""

    records: dict[str, bytes] = field(default_factory=dict)
    categories: tuple[str, ...] = ()
    problems: list[str] = field(default_factory=list)


class _Bad(Exception):
    pass


def _finite(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(
            value):
        raise _Bad(f"{what} is not a number: {shown(value)}")
    return float(value)


def read_coco(data: bytes, where: str, root: str, in_tree: Callable[[str], bool]) -> CocoIndex:
    """Read a COCO file; ``root`` is ``coco_root``, ``in_tree(relpath)`` says whether the scan
    found that image."""
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise AnnotationError(f"{where}: not valid JSON ({shown(str(exc), 120)})") from None
    if not isinstance(document, dict) or not all(
            isinstance(document.get(key, []), list)
            for key in ("images", "annotations", "categories")):
        raise AnnotationError(f"{where}: not a COCO file (expected images, annotations and "
                              "categories lists)")
    index = CocoIndex()
    names = _categories(document.get("categories", []), where)
    index.categories = tuple(names[key] for key in sorted(names))
    images: dict[Any, tuple[str, list[int]]] = {}
    outside = 0
    for number, image in enumerate(document.get("images", [])):
        if not isinstance(image, dict) or "id" not in image:
            index.problems.append(f"{where}: images[{number}] is not an image with an id")
            continue
        name = image.get("file_name")
        relpath = safe_relpath(posixpath.join(root, name) if root and isinstance(name, str)
                               else name)
        if relpath is None:
            index.problems.append(f"{where}: image {shown(image['id'])}: file_name "
                                  f"{shown(name)} leads out of the source tree (refused)")
            continue
        if not in_tree(relpath):
            outside += 1
            continue
        images[_key(image["id"])] = (relpath, [image.get("width"), image.get("height")])
    by_image: dict[Any, list[dict[str, Any]]] = {}
    errors: dict[Any, str] = {}
    for number, annotation in enumerate(document.get("annotations", [])):
        image_id = _key(annotation.get("image_id")) if isinstance(annotation, dict) else None
        if image_id not in images:
            continue
        label = annotation.get("id", number)
        try:
            by_image.setdefault(image_id, []).append(
                _object(annotation, names, images[image_id][1]))
        except _Bad as exc:
            errors.setdefault(image_id, f"{where}: annotation {shown(label)} (image "
                                        f"{shown(annotation.get('image_id'))}): {exc}")
    for image_id, (relpath, size) in images.items():
        if image_id in errors:
            record: dict[str, Any] = {"error": errors[image_id]}
        else:
            record = {"objects": by_image.get(image_id, [])}
            if all(isinstance(value, int) for value in size):
                record["size"] = size
        index.records[relpath] = json.dumps(record, sort_keys=True,
                                            separators=(",", ":")).encode()
    if outside:
        log.info("%s: %d images are not in the source tree (left out)", where, outside)
    return index


def _key(value: Any) -> Any:
    """Image ids as JSON has them (ints or strings), hashable; anything else never matches."""
    return value if isinstance(value, (int, str)) and not isinstance(value, bool) else None


def _categories(categories: list[Any], where: str) -> dict[Any, str]:
    names: dict[Any, str] = {}
    for number, category in enumerate(categories):
        if not isinstance(category, dict) or _key(category.get("id")) is None or not \
                isinstance(category.get("name"), str) or not category["name"]:
            raise AnnotationError(f"{where}: categories[{number}] needs an id and a name")
        names[_key(category["id"])] = category["name"]
    if len(set(names.values())) != len(names):
        raise AnnotationError(f"{where}: two categories have the same name")
    return names


def _object(annotation: dict[str, Any], names: dict[Any, str],
            size: list[Any]) -> dict[str, Any]:
    category = _key(annotation.get("category_id"))
    if category not in names:
        raise _Bad(f"category_id {shown(annotation.get('category_id'))} is not a category")
    item: dict[str, Any] = {"id": annotation.get("id"), "name": names[category]}
    segmentation = annotation.get("segmentation")
    if isinstance(segmentation, list) and segmentation:
        rings = []
        for ring in segmentation:
            if not isinstance(ring, list) or len(ring) < 6 or len(ring) % 2:
                raise _Bad("a polygon must be a list of at least 3 x, y pairs")
            rings.append([_finite(value, "a polygon coordinate") for value in ring])
        item["polygons"] = rings
    elif isinstance(segmentation, dict):
        item["rle"] = _rle(segmentation, size)
    elif segmentation not in (None, []):
        raise _Bad("segmentation is neither polygons nor an RLE")
    bbox = annotation.get("bbox")
    if bbox is not None:
        if not isinstance(bbox, list) or len(bbox) != 4:
            raise _Bad("bbox must be [x, y, width, height]")
        x, y, width, height = (_finite(value, "a bbox value") for value in bbox)
        if width <= 0 or height <= 0:
            raise _Bad(f"bbox [{x:g}, {y:g}, {width:g}, {height:g}] is empty")
        item["box"] = [x, y, x + width, y + height]
    elif "polygons" in item:
        xs = [value for ring in item["polygons"] for value in ring[0::2]]
        ys = [value for ring in item["polygons"] for value in ring[1::2]]
        item["box"] = [min(xs), min(ys), max(xs), max(ys)]
    elif "rle" in item:
        item["box"] = _rle_box(item["rle"])
    else:
        raise _Bad("neither a bbox nor a segmentation")
    return item


def _rle(segmentation: dict[str, Any], size: list[Any]) -> dict[str, Any]:
    rle_size, counts = segmentation.get("size"), segmentation.get("counts")
    if not (isinstance(rle_size, list) and len(rle_size) == 2
            and all(isinstance(value, int) and value > 0 for value in rle_size)):
        raise _Bad("an RLE needs a size [height, width]")
    if size[0] is not None and rle_size != [size[1], size[0]]:
        raise _Bad(f"an RLE of size {rle_size} on a {size[0]}x{size[1]} image")
    if isinstance(counts, list):
        if not all(isinstance(value, int) and value >= 0 for value in counts) or \
                sum(counts) != rle_size[0] * rle_size[1]:
            raise _Bad("RLE counts must be non-negative and add up to height x width")
    elif not isinstance(counts, str):
        raise _Bad("RLE counts must be a list or a compressed string")
    return {"size": rle_size, "counts": counts}


def _rle_box(rle: dict[str, Any]) -> list[float]:
    from pycocotools import mask

    try:
        coded = mask.frPyObjects(rle, *rle["size"]) if isinstance(rle["counts"], list) else \
            {"size": rle["size"], "counts": rle["counts"].encode()}
        x, y, width, height = mask.toBbox(coded).tolist()
    except (ValueError, TypeError, OverflowError) as exc:
        raise _Bad(f"an unreadable RLE ({exc})") from None
    if width <= 0 or height <= 0:
        raise _Bad("an empty RLE")
    return [x, y, x + width, y + height]
