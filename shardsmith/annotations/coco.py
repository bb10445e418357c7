"""A COCO instances file → one compact record per image of the tree.  Runs in the driver, once.

The document is untrusted: ``file_name`` must stay inside the source tree (``coco_root`` is
put in front of it), numbers must be numbers, categories must exist, an RLE must have the
image's size (and at most the pixels the decode budget allows) with counts that cover it
exactly, an image may have at most ``MAX_OBJECTS`` entries.  An image with a malformed entry
gets a record that says so (the worker rejects it with ``bad_annotation``, naming the
annotation), and so do two images with one id, one file listed twice and an image whose id is
malformed (an entry must never land on another image, nor be dropped in silence).  Ids are
integers, as COCO says: ``"1"`` or ``1.0`` is a malformed id, never a second spelling of ``1``.
An entry for an image the file lists outside the tree is counted; an entry that names no image
of the file, or is not an object, and a ``file_name`` that leads out of the tree are reported
under the COCO file's name.  A file that is not a COCO document at all, or whose categories
are malformed, is an ``AnnotationError``.
"""

from __future__ import annotations

import json
import logging
import math
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..text import shown
from . import rle
from .limits import MAX_OBJECTS, MAX_POINTS, too_many_objects
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


MAX_LISTED = 20  # entries that name no image, listed one by one; the rest are counted


class _Bad(Exception):
    pass


def _finite(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Bad(f"{what} is not a number: {shown(value)}")
    try:
        number = float(value)  # an int of 400 digits is no float
    except OverflowError:
        raise _Bad(f"{what} is out of range: {shown(value)}") from None
    if not math.isfinite(number):
        raise _Bad(f"{what} is not a number: {shown(value)}")
    return number


def read_coco(data: bytes, where: str, root: str, in_tree: Callable[[str], bool],
              max_pixels: int) -> CocoIndex:
    """Read a COCO file; ``root`` is ``coco_root``, ``in_tree(relpath)`` says whether the scan
    found that image; ``max_pixels`` bounds an RLE's declared size (the decode budget)."""
    document = _document(data, where)
    index = CocoIndex()
    names = _categories(document.get("categories", []), where)
    index.categories = tuple(names[key] for key in sorted(names))
    images = _images(document.get("images", []), where, root, in_tree, index.problems)
    objects = _annotations(document.get("annotations", []), where, images, names, max_pixels)
    for image_id, (relpath, size) in images.kept.items():
        if relpath in images.refused or image_id in objects.errors:
            record: dict[str, Any] = {"error": images.refused.get(relpath)
                                      or objects.errors[image_id]}
        else:
            record = {"objects": objects.by_image.get(image_id, [])}
            if all(isinstance(value, int) for value in size):
                record["size"] = size
        index.records[relpath] = _compact(record)
    for relpath, problem in images.refused.items():  # an image with another's id: not kept
        if relpath not in index.records and in_tree(relpath):
            index.records[relpath] = _compact({"error": problem})
    unmatched = objects.unmatched
    index.problems += [f"{where}: {problem}" for problem in unmatched[:MAX_LISTED]]
    if len(unmatched) > MAX_LISTED:
        index.problems.append(f"{where}: {len(unmatched) - MAX_LISTED:,} more annotations "
                              f"belong to no image (the first {MAX_LISTED} are listed)")
    if images.outside:
        log.info("%s: %d images are not in the source tree (left out)", where, images.outside)
    return index


def _compact(record: dict[str, Any]) -> bytes:
    return json.dumps(record, sort_keys=True, separators=(",", ":")).encode()


def _document(data: bytes, where: str) -> dict[str, Any]:
    """The parsed file, checked to have the three lists of a COCO document."""
    try:
        document = json.loads(data)
    except ValueError as exc:
        raise AnnotationError(f"{where}: not valid JSON ({shown(str(exc), 120)})") from None
    except RecursionError:
        raise AnnotationError(f"{where}: not valid JSON (nested too deeply)") from None
    if not isinstance(document, dict) or not all(
            isinstance(document.get(key, []), list)
            for key in ("images", "annotations", "categories")):
        raise AnnotationError(f"{where}: not a COCO file (expected images, annotations and "
                              "categories lists)")
    return document


@dataclass
class _Images:
    """The ``images`` list read: per id of an image in the tree its (relpath, [width, height]);
    per path, why an image is refused whole; every well-formed id; how many lie outside."""

    kept: dict[int, tuple[str, list[Any]]] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    listed_ids: set[int] = field(default_factory=set)
    outside: int = 0


def _images(entries: list[Any], where: str, root: str, in_tree: Callable[[str], bool],
            problems: list[str]) -> _Images:
    found = _Images()
    first_with_id: dict[int, tuple[int, str]] = {}
    id_of_path: dict[str, int] = {}
    for number, image in enumerate(entries):
        if not isinstance(image, dict):
            problems.append(f"{where}: images[{number}] is not an image with an id")
            continue
        image_id = _id(image.get("id"))
        if image_id is not None:
            found.listed_ids.add(image_id)
        name = image.get("file_name")
        relpath = safe_relpath(posixpath.join(root, name) if root and isinstance(name, str)
                               else name)
        if relpath is None:
            problems.append(f"{where}: image {shown(image.get('id'))}: file_name "
                            f"{shown(name)} leads out of the source tree (refused)")
            continue
        if image_id is None:  # its entries cannot be told: the image must not pass as bare
            problem = f"{where}: images[{number}]: {_not_an_id('id', image.get('id'))}"
            if in_tree(relpath):
                found.refused.setdefault(relpath, problem)
            else:
                problems.append(problem)
            continue
        # Two images with one id: their entries could land on either, so both are refused.
        first, first_path = first_with_id.setdefault(image_id, (number, relpath))
        if first != number:
            problem = (f"{where}: images[{first}] and images[{number}] have the same id "
                       f"{shown(image_id)} (which image its annotations are for is unknown)")
            found.refused.setdefault(first_path, problem)
            found.refused.setdefault(relpath, problem)
        if not in_tree(relpath):
            found.outside += 1
            continue
        listed = id_of_path.setdefault(relpath, image_id)
        if listed != image_id:  # the first entry's objects must not vanish behind the second
            found.refused.setdefault(relpath, f"{where}: {relpath} is listed twice (images "
                                              f"{shown(listed)} and {shown(image_id)})")
        elif image_id not in found.kept:
            found.kept[image_id] = (relpath, [image.get("width"), image.get("height")])
    return found


@dataclass
class _Objects:
    """The ``annotations`` list read: per image id its objects, or why its entries are refused;
    entries that belong to no image (the file's problems)."""

    by_image: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    unmatched: list[str] = field(default_factory=list)


def _annotations(entries: list[Any], where: str, images: _Images, names: dict[int, str],
                 max_pixels: int) -> _Objects:
    found = _Objects()
    counts: dict[int, int] = {}
    points: dict[int, int] = {}
    for number, annotation in enumerate(entries):
        if not isinstance(annotation, dict):
            found.unmatched.append(f"annotations[{number}] is not an object")
            continue
        label = annotation.get("id", number)
        image_id = _id(annotation.get("image_id"))
        if image_id is None:
            found.unmatched.append(f"annotation {shown(label)}: "
                                   f"{_not_an_id('image_id', annotation.get('image_id'))}")
            continue
        if image_id not in images.listed_ids:
            found.unmatched.append(f"annotation {shown(label)}: image_id {image_id} is not an "
                                   "image of the file")
            continue
        if image_id not in images.kept or images.kept[image_id][0] in images.refused:
            continue  # an image outside the tree, or one refused whole
        counts[image_id] = counts.get(image_id, 0) + 1
        if image_id in found.errors or counts[image_id] > MAX_OBJECTS:
            continue  # counted for the message, not kept
        try:
            if "id" in annotation and _id(annotation["id"]) is None:
                raise _Bad(_not_an_id("id", annotation["id"]))
            item = _object(annotation, names, images.kept[image_id][1], max_pixels)
            points[image_id] = points.get(image_id, 0) + sum(
                len(ring) // 2 for ring in item.get("polygons", ()))
            if points[image_id] > MAX_POINTS:
                raise _Bad(f"more than the {MAX_POINTS:,} polygon points an image may have")
            found.by_image.setdefault(image_id, []).append(item)
        except _Bad as exc:
            found.errors[image_id] = (f"{where}: annotation {shown(label)} (image "
                                      f"{shown(annotation.get('image_id'))}): {exc}")
            found.by_image.pop(image_id, None)
    for image_id, count in counts.items():
        if count > MAX_OBJECTS:
            found.errors.setdefault(image_id, f"{where}: image {shown(image_id)}: "
                                    f"{too_many_objects(count)}")
            found.by_image.pop(image_id, None)
    return found


def _id(value: Any) -> int | None:
    """An id as COCO has it, an integer; None for anything else (``"1"``, ``1.0``, ``true``),
    which never matches: one spelling a number, so ``7`` and ``"7"`` are never one id in one
    place and two in another."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _not_an_id(what: str, value: Any) -> str:
    return f"{what} {shown(value)} is not an integer (COCO ids are integers)"


def _categories(categories: list[Any], where: str) -> dict[int, str]:
    names: dict[int, str] = {}
    first_with_id: dict[int, int] = {}
    for number, category in enumerate(categories):
        if not isinstance(category, dict) or not isinstance(category.get("name"), str) or \
                not category["name"]:
            raise AnnotationError(f"{where}: categories[{number}] needs an id and a name")
        category_id = _id(category.get("id"))
        if category_id is None:
            raise AnnotationError(f"{where}: categories[{number}]: "
                                  f"{_not_an_id('id', category.get('id'))}")
        same = first_with_id.setdefault(category_id, number)
        if same != number:
            raise AnnotationError(f"{where}: categories[{same}] and categories[{number}] have "
                                  f"the same id {category_id}")
        names[category_id] = category["name"]
    if len(set(names.values())) != len(names):
        raise AnnotationError(f"{where}: two categories have the same name")
    return names


def _object(annotation: dict[str, Any], names: dict[int, str], size: list[Any],
            max_pixels: int) -> dict[str, Any]:
    category = _id(annotation.get("category_id"))
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
        item["rle"], runs = _rle(segmentation, size, max_pixels)
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
        try:
            item["box"] = list(rle.box_of(runs, item["rle"]["size"][0]))
        except rle.RleError as exc:
            raise _Bad(str(exc)) from None
    else:
        raise _Bad("neither a bbox nor a segmentation")
    return item


def _rle(segmentation: dict[str, Any], size: list[Any],
         max_pixels: int) -> tuple[dict[str, Any], Any]:
    """The RLE as the record carries it, and its checked runs: its size is the image's (when
    the COCO file gives one) and within ``max_pixels``; its counts add up to it."""
    rle_size, counts = segmentation.get("size"), segmentation.get("counts")
    if not (isinstance(rle_size, list) and len(rle_size) == 2
            and all(isinstance(value, int) and not isinstance(value, bool) and value > 0
                    for value in rle_size)):
        raise _Bad("an RLE needs a size [height, width]")
    if size[0] is not None and rle_size != [size[1], size[0]]:
        raise _Bad(f"an RLE of size {rle_size} on a {shown(size[0])}x{shown(size[1])} image")
    height, width = rle_size
    if height * width > max_pixels:
        raise _Bad(f"an RLE of {height:,} x {width:,} pixels: more than the {max_pixels:,} "
                   "the decode budget allows (image.max_pixels, image.max_decoded_mb)")
    try:
        runs = rle.checked(rle.counts_of(counts, height * width), height, width)
    except rle.RleError as exc:
        raise _Bad(str(exc)) from None
    return {"size": rle_size, "counts": counts}, runs
