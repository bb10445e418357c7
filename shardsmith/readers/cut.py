"""Samples showing a defect cut below ``min_visible``, taken out of a reader's sample table.

Such a sample is not normal (``dataset.normal``), and its targets would not say where its cut
defect is: a detector would learn the crack's tip as background.  The readers (torch, DALI's
plan, Ultralytics' dataset) leave them out of the table before the epoch plan is made, so an
epoch still yields every sample of the table exactly once (docs/design.md, invariant 9), and
say how many; ``keep_cut=True`` keeps them, their cut objects marked "ignore" in ``targets``
(``ignore_boxes``, ``ignore_labels``; the class mask's 255 pixels already are).  The tf.data
reader reads its records' keys from the same table and leaves those records out of its record
stream, counting its epoch without them (``readers.tf``).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from ..dataset.manifest import Manifest, iter_sample_index
from ..dataset.normal import CUT_REASON, cut_count
from .plan import SampleTable

log = logging.getLogger(__name__)


def cut_keys(directory: Path, manifest: Manifest, table: SampleTable) -> set[str]:
    """The keys of ``table``'s samples whose index line says min_visible dropped an object
    (``dataset.normal.cut_count``: the objects listed, or counted by an index of an earlier
    release); one pass over the sample index, none for a dataset without objects."""
    if manifest.object_classes is None:
        return set()
    shard_names = {Path(path).name for path in table.paths}
    return {record.key for record in iter_sample_index(directory, manifest)
            if record.shard in shard_names and cut_count(record)}


def log_left_out(directory: Path | str, count: int) -> None:
    """One warning: how many samples a reader leaves out, and why."""
    log.warning("%s: %d samples left out: %s (keep_cut=True keeps them, their cut objects "
                "marked ignore in the targets)", directory, count, CUT_REASON)


def without_cut(directory: Path, manifest: Manifest, table: SampleTable,
                keep_cut: bool = False) -> SampleTable:
    """``table`` less its samples with a defect cut below min_visible (logged), or as it is
    with ``keep_cut`` or when there are none."""
    if keep_cut:
        return table
    found = cut_keys(directory, manifest, table)
    if not found:
        return table
    rows = np.array([index for index in range(len(table)) if table.key(index) not in found],
                    np.int64)
    log_left_out(directory, len(table) - len(rows))
    return take(table, rows)


def take(table: SampleTable, rows: np.ndarray) -> SampleTable:
    """The rows ``rows`` (in order) of ``table``; its shards stay (a shard whose samples all
    left is still checked as the index describes it, and read by none)."""
    keys = [table.key(int(index)) or "" for index in rows]
    key_bounds = np.zeros(len(keys) + 1, np.int64)
    np.cumsum([len(key) for key in keys], out=key_bounds[1:])
    columns = (table.shard, table.image_offset, table.image_size, table.label_offset,
               table.label_size, table.meta_offset, table.meta_size, table.mask_offset,
               table.mask_size)
    return SampleTable(table.paths, *(column[rows] for column in columns),
                       first_members=table.first_members, keys="".join(keys),
                       key_bounds=key_bounds, format=table.format)
