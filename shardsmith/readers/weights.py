"""Weighted sampling for rare defects: class weights, and the epochs of draws they make.

Framework-free (NumPy only); the torch and DALI readers and ``inspect --weights`` share it, so
the class mix ``inspect`` shows is the one the readers draw.

A weight SPEC is comma-separated ``CLASS=WEIGHT`` terms::

    scratch=10,dent=10          # scratch and dent 10 times as likely as any other class
    #3=5,*=0.5                  # class id 3 (classes[3]) 5, every other class 0.5

``CLASS`` is a class name, ``#N`` the class of id ``N`` (how a name holding a comma, or
starting with ``#``, is written), or ``*``: every class not named, and unlabelled samples
(default 1).  A weight is a finite number >= 0; a sample is drawn with probability its
class's weight over the sum of every sample's weight.  In a SPEC a weight is written in ASCII
decimal or float syntax (``10``, ``0.5``, ``2e-3``; no ``1_000``, no other digits); one that
is not zero but too small for a float (``1e-400``) is refused rather than read as 0.  In Python
a mapping works too (``{"scratch": 10, 3: 5, "*": 1}``: names, ids, ``"*"``).

In weighted mode an epoch is ``draws`` samples (default: the selection's size) drawn with
replacement, a function of (seed, epoch) only (docs/design.md, invariant 9): the readers cut
it into equal shares per rank and into batches exactly as they cut an unweighted epoch.  Its
order is held in memory, ~33 bytes a draw at its peak: ``draws`` is at most ``MAX_DRAWS``
(2**28, ~8.9 GB), past it a WeightsError names the limit and what the order would take.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..dataset.manifest import Manifest, iter_sample_index
from ..errors import ConfigError
from ..text import human_bytes, shown
from .plan import SampleTable

log = logging.getLogger(__name__)

OTHERS = "*"
# A stream of its own: the weighted draw of (seed, epoch) is not built from the numbers that
# shuffle the unweighted epoch of the same (seed, epoch).
WEIGHTED_STREAM = 0x77656967
# Building an epoch's order peaks at ~33 bytes a draw (tracemalloc's peak over
# WeightedDraws.order of 1M draws: 32.7 MB): 2**28 draws take ~8.9 GB, the most one epoch may.
ORDER_BYTES_PER_DRAW = 33
MAX_DRAWS = 1 << 28
# float()'s syntax less what it also takes: "1_000", digits of other scripts, spaces within
# (inf and nan parse, to be refused as not finite)
_NUMBER = re.compile(r"[+-]?(?:(?P<mantissa>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
                     r"|inf|infinity|nan)", re.ASCII | re.IGNORECASE)


class WeightsError(ConfigError, ValueError):
    """A malformed weight SPEC or ``draws``: a ValueError in Python, one line and exit 2 from
    the command line."""


@dataclass(frozen=True)
class ClassWeights:
    """The weight of each class (``per_class[i]`` of ``classes[i]``) and of unlabelled
    samples (``others``, the ``*`` weight)."""

    per_class: tuple[float, ...]
    others: float = 1.0


WeightSpec = str | Mapping[str | int, float] | ClassWeights


def class_weights(spec: WeightSpec, classes: Sequence[str]) -> ClassWeights:
    """The weights ``spec`` (a SPEC string, a mapping, or ``ClassWeights``) gives ``classes``;
    WeightsError naming what is wrong (an unknown class, a class named twice, a negative or
    non-finite weight, every weight zero)."""
    if isinstance(spec, ClassWeights):
        if len(spec.per_class) != len(classes):
            raise WeightsError(f"weights: {len(spec.per_class)} class weights for "
                               f"{len(classes)} classes")
        terms = [(number, weight) for number, weight in enumerate(spec.per_class)]
        terms.append((OTHERS, spec.others))
    elif isinstance(spec, str):
        terms = _spec_terms(spec)
    elif isinstance(spec, Mapping):
        terms = list(spec.items())
    else:
        raise WeightsError(f"weights: expected a SPEC like 'scratch=10,*=1' or a mapping, "
                           f"got {type(spec).__name__}")
    if not terms:
        raise WeightsError("weights: no CLASS=WEIGHT term")
    named: dict[int, float] = {}
    others = None
    for key, raw in terms:
        weight = _weight(key, raw)
        if key == OTHERS:
            if others is not None:
                raise WeightsError("weights: '*' is given twice")
            others = weight
            continue
        number = _class_number(key, classes)
        if number in named:
            raise WeightsError(f"weights: class {shown(classes[number])} is given twice")
        named[number] = weight
    others = 1.0 if others is None else others
    per_class = tuple(named.get(number, others) for number in range(len(classes)))
    if not any(per_class) and not others:
        raise WeightsError("weights: every weight is zero; nothing could be drawn")
    return ClassWeights(per_class, others)


def _spec_terms(spec: str) -> list[tuple[str | int, str]]:
    terms: list[tuple[str | int, str]] = []
    for term in spec.split(","):
        name, equals, weight = term.strip().rpartition("=")
        if not equals or not name.strip():
            raise WeightsError(f"weights: {shown(term.strip())} is not CLASS=WEIGHT (e.g. "
                               "'scratch=10,*=1')")
        name = name.strip()
        if name.startswith("#") and name[1:].isdigit() and name[1:].isascii():
            terms.append((int(name[1:]), weight.strip()))
        else:
            terms.append((name, weight.strip()))
    return terms


def _weight(key: str | int, raw: object) -> float:
    where = f"weights: {shown(str(key))}"
    if isinstance(raw, bool):
        raise WeightsError(f"{where}: {raw!r} is not a number")
    if isinstance(raw, str):
        number = _NUMBER.fullmatch(raw.strip())
        if number is None:
            raise WeightsError(f"{where}: {shown(raw)} is not a number (ASCII digits: 10, "
                               "0.5, 2e-3)")
        nonzero = (number["mantissa"] or "1").strip("0.") != ""
    try:
        weight = float(raw)  # type: ignore[arg-type]
        if not isinstance(raw, str):
            nonzero = bool(raw != 0)  # type: ignore[operator]
    except OverflowError:  # an int (or Fraction) past the largest float
        raise WeightsError(f"{where}: {shown(str(raw)[:40])} is too large for a weight (at "
                           "most ~1.8e308)") from None
    except (TypeError, ValueError):
        raise WeightsError(f"{where}: {shown(str(raw))} is not a number") from None
    if weight == 0 and nonzero and math.isfinite(weight):
        raise WeightsError(f"{where}: {shown(str(raw)[:40])} is too small for a float "
                           "(it would be 0); the smallest is ~5e-324")
    if not math.isfinite(weight):
        raise WeightsError(f"{where}: the weight must be finite, got {raw}")
    if weight < 0:
        raise WeightsError(f"{where}: the weight must be >= 0, got {raw}")
    return weight


def _class_number(key: str | int, classes: Sequence[str]) -> int:
    if isinstance(key, bool) or not isinstance(key, str | int):
        raise WeightsError(f"weights: {key!r} is not a class name or id")
    if isinstance(key, int):
        if not 0 <= key < len(classes):
            raise WeightsError(f"weights: class id {key} is not one of 0 to "
                               f"{len(classes) - 1}")
        return key
    try:
        return list(classes).index(key)
    except ValueError:
        known = ", ".join(shown(name) for name in classes[:20])
        more = ", ..." if len(classes) > 20 else ""
        raise WeightsError(f"weights: {shown(key)} is not a class of this dataset "
                           f"(classes: {known}{more})") from None


@dataclass(frozen=True)
class WeightedDraws:
    """An epoch of ``draws`` sample numbers drawn with replacement, sample ``i`` with
    probability its class's weight over the sum of every sample's weight: a class is drawn
    by its share of that sum, then one of its samples uniformly.  ``labels`` are the samples'
    labels; bin ``classes`` holds unlabelled samples (and labels outside the classes)."""

    labels: np.ndarray  # int64, -1 for unlabelled
    members: np.ndarray  # int64, sample numbers grouped by bin (in table order within one)
    starts: np.ndarray  # int64, where each bin's samples begin in ``members``
    counts: np.ndarray  # int64, samples per bin
    cumulative: np.ndarray  # float64, the running sum of the bins' weight (count x weight)
    draws: int

    def order(self, seed: int, epoch: int) -> np.ndarray:
        """The sample numbers of ``epoch``, a function of (seed, epoch) only."""
        rng = np.random.default_rng(_entropy(int(seed), int(epoch)))
        total = self.cumulative[-1]
        bins = np.searchsorted(self.cumulative, rng.random(self.draws) * total, side="right")
        # Drawing the bin, then a sample of it: 0.2 s for a million draws, where one
        # searchsorted over a million samples' running weights took 1.4 s.
        # random() < 1, but times the total it may round up to it: the last bin of weight.
        bins = np.minimum(bins, int(np.searchsorted(self.cumulative, total, side="left")))
        within = (rng.random(self.draws) * self.counts[bins]).astype(np.int64)
        within = np.minimum(within, self.counts[bins] - 1)  # the same rounding
        return self.members[self.starts[bins] + within]


def weighted_draws(weights: ClassWeights, labels: np.ndarray,
                   draws: int | None = None) -> WeightedDraws:
    """The draws of an epoch over samples of ``labels`` (in the sample table's order)."""
    if draws is None:
        draws = len(labels)
    check_draws(draws)
    classes = len(weights.per_class)
    # A label outside the classes is a corrupt sample the reader replaces: weighted as '*'.
    bins = np.where((labels >= 0) & (labels < classes), labels, classes)
    counts = np.bincount(bins, minlength=classes + 1).astype(np.int64)
    per_bin = np.asarray((*weights.per_class, weights.others), np.float64)
    # Relative to the largest weight: 1e308 does not overflow the sum, and weights of 5e-324
    # do not leave random() * total on a grid of sub-normal steps (a wrong mix).
    largest = float(per_bin[counts > 0].max(initial=0.0))  # of the bins with samples
    drawn = counts > 0
    relative = np.zeros_like(per_bin)
    if largest > 0:  # a bin without samples weighs nothing (its 1/5e-324 would overflow)
        relative[drawn] = per_bin[drawn] / largest
    cumulative = np.cumsum(counts * relative)
    total = float(cumulative[-1])
    if total <= 0:
        raise WeightsError("weights: every sample of the selection has weight 0 (its classes "
                           "are all weighted 0); nothing could be drawn")
    starts = np.zeros(classes + 1, np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    return WeightedDraws(np.asarray(labels, np.int64), np.argsort(bins, kind="stable"), starts,
                         counts, cumulative, int(draws))


def check_draws(draws: object) -> None:
    """WeightsError unless ``draws`` is a whole number from 1 to ``MAX_DRAWS`` (not a bool,
    not a float): an epoch's order is held in memory."""
    if isinstance(draws, bool) or not isinstance(draws, int | np.integer) or draws < 1:
        raise WeightsError(f"draws: expected a whole number >= 1, got {draws!r}")
    if draws > MAX_DRAWS:
        raise WeightsError(f"draws: at most {MAX_DRAWS:,} a weighted epoch (its order takes "
                           f"~{ORDER_BYTES_PER_DRAW} bytes a draw: {int(draws):,} would take "
                           f"{human_bytes(int(draws) * ORDER_BYTES_PER_DRAW)} of memory)")


def _entropy(seed: int, epoch: int) -> list[int]:
    """The random numbers' seed for (seed, epoch): the whole integers, not their low 32 bits
    (epoch 2**32 is not epoch 0).  Seeds and epochs from 0 to 2**32 - 1 keep the three words
    they always had; any other pair is its own longer list (signs and word counts in it)."""
    mask = 0xFFFFFFFF
    if 0 <= seed <= mask and 0 <= epoch <= mask:
        return [seed, epoch, WEIGHTED_STREAM]
    words = [WEIGHTED_STREAM, WEIGHTED_STREAM]
    for number in (seed, epoch):
        magnitude, parts = abs(number), []
        while True:
            parts.append(magnitude & mask)
            magnitude >>= 32
            if not magnitude:
                break
        words += [int(number < 0), len(parts), *parts]
    return words


def table_labels(directory: Path, manifest: Manifest, table: SampleTable) -> np.ndarray:
    """Each sample's label, in ``table``'s order, from the sample index (one pass; no shard
    is read).  A sample the index does not list is counted unlabelled, with a warning."""
    shard_names = {Path(path).name for path in table.paths}
    by_key: dict[str, int] = {}
    for record in iter_sample_index(directory, manifest):
        if record.shard in shard_names:
            by_key[record.key] = record.label
    labels = np.array([by_key.get(table.key(index) or "", -2) for index in range(len(table))],
                      np.int64)
    missing = int((labels == -2).sum())
    if missing:
        log.warning("%d samples of the shards are not in the sample index: weighted as "
                    "unlabelled ('*')", missing)
        labels[labels == -2] = -1
    return labels


def reader_draws(directory: Path, manifest: Manifest, table: SampleTable,
                 weights: WeightSpec | None, draws: int | None) -> WeightedDraws | None:
    """The weighted draws a reader's ``weights=``/``draws=`` ask for over ``table`` (None:
    unweighted, every sample once per epoch)."""
    if weights is None:
        if draws is not None:
            raise WeightsError("draws= sets the size of a weighted epoch: give weights= too "
                               "(weights='*=1' draws uniformly with replacement)")
        return None
    require_webdataset(directory, manifest)
    chosen = class_weights(weights, manifest.classes)
    if draws is not None:
        check_draws(draws)  # before the sample index is read
    return weighted_draws(chosen, table_labels(directory, manifest, table), draws)


def require_webdataset(directory: Path, manifest: Manifest) -> None:
    """WeightsError unless ``manifest`` has WebDataset shards (the torch and DALI readers'
    plan; tf.data and DALI's TFRecord reader shuffle their own way)."""
    if manifest.format != "webdataset":
        raise WeightsError(f"weights: weighted sampling reads WebDataset shards (the torch "
                           f"and DALI readers); {directory} holds {manifest.format} shards")
