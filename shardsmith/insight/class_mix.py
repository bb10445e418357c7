"""``inspect --weights``: the class mix that class weights give a training epoch.

Per class: its samples and their share of the selection (what an unweighted epoch reads), its
weight, the share weighted sampling is expected to draw, and the count drawn in epoch 0 of the
torch and DALI readers with the same weights, seed and draws (one rank).  Built with the
readers' own ``readers.weights`` over the shards' indexes and the sample index: no image is
read, and the draw is the readers' draw, not a second implementation of it.  Its table is the
readers' too: the samples showing a defect cut below min_visible left out
(``readers.cut.without_cut``), as a reader without ``keep_cut`` leaves them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..dataset.manifest import read_manifest
from ..dataset.normal import CUT_REASON
from ..readers.cut import without_cut
from ..readers.plan import load_table
from ..readers.weights import (
    NO_OBJECTS,
    OBJECT,
    WeightSpec,
    check_draws,
    class_weights,
    table_classes,
    weighted_draws,
)
from ..storage import Location, location
from ..text import printable
from .census import require_split

UNLABELLED = "(unlabelled)"


@dataclass(frozen=True)
class MixRow:
    """One class of the mix."""

    label: int  # -1: unlabelled samples
    name: str
    samples: int
    weight: float
    unweighted_share: float
    expected_share: float
    drawn: int


@dataclass(frozen=True)
class ClassMix:
    """The class mix of one weighted epoch over a selection (a split, or every split)."""

    directory: Location
    split: str | None
    seed: int
    draws: int
    rows: tuple[MixRow, ...]
    by_objects: bool = False  # rows of object classes (a sample may count in several)
    left_out: int = 0  # samples showing a defect cut below min_visible, as the readers do


def class_mix(directory: str | Location, weights: WeightSpec,
              split: str | None = None, seed: int = 0, draws: int | None = None) -> ClassMix:
    """The mix ``weights`` give ``split`` of ``directory``, a folder or a location in a bucket
    (WeightsError for a malformed SPEC, ConfigError for an unknown split).  Weighted by
    object class, a row is an object class (the samples holding one of its objects) or the
    samples without objects; a sample holding two classes counts in both rows."""
    directory = location(directory)
    manifest = read_manifest(directory)
    require_split(manifest, split)
    # the SPEC and the draws are checked before any shard or index is read
    chosen = class_weights(weights, manifest.classes, manifest.object_classes or ())
    if draws is not None:
        check_draws(draws)
    whole = load_table(directory, [shard for shard in manifest.shards
                                   if split is None or shard.split == split], manifest)
    table = without_cut(directory, manifest, whole)
    found = table_classes(directory, manifest, table)
    planned = weighted_draws(chosen, found, draws)
    assert planned.bins is not None and planned.relative is not None
    # Each sample's weight relative to the largest (<= 1): sums of 1e308 do not overflow.
    mass = planned.relative[planned.bins]
    drawn = np.bincount(planned.order(seed, 0), minlength=len(mass)).astype(np.float64)
    total_samples, total_mass = max(len(mass), 1), float(mass.sum())
    if chosen.per_object is None:
        # Bins 0..n-1 are the classes; the last, unlabelled samples (and labels outside).
        names = [*manifest.classes, UNLABELLED]
        weights_of = [*chosen.per_class, chosen.others]
        labels = [*range(len(manifest.classes)), -1]
        group, sample = planned.bins, np.arange(len(mass))
    else:
        # Each (sample, object class) it holds, then the samples without objects, last.
        objects = manifest.object_classes or ()
        names = [*(f"{OBJECT}{name}" for name in objects), NO_OBJECTS]
        weights_of = [*(chosen.per_object or ()), chosen.no_objects]
        labels = [*range(1, len(objects) + 1), -1]
        owners, ids = found.object_owners(), found.object_ids
        bounds = found.object_bounds
        empty = np.flatnonzero(np.diff(bounds) == 0) if bounds is not None \
            else np.arange(len(mass))
        group = np.concatenate([ids - 1 if ids is not None else np.zeros(0, np.int64),
                                np.full(len(empty), len(objects))])
        sample = np.concatenate([owners, empty])
    size = len(names)
    group = np.where((group >= 0) & (group < size), group, size - 1)  # a damaged id: '*'
    samples = np.bincount(group, minlength=size)
    masses = np.bincount(group, weights=mass[sample], minlength=size)
    draws_of = np.bincount(group, weights=drawn[sample], minlength=size)
    rows = tuple(MixRow(labels[number], names[number], int(samples[number]),
                        float(weights_of[number]), float(samples[number] / total_samples),
                        float(masses[number] / total_mass), int(draws_of[number]))
                 for number in range(size)
                 if labels[number] >= 0 or samples[number] or chosen.per_object is not None)
    return ClassMix(directory, split, seed, planned.draws, rows,
                    chosen.per_object is not None, len(whole) - len(table))


def class_mix_text(mix: ClassMix) -> str:
    """The mix as a table for people."""
    width = max([len(printable(row.name)) for row in mix.rows] + [5])
    where = f"split {printable(mix.split)}" if mix.split else "every split"
    lines = [f"{printable(str(mix.directory))}, {where}: class mix of a weighted epoch of "
             f"{mix.draws:,} draws (seed {mix.seed}, epoch 0, one rank)",
             f"  {'label':>5}  {'class':<{width}}  {'samples':>9}  {'unweighted':>10}  "
             f"{'weight':>8}  {'expected':>8}  {'drawn in epoch 0':>16}"]
    for row in mix.rows:
        label = str(row.label) if row.label >= 0 else ""
        drawn = f"{row.drawn:,} ({row.drawn / mix.draws:.1%})"
        lines.append(f"  {label:>5}  {printable(row.name):<{width}}  {row.samples:>9,}  "
                     f"{row.unweighted_share:>10.1%}  {row.weight:>8g}  "
                     f"{row.expected_share:>8.1%}  {drawn:>16}")
    if mix.by_objects:
        lines.append("  (by object class: a sample holding objects of two classes counts in "
                     "both rows)")
    if mix.left_out:
        lines.append(f"  ({mix.left_out:,} samples left out, as the readers leave them: "
                     f"{CUT_REASON})")
    return "\n".join(lines)


def class_mix_json(mix: ClassMix) -> dict[str, Any]:
    """The mix as one JSON document."""
    return {"split": mix.split, "seed": mix.seed, "epoch": 0, "draws": mix.draws,
            "by": "object class" if mix.by_objects else "image class",
            "left_out": mix.left_out,
            "classes": [{"label": row.label, "class": row.name, "samples": row.samples,
                         "unweighted_share": row.unweighted_share, "weight": row.weight,
                         "expected_share": row.expected_share, "drawn": row.drawn}
                        for row in mix.rows]}
