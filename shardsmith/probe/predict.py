"""From the measurements to a prediction: pure arithmetic, no I/O.

A pack moves every original through three stages that run at the same time: reading (the
NAS), converting (the workers' cores) and writing (the driver's one writer).  Its rate is the
slowest of the three:

    images/s = min(read bound at the best concurrency,
                   cores x images/s of one core,
                   the single writer's samples/s)

and its time is the parallel scan, plus one image to fill the pipeline, plus the files at that
rate.  The training side compares a DataLoader decoding the originals (bounded by the same
reads) with one decoding packed samples from local disk.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from ..config import Config
from ..plan import assign_split
from ..scan import SourceFile
from .compute import ImagePath, LoaderCosts, WriterRate
from .storage import ReadLevel

READ, CPU, WRITER = "read-bound", "CPU-bound", "writer-bound"


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


def count_tree(files: Iterable[SourceFile], classes: tuple[str, ...], config: Config
               ) -> TreeCounts:
    """Files per split and class, by the same path hash as the plan of a pack."""
    counts: dict[str, Counter] = {name: Counter() for name, _ in config.splits}
    total_files = total_bytes = 0
    for source in files:
        label = classes[source.label] if 0 <= source.label < len(classes) else ""
        counts[assign_split(source.relpath, config.splits)][label] += 1
        total_files += 1
        total_bytes += source.size
    return TreeCounts(total_files, total_bytes,
                      {split: dict(sorted(counter.items())) for split, counter in counts.items()})


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


def predict(tree: TreeCounts, scan_seconds: float, best_read: ReadLevel | None,
            image_path: ImagePath, writer: WriterRate, cores: int, config: Config
            ) -> Prediction:
    """The pack of the whole tree on ``cores`` worker cores."""
    mean_size = tree.bytes / tree.files if tree.files else 0.0
    read_bound = None
    if best_read is not None and best_read.files:
        read_bound = (best_read.mb_per_second * 1e6 / mean_size if mean_size > 0
                      else best_read.files_per_second)
    per_core = 1000.0 / image_path.ms_per_image if image_path.ms_per_image > 0 else math.inf
    bounds = {CPU: cores * per_core, WRITER: writer.samples_per_second or math.inf}
    if read_bound is not None:
        bounds[READ] = read_bound
    binding = min(bounds, key=lambda name: bounds[name])
    rate = bounds[binding]
    fill = image_path.ms_per_image / 1000.0
    seconds = scan_seconds + (fill + tree.files / rate if tree.files and rate > 0 else 0.0)
    if binding == CPU:
        workers = cores
    else:
        workers = max(1, min(cores, math.ceil(rate / per_core))) if per_core < math.inf else 1
    output = estimate_shards(tree, config, image_path.record_bytes_per_sample,
                             f"measured on {image_path.images} sampled originals",
                             image_path.reject_share)
    return Prediction(
        cores=cores,
        read_bound=read_bound,
        cpu_bound=bounds[CPU],
        writer_bound=bounds[WRITER],
        binding=binding,
        images_per_second=rate,
        scan_seconds=scan_seconds,
        seconds=seconds,
        workers=workers,
        best_readers=best_read.readers if best_read is not None else None,
        output=output,
    )


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
