"""The YOLO task of an export, one predicate: ``segment`` only where every object exported has
pixels (a polygon or an instance mask), never a box passed off as a mask.

The pack counts, per sample, the objects that have a box only (``objects_box_only`` in the
sample index); an index line without that count was written by an earlier release, and its
objects cannot be told apart without reading every shard.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import ConfigError
from ..text import cut, plural
from .manifest import SampleRecord


@dataclass(frozen=True)
class PixelCensus:
    """The objects of the samples an export writes, by whether they have pixels."""

    objects: int = 0
    box_only: tuple[int, ...] = ()  # per object class id k, at k - 1
    uncounted: int = 0  # samples with objects whose index line predates the count

    @property
    def box_only_total(self) -> int:
        return sum(self.box_only)

    def box_only_named(self, object_classes: tuple[str, ...]) -> str:
        """``scratch 12, dent 3``: the box-only objects per class."""
        named = (f"{object_classes[number] if number < len(object_classes) else number + 1} "
                 f"{count}" for number, count in enumerate(self.box_only) if count)
        return cut(", ".join(named), 200)


def pixel_census(records: Iterable[SampleRecord]) -> PixelCensus:
    """Count the objects of ``records`` (the samples exported) that have a box only."""
    objects = uncounted = 0
    box_only: list[int] = []
    for record in records:
        present = sum(record.objects or ())
        objects += present
        if record.objects_box_only is None:
            uncounted += present > 0
            continue
        if len(record.objects_box_only) > len(box_only):
            box_only.extend([0] * (len(record.objects_box_only) - len(box_only)))
        for index, count in enumerate(record.objects_box_only):
            box_only[index] += count
    return PixelCensus(objects, tuple(box_only), uncounted)


EXPORT_REMEDY = ("export --task detect, or add --boxes-as-polygons to write their boxes as "
                 "polygons anyway")


def yolo_task(requested: str, census: PixelCensus, object_classes: tuple[str, ...],
              boxes_as_polygons: bool) -> tuple[str, str]:
    """The task to export (``detect`` or ``segment``) for ``requested`` (``auto``, ``detect``
    or ``segment``) and why, in one line; ConfigError for ``segment`` over box-only objects
    unless ``boxes_as_polygons`` (their boxes written as rectangle polygons)."""
    if requested == "detect":
        return "detect", ""
    if requested == "segment":
        return "segment", segment_note(census, object_classes, boxes_as_polygons,
                                       "--task segment", EXPORT_REMEDY)
    box_only = census.box_only_total
    if not census.objects:
        return "detect", "auto chose detect: the samples exported have no objects"
    if census.uncounted:
        return "detect", f"auto chose detect: {_uncounted(census)}; --task segment to override"
    if box_only:
        return "detect", f"auto chose detect: {_with_boxes(census, object_classes)}; --task " \
                         "segment --boxes-as-polygons writes their boxes as rectangles"
    return "segment", ("auto chose segment: every object exported has a polygon or mask "
                       f"({plural(census.objects, 'object')})")


def segment_note(census: PixelCensus, object_classes: tuple[str, ...],
                 boxes_as_polygons: bool, asked: str, remedy: str) -> str:
    """Why segmentation over ``census``'s objects is what it is, in one line; ConfigError
    naming how many objects have a box only (``asked``: how the user asked for segment;
    ``remedy``: what to do instead), unless ``boxes_as_polygons`` (their boxes as rectangle
    polygons).  The export and the Ultralytics reader ask this one rule."""
    if census.box_only_total and not boxes_as_polygons:
        raise ConfigError(f"{asked}: {_with_boxes(census, object_classes)}: a segmentation "
                          f"model would learn their rectangles as masks; {remedy}")
    if census.box_only_total:
        return f"segment, as asked: {_with_boxes(census, object_classes)}, written as " \
               "rectangles (boxes as polygons)"
    if census.uncounted:
        return f"segment, as asked: {_uncounted(census)}; a box-only object among them is " \
               "written as its rectangle"
    return "segment, as asked: every object has a polygon or mask"


def _with_boxes(census: PixelCensus, object_classes: tuple[str, ...]) -> str:
    return (f"{census.box_only_total} of {plural(census.objects, 'object')} have a box only "
            f"({census.box_only_named(object_classes)})")


def _uncounted(census: PixelCensus) -> str:
    return (f"the index lines of {plural(census.uncounted, 'sample')} with objects, written "
            "by an earlier release, do not record which objects have pixels")
