"""The YOLO task of an export, one predicate: ``segment`` only where every object exported has
pixels (a polygon or an instance mask), never a box passed off as a mask.

The pack counts, per sample, the objects that have a box only (``objects_box_only`` in the
sample index); an index line without that count was written by an earlier release, and its
objects cannot be told apart without reading every shard.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ...dataset.manifest import SampleRecord
from ...errors import ConfigError
from ...text import cut, plural


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


def yolo_task(requested: str, census: PixelCensus, object_classes: tuple[str, ...],
              boxes_as_polygons: bool) -> tuple[str, str]:
    """The task to export (``detect`` or ``segment``) for ``requested`` (``auto``, ``detect``
    or ``segment``) and why, in one line; ConfigError for ``segment`` over box-only objects
    unless ``boxes_as_polygons`` (their boxes written as rectangle polygons)."""
    box_only = census.box_only_total
    with_boxes = (f"{box_only} of {plural(census.objects, 'object')} have a box only "
                  f"({census.box_only_named(object_classes)})") if box_only else ""
    uncounted = (f"the index lines of {plural(census.uncounted, 'sample')} with objects, "
                 "written by an earlier release, do not record which objects have pixels")
    if requested == "detect":
        return "detect", ""
    if requested == "segment":
        if box_only and not boxes_as_polygons:
            raise ConfigError(f"--task segment: {with_boxes}: a segmentation model would "
                              "learn their rectangles as masks; export --task detect, or add "
                              "--boxes-as-polygons to write their boxes as polygons anyway")
        if box_only:
            return "segment", f"segment, as asked: {with_boxes}, written as rectangles " \
                              "(--boxes-as-polygons)"
        if census.uncounted:
            return "segment", f"segment, as asked: {uncounted}; a box-only object among " \
                              "them is written as its rectangle"
        return "segment", "segment, as asked: every object has a polygon or mask"
    if not census.objects:
        return "detect", "auto chose detect: the samples exported have no objects"
    if census.uncounted:
        return "detect", f"auto chose detect: {uncounted}; --task segment to override"
    if box_only:
        return "detect", f"auto chose detect: {with_boxes}; --task segment " \
                         "--boxes-as-polygons writes their boxes as rectangles"
    return "segment", ("auto chose segment: every object exported has a polygon or mask "
                       f"({plural(census.objects, 'object')})")
