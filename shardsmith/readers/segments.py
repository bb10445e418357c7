"""Whether the Ultralytics reader may train ``segment`` on a dataset's samples: the rule the
yolo export follows (``dataset.task``), asked of the samples the reader reads.

A box-only object (a scratch annotated with a YOLO box) has no pixels: as a segment it would
be its rectangle, a mask nobody drew, and a segmentation model would learn rectangles as
scratches.  Framework-free (no Ultralytics import), so the rule is checked where Ultralytics
is not installed.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..dataset.manifest import Manifest, iter_sample_index
from ..dataset.task import pixel_census, segment_note
from .plan import SampleTable

log = logging.getLogger(__name__)

REMEDY = ("train ShardDetectionTrainer (task=detect), or set boxes_as_polygons = True on the "
          "trainer (a subclass of ShardSegmentationTrainer) to train on their boxes as "
          "rectangles anyway")


def check_segments(directory: Path, manifest: Manifest, table: SampleTable,
                   boxes_as_polygons: bool = False) -> str:
    """The note on segmenting ``table``'s samples (logged: a warning where a box may pass as
    a mask); ConfigError naming how many objects have a box only, unless
    ``boxes_as_polygons``.  One pass over the sample index."""
    keys = {table.key(index) for index in range(len(table))}
    census = pixel_census(record for record in iter_sample_index(directory, manifest)
                          if record.key in keys)
    note = segment_note(census, manifest.object_classes or (), boxes_as_polygons,
                        f"{directory}: task=segment", REMEDY)
    if census.box_only_total or census.uncounted:
        log.warning("%s: %s", directory, note)
    else:
        log.info("%s: %s", directory, note)
    return note
