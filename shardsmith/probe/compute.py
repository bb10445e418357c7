"""What this machine's CPU does with the sampled originals: the image path, the single writer,
and what a training loader would pay per image.

* Image path: each sampled original, read once (one reader: the first round of the cold read
  measurement), then hashed and converted exactly as a pack worker does (``content_digest`` +
  ``imaging.convert`` at the job's settings); wall time per image on one core, per format of
  the original.
* Writer: the converted samples, encoded in the job's shard format and appended through the
  real ``ShardRoller`` (framing, sha256, fsync at each shard) in a temporary directory, until
  ``WRITER_BYTES`` or ``WRITER_SECONDS``: the driver's limit, which no worker count lifts.
* Training: a naive loader over the originals (full decode, RGB, resize; what a DataLoader
  without shardsmith does) against decoding a packed sample (simplejpeg, the decode floor).
"""

from __future__ import annotations

import io
import os
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..config import Config
from ..errors import BadImage
from ..formats import ShardLimits, ShardRoller, shard_format
from ..originals import read_original
from ..plan import sample_key
from ..records import Sample, content_digest
from ..scan import SourceFile
from .storage import ReadLevel, level_of

WRITER_BYTES = 64 * 2**20
WRITER_SECONDS = 1.0
WRITER_SHARD_BYTES = 32 * 2**20  # at least two shards closed (and fsynced) in the measurement
NAIVE_SECONDS = 3.0  # a naive full decode of a 48 MP original takes ~1.2 s: a few suffice
SHARD_DECODE_SECONDS = 0.2


@dataclass(frozen=True)
class FormatCost:
    """Sampled originals of one format and their mean conversion time on one core."""

    images: int
    ms_per_image: float


@dataclass(frozen=True)
class ImagePath:
    """The per-image work of a pack over the sample (rejects included in the mean)."""

    images: int
    ms_per_image: float
    formats: dict[str, FormatCost]
    rejected: dict[str, int]
    original_bytes_per_image: float
    jpeg_bytes_per_sample: float
    record_bytes_per_sample: float

    @property
    def reject_share(self) -> float:
        return sum(self.rejected.values()) / self.images if self.images else 0.0


@dataclass(frozen=True)
class LoaderCosts:
    """Milliseconds per image on one core for a training loader: originals vs packed shards."""

    originals_ms_per_image: float
    originals_measured: int
    shards_ms_per_image: float


@dataclass(frozen=True)
class WriterRate:
    """The single writer: samples and bytes appended to shards per second."""

    samples: int
    bytes: int
    seconds: float
    directory: str

    @property
    def samples_per_second(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_second(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class SampleMeasurement:
    """Everything measured while going through the sample once, one file at a time."""

    reads: ReadLevel
    image_path: ImagePath
    loader: LoaderCosts
    samples: tuple[Sample, ...]
    unreadable: tuple[tuple[str, str], ...]


def measure_sample(root: Path, sample: Sequence[SourceFile], config: Config,
                   classes: tuple[str, ...], say: Callable[[str], None] | None = None
                   ) -> SampleMeasurement:
    """Read each sampled original (one reader, as a worker does), convert it, and time both
    separately.  The caller drops the files from the page cache first."""
    from ..imaging import convert

    if say is not None:
        say(f"reading {len(sample)} originals cold with 1 reader and converting them "
            f"({config.image.size} px, quality {config.image.quality})")
    split = config.splits[0][0]
    reads, samples, unreadable = [], [], []
    costs: dict[str, list[float]] = {}
    rejected: Counter = Counter()
    naive: list[float] = []
    read_seconds = 0.0
    for source in sample:
        path = os.path.join(root, source.relpath)
        try:
            read_started = time.perf_counter()
            data, _ = read_original(path, config.source.follow_symlinks)
            elapsed = time.perf_counter() - read_started
        except BadImage as exc:
            unreadable.append((source.relpath, exc.detail))
            continue
        except OSError as exc:
            unreadable.append((source.relpath, f"cannot read file: {exc.strerror or exc}"))
            continue
        count = len(data)
        reads.append((count, elapsed))
        read_seconds += elapsed
        convert_started = time.perf_counter()
        try:
            digest = content_digest(data)
            encoded = convert(data, config.image)
        except BadImage as exc:
            costs.setdefault("rejected", []).append(time.perf_counter() - convert_started)
            rejected[exc.reason] += 1
            continue
        costs.setdefault(encoded.original_format, []).append(
            time.perf_counter() - convert_started)
        samples.append(Sample(sample_key(source.relpath), source.relpath, split, source.label,
                              source_size=count, source_mtime_ns=source.mtime_ns,
                              source_digest=digest, **encoded._asdict()))
        if sum(naive) < NAIVE_SECONDS:
            naive += _naive_load(data, config.image.size)
    level = level_of(1, reads, read_seconds)
    return SampleMeasurement(level, _image_path(costs, rejected, reads, samples, config, classes),
                             _loader_costs(naive, samples), tuple(samples), tuple(unreadable))


def _image_path(costs: dict[str, list[float]], rejected: Counter, reads: list,
                samples: list[Sample], config: Config, classes: tuple[str, ...]) -> ImagePath:
    timings = [seconds for values in costs.values() for seconds in values]
    fmt = shard_format(config.output.format)
    records = [len(fmt.encode(sample, classes).data) for sample in samples]
    return ImagePath(
        images=len(timings),
        ms_per_image=_mean(timings) * 1000,
        formats={name: FormatCost(len(values), _mean(values) * 1000)
                 for name, values in sorted(costs.items()) if name != "rejected"},
        rejected=dict(sorted(rejected.items())),
        original_bytes_per_image=_mean([count for count, _ in reads]),
        jpeg_bytes_per_sample=_mean([len(sample.jpeg) for sample in samples]),
        record_bytes_per_sample=_mean(records),
    )


def _naive_load(data: bytes, size: int) -> list[float]:
    """Seconds of one naive load (full decode, RGB, bilinear resize); none if it fails."""
    from PIL import Image

    started = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(data)) as image:
                image = image.convert("RGB")
                scale = size / max(image.size)
                image.resize((max(1, round(image.width * scale)),
                              max(1, round(image.height * scale))), Image.BILINEAR)
    except (OSError, ValueError, SyntaxError):
        return []
    return [time.perf_counter() - started]


def _loader_costs(naive: list[float], samples: list[Sample]) -> LoaderCosts:
    import simplejpeg

    jpegs = [sample.jpeg for sample in samples]
    decoded, started = 0, time.perf_counter()
    while jpegs and (decoded == 0 or time.perf_counter() - started < SHARD_DECODE_SECONDS):
        for jpeg in jpegs:
            simplejpeg.decode_jpeg(jpeg, colorspace="RGB")
        decoded += len(jpegs)
    seconds = time.perf_counter() - started
    return LoaderCosts(_mean(naive) * 1000, len(naive),
                       seconds / decoded * 1000 if decoded else 0.0)


def measure_writer(samples: Sequence[Sample], config: Config, classes: tuple[str, ...],
                   directory: str | None = None) -> WriterRate:
    """Append the samples, round after round, through the shard writer the driver uses."""
    fmt = shard_format(config.output.format)
    limits = ShardLimits(min(config.output.shard_bytes, WRITER_SHARD_BYTES),
                         config.output.shard_samples)
    split = config.splits[0][0]
    written = count = 0
    with tempfile.TemporaryDirectory(prefix="shardsmith-probe-", dir=directory) as scratch:
        roller = ShardRoller(fmt, Path(scratch), limits, Counter())
        started = time.perf_counter()
        try:
            while samples and written < WRITER_BYTES and (
                    count == 0 or time.perf_counter() - started < WRITER_SECONDS):
                for sample in samples:
                    record = fmt.encode(sample, classes)
                    roller.add(split, record)
                    written += len(record.data)
                    count += 1
            roller.close()
        finally:
            roller.discard()
        seconds = time.perf_counter() - started
        where = os.path.dirname(scratch)
    return WriterRate(count, written, seconds, where)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0
