"""``inspect --weights``: the class mix that class weights give a training epoch.

Per class: its samples and their share of the selection (what an unweighted epoch reads), its
weight, the share weighted sampling is expected to draw, and the count drawn in epoch 0 of the
torch and DALI readers with the same weights, seed and draws (one rank).  Built with the
readers' own ``readers.weights`` over the shards' indexes and the sample index: no image is
read, and the draw is the readers' draw, not a second implementation of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..dataset.manifest import read_manifest
from ..readers.plan import load_table
from ..readers.weights import WeightSpec, class_weights, reader_draws, require_webdataset
from ..storage import ObjectPath, location
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

    directory: Path | ObjectPath
    split: str | None
    seed: int
    draws: int
    rows: tuple[MixRow, ...]


def class_mix(directory: str | Path | ObjectPath, weights: WeightSpec,
              split: str | None = None, seed: int = 0, draws: int | None = None) -> ClassMix:
    """The mix ``weights`` give ``split`` of ``directory``, a folder or a location in a bucket
    (WeightsError for a malformed SPEC, ConfigError for an unknown split or a TFRecord
    dataset)."""
    directory = location(directory)
    manifest = read_manifest(directory)
    require_split(manifest, split)
    require_webdataset(directory, manifest)
    table = load_table(directory, [shard for shard in manifest.shards
                                   if split is None or shard.split == split])
    chosen = class_weights(weights, manifest.classes)
    planned = reader_draws(directory, manifest, table, chosen, draws)
    assert planned is not None  # weights were given
    classes = len(manifest.classes)
    # Bin classes 0..n-1 and, last, unlabelled samples (and labels outside the classes).
    bins = np.where((planned.labels >= 0) & (planned.labels < classes), planned.labels,
                    classes)
    samples = planned.counts  # per bin, as the draw counted them
    drawn = np.bincount(bins[planned.order(seed, 0)], minlength=classes + 1)
    per_bin = np.asarray((*chosen.per_class, chosen.others), np.float64)
    mass = samples * per_bin
    total_samples, total_mass = max(len(bins), 1), float(mass.sum())
    rows = []
    for number in range(classes + 1):
        if number == classes and not samples[number]:
            continue
        name = manifest.classes[number] if number < classes else UNLABELLED
        rows.append(MixRow(number if number < classes else -1, name, int(samples[number]),
                           float(per_bin[number]), float(samples[number] / total_samples),
                           float(mass[number] / total_mass),
                           int(drawn[number])))
    return ClassMix(directory, split, seed, planned.draws, tuple(rows))


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
    return "\n".join(lines)


def class_mix_json(mix: ClassMix) -> dict[str, Any]:
    """The mix as one JSON document."""
    return {"split": mix.split, "seed": mix.seed, "epoch": 0, "draws": mix.draws,
            "classes": [{"label": row.label, "class": row.name, "samples": row.samples,
                         "unweighted_share": row.unweighted_share, "weight": row.weight,
                         "expected_share": row.expected_share, "drawn": row.drawn}
                        for row in mix.rows]}
