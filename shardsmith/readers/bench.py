"""``shardsmith bench-read``: what the readers get out of the shards, against the decode floor.

Rows, all over the same samples in one run (``seconds`` each, epoch after epoch):

* floor: every JPEG of the selection decoded in a loop from memory, one core (libjpeg-turbo
  through simplejpeg): no reader can beat it on one core;
* the torch reader in-process (batch mode: reads by offset, decodes into one array);
* ``DataLoader(num_workers=1, persistent_workers=True)``, epochs after the first: the same plus
  a new shared-memory batch per batch (a mapping and a page fault per 4 KiB);
* ``ShardLoader`` (a DataLoader whose workers decode into reused shared buffers), one worker
  and all cores; DALI's CPU pipeline on one thread (when DALI is installed), fed by our plan
  and, for comparison, by DALI's own reader;
  the tf.data reader over a TFRecord copy of the same images (``--tfrecords``);
* a naive loader over the originals (``--source``): open, full decode, resize; with ``--cold``
  each file is dropped from the page cache first, as a NAS-bound loader would see it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TextIO

from ..dataset.manifest import Manifest, iter_sample_index, read_manifest
from ..errors import ConfigError


@dataclass
class ReadResult:
    name: str
    samples: int
    seconds: float
    bytes_per_sample: float
    note: str = ""

    @property
    def rate(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0


def _timed(name: str, epochs: Callable[[], Iterable[int]], seconds: float,
           bytes_per_sample: float, warm_epochs: int = 0) -> ReadResult:
    """Samples/s over ``seconds``, starting a new epoch whenever one ends.  Each item of an
    epoch is the number of samples it carries.  ``warm_epochs`` run first, uncounted."""
    for _ in range(warm_epochs):
        for _ in epochs():
            pass
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        empty = True
        for samples in epochs():
            empty = False
            count += samples
            if time.perf_counter() - started > seconds:
                break
        if empty:
            break
    return ReadResult(name, count, time.perf_counter() - started, bytes_per_sample)


def bench_read(shards: str | Path, source: str | Path | None = None,
               tfrecords: str | Path | None = None, workers: int | None = None,
               seconds: float = 10.0, split: str | None = None, batch_size: int = 64,
               cold: bool = False, progress: TextIO | None = sys.stderr) -> list[ReadResult]:
    """Measure every row that applies; returns them, the floor first."""
    for name, value, low, high in (("workers", workers or 0, 0, 4096),
                                   ("batch-size", batch_size, 1, 1 << 16),
                                   ("seconds", seconds, 0.001, 86400.0)):
        if not low <= value <= high:  # NaN too; a batch of 10**30 or -1 workers reached torch
            raise ConfigError(f"--{name}: expected {low} to {high:g}, got {value}")
    shards = Path(shards)
    workers = workers or len(os.sched_getaffinity(0))
    manifest = read_manifest(shards)
    if tfrecords is not None:
        _check_same_images(manifest, read_manifest(Path(tfrecords)), tfrecords)
    originals = _original_jobs(shards, manifest, Path(source), split, cold) \
        if source is not None else None

    def say(row: str) -> None:
        if progress is not None:
            print(f"bench-read: {row} ({seconds:g} s) ...", file=progress, flush=True)

    from .torch import dataset

    data = dataset(shards, split=split, batch_size=batch_size)
    per_sample = sum(shard.bytes for _, shard in data.shards) / max(1, len(data.table))
    say("decode floor, 1 core")
    results = [_floor(data, seconds, per_sample)]
    say("torch reader in-process, 1 core")
    results.append(_timed("torch reader in-process", lambda: (len(labels) for _, labels in data),
                          seconds, per_sample, warm_epochs=1))
    import torch

    from .torch import ShardLoader

    loaders = [("DataLoader", 1, lambda: torch.utils.data.DataLoader(
        data, batch_size=None, num_workers=1, persistent_workers=True))]
    loaders += [("ShardLoader", count, lambda count=count: ShardLoader(data, num_workers=count))
                for count in sorted({1, workers})]
    for kind, count, make in loaders:
        say(f"{kind}, {count} persistent worker{'s' if count > 1 else ''}, epochs 2+")
        loader = make()
        results.append(_timed(f"{kind}, {count} worker{'s' if count > 1 else ''}",
                              lambda loader=loader: (len(labels) for _, labels in loader),
                              seconds, per_sample, warm_epochs=1))
        del loader
    results += _dali_cpu(shards, split, batch_size, seconds, per_sample, say)
    if tfrecords is not None:
        results.append(_tf(Path(tfrecords), split, batch_size, seconds, say))
    if originals is not None:
        results.append(_originals(originals, workers, seconds, cold, say))
    return results


def _check_same_images(manifest: Manifest, other: Manifest, where: str | Path) -> None:
    if other.format != "tfrecord":
        raise ConfigError(f"--tfrecords: {where} holds {other.format} shards, not TFRecords")
    mine, theirs = (manifest.image_size, manifest.image_resize), \
        (other.image_size, other.image_resize)
    if mine != theirs:
        raise ConfigError(f"--tfrecords: {where} was packed at {theirs[0]} px ({theirs[1]}), "
                          f"SHARDS at {mine[0]} px ({mine[1]}): rates of different images do "
                          "not compare")


def _floor(data, seconds: float, per_sample: float) -> ReadResult:
    """Every JPEG of the selection decoded from memory through the readers' checked decode
    (header first); a sample that does not read or decode is a ``CorruptSampleError`` naming
    it, found before the timing starts."""
    from .sample_jpeg import decode_sample

    size = data.image_size
    jpegs = []
    for index in range(len(data.table)):
        jpeg, _ = data.reader.read(index)
        data.reader.decode(index, jpeg, "RGB", expect=size)
        jpegs.append(jpeg)

    def epoch() -> Iterable[int]:
        for jpeg in jpegs:
            decode_sample(jpeg, expect=size)
            yield 1

    return _timed("decode floor (simplejpeg)", epoch, seconds, per_sample, warm_epochs=0)


def _dali_cpu(shards: Path, split: str | None, batch_size: int, seconds: float,
              per_sample: float, say: Callable[[str], None]) -> list[ReadResult]:
    """DALI's CPU pipeline on one thread fed by our plan (external source), and the same
    decode behind DALI's own reader (``fn.readers.webdataset``): what the plan costs."""
    try:
        from .dali import loader, own_reader
    except ImportError:
        return [ReadResult(name, 0, 0.0, per_sample,
                           "skipped: DALI is not installed (pip install 'shardsmith[dali]')")
                for name in (DALI_PLAN, DALI_OWN)]
    say("DALI CPU pipeline, 1 thread, our plan")
    batches = loader(shards, split=split, batch_size=batch_size, device="cpu", num_threads=1)
    results = [_timed(DALI_PLAN, lambda: (len(labels) for _, labels in batches), seconds,
                      per_sample, warm_epochs=1)]
    say("DALI CPU pipeline, 1 thread, its own reader")
    own = own_reader(shards, split=split, batch_size=batch_size, device="cpu", num_threads=1)
    results.append(_timed(DALI_OWN, lambda: (len(labels) for _, labels in own), seconds,
                          per_sample, warm_epochs=1))
    return results


DALI_PLAN = "DALI CPU, 1 thread, our plan"
DALI_OWN = "DALI CPU, 1 thread, its own reader"


def _tf(tfrecords: Path, split: str | None, batch_size: int, seconds: float,
        say: Callable[[str], None]) -> ReadResult:
    from .tf import dataset as tf_dataset

    manifest = read_manifest(tfrecords)
    chosen = [s for s in manifest.shards if split is None or s.split == split]
    per_sample = sum(s.bytes for s in chosen) / max(1, sum(s.samples for s in chosen))
    say("tf.data reader")
    reader = tf_dataset(tfrecords, split=split).batch(batch_size)
    return _timed("tf.data reader", lambda: (int(labels.shape[0]) for _, labels in reader), seconds,
                  per_sample, warm_epochs=1)


def _load_original(args: tuple[str, str, int, int, bool]) -> int:
    """What a loader without shardsmith does per sample: full decode of the original, resize.
    The file is read through the door (``originals.read_under_root``), like every original."""
    import io

    from PIL import Image

    from ..packing.originals import read_under_root

    root, relpath, source_size, size, cold = args
    if cold:
        _drop_from_cache(root, relpath)
    data = read_under_root(root, relpath, source_size)
    with Image.open(io.BytesIO(data)) as image:
        image = image.convert("RGB")
        scale = size / max(image.size)
        image = image.resize((max(1, round(image.width * scale)),
                              max(1, round(image.height * scale))), Image.BILINEAR)
    return 1


def _drop_from_cache(root: str, relpath: str) -> None:
    from ..packing.originals import open_original, original_path

    with open_original(original_path(root, relpath), False) as handle:
        os.posix_fadvise(handle.fd, 0, 0, os.POSIX_FADV_DONTNEED)


@dataclass
class _OriginalJobs:
    """The originals the naive loader reads: one job per unchanged original, and how many
    are missing or changed since packing."""

    jobs: list[tuple[str, str, int, int, bool]]
    sizes: list[int]
    changed: int


def _original_jobs(shards: Path, manifest: Manifest, source: Path, split: str | None,
                   cold: bool) -> _OriginalJobs:
    """Every path of the sample index checked by the one rule for originals
    (``originals.original_path``: a path out of the source is a ManifestError) and its file
    looked at through the door, before any timing starts."""
    from ..door import Refused, open_file
    from ..packing.originals import original_path

    if not source.is_dir():
        raise ConfigError(f"--source: {source} is not a directory")
    root = os.path.realpath(source)
    size = manifest.image_size
    found = _OriginalJobs([], [], 0)
    for record in iter_sample_index(shards, manifest):
        if split is not None and record.split != split:
            continue
        path = original_path(root, record.path)
        try:
            with open_file(path, max(0, record.source_size)) as handle:
                on_disk = handle.size
        except (OSError, Refused):
            on_disk = -1
        if on_disk != record.source_size:
            found.changed += 1
            continue
        found.jobs.append((root, record.path, record.source_size, size, cold))
        found.sizes.append(on_disk)
    return found


def _originals(originals: _OriginalJobs, workers: int, seconds: float, cold: bool,
               say: Callable[[str], None]) -> ReadResult:
    """The naive loader over the originals, each opened through the door."""
    name = f"originals, {workers} processes" + (", cold cache" if cold else "")
    jobs, changed, sizes = originals.jobs, originals.changed, originals.sizes
    if changed or not jobs:
        return ReadResult(name, 0, 0.0, 0.0, f"skipped: {changed} of {changed + len(jobs)} "
                          "originals are missing or changed since packing")
    note = "page cache dropped per file (a NAS may still cache on its side)" if cold else ""
    from multiprocessing import get_context

    say(name)
    with get_context("spawn").Pool(workers) as pool:
        result = _timed(name, lambda: pool.imap(_load_original, jobs, chunksize=1), seconds,
                        sum(sizes) / len(sizes), warm_epochs=0)
    result.note = note
    return result


def report(results: list[ReadResult]) -> str:
    """The table, each row's share of the floor, and the shards against the originals."""
    floor = results[0].rate if results and results[0].rate > 0 else 0.0
    lines = [f"{'loader':<38}{'samples':>9}{'samples/s':>11}{'of floor':>10}"
             f"{'bytes/sample':>14}"]
    for result in results:
        if not result.samples and result.note:
            lines.append(f"{result.name:<38}  {result.note}")
            continue
        share = f"{result.rate / floor:.0%}" if floor else "-"
        lines.append(f"{result.name:<38}{result.samples:>9,}{result.rate:>11,.0f}"
                     f"{share:>10}{result.bytes_per_sample:>14,.0f}"
                     + (f"  ({result.note})" if result.note else ""))
    originals = next((r for r in results if r.name.startswith("originals") and r.rate), None)
    best = max((r for r in results[1:] if not r.name.startswith("originals")),
               key=lambda r: r.rate, default=None)
    if originals is not None and best is not None:
        lines.append(f"{best.name} / originals: {best.rate / originals.rate:,.0f}x")
    return "\n".join(lines)


def as_json(results: list[ReadResult]) -> str:
    return json.dumps([dict(asdict(r), samples_per_second=r.rate) for r in results], indent=1)
