"""``shardsmith probe``: measure the storage and the CPU on a seeded sample, predict the pack.

    listing  → storage.measure_listing   parallel scan of the tree, serial walk for comparison
    sample   → seeded random originals of the scanned tree
    reads    → storage.measure_reads     cold reads at 1, 2, 4, ... concurrent readers
    CPU      → compute.measure_sample    the image path per format; a training loader's costs
               compute.measure_writer    the single writer's samples/s
    predict  → predict.predict           bounds (reads, cores x per-core, writer), which binds,
                                         the rate of W workers, time, output, workers to use

Nothing is written outside a temporary directory (the writer measurement).  ``dry_run`` (the
``pack --dry-run`` of a job) lives in ``dryrun``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..config import Config
from ..errors import ConfigError, ShardsmithError
from ..packing.originals import original_cap
from ..packing.scan import ScanResult
from ..storage import is_url
from .compute import ImagePath, LoaderCosts, WriterRate, measure_sample, measure_writer
from .predict import Prediction, TrainingFeed, TreeCounts, count_tree, predict, training_feed
from .storage import ColdReads, Listing, drop_all, measure_listing, measure_reads, reader_levels

Say = Callable[[str], None]
SERIAL_LISTING_SECONDS = 10.0  # the serial walk's time budget on a big tree


@dataclass(frozen=True)
class ProbeOptions:
    """How much to measure: ``sample`` originals, and the images/s the training GPU consumes
    (for the utilisation estimate)."""

    sample: int = 32
    gpu_demand: float | None = None


@dataclass(frozen=True)
class ProbeReport:
    """Every measurement of one probe and the predictions made from them."""

    source: str
    classes: tuple[str, ...]
    tree: TreeCounts
    excluded: dict[str, int]
    unreadable: int
    sampled: tuple[str, ...]
    seed: int
    settings: dict
    listing: Listing
    reads: ColdReads
    image_path: ImagePath
    loader: LoaderCosts
    writer: WriterRate
    prediction: Prediction
    training: TrainingFeed
    note: str | None = None  # what the measurement leaves out for this job


def probe(config: Config, options: ProbeOptions, say: Say | None = None) -> ProbeReport:
    """Measure the source tree of ``config`` and predict its pack on this machine."""
    return probe_tree(config, options, say)[0]


def probe_tree(config: Config, options: ProbeOptions, say: Say | None = None
               ) -> tuple[ProbeReport, ScanResult]:
    """``probe``, also returning the scan it made (``dry_run`` counts from it)."""
    root = source_root(config)
    note = None
    if config.image.tiles.enabled or config.source.annotations.has_objects:
        # Measured all the same: the storage, the listing and the writer are the job's; the
        # image path is the whole-image conversion, a lower bound of the job's.
        note = ("image path measured as a whole-image conversion at image.size: "
                + " and ".join(what for what, on in (
                    ("cutting tiles", config.image.tiles.enabled),
                    ("reading annotations", config.source.annotations.has_objects)) if on)
                + " not included (pack --dry-run checks the annotations)")
    if say is not None:
        say(f"listing {root} (parallel scan, then a serial walk of at most "
            f"{SERIAL_LISTING_SECONDS:g} s)")
    listing, scanned = measure_listing(root, config, SERIAL_LISTING_SECONDS)
    if not scanned.files:
        raise ShardsmithError(f"no image files under {root} (extensions: "
                              f"{', '.join(config.source.extensions)})")
    tree = count_tree(scanned.files, scanned.classes, config)
    chosen = random.Random(f"probe:{config.seed}").sample(
        range(len(scanned.files)), min(options.sample, len(scanned.files)))
    sample = [scanned.files[index] for index in chosen]
    paths = [str(root / source.relpath) for source in sample]
    follow = config.source.follow_symlinks
    cores = config.run.worker_count

    cap = original_cap(config.image)  # as a pack: a larger original is never read
    resident = drop_all(paths, follow, cap)
    measured = measure_sample(root, sample, config, scanned.classes, say)
    reads = measure_reads(root, [source.relpath for source in sample],
                          reader_levels(len(sample), cores), follow, cap,
                          first=measured.reads,
                          resident=resident, say=say)
    if measured.unreadable:
        reads = ColdReads(reads.levels, reads.cold, reads.note,
                          tuple(sorted(dict(reads.unreadable + measured.unreadable).items())))
    if say is not None:
        say("measuring the shard writer")
    writer = measure_writer(measured.samples, config, scanned.classes)
    prediction = predict(tree, listing.parallel.seconds, reads.levels, measured.image_path,
                         writer, cores, config)
    feed = training_feed(tree, reads.best, measured.loader, cores, options.gpu_demand)
    report = ProbeReport(
        source=str(root),
        classes=scanned.classes,
        tree=tree,
        excluded=dict(sorted(scanned.excluded.items())),
        unreadable=len(scanned.unreadable),
        sampled=tuple(source.relpath for source in sample),
        seed=config.seed,
        settings={"format": config.output.format, "size": config.image.size,
                  "resize": config.image.resize, "quality": config.image.quality},
        listing=listing,
        reads=reads,
        image_path=measured.image_path,
        loader=measured.loader,
        writer=writer,
        prediction=prediction,
        training=feed,
        note=note,
    )
    return report, scanned


def source_root(config: Config) -> Path:
    """The source directory of ``config``, resolved; ConfigError when there is none."""
    if not config.source.path:
        raise ConfigError("source.path: no source directory given (argument SOURCE or config)")
    if is_url(config.source.path):  # its cold reads and listing rates are a disk's
        raise ConfigError(f"source.path: {config.source.path}: the probe measures a local or "
                          "mounted tree, not an s3:// source (pack --dry-run counts a bucket "
                          "without --probe)")
    root = Path(config.source.path).expanduser().resolve()
    if not root.is_dir():
        raise ConfigError(f"source.path: {root} is not a directory")
    return root
