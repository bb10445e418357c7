"""Dataset versions: what a pack run starts from, what it must redo, and what it rewrites.

A first pack starts from an empty ``Base`` and processes the whole plan.  A later pack over a
dataset with the same settings starts from that dataset:

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
plan, plus entries for the files that changed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from .errors import OutputStateError
from .formats import ShardLimits, ShardRoller
from .journal import JournalState
from .manifest import (
    Manifest,
    RejectEntry,
    SampleRecord,
    ShardEntry,
    VersionEntry,
    files_intact,
    iter_sample_index,
    shard_number,
)
from .plan import Plan, PlanItem
from .scan import SourceTable


@dataclass
class Base:
    """The dataset a run builds on (None for a first pack) and the work left to do."""

    previous: Manifest | None
    work: Sequence[PlanItem]  # the whole Plan for a first pack, else the items to process
    kept_rejects: list[RejectEntry] = field(default_factory=list)
    damaged: list[ShardEntry] = field(default_factory=list)
    stale_keys: set[str] = field(default_factory=set)  # previous samples that leave
    stale_shards: set[str] = field(default_factory=set)
    # relpath -> (key, shard) of each sample of a source whose stat changed (a tiled original
    # has several)
    maybe: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    added_paths: set[str] = field(default_factory=set)  # new sources (unless a first pack)
    next_numbers: Counter = field(default_factory=Counter)
    changes: Counter = field(default_factory=Counter)

    @property
    def version(self) -> int:
        return self.previous.version if self.previous is not None else 0


def prepare_base(output: Path, previous: Manifest | None, plan: Plan,
                 classes: tuple[str, ...], annotation_digests: np.ndarray | None = None,
                 compare_labels: bool = False) -> Base:
    """Compare the previous version with the current plan: what to process, what leaves.

    ``annotation_digests`` (per table position) and ``compare_labels`` (labels from a file):
    a source whose annotations or label changed is processed again, though its bytes did not.
    """
    if previous is None:
        return Base(None, plan)
    _check_classes(output, previous.classes, classes)
    base = Base(previous, [])
    base.damaged = [shard for shard in previous.shards
                    if not files_intact(output, shard.files())]
    damaged = {shard.name for shard in base.damaged}
    table, plan_position = plan.table, plan.position_of()

    def position(relpath: str) -> int | None:
        index = table.index_of(relpath)
        return None if index is None else int(plan_position[index])

    todo: dict[int, str | None] = {}  # plan position -> expected digest (None: decode)
    seen = bytearray(len(plan))
    changes = base.changes
    relabelled: set[str] = set()

    def annotations_changed(record: SampleRecord, at: int) -> bool:
        if compare_labels and record.label != int(table.labels[at]):
            return True
        if annotation_digests is None:
            return False
        try:
            return int(record.annotation_digest or "", 16) != int(annotation_digests[at])
        except ValueError:
            return True

    for record in iter_sample_index(output, previous):
        number = position(record.path)
        if number is not None:
            seen[number] = 1
        if record.shard in damaged:
            base.stale_keys.add(record.key)
            changes["repaired"] += 1
            if number is not None:
                todo[number] = None
        elif number is None:
            base.stale_keys.add(record.key)
            base.stale_shards.add(record.shard)
            changes["removed"] += 1
        else:
            at = int(plan.order[number])
            if annotations_changed(record, at):  # its samples go; it is processed again
                todo[number] = None
                base.stale_keys.add(record.key)
                base.stale_shards.add(record.shard)
                if record.path not in relabelled:
                    relabelled.add(record.path)
                    changes["changed"] += 1
            elif (record.source_size, record.source_mtime_ns) != (int(table.sizes[at]),
                                                                   int(table.mtimes[at])):
                todo[number] = record.source_digest or None
                base.maybe.setdefault(record.path, []).append((record.key, record.shard))
    for reject in previous.rejects:
        if reject.source_size is None:
            continue  # found by the scan (a folder it could not list): the scan judges again
        number = position(reject.path)
        if number is None:
            changes["removed"] += 1
            continue
        seen[number] = 1
        at = int(plan.order[number])
        if (reject.source_size, reject.source_mtime_ns) == (int(table.sizes[at]),
                                                            int(table.mtimes[at])):
            base.kept_rejects.append(reject)
        else:
            todo[number] = None
            changes["changed"] += 1
    for number in np.flatnonzero(np.frombuffer(seen, np.uint8) == 0).tolist():
        todo[number] = None
        base.added_paths.add(table.relpaths[int(plan.order[number])])
    base.work = [replace(plan[number], expected_digest=todo[number]) if todo[number]
                 else plan[number] for number in sorted(todo)]

    # Numbers only grow: a name, once used, never stands for other content.
    for shard in previous.shards:
        base.next_numbers[shard.split] = max(base.next_numbers[shard.split],
                                             shard_number(shard.name) + 1)
    for split, number in previous.next_shard_numbers.items():
        base.next_numbers[split] = max(base.next_numbers[split], number)
    return base


def settle(base: Base, state: JournalState) -> None:
    """After processing: count what was added and rejected; sources whose stat changed either
    kept their content (touched) or changed, which makes their previous sample stale."""
    if base.previous is None:
        base.changes.update(added=state.sources, rejected=len(state.rejects))
        return
    rejected = sum(1 for reject in state.rejects if reject.path in base.added_paths)
    base.changes.update(added=len(base.added_paths) - rejected, rejected=rejected)
    for item in base.work:
        if item.expected_digest is None:
            continue
        relpath = item.source.relpath
        if relpath in state.unchanged:
            base.changes["touched"] += 1
        else:
            base.changes["changed"] += 1
            for key, shard in base.maybe[relpath]:
                base.stale_keys.add(key)
                base.stale_shards.add(shard)


def rewrite(base: Base, shards: list[ShardEntry], output: Path, roller: ShardRoller,
            compact_below: ShardLimits | None,
            split_order: list[str]) -> tuple[list[ShardEntry], dict[str, str], list[ShardEntry]]:
    """Copy the kept samples of stale shards (and, with ``compact_below``, all samples of
    small shards) into new shards through ``roller``.

    Returns the shards of the new version, key -> new shard name of every moved sample, and
    the shards the new version no longer lists.  Deterministic: the same inputs give the same
    files under the same names, so a resumed run repeats it exactly.
    """
    damaged = {shard.name for shard in base.damaged}
    rewrite_names = set(base.stale_shards)
    if compact_below is not None:
        small: dict[str, list[str]] = {}
        for shard in shards:
            if shard.name not in damaged and _is_small(shard, compact_below):
                small.setdefault(shard.split, []).append(shard.name)
        rewrite_names |= {name for group in small.values() if len(group) > 1 for name in group}

    obsolete = [shard for shard in shards if shard.name in rewrite_names | damaged]
    kept = [shard for shard in shards if shard.name not in rewrite_names | damaged]
    moved: dict[str, str] = {}
    order = {split: number for number, split in enumerate(split_order)}
    for shard in sorted((s for s in obsolete if s.name not in damaged),
                        key=lambda s: order.get(s.split, len(order))):
        for _, record in roller.fmt.records(output / shard.name, shard.bytes):
            if record.key not in base.stale_keys:
                moved[record.key], _ = roller.add(shard.split, record)
    roller.close()
    return kept + roller.closed, moved, obsolete


def _is_small(shard: ShardEntry, limits: ShardLimits) -> bool:
    if limits.samples is not None:
        return shard.samples < limits.samples / 2
    return shard.bytes < limits.bytes / 2


def kept_samples(output: Path, base: Base, moved: dict[str, str],
                 state: JournalState) -> Iterator[SampleRecord]:
    """The previous version's samples that stay, streamed from its index, with new shard
    names for moved samples and the new stat and digest of touched ones."""
    if base.previous is None:
        return
    touched = state.unchanged
    for record in iter_sample_index(output, base.previous):
        if record.key in base.stale_keys:
            continue
        if record.key in moved:
            record = replace(record, shard=moved[record.key])
        if record.path in touched:
            digest, size, mtime_ns = touched[record.path]
            record = replace(record, source_digest=digest, source_size=size,
                             source_mtime_ns=mtime_ns)
        yield record


def history_entry(base: Base, version: int, created: str, shards: list[ShardEntry],
                  note: str | None = None) -> VersionEntry:
    """What one version changed, for the manifest's history and ``shardsmith log``."""
    before = {shard.name for shard in base.previous.shards} if base.previous else set()
    now = {shard.name for shard in shards}
    changes = base.changes
    return VersionEntry(
        version=version, created=created, added=changes["added"], changed=changes["changed"],
        removed=changes["removed"], rejected=changes["rejected"], touched=changes["touched"],
        repaired=changes["repaired"],
        shards_added=tuple(sorted(now - before)), shards_removed=tuple(sorted(before - now)),
        previous_content_fingerprint=(base.previous.content_fingerprint
                                      if base.previous else None),
        note=note,
    )


def append_classes(files: SourceTable, before: tuple[str, ...],
                   now: tuple[str, ...]) -> tuple[str, ...]:
    """The class list of a new version: the previous one, then classes new in this scan
    (sorted); the labels of ``files`` are changed in place to index it.  A label, once
    given, keeps its meaning, also when its class has no images left."""
    merged = tuple(before) + tuple(sorted(set(now) - set(before)))
    if merged[: len(now)] != tuple(now):
        position = {name: number for number, name in enumerate(merged)}
        table = np.array([position[name] for name in now], np.int32)
        labelled = files.labels >= 0
        files.labels[labelled] = table[files.labels[labelled]]
    return merged


def _check_classes(output: Path, before: tuple[str, ...], now: tuple[str, ...]) -> None:
    """Labels are indices into the class list: existing ones must keep their meaning."""
    if tuple(now[: len(before)]) != tuple(before):
        raise OutputStateError(f"{output}: the class list of this version does not begin "
                               "with the previous one's; pass --overwrite to rebuild")
