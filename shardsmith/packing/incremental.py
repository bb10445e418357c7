"""Dataset versions: what a pack run rewrites and keeps once its ``Delta`` is executed.

A first pack processes the whole plan.  A later pack over a dataset with the same settings
starts from that dataset (``delta.diff`` decides what changes, before any pixel is read):

* new sources are processed; sources whose size or mtime changed are processed with the
  digest of their packed sample, and decoded only if their content differs
  (``imaging.process`` returns ``Unchanged`` otherwise); everything else is not read;
* a listed shard that is missing or has the wrong size is repaired: its samples are decoded
  again;
* shards holding no changed or removed source stay as they are, byte for byte;
* a shard holding one is rewritten under a new name without the stale samples (their bytes
  are copied, not re-encoded), so the manifest never lists a sample whose source is gone or
  stale, and a later ``stage`` copies only new and rewritten shards; ``--compact`` merges
  small shards the same way.

Memory: the previous sample index is streamed, never loaded; what is kept per file is the
plan and the Delta's byte of flags.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType

import numpy as np

from ..dataset.formats import ShardLimits, ShardRoller
from ..dataset.manifest import SampleRecord, ShardEntry, iter_sample_index
from .delta import Outcome
from .scan import SourceTable


@dataclass(frozen=True)
class Rewritten:
    """The shards of the new version, key -> new shard name of every moved sample, the shards
    the new version no longer lists, and the next shard number of each split."""

    shards: tuple[ShardEntry, ...]
    moved: Mapping[str, str]
    obsolete: tuple[ShardEntry, ...]
    numbers: Mapping[str, int]


def rewrite(outcome: Outcome, shards: list[ShardEntry], output: Path, roller: ShardRoller,
            compact_below: ShardLimits | None, split_order: list[str]) -> Rewritten:
    """Copy the kept samples of stale shards (and, with ``compact_below``, all samples of
    small shards) into new shards through ``roller``.  Deterministic: the same inputs give
    the same files under the same names, so a resumed run repeats it exactly.
    """
    damaged = outcome.damaged
    rewrite_names = set(outcome.stale_shards)
    if compact_below is not None:
        rewrite_names |= merged_by_compaction(shards, compact_below, damaged)

    obsolete = [shard for shard in shards if shard.name in rewrite_names | damaged]
    kept = [shard for shard in shards if shard.name not in rewrite_names | damaged]
    moved: dict[str, str] = {}
    order = {split: number for number, split in enumerate(split_order)}
    for shard in sorted((s for s in obsolete if s.name not in damaged),
                        key=lambda s: order.get(s.split, len(order))):
        for _, record in roller.fmt.records(output / shard.name, shard.bytes):
            if record.key not in outcome.leaving_keys:
                moved[record.key], _ = roller.add(shard.split, record)
    roller.close()
    return Rewritten(tuple(kept + roller.closed), MappingProxyType(moved), tuple(obsolete),
                     MappingProxyType(dict(roller.numbers)))


def merged_by_compaction(shards: Sequence[ShardEntry], limits: ShardLimits,
                         damaged: frozenset[str] = frozenset()) -> set[str]:
    """The shards ``--compact`` merges: in each split, the small ones (under half the
    limit), when there are two or more to merge; damaged shards are packed again instead."""
    small: dict[str, list[str]] = {}
    for shard in shards:
        if shard.name not in damaged and _is_small(shard, limits):
            small.setdefault(shard.split, []).append(shard.name)
    return {name for group in small.values() if len(group) > 1 for name in group}


def _is_small(shard: ShardEntry, limits: ShardLimits) -> bool:
    if limits.samples is not None:
        return shard.samples < limits.samples / 2
    return shard.bytes < limits.bytes / 2


def kept_samples(output: Path, outcome: Outcome, moved: Mapping[str, str],
                 observe: Callable[[SampleRecord, bool], None] | None = None
                 ) -> Iterator[SampleRecord]:
    """The previous version's samples that stay, streamed from its index, with new shard
    names for moved samples and the new stat and digest of touched ones.  ``observe`` sees
    every previous record as it is read, and whether it leaves (the changes file's)."""
    previous = outcome.delta.previous
    if previous is None:
        return
    touched = outcome.touched
    for record in iter_sample_index(output, previous):
        leaves = record.key in outcome.leaving_keys
        if observe is not None:
            observe(record, leaves)
        if leaves:
            continue
        if record.key in moved:
            record = replace(record, shard=moved[record.key])
        if record.path in touched:
            digest, size, mtime_ns = touched[record.path]
            record = replace(record, source_digest=digest, source_size=size,
                             source_mtime_ns=mtime_ns)
        yield record


def append_classes(files: SourceTable, before: tuple[str, ...],
                   now: tuple[str, ...]) -> tuple[SourceTable, tuple[str, ...]]:
    """The class list of a new version: the previous one, then classes new in this scan
    (sorted); and ``files`` with labels that index it (a new table: ``files`` is not
    changed).  A label, once given, keeps its meaning, also when its class has no images
    left."""
    merged = tuple(before) + tuple(sorted(set(now) - set(before)))
    if merged[: len(now)] == tuple(now):
        return files, merged
    position = {name: number for number, name in enumerate(merged)}
    table = np.array([position[name] for name in now], np.int32)
    labels = files.labels.copy()
    labelled = labels >= 0
    labels[labelled] = table[labels[labelled]]
    return replace(files, labels=labels), merged
