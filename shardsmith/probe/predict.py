"""From the measurements to a prediction: pure arithmetic, no I/O.

A pack moves every original through three stages at once: reading (the storage), converting
(the workers' cores) and writing (the driver's one writer).  Each has a bound:

    read bound    the best read throughput the probe measured (1, 2, 4, ... readers)
    CPU bound     cores x images/s of one core (measured with every core converting)
    writer bound  the single writer's samples/s

and the stage whose bound is closest to the pack's rate binds.  The rate itself is below the
smallest bound when two are close: a pack worker reads an original, then converts it, and
while it waits for its read it does not convert.  ``pipeline_rates`` solves exactly that
(W workers cycling between the storage and the cores) by mean value analysis.  The time is
the parallel scan, one image through read and convert, then the tree at that rate.  The
training side compares a DataLoader decoding the originals (bounded by the same reads) with
one decoding packed samples from local disk.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..config import Config
from ..packing.plan import make_plan
from ..packing.scan import SourceTable
from .compute import ImagePath, LoaderCosts, WriterRate
from .storage import ReadLevel

READ, CPU, WRITER = "read-bound", "CPU-bound", "writer-bound"
WORKERS_SHARE = 0.95  # the workers to use: the fewest that reach 95% of the best rate


@dataclass(frozen=True)
class TreeCounts:
    """The files a pack would take, per split and class, and their bytes."""

    files: int
    bytes: int
    by_split: dict[str, dict[str, int]]  # split -> class ("" without class folders) -> files

    def split_totals(self) -> dict[str, int]:
        return {split: sum(classes.values()) for split, classes in self.by_split.items()}


@dataclass(frozen=True)
class ShardEstimate:
    """Shards and output bytes expected per split, and how the bytes per sample were found."""

    shards: dict[str, int]
    output_bytes: int
    bytes_per_sample: float
    basis: str


@dataclass(frozen=True)
class Prediction:
    """Pack rate, which stage binds, time and output for the whole tree, workers to use."""

    cores: int
    read_bound: float | None
    cpu_bound: float
    writer_bound: float
    binding: str
    images_per_second: float
    scan_seconds: float
    seconds: float
    workers: int
    best_readers: int | None
    output: ShardEstimate


@dataclass(frozen=True)
class TrainingFeed:
    """Images/s a DataLoader with ``cores`` workers gets from the originals and from shards,
    and, with a GPU demand, the share of the time the GPU would be busy."""

    cores: int
    originals_per_second: float
    shards_per_second: float
    gpu_demand: float | None
    originals_gpu_utilisation: float | None
    shards_gpu_utilisation: float | None


def count_tree(files: SourceTable, classes: tuple[str, ...], config: Config) -> TreeCounts:
    """Files per split and class, split by the plan a pack makes (``plan.make_plan``)."""
    plan = make_plan(files, config.splits, config.seed, config.split_group,
                     config.split_folder)
    columns = len(classes) + 1  # column 0: no class
    cells = plan.split_of.astype(np.int64) * columns + (files.labels.astype(np.int64) + 1)
    counts = np.bincount(cells, minlength=len(plan.split_names) * columns)
    names = ("", *classes)
    by_split = {split: {names[column]: int(counts[row * columns + column])
                        for column in range(columns) if counts[row * columns + column]}
                for row, split in enumerate(plan.split_names)}
    return TreeCounts(len(files), int(files.sizes.sum()), by_split)


def estimate_shards(tree: TreeCounts, config: Config, bytes_per_sample: float,
                    basis: str, reject_share: float = 0.0) -> ShardEstimate:
    """Shards per split: by sample count when ``output.shard_samples`` is set, else by bytes."""
    shards, output = {}, 0.0
    for split, files in tree.split_totals().items():
        packed = files * (1.0 - reject_share)
        output += packed * bytes_per_sample
        if config.output.shard_samples:
            shards[split] = math.ceil(packed / config.output.shard_samples)
        else:
            shards[split] = math.ceil(packed * bytes_per_sample / config.output.shard_bytes)
    return ShardEstimate(shards, round(output), bytes_per_sample, basis)


def predict(tree: TreeCounts, scan_seconds: float, reads: Sequence[ReadLevel],
            image_path: ImagePath, writer: WriterRate, cores: int, config: Config
            ) -> Prediction:
    """The pack of the whole tree with ``cores`` workers on as many cores."""
    mean_size = tree.bytes / tree.files if tree.files else 0.0
    read_rate = storage_rate(reads, mean_size)
    convert_seconds = image_path.ms_per_image / 1000.0
    most_workers = 2 * cores
    rates = pipeline_rates(most_workers, read_rate, convert_seconds, cores)
    read_bound = max((read_rate(level.readers) for level in reads), default=None)
    cpu_bound = cores / convert_seconds if convert_seconds > 0 else math.inf
    writer_bound = writer.samples_per_second or math.inf
    rate = min(rates[cores - 1], writer_bound)
    bounds = {READ: read_bound if read_bound is not None else math.inf, CPU: cpu_bound,
              WRITER: writer_bound}
    binding = max(bounds, key=lambda name: rate / bounds[name] if bounds[name] > 0 else 0.0)
    # More workers than cores only pay when the reads bind: more of them are then in flight.
    candidates = rates if binding == READ else rates[:cores]
    best = min(max(candidates), writer_bound)
    workers = next(count for count, value in enumerate(candidates, 1)
                   if min(value, writer_bound) >= WORKERS_SHARE * best)
    first_image = (1.0 / read_rate(1) if reads else 0.0) + convert_seconds
    seconds = scan_seconds + (first_image + tree.files / rate if tree.files and rate > 0
                              else 0.0)
    output = estimate_shards(tree, config, image_path.record_bytes_per_sample,
                             f"measured on {image_path.images} sampled originals",
                             image_path.reject_share)
    best_read = max(reads, key=lambda level: level.mb_per_second, default=None)
    return Prediction(
        cores=cores,
        read_bound=read_bound,
        cpu_bound=cpu_bound,
        writer_bound=writer_bound,
        binding=binding,
        images_per_second=rate,
        scan_seconds=scan_seconds,
        seconds=seconds,
        workers=workers,
        best_readers=best_read.readers if best_read is not None else None,
        output=output,
    )


def storage_rate(reads: Sequence[ReadLevel], mean_size: float) -> Callable[[int], float]:
    """Originals per second with ``n`` concurrent readers: the measured levels (MB/s over the
    tree's mean file size), interpolated between them and flat past the last one."""
    points = sorted((level.readers, level.mb_per_second * 1e6 / mean_size if mean_size > 0
                     else level.files_per_second) for level in reads)

    def rate(readers: int) -> float:
        if not points:
            return math.inf
        below = [point for point in points if point[0] <= readers] or points[:1]
        above = [point for point in points if point[0] >= readers] or points[-1:]
        (low, low_rate), (high, high_rate) = below[-1], above[0]
        if high == low:
            return low_rate
        return low_rate + (high_rate - low_rate) * (readers - low) / (high - low)

    return rate


def pipeline_rates(workers: int, read_rate: Callable[[int], float], convert_seconds: float,
                   cores: int) -> list[float]:
    """Images/s with 1..``workers`` workers that each read an original, then convert it.

    A closed network of two stations: the storage, whose throughput with ``n`` concurrent
    readers is ``read_rate(n)`` (what the probe measured), and the cores, ``min(n, cores)``
    images at a time, ``convert_seconds`` each.  Solved exactly for such load-dependent
    stations by mean value analysis (Reiser and Lavenberg): the rate lies below the smallest
    bound whenever two bounds are close, because a worker waiting on a read is not converting.
    """

    def cpu_rate(busy: int) -> float:
        return min(busy, cores) / convert_seconds if convert_seconds > 0 else math.inf

    stations = (read_rate, cpu_rate)
    marginals = [[1.0] for _ in stations]  # P(j workers at the station) for n - 1 workers
    rates = []
    for population in range(1, workers + 1):
        residences = [
            sum(count / rate(count) * marginal[count - 1]
                for count in range(1, population + 1) if rate(count) > 0 and
                rate(count) < math.inf)
            for rate, marginal in zip(stations, marginals, strict=True)
        ]
        total = sum(residences)
        throughput = population / total if total > 0 else math.inf
        rates.append(throughput)
        if math.isinf(throughput):
            continue
        for index, rate in enumerate(stations):
            previous = marginals[index]
            current = [0.0] + [throughput / rate(count) * previous[count - 1]
                               for count in range(1, population + 1)]
            current[0] = max(0.0, 1.0 - sum(current[1:]))
            marginals[index] = current
    return rates


def training_feed(tree: TreeCounts, best_read: ReadLevel | None, loader: LoaderCosts,
                  cores: int, gpu_demand: float | None) -> TrainingFeed:
    """Originals: min(the reads, cores x a naive full decode); shards: cores x the decode of
    a packed sample (staged on local disk, so no NAS bound)."""
    mean_size = tree.bytes / tree.files if tree.files else 0.0
    originals = cores * 1000.0 / loader.originals_ms_per_image \
        if loader.originals_ms_per_image > 0 else 0.0
    if best_read is not None and best_read.mb_per_second > 0 and mean_size > 0:
        originals = min(originals, best_read.mb_per_second * 1e6 / mean_size)
    shards = cores * 1000.0 / loader.shards_ms_per_image if loader.shards_ms_per_image else 0.0

    def utilisation(rate: float) -> float | None:
        return min(1.0, rate / gpu_demand) if gpu_demand else None

    return TrainingFeed(cores, originals, shards, gpu_demand, utilisation(originals),
                        utilisation(shards))
