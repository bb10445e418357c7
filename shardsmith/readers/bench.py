"""``shardsmith bench-read``: what the shards buy a training loader, measured in one run.

(a) a naive loader over the originals (open, full decode, resize; N worker processes),
(b) the PyTorch reader over WebDataset shards (DataLoader, N workers),
(c) the tf.data reader over TFRecord shards, when TensorFlow is installed and a TFRecord
    dataset is given.
Each runs for ``seconds`` (epoch after epoch) after a short warm-up; the report gives
samples/s, bytes read per sample, and the ratios (b)/(a), (c)/(a).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..manifest import iter_sample_index, read_manifest

WARMUP_SAMPLES = 16


@dataclass
class ReadResult:
    name: str
    samples: int
    seconds: float
    bytes_per_sample: float

    @property
    def rate(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0


def _timed(name: str, epochs: Callable[[], Iterable], seconds: float,
           bytes_per_sample: float) -> ReadResult:
    """Samples/s over ``seconds``, restarting the loader (a new epoch) whenever it runs dry."""
    def stream():
        while True:
            empty = True
            for item in epochs():
                empty = False
                yield item
            if empty:
                return

    iterator = stream()
    for _ in range(WARMUP_SAMPLES):  # worker start-up is not reading speed
        if next(iterator, None) is None:
            break
    count, started = 0, time.perf_counter()
    for _ in iterator:
        count += 1
        if time.perf_counter() - started > seconds:
            break
    return ReadResult(name, count, time.perf_counter() - started, bytes_per_sample)


def _load_original(args: tuple[str, int]) -> int:
    """What a loader without shardsmith does per sample: full decode of the original, resize."""
    from PIL import Image

    path, size = args
    with Image.open(path) as image:
        image = image.convert("RGB")
        scale = size / max(image.size)
        image = image.resize((max(1, round(image.width * scale)),
                              max(1, round(image.height * scale))), Image.BILINEAR)
    return image.width


def bench_read(shards: str | Path, source: str | Path | None = None,
               tfrecords: str | Path | None = None, workers: int | None = None,
               seconds: float = 20.0, split: str | None = None) -> list[ReadResult]:
    """Measure (a) originals, (b) torch over ``shards``, (c) tf over ``tfrecords``."""
    workers = workers or os.cpu_count() or 1
    manifest = read_manifest(Path(shards))
    results = []
    if source is not None:
        from multiprocessing import get_context

        size = manifest.config["image"]["size"]
        jobs = [(os.path.join(source, s.path), size)
                for s in iter_sample_index(Path(shards), manifest)
                if split is None or s.split == split]
        mean_bytes = sum(os.path.getsize(path) for path, _ in jobs) / max(1, len(jobs))
        with get_context("spawn").Pool(workers) as pool:
            results.append(_timed(f"(a) originals, {workers} processes",
                                  lambda: pool.imap(_load_original, jobs, chunksize=1),
                                  seconds, mean_bytes))
    if manifest.format == "webdataset":
        import torch

        from .torch import dataset

        data = dataset(shards, split=split, shuffle=True)
        loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=workers,
                                             persistent_workers=True)
        per_sample = sum(s.bytes for _, s in data.shards) / max(1, len(data))
        results.append(_timed(f"(b) torch reader, {workers} workers", lambda: loader, seconds,
                              per_sample))
    if tfrecords is not None:
        from .tf import dataset as tf_dataset

        tf_manifest = read_manifest(Path(tfrecords))
        chosen = [s for s in tf_manifest.shards if split is None or s.split == split]
        per_sample = sum(s.bytes for s in chosen) / max(1, sum(s.samples for s in chosen))
        reader = tf_dataset(tfrecords, split=split)
        results.append(_timed("(c) tf.data reader", lambda: reader, seconds, per_sample))
    return results


def report(results: list[ReadResult]) -> str:
    """The table and the ratios against the originals loader."""
    lines = [f"{'loader':<34}{'samples':>9}{'samples/s':>12}{'bytes/sample':>15}"]
    for result in results:
        lines.append(f"{result.name:<34}{result.samples:>9,}{result.rate:>12,.1f}"
                     f"{result.bytes_per_sample:>15,.0f}")
    baseline = next((r for r in results if r.name.startswith("(a)")), None)
    if baseline and baseline.rate > 0:
        for result in results:
            if result is not baseline:
                lines.append(f"{result.name.split(',')[0]} / (a): "
                             f"{result.rate / baseline.rate:,.1f}x")
    return "\n".join(lines)


def as_json(results: list[ReadResult]) -> str:
    payload: list[dict[str, Any]] = [
        {"name": r.name, "samples": r.samples, "seconds": r.seconds,
         "samples_per_second": r.rate, "bytes_per_sample": r.bytes_per_sample}
        for r in results
    ]
    return json.dumps(payload, indent=1)
