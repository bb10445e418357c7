"""The memory of a pack, from its settings, the scanned tree and the headers read: pure
arithmetic.  ``pack_memory`` sums the terms for a given cost of converting one original:
``worst_case_memory`` at the limits, the dry run's prediction at what the headers say.

A pack's process tree is one driver (scan, plan, the single writer), ``run.workers`` loky
worker processes (each converts one original at a time) and loky's helper processes.  After
the conversions, the near-duplicate hash pass uses the same processes: where it takes more
than the conversion did, the excess is a term of its own.  Each
term below is either a setting that bounds memory (``image.max_decoded_mb``, ``image.
max_pixels``, the annotation caps) or a number measured on this kind of machine, named with
the script that measures it.  There is no safety factor: where a term is only an expectation
(the samples waiting in the driver, at their expected size), its basis says so.

Measured with ``scripts/measure_baselines.py`` (a pack of 6 tiny JPEGs, 2 workers, the
process tree read from /proc every 20 ms, 3 runs, Python 3.11, numpy 2, opencv-python-headless
4.x; the largest run, rounded up to the MiB): driver 97.2 MiB (with 1 worker, where the driver
converts in-process: 91.6 MiB), worker 95.0 MiB, helper 44.4 MiB, at most 2 helpers.  On
another machine or other library versions, run the script again and update these numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..config import Config
from ..door import ANNOTATION_CAP, MIB
from ..neardup.fixtures import BACKGROUND_SHOTS, FEW_SHOTS
from ..neardup.hashing import FRAME
from ..packing.nearhash import GROUP, KEPT
from ..packing.pipeline import TASK_BYTES

DRIVER_BASELINE_BYTES = 98 * MIB
WORKER_BASELINE_BYTES = 95 * MIB
HELPER_BASELINE_BYTES = 45 * MIB
HELPERS = 2  # loky's resource trackers, with more than one worker
# scripts/bench_scale.py on 1,000,000 files (README, Big trees): 155 B a file for a pack,
# 159 for an increment, 182 for a no-op rerun; the largest.
DRIVER_BYTES_PER_FILE = 182
# A COCO file is read whole and parsed in the driver: peak 7.4-7.7x the file's bytes (its
# bytes plus json.loads' objects; tracemalloc over read_coco on 11 and 24 MB files of boxes
# and polygons); the records kept afterwards are 0.8x.  Taken as 8x; the same for an image's
# own annotation file in a worker (JSON, XML or text: parsed into Python objects likewise).
PARSED_BYTES_PER_FILE_BYTE = 8
# The largest JPEG a pixel can take: random noise at quality 100, 4:4:4 is 4.11 bytes a pixel
# (1.37x its raw RGB; 4:2:0 at quality 90 is 0.9 bytes).
JPEG_WORST_BYTES_PER_PIXEL = 4.2
RESULT_WINDOW_PER_WORKER = 2  # parallel.WorkerPool keeps 2 x workers batches out
# The near-duplicate hash pass (packing.nearhash) runs after the conversions: a background
# task holds its fixture's 255 shots (and their pickled copy) and their frames, stacked and
# sorted: 3.84 B a frame pixel (tracemalloc over tasks.background_task, 255 frames of 256 x
# 256), taken as 4.  The driver keeps ~110 B a sample index line and its row of hashes (144
# B: two hashes and the signature), GROUP backgrounds, and the backgrounds a fixture of few
# samples may borrow: at most one per FEW_SHOTS samples.
FRAME_BYTES_PER_PIXEL = 4
HASH_BYTES_PER_LINE = 256
# ``splits.near_duplicates: together`` (packing.nearsplit) then holds, beside the hash pass's
# lines: 129 B a line of what the rule needs (its path, split, group, hashes), 348-373 B a line
# at the peak of the rule itself (tracemalloc over 200,000 synthetic lines of 50-character
# paths), ~550 B a line of candidate pairs (10.5 a sample, two int64 and a score, and the
# copies of the search's pairs), and the KEPT backgrounds the check holds.  Taken as 1,100 B
# a line with hashes alone; the signatures add their arrays' sizes: 128 B a line's row, 126
# its copy for the ranking, 320 an index's lists of hashing.RANKED and their ranked copy.
SPLIT_BYTES_PER_LINE = 1700


@dataclass(frozen=True)
class MemoryTerm:
    """One part of the worst case: its bytes and what they are (a setting or a measurement)."""

    name: str
    bytes: int
    basis: str


@dataclass(frozen=True)
class MemoryEstimate:
    """The worst case of a pack's process tree: per worker process, the driver, helpers."""

    workers: int  # worker processes (0 when the driver converts in-process or dask does)
    per_worker: tuple[MemoryTerm, ...]
    driver: tuple[MemoryTerm, ...]
    helpers: MemoryTerm | None
    note: str = ""

    @property
    def worker_bytes(self) -> int:
        return sum(term.bytes for term in self.per_worker)

    @property
    def driver_bytes(self) -> int:
        return sum(term.bytes for term in self.driver)

    @property
    def total_bytes(self) -> int:
        helpers = self.helpers.bytes if self.helpers is not None else 0
        return self.driver_bytes + self.workers * self.worker_bytes + helpers


@dataclass(frozen=True)
class Conversion:
    """What converting one original takes: the memory of its decode and output (the count
    ``image.max_decoded_mb`` bounds), the bytes of its samples, and where each comes from."""

    decode: MemoryTerm
    sample_bytes: int
    sample_basis: str
    annotation: MemoryTerm | None = None  # an image's own annotation file, parsed
    samples: float = 1.0  # the samples (sample index lines) of one original: tiles, or one


def worst_case_memory(config: Config, files: int, bytes_in: int,
                      coco_bytes: int) -> MemoryEstimate:
    """The most memory the pack of ``files`` originals (``bytes_in`` together) can take.

    Per worker: its baseline (measured), the decode budget (``image.max_decoded_mb``: the
    original's bytes, its decoded pixels at their depth, the decoder's copies, a mask's
    canvas, the resized output, its canvas or tile and the encoder's buffer; checked from the
    header before decoding), an image's own annotation file parsed
    (when configured), and the results of its batch: the samples of ``batch`` originals and
    their pickled copy.  The driver: its baseline (measured), the per-file state of the tree
    (measured), a COCO file parsed (when configured), and the results waiting in the ordered
    map (2 x workers batches, one of them also pickled).  With one worker the driver converts
    in-process: the decode terms are the driver's, its baseline already holds the image
    libraries (measured lower than with a pool).
    """
    image = config.image
    budget = image.max_decoded_mb * MIB
    per_original, per_original_basis, samples = _output_bound(config, budget)
    notes = config.source.annotations
    annotation = None
    if notes.files or notes.masks or notes.preset:
        annotation = MemoryTerm(
            "annotation file", ANNOTATION_CAP * PARSED_BYTES_PER_FILE_BYTE,
            f"an image's own file, up to {ANNOTATION_CAP // MIB} MiB, parsed "
            f"({PARSED_BYTES_PER_FILE_BYTE}x its bytes)")
    decode = MemoryTerm("decode budget", budget,
                        f"image.max_decoded_mb: {image.max_decoded_mb:,} MiB")
    return pack_memory(config, files, bytes_in, coco_bytes,
                       Conversion(decode, per_original, per_original_basis, annotation,
                                  samples))


def pack_memory(config: Config, files: int, bytes_in: int, coco_bytes: int,
                conversion: Conversion) -> MemoryEstimate:
    """The memory of a pack's process tree when each original takes ``conversion``: the
    terms of ``worst_case_memory``, with the limits or with what the headers tell."""
    mean_size = bytes_in / files if files else 1.0
    batch = max(1, min(64, int(TASK_BYTES // max(mean_size, 1.0))))  # as pipeline._batch_size
    per_original, per_original_basis = conversion.sample_bytes, conversion.sample_basis
    local_workers = config.run.worker_count if config.run.backend == "local" else 0
    in_process = local_workers <= 1 and config.run.backend == "local"
    converting = [conversion.decode]
    if conversion.annotation is not None:
        converting.append(conversion.annotation)

    driver = [
        MemoryTerm("baseline", DRIVER_BASELINE_BYTES, "measured: scripts/measure_baselines.py"),
        MemoryTerm("per file", files * DRIVER_BYTES_PER_FILE,
                   f"{files:,} files x {DRIVER_BYTES_PER_FILE} B, measured: "
                   "scripts/bench_scale.py"),
    ]
    if coco_bytes:
        driver.append(MemoryTerm("COCO file", coco_bytes * PARSED_BYTES_PER_FILE_BYTE,
                                 f"{coco_bytes:,} B parsed ({PARSED_BYTES_PER_FILE_BYTE}x)"))
    lines = math.ceil(files * conversion.samples)
    shot = math.ceil(per_original / max(1.0, conversion.samples))  # one sample's JPEG
    # a fixture holds at most one sample (or tile at one place) of each original, and
    # no more backgrounds are held than there are samples
    shots, grounds = max(1, min(BACKGROUND_SHOTS, files)), min(GROUP, lines)
    if config.output.near_hashes:
        driver.append(MemoryTerm(
            "hash pass", lines * HASH_BYTES_PER_LINE + (grounds + lines // FEW_SHOTS) * FRAME ** 2,
            f"{lines:,} sample index lines x {HASH_BYTES_PER_LINE} B; {grounds} backgrounds, and "
            f"one per {FEW_SHOTS} samples to lend, {FRAME} x {FRAME} B each"))
    if config.split_near_duplicates == "together":
        driver.append(MemoryTerm(
            "near-dup splits", lines * SPLIT_BYTES_PER_LINE + min(KEPT, lines) * FRAME ** 2,
            f"{lines:,} sample index lines x {SPLIT_BYTES_PER_LINE} B (the rule, the pairs); "
            f"{min(KEPT, lines)} backgrounds of the check, {FRAME} x {FRAME} B each"))
    if in_process:
        conversion_bytes = sum(term.bytes for term in converting) + per_original
        driver += converting
        driver.append(MemoryTerm("result", per_original, per_original_basis))
        if config.output.near_hashes:
            driver.append(_hash_task_excess(shots, shot, 1, conversion_bytes))
        return MemoryEstimate(0, (), tuple(driver), None)

    window = RESULT_WINDOW_PER_WORKER * local_workers * batch + batch
    driver.append(MemoryTerm(
        "results waiting", window * per_original,
        f"({RESULT_WINDOW_PER_WORKER} x {local_workers} workers + 1 pickled) batches of "
        f"{batch} originals; {per_original_basis}"))
    if config.output.near_hashes:
        tasks = RESULT_WINDOW_PER_WORKER * local_workers + 1
        waiting = min(tasks * shots, lines) * shot
        driver.append(MemoryTerm(
            "hash tasks waiting", max(0, waiting - window * per_original),
            f"({RESULT_WINDOW_PER_WORKER} x {local_workers} workers + 1 pickled) tasks of "
            f"{shots} samples of up to {shot:,} B, beyond the results waiting "
            "(the hash pass follows the conversions)"))
    note = ""
    if config.run.backend != "local":
        note = "dask: the workers run on the cluster and are not counted here"
        return MemoryEstimate(0, (), tuple(driver), None, note)
    batch_results = MemoryTerm("batch results", 2 * batch * per_original,
                               f"{batch} originals and their pickled copy; {per_original_basis}")
    per_worker = (
        MemoryTerm("baseline", WORKER_BASELINE_BYTES, "measured: scripts/measure_baselines.py"),
        *converting,
        batch_results,
    )
    if config.output.near_hashes:
        conversion_bytes = sum(term.bytes for term in converting) + batch_results.bytes
        per_worker += (_hash_task_excess(shots, shot, 2, conversion_bytes),)
    helpers = MemoryTerm("loky helpers", HELPERS * HELPER_BASELINE_BYTES,
                         f"{HELPERS} x {HELPER_BASELINE_BYTES // MIB} MiB, measured: "
                         "scripts/measure_baselines.py")
    return MemoryEstimate(local_workers, per_worker, tuple(driver), helpers, note)


def _hash_task_excess(shots: int, shot: int, copies: int, conversion_bytes: int
                      ) -> MemoryTerm:
    """A background task of the hash pass, beyond what converting took before it: its
    ``copies`` of the ``shots`` samples' JPEGs (a worker's: the task and its pickled copy)
    and their frames."""
    task = shots * (copies * shot + FRAME_BYTES_PER_PIXEL * FRAME ** 2)
    return MemoryTerm(
        "hash task", max(0, task - conversion_bytes),
        f"{shots} samples of up to {shot:,} B ({copies}x) and their frames at "
        f"{FRAME_BYTES_PER_PIXEL} B a pixel, beyond the conversion (the hash pass follows it)")


def _output_bound(config: Config, budget: int) -> tuple[int, str, float]:
    """The most bytes the samples of one original take, how that is found, and how many
    samples that is at most.

    The pixels of a decoded original are at most ``image.max_pixels`` and at most the decode
    budget (a decoded pixel takes at least a byte).  Resized: ``size`` x ``size`` pixels, or
    for ``shorter`` the whole original.  Tiled: the scaled original's pixels times the share
    of them that neighbouring tiles repeat ((size / stride)^2); the padding of an image
    narrower than a tile is left out (its fill compresses to almost nothing).  Every pixel at
    the largest JPEG a pixel can take.
    """
    image = config.image
    pixels_decoded = min(image.max_pixels, budget)
    tiles, samples = image.tiles, 1.0
    if tiles.enabled:
        stride = max(1, tiles.size - tiles.overlap)
        pixels = pixels_decoded * tiles.scale ** 2 * (tiles.size / stride) ** 2
        what = f"tiles of {pixels / 1e6:,.0f} MP"
        samples = max(1.0, pixels / tiles.size ** 2)
    elif image.resize == "shorter":
        pixels, what = pixels_decoded, f"a sample of {pixels_decoded / 1e6:,.0f} MP (shorter)"
    else:
        pixels, what = image.size ** 2, f"a sample of {image.size} x {image.size} px"
    return math.ceil(pixels * JPEG_WORST_BYTES_PER_PIXEL), \
        f"{what} at {JPEG_WORST_BYTES_PER_PIXEL} B a pixel", samples
