"""What this machine's CPU does with the sampled originals: the image path, the single writer,
and what a training loader would pay per image.

* Image path: each sampled original is read once (one reader: the first round of the cold
  read measurement) and handed to worker processes, one per core the job uses (at most the
  cores here), which hash and convert it exactly as a pack worker does (``content_digest`` +
  ``imaging.convert`` at the job's settings).  The wall time per image, per format of the
  original, is therefore a core's share with every core busy, as during a pack: it includes
  what sibling workers and any other load on the machine take from it.
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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import Config, ImageConfig, machine_cores
from ..dataset.formats import ShardLimits, ShardRoller, shard_format
from ..dataset.records import Sample, content_digest
from ..errors import BadImage
from ..ordered import in_order
from ..packing.originals import open_source, original_cap, read_all
from ..packing.parallel import local_executor
from ..packing.plan import sample_key
from ..packing.scan import SourceFile
from ..text import plural
from .storage import ReadLevel, level_of

if TYPE_CHECKING:
    from ..packing.imaging import Encoded

WRITER_BYTES = 64 * 2**20
WRITER_SECONDS = 1.0
WRITER_SHARD_BYTES = 32 * 2**20  # at least two shards closed (and fsynced) in the measurement
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
    processes: int  # converting at once while measured (all cores busy, as in a pack)

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
    """Read the sampled originals one at a time (as one worker does) while worker processes
    convert them, all cores busy as in a pack; reads and conversions are timed separately.
    The caller drops the files from the page cache first."""
    processes = max(1, min(config.run.worker_count, machine_cores()))
    if say is not None:
        say(f"reading {len(sample)} originals cold with 1 reader while "
            f"{plural(processes, 'process', 'processes')} convert them "
            f"({config.image.size} px, quality {config.image.quality})")
    reads: list[tuple[int, float]] = []
    unreadable: list[tuple[str, str]] = []
    read_in_order: list[SourceFile] = []
    rejected: Counter = Counter()
    cap = original_cap(config.image)

    def originals() -> Iterator[tuple[int, bytes]]:
        for index, source in enumerate(sample):
            started = time.perf_counter()
            try:
                # As a pack worker opens it: the file the scan saw, refused unread when it is
                # larger than the decode budget.
                with open_source(str(root), source.relpath, config.source.follow_symlinks,
                                 cap, source.identity) as handle:
                    data = read_all(handle)
            except BadImage as exc:
                if exc.reason == "too_large":  # a pack rejects it too, without reading it
                    rejected[exc.reason] += 1
                else:
                    unreadable.append((source.relpath, exc.detail))
                continue
            except OSError as exc:
                unreadable.append((source.relpath, f"cannot read file: {exc.strerror or exc}"))
                continue
            reads.append((len(data), time.perf_counter() - started))
            read_in_order.append(source)
            yield index, data

    naive_images = 2 * processes
    tasks = ((data, config.image, index < naive_images) for index, data in originals())
    if processes == 1:  # in this process
        converted = [convert_timed(*task) for task in tasks]
    else:  # on the loky process pool a pack uses
        executor = local_executor(processes)
        converted = list(in_order(lambda task: executor.submit(convert_timed, *task), tasks,
                                  2 * processes))
    split = config.splits[0][0]
    costs: dict[str, list[float]] = {}
    samples: list[Sample] = []
    naive = [result.naive_seconds for result in converted if result.naive_seconds is not None]
    for source, result in zip(read_in_order, converted, strict=True):
        if isinstance(result.outcome, str):
            costs.setdefault("rejected", []).append(result.seconds)
            rejected[result.outcome] += 1
            continue
        encoded = result.outcome
        costs.setdefault(encoded.original_format, []).append(result.seconds)
        samples.append(Sample(sample_key(source.relpath), source.relpath, split, source.label,
                              source_size=result.size, source_mtime_ns=source.mtime_ns,
                              source_digest=result.digest, **encoded._asdict()))
    level = level_of(1, reads, sum(seconds for _, seconds in reads))
    path = _image_path(costs, rejected, reads, samples, config, classes, processes)
    return SampleMeasurement(level, path, _loader_costs(naive, samples), tuple(samples),
                             tuple(unreadable))


@dataclass(frozen=True)
class Converted:
    """One original through the image path in a worker: seconds of hashing and converting,
    the result (or the reject reason), and the seconds of a naive load when asked for."""

    seconds: float
    outcome: Encoded | str
    size: int
    digest: str
    naive_seconds: float | None


def convert_timed(data: bytes, image: ImageConfig, with_naive: bool) -> Converted:
    """The per-image work of a pack worker on bytes already read, timed (runs in a worker)."""
    from ..packing.imaging import convert

    started = time.perf_counter()
    digest = content_digest(data)
    try:
        outcome: Encoded | str = convert(data, image)
    except BadImage as exc:
        outcome = exc.reason
    seconds = time.perf_counter() - started
    naive = _naive_load(data, image.size) if with_naive and not isinstance(outcome, str) \
        else None
    return Converted(seconds, outcome, len(data), digest, naive)


def _image_path(costs: dict[str, list[float]], rejected: Counter, reads: list,
                samples: list[Sample], config: Config, classes: tuple[str, ...],
                processes: int) -> ImagePath:
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
        processes=processes,
    )


def _naive_load(data: bytes, size: int) -> float | None:
    """Seconds of one naive load (full decode, RGB, bilinear resize); None if it fails."""
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
    except Exception:  # Pillow raises any type on damaged bytes; no timing is the answer
        return None
    return time.perf_counter() - started


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
