"""Weighted sampling for rare defects: the epochs of draws that class weights make.

Framework-free (NumPy only); the torch and DALI readers and ``inspect --weights`` share it, so
the class mix ``inspect`` shows is the one the readers draw.  The weights themselves, a SPEC
like ``scratch=10,dent=10,*=1`` (image classes, object classes, ``(none)``), are read by
``weight_spec``.

In weighted mode an epoch is ``draws`` samples (default: the selection's size) drawn with
replacement, a function of (seed, epoch) only (docs/design.md, invariant 9): the readers cut
it into equal shares per rank and into batches exactly as they cut an unweighted epoch.  Its
order is held in memory, ~33 bytes a draw at its peak: ``draws`` is at most ``MAX_DRAWS``
(2**24 = 16,777,216: ~540 MB and ~3.5 s an epoch in each worker), past it a WeightsError
names the limit and what the order would take.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..dataset.manifest import Manifest, iter_sample_index
from ..text import human_bytes
from .plan import SampleTable, seed_words
from .weight_spec import (
    NO_OBJECTS,
    OBJECT,
    OTHERS,
    ClassWeights,
    WeightsError,
    WeightSpec,
    class_weights,
)

__all__ = ["MAX_DRAWS", "NO_OBJECTS", "OBJECT", "OTHERS", "ClassWeights", "SampleClasses",
           "WeightSpec", "WeightedDraws", "WeightsError", "check_draws", "class_weights",
           "reader_draws", "table_classes", "weighted_draws"]

log = logging.getLogger(__name__)

# A stream of its own: the weighted draw of (seed, epoch) is not built from the numbers that
# shuffle the unweighted epoch of the same (seed, epoch).
WEIGHTED_STREAM = 0x77656967
# Building an epoch's order peaks at ~33 bytes a draw (tracemalloc's peak over
# WeightedDraws.order of 1M draws: 32.7 MB), in every worker process that reads the epoch.
# 2**24 draws, the most one epoch may, peak at 538 MB and take 3.5 s (one shared core); the
# earlier bound, 2**28, would take ~8.9 GB (100M draws took 3.1 GB and 13.7 s).
ORDER_BYTES_PER_DRAW = 33
MAX_DRAWS = 1 << 24


@dataclass(frozen=True)
class SampleClasses:
    """The classes of each sample of a sample table, in its order: ``labels`` (-1 for
    unlabelled) and, in a dataset with objects, the object class ids each one holds (sample
    ``i``'s are ``object_ids[object_bounds[i]:object_bounds[i + 1]]``, ids from 1)."""

    labels: np.ndarray  # int64
    object_bounds: np.ndarray | None = None  # int64, one more than there are samples
    object_ids: np.ndarray | None = None  # int64

    def object_owners(self) -> np.ndarray:
        """The sample number of each entry of ``object_ids`` (empty without objects)."""
        if self.object_bounds is None:
            return np.zeros(0, np.int64)
        return np.repeat(np.arange(len(self.labels)), np.diff(self.object_bounds))


@dataclass(frozen=True)
class WeightedDraws:
    """An epoch of ``draws`` sample numbers drawn with replacement, sample ``i`` with
    probability its weight over the sum of every sample's weight: a bin of samples of one
    weight is drawn by its share of that sum, then one of its samples uniformly.  Weighted by
    image class, bin ``k`` holds the samples of class ``k`` and the last bin unlabelled ones
    (and labels outside the classes); by object class, a bin holds the samples of one weight.
    """

    labels: np.ndarray  # int64, -1 for unlabelled
    members: np.ndarray  # int64, sample numbers grouped by bin (in table order within one)
    starts: np.ndarray  # int64, where each bin's samples begin in ``members``
    counts: np.ndarray  # int64, samples per bin
    cumulative: np.ndarray  # float64, the running sum of the bins' weight (count x weight)
    draws: int
    bins: np.ndarray | None = None  # int64, each sample's bin
    relative: np.ndarray | None = None  # float64, each bin's weight over the largest one

    def order(self, seed: int, epoch: int) -> np.ndarray:
        """The sample numbers of ``epoch``, a function of (seed, epoch) only."""
        rng = np.random.default_rng(seed_words(int(seed), int(epoch), WEIGHTED_STREAM))
        total = self.cumulative[-1]
        bins = np.searchsorted(self.cumulative, rng.random(self.draws) * total, side="right")
        # Drawing the bin, then a sample of it: 0.2 s for a million draws, where one
        # searchsorted over a million samples' running weights took 1.4 s.
        # random() < 1, but times the total it may round up to it: the last bin of weight.
        bins = np.minimum(bins, int(np.searchsorted(self.cumulative, total, side="left")))
        within = (rng.random(self.draws) * self.counts[bins]).astype(np.int64)
        within = np.minimum(within, self.counts[bins] - 1)  # the same rounding
        return self.members[self.starts[bins] + within]


def weighted_draws(weights: ClassWeights, labels: np.ndarray | SampleClasses,
                   draws: int | None = None) -> WeightedDraws:
    """The draws of an epoch over samples of ``labels`` (their labels, or their classes with
    their objects', in the sample table's order)."""
    found = labels if isinstance(labels, SampleClasses) else SampleClasses(labels)
    labels = np.asarray(found.labels, np.int64)
    if draws is None:
        draws = len(labels)
    check_draws(draws)
    classes = len(weights.per_class)
    # A label outside the classes is a corrupt sample the reader replaces: weighted as '*'.
    by_label = np.where((labels >= 0) & (labels < classes), labels, classes)
    if weights.per_object is None:
        bins = by_label
        per_bin = np.asarray((*weights.per_class, weights.others), np.float64)
    else:
        per_bin, bins = np.unique(_object_weights(weights, found, by_label),
                                  return_inverse=True)
        bins = bins.astype(np.int64).ravel()
    counts = np.bincount(bins, minlength=len(per_bin)).astype(np.int64)
    # Relative to the largest weight: 1e308 does not overflow the sum, and weights of 5e-324
    # do not leave random() * total on a grid of sub-normal steps (a wrong mix).
    largest = float(per_bin[counts > 0].max(initial=0.0))  # of the bins with samples
    drawn = counts > 0
    relative = np.zeros_like(per_bin)
    if largest > 0:  # a bin without samples weighs nothing (its 1/5e-324 would overflow)
        relative[drawn] = per_bin[drawn] / largest
    cumulative = np.cumsum(counts * relative)
    total = float(cumulative[-1]) if len(cumulative) else 0.0
    if total <= 0:
        raise WeightsError("weights: every sample of the selection has weight 0 (its classes "
                           "are all weighted 0); nothing could be drawn")
    starts = np.zeros(len(per_bin), np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    return WeightedDraws(labels, np.argsort(bins, kind="stable"), starts, counts, cumulative,
                         int(draws), bins, relative)


def _object_weights(weights: ClassWeights, found: SampleClasses,
                    by_label: np.ndarray) -> np.ndarray:
    """Each sample's weight by the classes of its objects (the largest; a sample without
    objects, ``(none)``'s) and by its image class where the SPEC named it."""
    assert weights.per_object is not None
    samples = len(by_label)
    weight = np.full(samples, -np.inf)
    bounds, ids = found.object_bounds, found.object_ids
    if bounds is not None and ids is not None and len(ids):
        # An id past the object classes (a damaged index) weighs '*'.
        per_id = np.asarray((weights.others, *weights.per_object), np.float64)
        of_objects = per_id[np.where((ids >= 1) & (ids < len(per_id)), ids, 0)]
        holding = np.flatnonzero(np.diff(bounds) > 0)
        weight[holding] = np.maximum.reduceat(of_objects, bounds[holding])
    named = np.full(len(weights.per_class) + 1, -np.inf)
    for number in weights.named_classes:
        named[number] = weights.per_class[number]
    weight = np.maximum(weight, named[by_label])
    weight[weight == -np.inf] = weights.no_objects
    return weight


def check_draws(draws: object) -> None:
    """WeightsError unless ``draws`` is a whole number from 1 to ``MAX_DRAWS`` (not a bool,
    not a float): an epoch's order is held in memory."""
    if isinstance(draws, bool) or not isinstance(draws, int | np.integer) or draws < 1:
        raise WeightsError(f"draws: expected a whole number >= 1, got {draws!r}")
    if draws > MAX_DRAWS:
        raise WeightsError(f"draws: at most {MAX_DRAWS:,} a weighted epoch (its order takes "
                           f"~{ORDER_BYTES_PER_DRAW} bytes a draw: {int(draws):,} would take "
                           f"{human_bytes(int(draws) * ORDER_BYTES_PER_DRAW)} of memory); "
                           "give a smaller draws=")


def table_classes(directory: Path, manifest: Manifest, table: SampleTable) -> SampleClasses:
    """Each sample's label and object classes, in ``table``'s order, from the sample index
    (one pass; no shard is read).  A sample the index does not list is counted unlabelled and
    without objects, with a warning."""
    shard_names = {Path(path).name for path in table.paths}
    by_key: dict[str, tuple[int, tuple[int, ...]]] = {}
    with_objects = manifest.object_classes is not None
    for record in iter_sample_index(directory, manifest):
        if record.shard in shard_names:
            held = tuple(number for number, count in enumerate(record.objects or (), 1)
                         if count) if with_objects else ()
            by_key[record.key] = (record.label, held)
    absent: tuple[int, tuple[int, ...]] = (-2, ())
    found = [by_key.get(table.key(index) or "", absent) for index in range(len(table))]
    labels = np.array([label for label, _ in found], np.int64)
    missing = int((labels == -2).sum())
    if missing:
        log.warning("%d samples of the shards are not in the sample index: weighted as "
                    "unlabelled ('*') and without objects", missing)
        labels[labels == -2] = -1
    if not with_objects:
        return SampleClasses(labels)
    bounds = np.zeros(len(found) + 1, np.int64)
    np.cumsum([len(held) for _, held in found], out=bounds[1:])
    ids = np.fromiter((number for _, held in found for number in held), np.int64,
                      count=int(bounds[-1]))
    return SampleClasses(labels, bounds, ids)


def reader_draws(directory: Path, manifest: Manifest, table: SampleTable,
                 weights: WeightSpec | None, draws: int | None) -> WeightedDraws | None:
    """The weighted draws a reader's ``weights=``/``draws=`` ask for over ``table`` (None:
    unweighted, every sample once per epoch)."""
    if weights is None:
        if draws is not None:
            raise WeightsError("draws= sets the size of a weighted epoch: give weights= too "
                               "(weights='*=1' draws uniformly with replacement)")
        return None
    chosen = class_weights(weights, manifest.classes, manifest.object_classes or ())
    if draws is not None:
        check_draws(draws)  # before the sample index is read
    return weighted_draws(chosen, table_classes(directory, manifest, table), draws)
