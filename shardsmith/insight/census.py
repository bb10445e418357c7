"""What a dataset holds: counts, sizes, exact duplicates and groups, from its sample index.

One streamed pass over the sample index (a second one only when two samples may share their
content) gives the samples per class and split, the distribution of output sizes and bytes,
the sets of identical originals (same XXH3-128 of every byte, which the pack computes for
each sample), with ``splits.group`` the groups of each split, and the objects of an annotated
dataset.  ``inspect`` shows it all; the pack summary shows duplicates, groups and objects.
Memory: 24 bytes per sample (sizes and a 64-bit digest prefix in flat arrays), plus one entry
per group when the dataset is grouped; time: about 30 us per sample and pass (the validating
index reader).
"""

from __future__ import annotations

from array import array
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..config import Config, config_from_settings
from ..dataset.manifest import Manifest, SampleRecord, iter_sample_index
from ..dataset.normal import record_is_normal
from ..dataset.records import CONTENT_PREFIX
from ..errors import ConfigError, ManifestError
from ..text import printable
from .picks import SeededPicks

COMMON_SIZES = 5


@dataclass(frozen=True)
class Spread:
    """Minimum, median, maximum and mean of some numbers."""

    count: int
    minimum: float
    median: float
    maximum: float
    mean: float

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread | None:
        """The spread of ``values``; None when there are none."""
        numbers = np.asarray(values if isinstance(values, array) else list(values), np.float64)
        if numbers.size == 0:
            return None
        return cls(int(numbers.size), float(numbers.min()), float(np.median(numbers)),
                   float(numbers.max()), float(numbers.mean()))


@dataclass(frozen=True)
class DuplicateSet:
    """Samples whose originals are identical, byte for byte: (split, path) of each copy."""

    digest: str
    copies: tuple[tuple[str, str], ...]

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(sorted({split for split, _ in self.copies}))

    @property
    def leaks(self) -> bool:
        """Copies in more than one split: a model would be validated on what it trained on."""
        return len(self.splits) > 1


@dataclass
class ObjectCensus:
    """The objects of an annotated dataset, from its sample index: samples with objects,
    without any defect (``dataset.normal``) and with only a defect cut below ``min_visible``
    per split, objects per class id and split, objects dropped by ``min_visible`` and
    masks merged with their box (None when no sample records them), and samples packed before
    objects were counted."""

    with_objects: Counter = field(default_factory=Counter)
    without_objects: Counter = field(default_factory=Counter)
    per_class: Counter = field(default_factory=Counter)  # by (class id, split)
    dropped: int | None = None
    merged: int | None = None
    uncounted: int = 0
    only_cut: Counter = field(default_factory=Counter)
    cut_per_class: Counter = field(default_factory=Counter)  # objects_cut, by class id

    @property
    def objects(self) -> int:
        return sum(self.per_class.values())

    def add(self, record: SampleRecord) -> None:
        """Count the objects of one sample index line."""
        if record.objects is None:
            self.uncounted += 1
            return
        (self.with_objects if any(record.objects) else self.without_objects
         if record_is_normal(record) else self.only_cut)[record.split] += 1
        for number, count in enumerate(record.objects, 1):
            if count:
                self.per_class[(number, record.split)] += count
        self.cut_per_class.update(item.label for item in record.objects_cut or ())
        if record.objects_dropped is not None:
            self.dropped = (self.dropped or 0) + record.objects_dropped
        if record.objects_merged is not None:
            self.merged = (self.merged or 0) + record.objects_merged


@dataclass(frozen=True)
class Census:
    """The facts ``inspect`` shows; restricted to ``split`` when it is set (duplicates are
    always looked for across the whole dataset, and kept when a copy is in ``split``)."""

    split: str | None
    classes: tuple[str, ...]
    splits: tuple[str, ...]
    counts: dict[tuple[int, str], int]
    samples: int
    widths: Spread | None
    heights: Spread | None
    jpeg_bytes: Spread | None
    common_sizes: tuple[tuple[int, int, int], ...]
    duplicates: tuple[DuplicateSet, ...]
    undigested: int
    group_pattern: str = ""
    groups: dict[str, int] = field(default_factory=dict)
    ungrouped: dict[str, int] = field(default_factory=dict)
    groups_in_several_splits: tuple[str, ...] = ()
    objects: ObjectCensus | None = None  # a dataset with objects
    picks: dict[int, list[SampleRecord]] = field(default_factory=dict)  # label -> seeded picks

    @property
    def labels(self) -> tuple[int, ...]:
        """Every label to show: the class list's, and any other found in the index."""
        found = {label for label, _ in self.counts}
        return tuple(sorted(found | set(range(len(self.classes)))))

    def class_name(self, label: int) -> str:
        """The class of ``label`` as a terminal shows it (``(no label)`` for -1)."""
        if 0 <= label < len(self.classes):
            return printable(self.classes[label])
        return "(no label)" if label == -1 else f"(label {label})"

    def class_total(self, label: int) -> int:
        return sum(n for (found, _), n in self.counts.items() if found == label)

    def split_total(self, split: str) -> int:
        return sum(n for (_, found), n in self.counts.items() if found == split)

    @property
    def leaks(self) -> tuple[DuplicateSet, ...]:
        return tuple(duplicate for duplicate in self.duplicates if duplicate.leaks)


def require_split(manifest: Manifest, split: str | None) -> None:
    """ConfigError unless ``split`` is None or a split of the dataset."""
    if split is not None and split not in manifest.splits:
        known = ", ".join(manifest.splits) or "none"
        raise ConfigError(f"--split: the dataset has no split {split!r} (splits: {known})")


def packed_config(manifest: Manifest) -> Config:
    """The settings the dataset was packed with, validated (the manifest is untrusted)."""
    try:
        return config_from_settings(manifest.config)
    except ConfigError as exc:
        raise ManifestError(f"config: {exc}") from None


def take_census(directory: Path, manifest: Manifest, split: str | None = None,
                duplicates: bool = True, per_class: int = 0, seed: int = 0) -> Census:
    """Stream the sample index of ``directory`` once (twice when duplicates are possible;
    ``duplicates=False`` leaves them out); with ``per_class``, pick that many samples of
    each label in the order of ``seed`` on the way (``picks.SeededPicks``)."""
    counts: Counter = Counter()
    widths, heights, jpeg_bytes = array("I"), array("I"), array("Q")
    prefixes = array("Q")
    undigested = 0
    group_split: dict[str, str] = {}
    several: set[str] = set()
    groups: dict[str, set[str]] = defaultdict(set)
    ungrouped: Counter = Counter()
    previous_path = None
    objects = ObjectCensus() if manifest.object_classes is not None else None
    picks = SeededPicks(per_class, seed)
    for record in iter_sample_index(directory, manifest):
        prefix = _digest_prefix(record)
        if prefix is None:
            if split is None or record.split == split:
                undigested += 1
        elif duplicates and record.path != previous_path:  # the tiles of one original: once
            prefixes.append(prefix)
        previous_path = record.path
        if record.group is not None:
            first = group_split.setdefault(record.group, record.split)
            if first != record.split:
                several.add(record.group)
        if split is not None and record.split != split:
            continue
        counts[record.label, record.split] += 1
        widths.append(min(max(record.width, 0), 2**32 - 1))
        heights.append(min(max(record.height, 0), 2**32 - 1))
        jpeg_bytes.append(min(max(record.jpeg_bytes, 0), 2**62))
        if record.group is None:
            ungrouped[record.split] += 1
        else:
            groups[record.split].add(record.group)
        if objects is not None:
            objects.add(record)
        if per_class:
            picks.add(record)
    try:
        group_pattern = packed_config(manifest).split_group
    except ManifestError:  # settings this version cannot read: counts are still worth seeing
        group_pattern = ""
    names = tuple(manifest.splits) if split is None else (split,)
    return Census(
        split=split,
        classes=manifest.classes,
        splits=names + tuple(sorted({s for _, s in counts} - set(names))),
        counts=dict(counts),
        samples=sum(counts.values()),
        widths=Spread.of(widths),
        heights=Spread.of(heights),
        jpeg_bytes=Spread.of(jpeg_bytes),
        common_sizes=_common_sizes(widths, heights),
        duplicates=_duplicates(directory, manifest, prefixes, split),
        undigested=undigested,
        group_pattern=group_pattern,
        groups={name: len(groups.get(name, ())) for name in names} if group_pattern else {},
        ungrouped={name: ungrouped.get(name, 0) for name in names} if group_pattern else {},
        groups_in_several_splits=tuple(sorted(several)),
        objects=objects,
        picks=picks.picks(),
    )


def _digest_prefix(record: SampleRecord) -> int | None:
    """The first 64 bits of a content digest; None for an older edges digest (the size and
    first and last 64 KiB, which is not proof of identical content) or none at all."""
    digest = record.source_digest
    if not digest.startswith(CONTENT_PREFIX) or len(digest) != len(CONTENT_PREFIX) + 32:
        return None
    try:
        return int(digest[len(CONTENT_PREFIX) : len(CONTENT_PREFIX) + 16], 16)
    except ValueError:
        return None


def _common_sizes(widths: array, heights: array) -> tuple[tuple[int, int, int], ...]:
    """The most frequent (width, height, samples), most frequent first."""
    if not widths:
        return ()
    keys = np.asarray(widths, np.int64) << 32 | np.asarray(heights, np.int64)
    values, counts = np.unique(keys, return_counts=True)
    order = np.lexsort((values, -counts))[:COMMON_SIZES]
    return tuple((int(values[i] >> 32), int(values[i] & 0xFFFFFFFF), int(counts[i]))
                 for i in order)


def _duplicates(directory: Path, manifest: Manifest, prefixes: array,
                split: str | None) -> tuple[DuplicateSet, ...]:
    """Sets of samples with the same content digest; leaking sets (several splits) first."""
    if len(prefixes) < 2:
        return ()
    ordered = np.sort(np.asarray(prefixes, np.uint64))
    repeated = set(ordered[1:][ordered[1:] == ordered[:-1]].tolist())
    if not repeated:
        return ()
    copies: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for record in iter_sample_index(directory, manifest):
        if _digest_prefix(record) in repeated:
            copies[record.source_digest].append((record.split, record.path))
    sets = [DuplicateSet(digest, tuple(sorted(set(found)))) for digest, found in copies.items()
            if len(set(found)) > 1]  # set: the tiles of an original are one copy
    if split is not None:
        sets = [duplicate for duplicate in sets if split in duplicate.splits]
    return tuple(sorted(sets, key=lambda d: (not d.leaks, d.copies)))
