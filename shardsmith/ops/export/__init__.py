"""``export``: a packed or staged dataset version as a trainer's own folder layout (Ultralytics
YOLO, COCO, anomalib), read from its shards, never from the originals.

Compute, then do: the samples to export come from the sample index, a group per shard; a
shard whose sha256 and index lines, layout, options and classes are unchanged since the
version ``current`` points to has its group of files hard-linked from it whole (the shard is
not read); the others are read shard by shard, each shard's sha256 checked against the
manifest while it is read.  Everything goes into ``DEST/vN.partial``, which is fsynced, renamed
to ``DEST/vN`` and switched to (``versions``).  An interrupted export resumes: the shards it
finished are in a journal, and their files are kept when they are still as written (size,
inode and mode).

The dataset may be an ``s3://`` URL (``storage.Location``; the export stays local): its
manifest and sample index are read from the bucket, each shard is copied to a temporary file
through the guarded door (``dataset.remote``) and read from there exactly as a local shard,
its sha256 checked as it streams by; a bucket has no lock to share.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import hashlib
import logging
import os
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import msgspec

from ...dataset.agreement import disagreement, indexed_objects
from ...dataset.formats import shard_format
from ...dataset.formats.base import open_shard
from ...dataset.lock import DirectoryLock, reading
from ...dataset.manifest import (
    MANIFEST_NAME,
    Manifest,
    SampleRecord,
    ShardEntry,
    iter_sample_index,
    read_manifest,
)
from ...dataset.normal import CUT_REASON, cut_count
from ...dataset.remote import local_copy
from ...dataset.task import pixel_census, yolo_task
from ...door import Refused, chunks
from ...errors import (
    ConfigError,
    CorruptSampleError,
    ManifestError,
    OutputStateError,
    ShardFormatError,
)
from ...progress import Progress
from ...storage import Location, location
from ...text import cut, plural, shown
from . import layouts
from .record import (
    JOURNAL_NAME,
    RECORD_BYTES_PER_SAMPLE,
    RECORD_DIR,
    RECORD_FORMAT,
    RECORD_NAME,
    ExportedFile,
    ExportedSample,
    ExportedShard,
    ExportOptions,
    ExportRecord,
    RecordHead,
    SharedFile,
    journal_line,
    options_line,
    read_journal,
    record_bytes,
    record_cap,
)
from .tree import ExportTree, real_folders, still_written
from .versions import (
    Destination,
    check_destination,
    check_paths,
    current_record,
    finish_publish,
    publish,
    remove_older,
    survey,
)

log = logging.getLogger(__name__)

LAYOUTS = tuple(dict.fromkeys(name for name, _ in layouts.LAYOUTS))
# Threads creating and writing the files while the samples after them are parsed: a create
# waits in the kernel, the GIL released (a full COCO export of 10,000 samples: 2.7 to 7 s one
# file after another, mostly that wait).
WRITE_THREADS = 4

__all__ = ["ExportOptions", "ExportResult", "export", "resolve_options"]


class DamagedShardError(CorruptSampleError):
    """A shard or sample of the dataset that is not what its manifest says (a sha256 or size
    mismatch, a record that does not parse, metadata that does not fit its image): the
    dataset is damaged, as a malformed manifest is, so the same exit code."""

    exit_code = 2


@dataclass(frozen=True)
class ExportResult:
    folder: Path  # DEST/vN
    version: int
    options: ExportOptions
    samples: int
    written: int  # samples whose files were made from their shards
    linked: int  # samples hard-linked from the previous export
    kept: int  # samples an interrupted export had finished
    shards_read: int
    removed: tuple[int, ...]  # older versions deleted
    up_to_date: bool
    seconds: float
    left_out: int = 0  # samples with a defect cut below min_visible, not exported
    note: str = ""  # why the yolo task is the one exported (``task.yolo_task``)

    def summary(self) -> str:
        """The line the CLI prints after an export."""
        variant = self.options.task or self.options.anomalib_layout
        what = self.options.layout + (f" ({variant})" if variant else "")
        removed = (f"; removed {', '.join(f'v{number}' for number in self.removed)}"
                   if self.removed else "")
        left_out = (f"; {plural(self.left_out, 'sample')} left out: {CUT_REASON} (--keep-cut "
                    "exports them, the cut part labelled)" if self.left_out else "")
        note = f"task: {self.note}\n" if self.note else ""
        if self.up_to_date:
            return (f"{note}{self.folder}: up to date ({plural(self.samples, 'sample')}, {what})"
                    f"{left_out}{removed}")
        parts = [f"{self.written} from {plural(self.shards_read, 'shard')}"]
        if self.linked:
            parts.append(f"{self.linked} hard-linked from the previous export")
        if self.kept:
            parts.append(f"{self.kept} kept from an interrupted export")
        return (f"{note}{self.folder}: {plural(self.samples, 'sample')} exported as {what} "
                f"({', '.join(parts)}) in {self.seconds:.1f}s; current -> v{self.version}"
                f"{left_out}{removed}")


def resolve_options(manifest: Manifest, layout: str, task: str = "auto", normal: str = "good",
                    anomalib_layout: str = "folder",
                    splits: tuple[str, ...] | None = None,
                    keep_cut: bool = False, boxes_as_polygons: bool = False) -> ExportOptions:
    """The export's options, checked against the dataset (its class names too, where they
    become folders) before anything is written; ConfigError for what cannot be.  A yolo
    ``auto`` of a dataset with objects is ``detect`` here: ``export`` makes it ``segment``
    where every object exported has pixels (``task.yolo_task``, which reads the index)."""
    if layout not in LAYOUTS:
        raise ConfigError(f"--layout: {layout!r} is not one of {', '.join(LAYOUTS)}")
    if layout != "yolo" and task != "auto":
        raise ConfigError(f"--task {task}: only for --layout yolo (the {layout} layout has "
                          "no tasks)")
    for split in splits or ():
        if split not in manifest.splits:
            raise ConfigError(f"--split: the dataset has no split {split!r} (splits: "
                              f"{', '.join(manifest.splits) or 'none'})")
    if keep_cut and (layout == "anomalib" or (layout == "yolo" and task == "classify")):
        raise ConfigError("--keep-cut: only for --layout coco and yolo's detect and segment "
                          "tasks (anomalib exports such samples as abnormal; classify "
                          "follows image classes)")
    chosen = tuple(name for name in manifest.splits if splits is None or name in splits)
    splits = None if splits is None else chosen
    if layout == "yolo":
        if task == "auto":
            task = "classify" if manifest.object_classes is None else "detect"
        if task != "classify" and manifest.object_classes is None:
            raise ConfigError(f"--task {task}: the dataset has no objects (image labels "
                              "only); export --task classify")
        if task == "classify":
            if not manifest.classes:
                raise ConfigError("--task classify: the dataset has no image classes "
                                  "(packed with labels: none)")
            layouts.check_folder_names(manifest.classes, "image class",
                                       "the classify layout makes one folder per class")
        if task == "classify" and keep_cut:
            raise ConfigError("--keep-cut: only for yolo's detect and segment tasks (classify "
                              "follows image classes)")
        return ExportOptions(layout, task=task, splits=splits,
                             keep_cut=keep_cut and task != "classify")
    if layout == "coco":
        if manifest.object_classes is None:
            raise ConfigError("--layout coco: the dataset has no objects (image labels only)")
        return ExportOptions(layout, splits=splits, keep_cut=keep_cut,
                             box_polygons=boxes_as_polygons)
    if boxes_as_polygons:
        raise ConfigError("--boxes-as-polygons: for --layout yolo (segment) or coco; the "
                          "anomalib layout's masks are its objects' pixels")
    if ("anomalib", anomalib_layout) not in layouts.LAYOUTS:
        raise ConfigError(f"--anomalib-layout: {anomalib_layout!r} is not folder or mvtec")
    if manifest.classes and normal not in manifest.classes:
        raise ConfigError(f"--normal {shown(normal)}: not an image class of the dataset "
                          f"(classes: {cut(', '.join(manifest.classes), 200)})")
    if anomalib_layout == "mvtec":
        layouts.check_folder_names(
            layouts.defect_names(manifest.classes, manifest.object_classes, normal),
            "defect class", "the mvtec layout makes one folder per defect class",
            reserved=layouts.NORMAL_FOLDER)
    return ExportOptions(layout, normal=normal, anomalib_layout=anomalib_layout, splits=splits)


def export(dataset: str | Path, destination: str | Path, layout: str, task: str = "auto",
           normal: str = "good", anomalib_layout: str = "folder",
           splits: tuple[str, ...] | None = None, quiet: bool = False,
           keep: int = 2, keep_cut: bool = False,
           boxes_as_polygons: bool = False) -> ExportResult:
    """Export the dataset in ``dataset`` (a folder, an ``s3://`` URL or a location) into
    ``destination`` as ``layout``; ``keep`` versions stay (the current one and the
    ``keep - 1`` before it).  ``keep_cut`` (yolo, coco): samples with
    a defect cut below min_visible are exported with it labelled, not left out.
    ``boxes_as_polygons``: an object with a box only gets its box as a polygon (yolo segment,
    COCO ``segmentation``)."""
    started = time.monotonic()
    if not (isinstance(keep, int) and 1 <= keep <= 1000):
        raise ConfigError(f"--keep {keep}: keep 1 to 1000 versions (the current one counts)")
    source, root = _check_locations(location(dataset), Path(destination))
    with _collector_paused():  # restored once ``_export``'s records are gone (none to walk)
        return _export(source, root, layout, task, normal, anomalib_layout, splits, quiet,
                       keep, started, keep_cut, boxes_as_polygons)


def _export(source: Location, root: Path, layout: str, task: str, normal: str,
            anomalib_layout: str, splits: tuple[str, ...] | None, quiet: bool, keep: int,
            started: float, keep_cut: bool = False,
            boxes_as_polygons: bool = False) -> ExportResult:
    with reading(source, "packed"):
        manifest = read_manifest(source)
        options = resolve_options(manifest, layout, task, normal, anomalib_layout, splits,
                                  keep_cut, boxes_as_polygons)
        note = ""
        # read once (~6 s a million lines): the task below and the run take it
        chosen = options.splits
        indexed = [record for record in iter_sample_index(source, manifest)
                   if chosen is None or record.split in chosen]
        if options.layout == "yolo" and options.task != "classify" and task != "detect":
            # the task the record of the export, and so what it may link, depends on
            picked, note = yolo_task(task, pixel_census(indexed), manifest.object_classes or (),
                                     boxes_as_polygons)
            options = msgspec.structs.replace(options, task=picked)
            log.info("task: %s", note)
        cap = record_cap(manifest.totals.packed)
        if root.is_dir():  # refused before our lock folder appears in someone's folder
            survey(root, layout, cap)
        root.mkdir(parents=True, exist_ok=True)
        check_destination(root)
        with DirectoryLock(root / RECORD_DIR / "lock", "exported"):
            destination = survey(root, layout, cap)
            if finish_publish(destination, cap):
                destination = survey(root, layout, cap)
            run = _Run(source, manifest, indexed, options, destination, quiet, keep, cap)
            return dataclasses.replace(run.execute(started), note=note)


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector paused while an export runs: it builds tens of
    thousands of small objects that hold no cycles (records, files, COCO objects), and the
    collector walked them again and again (a COCO re-export of 10,100 samples: 240 runs,
    0.08 s of 0.55 s); a ``gc.collect()`` after an export and a re-export of 10,000 samples
    found nothing to collect.  Restored as it was, whatever happens: after the export's
    objects are freed, or the first allocation after it walks them all once more (60 to 100
    ms of a COCO re-export of 10,100 samples)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _check_locations(source: Location, destination: Path) -> tuple[Location, Path]:
    destination = destination.expanduser().absolute()
    check_destination(destination)
    destination = destination.parent.resolve() / destination.name
    source = source.expanduser().resolve()
    if not (source / MANIFEST_NAME).is_file():
        raise ConfigError(f"{source}: no {MANIFEST_NAME}: not a packed dataset")
    if destination == source or source in destination.parents:
        raise ConfigError(f"{destination}: inside the dataset {source}; export elsewhere")
    if destination in source.parents:
        raise ConfigError(f"{destination}: contains the dataset {source}; export elsewhere")
    return source, destination


_INDEX_ENCODER = msgspec.json.Encoder()


def index_digest(records: list[SampleRecord]) -> str:
    """The sha256 of a shard's samples' index lines, in their order: what, with the shard's
    own sha256, decides that its exported files are still the ones a new export would make
    (one encode of the list: 10,000 lines in ~5 ms).  Near-duplicate hashes are left out:
    no layout writes them, and a fixture's new background makes them again."""
    return hashlib.sha256(_INDEX_ENCODER.encode(
        [replace(record, near=None, near_signature=None)
         if record.near is not None or record.near_signature is not None else record
         for record in records])).hexdigest()


class _Run:
    """One export: the plan (``execute``'s first half), then the writing."""

    def __init__(self, source: Location, manifest: Manifest, indexed: list[SampleRecord],
                 options: ExportOptions, destination: Destination, quiet: bool, keep: int,
                 cap: int):
        self.source, self.manifest, self.options = source, manifest, options
        self.indexed = indexed  # the sample index's lines of the splits exported
        self.destination, self.quiet, self.keep = destination, quiet, keep
        self.cap = cap  # the largest record and journal read back (``record_cap``)
        self.number = manifest.version
        self.fmt = shard_format(manifest.format)
        self.layout = layouts.layout_of(options)
        self.fallback_warned = False
        # the dataset's splits this export writes, in the manifest's order
        self.splits = tuple(name for name in manifest.splits
                            if options.splits is None or name in options.splits)
        # a COCO sample's recorded objects are written into the new instances files when it
        # is linked or kept: held to what this release can have made
        self.coco_fits = self.layout.recorded_fit(manifest.object_classes)
        self.paths_fit = layouts.paths_fit(options, manifest.classes, manifest.object_classes)
        self.listed = {shard.name: shard for shard in manifest.shards}
        self.left_out = 0

    def execute(self, started: float) -> ExportResult:
        current = self.destination.current
        before = None  # the current version's record, where this export may use it
        if current is not None and self._same_export(self.destination.versions[current]):
            before = current_record(self.destination, self.cap)
        if current == self.number and before is not None and self._up_to_date(before):
            records, _ = self._read_index()
            removed = remove_older(self.destination, self.number, self.keep)
            return self._result(len(records), 0, 0, 0, 0, tuple(removed), True, started)
        partial = self.destination.partial(self.number)
        tree = ExportTree(partial)
        tree.folder(RECORD_DIR)
        exported: dict[str, ExportedShard] = {}
        progress = Progress(sum(self.manifest.splits[name].samples for name in self.splits),
                            0, "samples", "export", self.quiet)
        linked: list[ExportedShard] = []
        try:
            records, by_shard = self._read_index()
            digests = {name: index_digest(wanted) for name, wanted in by_shard.items()}
            groups = before.shards if before else ()
            # a shard the record names twice lends neither group (both linked: EEXIST)
            named = Counter(group.shard for group in groups)
            unchanged = [group for group in groups
                         if group.shard in by_shard and named[group.shard] == 1
                         and self._fits(group, by_shard[group.shard], digests[group.shard])]
            linking = {group.shard for group in unchanged}
            source = self.destination.folder(current) if unchanged else self.destination.root
            with tree.linking(source, unchanged, progress) as links:

                def not_linked() -> dict[str, list[SampleRecord]]:
                    """The groups whose files were not linked after all, once all are done."""
                    linked.extend(links())
                    exported.update((group.shard, group) for group in linked)
                    return {name: by_shard[name] for name in sorted(linking - set(exported))}

                # the changed shards are read while the unchanged ones are linked
                kept, read = self._from_shards(
                    {name: wanted for name, wanted in by_shard.items() if name not in linking},
                    digests, tree, exported, progress, not_linked)
        finally:
            progress.close()
        groups = tuple(exported[name] for name in sorted(exported))
        by_key = {sample.key: sample for group in groups for sample in group.samples}
        samples = [by_key[record.key] for record in records]  # the index's order
        final = self.destination.folder(self.number)
        shared = tuple(
            SharedFile(*msgspec.structs.astuple(tree.write(relpath, data)),
                       hashlib.sha256(data).hexdigest())
            for relpath, data in self.layout.shared_files(
                self.manifest.object_classes, list(self.splits), samples, str(final),
                lambda message: log.warning("%s", message)))
        record = ExportRecord(RECORD_FORMAT, self.options, self.manifest.content_fingerprint,
                              self.manifest.fingerprint, self.number, self.manifest.classes,
                              self.manifest.object_classes, groups, shared)
        if not tree.fresh:  # an earlier try's folder: its files this export does not name
            tree.remove_unnamed({file.path for file in record.files()})
        written = record_bytes(record)
        if len(written) > self.cap:  # the next export would refuse this version: refused now
            raise OutputStateError(
                f"{partial / RECORD_DIR / RECORD_NAME}: the export's record would be "
                f"{len(written) / 2**20:,.0f} MiB, over the {self.cap / 2**20:,.0f} MiB an export "
                f"of a dataset of {plural(self.manifest.totals.packed, 'sample')} reads back "
                f"({RECORD_BYTES_PER_SAMPLE >> 10} KiB a sample); nothing was switched")
        tree.write(f"{RECORD_DIR}/{RECORD_NAME}", written)
        (partial / RECORD_DIR / JOURNAL_NAME).unlink(missing_ok=True)
        tree.sync()
        publish(self.destination, self.number)
        removed = remove_older(self.destination, self.number, self.keep)
        linked_samples = sum(len(group.samples) for group in linked)
        return self._result(len(records), len(records) - linked_samples - kept, linked_samples,
                            kept, read, tuple(removed), False, started)

    def _result(self, samples: int, written: int, linked: int, kept: int, read: int,
                removed: tuple[int, ...], up_to_date: bool, started: float) -> ExportResult:
        return ExportResult(self.destination.folder(self.number), self.number, self.options,
                            samples, written, linked, kept, read, removed, up_to_date,
                            time.monotonic() - started, self.left_out)

    def _same_export(self, head: RecordHead) -> bool:
        """A version exported by this release with these options and classes, from a
        dataset packed with this config: its files may be this export's."""
        return (head.format == RECORD_FORMAT and head.options == self.options
                and head.classes == self.manifest.classes
                and head.object_classes == self.manifest.object_classes
                and head.fingerprint == self.manifest.fingerprint)

    def _up_to_date(self, record: ExportRecord) -> bool:
        """The current export is this version with these options, and every file it lists
        is still there as written (``tree.still_written``: an ``lstat`` each, no reading)."""
        if not (record.version == self.number
                and record.content_fingerprint == self.manifest.content_fingerprint):
            return False
        check_paths(self.destination, record)
        folder = self.destination.folder(self.number)
        files = record.files()
        if not real_folders(folder, {file.path.rpartition("/")[0] for file in files}):
            return False  # a folder swapped for a link: its files may be anyone's
        return all(still_written(folder, file) for file in files)

    def _fits(self, group: ExportedShard, wanted: list[SampleRecord], digest: str) -> bool:
        """``group`` (of the current version's record, or of the journal) holds this export's
        files of its shard: the same shard (its sha256 the manifest's), the same index lines
        (``digest``), exactly the samples this export takes of it (``wanted``: key, split and
        the image size COCO's instances files give it), each sample's recorded files the
        layout's for its key and split (a record that names other files lends none of them),
        and (COCO) its recorded objects ones this release can have made.  Its files are
        checked by the link or ``ExportTree.holds``."""
        fits, coco_fits = self.paths_fit, self.coco_fits
        shard = self.listed.get(group.shard)
        return (shard is not None and shard.sha256 == group.sha256 and digest == group.index
                and [(sample.key, sample.split, sample.width, sample.height)
                     for sample in group.samples]
                == [(record.key, record.split, record.width, record.height) for record in wanted]
                and all(fits(sample.key, sample.split, tuple(file.path for file in sample.files))
                        and coco_fits(sample) for sample in group.samples))

    def _read_index(self) -> tuple[list[SampleRecord], dict[str, list[SampleRecord]]]:
        """The samples to export, in the index's order, and by shard."""
        records: list[SampleRecord] = []
        by_shard: dict[str, list[SampleRecord]] = defaultdict(list)
        self.left_out, unlocated, uncounted = 0, 0, False
        for record in self.indexed:
            if cut_count(record) and record.objects_cut is None:
                unlocated += 1  # counted by an index of an earlier release, not located
            if self.layout.leaves_out_cut and cut_count(record):
                if not self.options.keep_cut or record.objects_cut is None:
                    self.left_out += 1
                    continue
            uncounted = uncounted or (record.objects_dropped is None
                                      and self.manifest.object_classes is not None)
            records.append(record)
            by_shard[record.shard].append(record)
        self._warn_old_index(unlocated, uncounted)
        self.layout.check(records, self.manifest.classes)
        return records, by_shard

    def _warn_old_index(self, unlocated: int, uncounted: bool) -> None:
        """Say what an index of an earlier release cannot tell of cut defects."""
        if unlocated:
            log.warning("%s: %s with a defect cut below min_visible: the sample index counts "
                        "their cut objects but does not say where they are (packed by an "
                        "earlier release; the next pack records them): %s", self.source,
                        plural(unlocated, "sample"),
                        "left out, even with --keep-cut" if self.layout.leaves_out_cut else
                        "their masks show a cut object by the 255 (\"ignore\") pixels of the "
                        "class mask; a box-only one cannot be told apart")
        if uncounted and self.layout.leaves_out_cut:
            log.warning("%s: the sample index does not count the objects min_visible "
                        "dropped (packed by an earlier release): a sample showing only a "
                        "cut defect cannot be told from a background one; the next pack "
                        "records them", self.source)
        elif uncounted:
            log.warning("%s: the sample index does not count the objects min_visible "
                        "dropped (packed by an earlier release): a cut defect is found by the "
                        "255 (\"ignore\") pixels of a class mask; a box-only one cannot be "
                        "told apart; the next pack records them", self.source)

    def _from_shards(self, todo: dict[str, list[SampleRecord]], digests: dict[str, str],
                     tree: ExportTree, exported: dict[str, ExportedShard], progress: Progress,
                     then: Callable[[], dict[str, list[SampleRecord]]] = dict) -> tuple[int, int]:
        """Export the samples of ``todo`` (shard name -> its samples to export) from their
        shards, then those ``then`` gives once they are done; returns (samples kept from an
        interrupted run, shards read)."""
        listed = self.listed  # name -> the manifest's entry
        header = options_line(self.options, self.manifest.content_fingerprint)
        finished = read_journal(tree.root, header, self.cap)
        for entry in finished.values():
            problem = layouts.check_record_paths(self.options, self.manifest.classes,
                                                 self.manifest.object_classes, entry.samples)
            if problem is not None:
                raise OutputStateError(f"{tree.root / RECORD_DIR / JOURNAL_NAME}: {problem}: "
                                       f"the journal is damaged; move {tree.root} away and "
                                       "rerun")
        journal_path = tree.root / RECORD_DIR / JOURNAL_NAME
        if not finished:
            tree.write(f"{RECORD_DIR}/{JOURNAL_NAME}", header)
        counts = [0, 0]  # kept, read
        flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        with os.fdopen(os.open(journal_path, flags), "ab") as journal, ThreadPoolExecutor(
                WRITE_THREADS, thread_name_prefix="shardsmith-export") as pool:

            def make(name: str, wanted: list[SampleRecord]) -> None:
                if name not in listed:
                    raise ManifestError(f"{self.source}: sample {wanted[0].key} lies in "
                                        f"{name}, a shard the manifest does not list")
                entry = finished.get(name)
                if entry is not None and self._fits(entry, wanted, digests[name]) and all(
                        tree.holds(file) for sample in entry.samples for file in sample.files):
                    exported[name] = entry
                    counts[0] += len(entry.samples)
                    progress.update(len(entry.samples))
                    return
                made = self._read_shard(listed[name], {record.key: record for record in wanted},
                                        tree, pool, progress)
                counts[1] += 1
                group = exported[name] = ExportedShard(name, listed[name].sha256,
                                                       digests[name], tuple(made))
                journal.write(journal_line(group))
                journal.flush()

            for name in sorted(todo):
                make(name, todo[name])
            for name, wanted in then().items():
                make(name, wanted)
        return counts[0], counts[1]

    def _read_shard(self, shard: ShardEntry, wanted: dict[str, SampleRecord],
                    tree: ExportTree, pool: Executor,
                    progress: Progress) -> list[ExportedSample]:
        """Export the ``wanted`` samples of ``shard``, hashing the whole shard as its records
        stream by: a shard that is not the manifest's stops the export before anything is
        switched.  Its files are written by ``pool``'s threads, all of them finished before
        this returns (then the shard is journalled as done)."""
        path = self.source / shard.name  # what messages name; ``copy`` is what is read
        digest = hashlib.sha256()
        position = 0
        made = []
        try:
            with local_copy(path, shard.bytes) as copy, open_shard(copy) as opened, \
                    contextlib.closing(self.fmt.records(copy, shard.bytes)) as stream:
                for offset, packed in stream:
                    if offset < position:
                        raise ShardFormatError(f"record {packed.key} overlaps the one before")
                    for data in chunks(opened, offset, position):  # between records
                        digest.update(data)
                    digest.update(packed.data)
                    position = offset + len(packed.data)
                    record = wanted.get(packed.key)
                    if record is not None:
                        made.append(self._export_sample(shard, record, packed, tree, pool))
                        progress.update()
                for data in chunks(opened, shard.bytes, position):  # the trailer
                    digest.update(data)
                if opened.size != shard.bytes:
                    raise ManifestError(self._mismatch(path, f"{opened.size:,} bytes, the "
                                                       f"manifest lists {shard.bytes:,}"))
        except Refused as exc:  # an object larger than the manifest says: not read
            raise ManifestError(self._mismatch(path, exc.detail)) from None
        except ShardFormatError as exc:
            raise DamagedShardError(f"{path}: {exc} (shardsmith verify checks the whole "
                                     "dataset); nothing was switched") from None
        except FileNotFoundError:
            raise DamagedShardError(f"{path}: missing (a staged copy of another split? "
                                     "shardsmith verify checks the dataset)") from None
        if digest.hexdigest() != shard.sha256:
            raise ManifestError(self._mismatch(path, "its sha256 is not the manifest's"))
        missing = sorted(set(wanted) - {pending.sample.key for pending in made})
        if missing:
            raise DamagedShardError(f"{path}: does not hold sample {missing[0]} the sample "
                                     "index places there (shardsmith verify shows more)")
        order = {key: number for number, key in enumerate(wanted)}  # the index's
        return [pending.result() for pending in sorted(made, key=lambda pending:
                                                       order[pending.sample.key])]

    def _mismatch(self, path: Location, why: str) -> str:
        return (f"{path}: {why}: the shard changed or is damaged since it was packed "
                "(shardsmith verify); nothing was switched")

    def _export_sample(self, shard: ShardEntry, record: SampleRecord, packed,
                       tree: ExportTree, pool: Executor) -> _Pending:
        classes = self.manifest.classes
        class_name = classes[record.label] if 0 <= record.label < len(classes) else ""
        try:
            metadata = self.fmt.metadata(packed)  # a checked mapping, or ShardFormatError
            # normal or not, masks or boxes: decided from the index; a line the shard does
            # not bear out stops the export (a hidden cut would be a background image)
            problem = disagreement(indexed_objects(record), metadata)
            if problem is not None:
                raise ShardFormatError(problem)
            wants_mask = self.layout.every_class_mask or "rle" not in metadata
            object_classes = self.manifest.object_classes if self.layout.with_objects else None
            sample = layouts.parse_sample(
                record.key, record.split, class_name, metadata, self.fmt.jpeg(packed),
                self.fmt.mask_png(packed) if wants_mask else None, object_classes,
                self._warn_fallback)
            if object_classes is not None:  # classify follows image classes: no objects
                sample.cut_count = cut_count(record)
                sample.cut = layouts.cut_objects(record.objects_cut or (), object_classes,
                                                 sample.height, sample.width)
            files, coco = self.layout.files(self.options, sample)
        except (ValueError, TypeError, KeyError, ShardFormatError) as exc:
            # a format's own error may name the sample already
            why = str(exc).removeprefix(f"sample {record.key}: ")
            raise DamagedShardError(f"{self.source / shard.name}: sample {record.key}: {why}; "
                                    "nothing was switched") from None
        writes = [tree.write_later(pool, relpath, data) for relpath, data in files]
        return _Pending(ExportedSample(record.key, record.split, sample.width, sample.height,
                                       (), coco), writes)

    def _warn_fallback(self) -> None:
        if not self.fallback_warned:
            self.fallback_warned = True
            log.warning("%s: its shards store no instance masks (packed by an older "
                        "release): each object's mask is taken as the class-mask pixels of "
                        "its class inside its box; pack again for exact masks", self.source)


@dataclass(frozen=True)
class _Pending:
    """A sample whose files are being written: its record less its files, and their writes."""

    sample: ExportedSample
    writes: list[Future[ExportedFile]]

    def result(self) -> ExportedSample:
        """The sample with its files, once written (a write's error raised here)."""
        sample = self.sample
        return ExportedSample(sample.key, sample.split, sample.width, sample.height,
                              tuple(write.result() for write in self.writes), sample.coco)


