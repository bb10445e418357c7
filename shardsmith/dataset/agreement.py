"""Does a sample's index line say what its shard's metadata says of its objects?

The export, the readers and ``inspect`` decide from the sample index alone whether a sample is
normal (``dataset.normal``: its objects and the objects cut below min_visible) and whether
its objects may be exported as masks (``dataset.task``: the box-only ones).  The shard's
``KEY.json`` (or TFRecord features) lists the same objects one by one.  Where the two
disagree the dataset lies about itself: a crack's tip hidden by the index would be a
background image, a box called a mask a rectangle polygon.  Every consumer that reads a
sample's metadata anyway (the export, ``verify --decode``) holds the index line to it here.

What an index line of an earlier release does not record (``None``) is not compared.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .manifest import SampleRecord
from .normal import cut_count


@dataclass(frozen=True, slots=True)
class IndexedObjects:
    """What a sample index line says of a sample's objects: per object class id ``k`` at
    ``k - 1``, the objects (``objects``) and the box-only ones (``box_only``); the class ids
    of the objects cut below min_visible, sorted (``cut``), or where a line of an earlier
    release counts them only, their count (``cut_count``).  None: not recorded."""

    objects: tuple[int, ...] | None
    cut: tuple[int, ...] | None
    box_only: tuple[int, ...] | None
    cut_count: int = 0


def indexed_objects(record: SampleRecord) -> IndexedObjects:
    """The object fields of ``record`` to hold its metadata to."""
    return IndexedObjects(
        None if record.objects is None else _trimmed(record.objects),
        None if record.objects_cut is None else tuple(sorted(item.label
                                                             for item in record.objects_cut)),
        None if record.objects_box_only is None else _trimmed(record.objects_box_only),
        cut_count(record))


def disagreement(indexed: IndexedObjects, metadata: dict[str, Any]) -> str | None:
    """Where the index line (``indexed``) and the sample's checked metadata
    (``ShardFormat.metadata``) disagree on its objects, its cut objects or its box-only
    objects, in a few words; None when they agree."""
    labels = metadata.get("labels") or []
    if indexed.objects is not None and indexed.objects != _per_class(labels):
        return _differ("objects per class", indexed.objects, _per_class(labels))
    cut = metadata.get("objects_cut")
    shard_cut = None if cut is None else tuple(sorted(item["label"] for item in cut))
    if indexed.cut is None and shard_cut and indexed.cut_count != len(shard_cut):
        return _differ("the count of objects cut below min_visible", (indexed.cut_count,),
                       (len(shard_cut),))
    if indexed.cut is not None and indexed.cut != (shard_cut or ()):
        return _differ("the objects cut below min_visible (class ids)", indexed.cut,
                       shard_cut or ())
    # a shard of a release before instance masks has no "rle": its objects' pixels are the
    # class mask's, and its index line does not count box-only objects either
    if indexed.box_only is not None and "rle" in metadata:
        shard_box_only = _per_class(_box_only_labels(labels, metadata.get("polygons") or (),
                                                     metadata["rle"]))
        if indexed.box_only != shard_box_only:
            return _differ("the box-only objects per class", indexed.box_only, shard_box_only)
    return None


def _box_only_labels(labels: Sequence[int], polygons: Sequence[Any],
                     rles: Sequence[Any]) -> Iterable[int]:
    """The class ids of the objects with no pixels: no instance mask, no polygon ring of
    three points (``annotations.counts.box_only_counts``, as the pack counted them)."""
    for index, label in enumerate(labels):
        rings = polygons[index] if index < len(polygons) else ()
        if rles[index] is None and not any(len(ring) >= 6 for ring in rings):
            yield label


def _per_class(labels: Iterable[int]) -> tuple[int, ...]:
    counts: list[int] = []
    for label in labels:
        if label > len(counts):
            counts.extend([0] * (label - len(counts)))
        counts[label - 1] += 1
    return tuple(counts)


def _trimmed(counts: Sequence[int]) -> tuple[int, ...]:
    end = len(counts)
    while end and not counts[end - 1]:
        end -= 1
    return tuple(counts[:end])


def _differ(what: str, indexed: Sequence[int], shard: Sequence[int]) -> str:
    return (f"its sample index line and its metadata in the shard disagree on {what}: "
            f"{_shown(indexed)} in the index, {_shown(shard)} in the shard (the dataset is "
            "damaged or forged; pack it again)")


def _shown(values: Sequence[int]) -> str:
    return "[" + ", ".join(map(str, values[:20])) + (", ...]" if len(values) > 20 else "]")
