"""What an annotation is on the way in (``Shape``, in the original's pixels) and on the way out
(``Objects``, in a sample's pixels)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..errors import ConfigError
from .limits import MAX_OBJECT_CLASSES

Box = tuple[float, float, float, float]


class AnnotationError(ConfigError):
    """An annotation file that cannot be used at all (the COCO file is not JSON, the labels
    file has a row without a path): one clear line, exit 2."""


@dataclass(frozen=True, slots=True)
class Shape:
    """One annotated object in the pixel frame of its original (stored or upright, as
    ``source.annotations.coordinates`` says).

    ``box`` is always set (for a polygon or RLE object: its bounds); ``polygons`` are flat
    ``x, y, x, y, ...`` rings; ``rle`` is a COCO RLE (``{"size": [h, w], "counts": ...}``).
    """

    name: str
    box: Box
    polygons: tuple[tuple[float, ...], ...] = ()
    rle: dict[str, Any] | None = None


@dataclass
class ImageAnnotations:
    """Everything annotated on one original.

    ``mask`` is a class mask in the original's frame (0 background, ``v`` the class
    ``mask_names[v - 1]``), or None; ``digest`` identifies the annotation record (its entries in
    the COCO or labels file, and the size and mtime of its own files).
    """

    shapes: list[Shape]
    mask: np.ndarray | None = None
    mask_names: tuple[str, ...] = ()
    digest: str = ""
    mask_file: str = ""  # the mask's path, for messages


@dataclass(frozen=True, slots=True)
class CutObject:
    """An object a crop or tile showed too little of (``min_visible``): not one of the
    sample's objects, but its defect is in the pixels.  ``box`` is its clipped box in the
    sample's pixels; ``rle`` its pixels in the sample (uncompressed COCO RLE) when it has a
    mask, None for a box-only object."""

    name: str
    box: Box
    rle: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class Objects:
    """A sample's annotations in its own pixels, as the worker hands them to the writer.

    Per object: a box ``(x0, y0, x1, y1)``, its class name, its polygons (flat rings, maybe
    none) and its instance mask as uncompressed COCO RLE over the sample (or None for a box
    without a mask).  ``mask_png`` is the class mask (PNG, one byte a pixel) whose value ``v``
    is ``mask_names[v - 1]``, and 255 marks the pixels of an object dropped by
    ``min_visible`` ("ignore"); the writer maps the others to dataset class ids.
    """

    boxes: tuple[Box, ...] = ()
    names: tuple[str, ...] = ()
    polygons: tuple[tuple[tuple[float, ...], ...], ...] = ()
    rles: tuple[tuple[int, ...] | None, ...] = ()
    mask_png: bytes | None = None
    mask_names: tuple[str, ...] = ()
    marked: bool = False  # the class mask marks a pixel of a class (not only "ignore")
    merged: int = 0  # objects that are a mask and a box of one defect, merged
    dropped: int = 0  # objects that showed less than source.annotations.min_visible
    cut: tuple[CutObject, ...] = ()  # those objects, where and what they are

    def __len__(self) -> int:
        return len(self.boxes)


@dataclass(frozen=True)
class Vocabulary:
    """Names a worker needs: the image classes (a label's name) and the object classes known
    when the run started (their ids are fixed; new names get ids the writer assigns)."""

    image_classes: tuple[str, ...] = ()
    object_classes: tuple[str, ...] = ()


class ObjectClasses:
    """The dataset's object classes, only ever appended to: id ``k`` is ``names[k - 1]``.

    The writer keeps one for a run: it starts from the previous version's list (and the
    classes known from the config and the COCO file) and gives a new name the next id when a
    sample in plan order first uses it, so ids do not depend on which worker saw it first.
    """

    def __init__(self, names: tuple[str, ...] | list[str] = ()):
        self.names: list[str] = []
        self._ids: dict[str, int] = {}
        for name in names:
            self.id(name)

    def id(self, name: str) -> int:
        number = self._ids.get(name)
        if number is None:
            self.names.append(name)
            number = self._ids[name] = len(self.names)
        return number

    def resolve(self, objects: Objects) -> Objects:
        """``objects`` with its class mask holding dataset ids (``mask_names`` = the first
        names of this list); a mask whose values already are those is kept as it is.

        With a class mask (one byte a pixel), ids run 1 to ``MAX_OBJECT_CLASSES`` and 255
        stays free for "ignore": a class past that is an ``AnnotationError`` naming it."""
        mask_ids = [self.id(name) for name in objects.mask_names]
        for name in objects.names:
            self.id(name)
        for item in objects.cut:
            self.id(item.name)
        if objects.mask_png is not None:
            self.check_mask_limit()
        if mask_ids == list(range(1, len(mask_ids) + 1)) or objects.mask_png is None:
            return objects
        from .maskpng import remap_png  # numpy and OpenCV only where a mask is remapped

        png = remap_png(objects.mask_png, mask_ids)
        return replace(objects, mask_png=png, mask_names=tuple(self.names[: max(mask_ids)]))

    def check_mask_limit(self) -> None:
        """AnnotationError when a class mask could not hold every class's id."""
        if len(self.names) > MAX_OBJECT_CLASSES:
            raise AnnotationError(
                f"object class {self.names[MAX_OBJECT_CLASSES]!r} is class "
                f"{MAX_OBJECT_CLASSES + 1}: a dataset with class masks has at most "
                f"{MAX_OBJECT_CLASSES} object classes (one byte a pixel, 255 left for "
                "\"ignore\")")
