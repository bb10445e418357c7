"""``pack``: scan → plan → process (worker processes) → write shards → commit a version.

One driver process owns the writers; images are processed by a bounded, ordered parallel map,
so shards are byte-identical whatever the worker count and memory stays flat.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from ..annotations.counts import object_counts
from ..annotations.model import ObjectClasses, Vocabulary
from ..annotations.prepare import Prepared, prepare
from ..atomic import fsync_directory, remove_stale_tmp
from ..config import FORMATS, Config, check_paths
from ..dataset.formats import ShardLimits, ShardRoller, shard_format, write_index
from ..dataset.lock import DirectoryLock
from ..dataset.manifest import (
    ANNOTATION_RULES,
    Manifest,
    RejectEntry,
    SampleRecord,
    ShardEntry,
    commit,
    files_intact,
    iter_sample_index,
    no_longer_named,
    remove_unnamed,
    sample_index_intact,
    samples_index_name,
    sources_fingerprint,
    write_derived,
    write_sample_index,
)
from ..dataset.normal import cut_fields
from ..dataset.records import Rederived, Reject, Sample, Unchanged
from ..dataset.statedir import DatasetDir
from ..errors import OutputStateError, ShardsmithError
from ..progress import Progress
from ..storage import BACKENDS, Location, is_url
from ..text import plural
from . import nearhash, nearsplit
from .changes import ChangesRecorder, index_tally, wrong_totals
from .delta import Delta, Execution, Job, Outcome, RederiveItem, WorkItems, diff, resolve
from .incremental import Rewritten, append_classes, kept_samples, rewrite
from .journal import Journal, JournalMirror, JournalState
from .jpegcopy import Decoded, PreviousJpegs, copy_jpegs
from .nearhash import NearHashes
from .originals import original_cap, use_storage
from .outputdir import clear_previous_output, previous_dataset
from .parallel import WorkerPool
from .plan import Plan, PlanItem, make_plan
from .readahead import ReadAhead
from .scan import ScanResult, SourceTable, scan
from .version import version_manifest

log = logging.getLogger(__name__)

TASK_BYTES = 1_000_000


@dataclass(frozen=True)
class PackResult:
    """What a pack run did; ``manifest`` is the dataset's manifest as written (or found)."""

    manifest: Manifest
    output: Path
    up_to_date: bool = False
    resumed_at: int = 0
    published: str = ""  # the s3:// URL of a pack to a bucket (``output`` is its spool)

    @property
    def shown(self) -> str:
        """Where the dataset is, as the user named it."""
        return self.published or str(self.output)

    @property
    def reject_fraction(self) -> float:
        totals = self.manifest.totals  # originals, also when they were cut into tiles
        candidates = (totals.packed if totals.sources is None else totals.sources) \
            + totals.rejected
        return totals.rejected / candidates if candidates else 0.0


def pack(config: Config) -> PackResult:
    """Pack the source tree into shards and a manifest, as ``config`` says.

    Re-running on a finished output with the same config and unchanged sources does nothing;
    with changed sources (or a damaged or older-schema output) it adds a dataset version
    (only new or changed sources decoded); after an interruption it resumes from the last
    published shard.  An ``s3://`` output is packed in a local spool whose journal and
    shards are mirrored to the bucket, and published there when the pack is done.
    """
    started = time.monotonic()
    source, output = check_paths(config)
    if is_url(output):
        from .s3output import bucket_output

        with bucket_output(config, output) as (spooled, mirror):
            result = _pack_in(spooled, *check_paths(spooled), started, mirror)
        # a spool up to date may hold the version a killed run did not commit: committed now
        return replace(result, published=str(output),
                       up_to_date=result.up_to_date and not mirror.committed)
    return _pack_in(config, source, output, started)


def _pack_in(config: Config, source: Location, output: Path, started: float,
             mirror: JournalMirror | None = None) -> PackResult:
    """Pack into the folder ``output``; ``mirror``: where the journal's checkpoints are
    copied as they are written (a pack to a bucket, through its spool)."""
    with DirectoryLock(DatasetDir(output).lock, "packed"):
        with WorkerPool(config.run) as pool:  # local workers start while the tree is scanned
            split_folders = tuple(name for name, _ in config.splits) \
                if config.split_folder else ()
            scanned = scan(source, config.source, split_folders=split_folders)
            return _pack_scanned(pool, scanned, config, source, output, started, mirror)


def _pack_scanned(
    pool: WorkerPool, scanned: ScanResult, config: Config, source: Location,
    output: Path,
    started: float,
    mirror: JournalMirror | None = None,
) -> PackResult:
    previous = previous_dataset(output, config)
    job = make_job(scanned, config, source, output, previous, started)
    if previous is not None and up_to_date(output, previous, job) \
            and not wrong_totals(previous, index_tally(output, previous)):
        # Nothing to pack, but a shard list edited or swapped by hand is still made what the
        # manifest says: readers trust the lists.  Totals the sample index does not bear out
        # are corrected by a new version (its history says so), as a pack that changes
        # something corrects them, not by a manifest rewritten under a version that stage and
        # export already know.  Telling costs one parse of the index (5-7 s a million lines).
        repaired = write_derived(output, previous)
        if repaired:
            log.warning("rewrote %s to match the manifest", ", ".join(repaired))
        finish_commit(output, previous)
        return PackResult(previous, output, up_to_date=True)

    delta = find_delta(job, previous)
    journal = Journal(output, {"delta": delta.digest}, mirror)
    # What is left to do comes first: a journal is resumed from only if it fits that work.
    state = journal.load(delta.items(), delta.next_numbers, FORMATS[config.output.format])
    if state is None:
        if previous is None:
            clear_previous_output(output)
        else:  # files of an unfinished version: the manifest does not name them
            remove_unnamed(output, {entry.name for entry in previous.files()})
        state = journal.start()
    else:
        log.info("resuming at image %d", state.next_index)
    remove_stale_tmp(output)

    execution = execute(delta, job, journal, state, pool)
    outcome = resolve(delta, state.rejects, state.sources, state.unchanged)
    done = _rewrite(job, outcome, execution)
    moved, split_of, moved_from = done.moved, {}, {}  # key -> new shard, split, split before

    def kept(observe: Callable | None) -> Iterator[SampleRecord]:
        records = kept_samples(output, outcome, moved, observe)
        return (replace(r, split=split_of[r.key]) if r.key in split_of else r for r in records)

    def packed() -> Iterator[dict[str, Any]]:
        return (dict(s, shard=moved.get(s["key"], s.get("shard")),
                     split=split_of.get(s["key"], s["split"]))
                for s in journal.samples(state.samples_end))

    near = NearHashes()
    together = config.split_near_duplicates == "together"
    # turned on: every unit placed anew (one "resplit" version); turned off: nothing moves
    switched = previous is not None and together != (previous.near_duplicates == "together")
    notes = ["splits.near_duplicates: independent; packed samples stay in their split"] \
        if switched and not together else []
    if config.output.near_hashes:  # one more pass over the lines, before they are written
        removed = nearhash.Removed()
        # together: every unit placed by its clusters; independent: an original packed
        # again stays in the split an earlier version (kept together) put it in
        observer = nearsplit.Placement((name for name, _ in config.splits), switched) \
            if together else nearsplit.Stay()
        near = NearHashes.make(
            observer.lines(kept, packed, removed), output, config.output.format, done.shards,
            pool, config.run.quiet,
            previous is not None and previous.near_hash == nearhash.CURRENT, removed)
        if isinstance(observer, nearsplit.Placement):
            done, split_of, moved_from, notes = _together(job, done, observer, near, pool)
        elif observer.moves:  # changed originals of units an earlier version moved
            split_of = {key: split for key, split in observer.moves.items()
                        if split in dict(config.splits)}  # a forged index names no other
            done = _relocate(job, done, split_of, observer.shards)
        moved = done.moved
    manifest = replace(with_copies(version_manifest(job, outcome, execution, done, notes),
                                   execution),
                       annotation_sources=job.notes.report,
                       near_hash=nearhash.CURRENT if config.output.near_hashes else None,
                       near_duplicates="together" if together else None)
    # What the version changed is recorded from the same two streams, as they are written.
    changes = ChangesRecorder(output, previous, manifest, moved_from)
    samples = itertools.chain(
        changes.kept(near.attached(kept(changes.previous_sample))),
        changes.packed(near.attached(packed())),
    )
    try:
        index = write_sample_index(output, samples_index_name(manifest.version), samples)
        manifest = replace(changes.settle(manifest), samples_index=index)
        # Written before the manifest that names it, like the sample index (invariant 8).
        manifest = replace(manifest, changes=changes.publish(output, config.output.keep_changes))
    finally:
        changes.close()
    manifest = manifest.with_content_fingerprint()
    merged_away = [entry.name for shard in done.obsolete for entry in shard.files()]
    commit(output, manifest, no_longer_named(previous, manifest) + merged_away)
    journal.remove()
    return PackResult(manifest, output, resumed_at=execution.resumed_at)


def finish_commit(output: Path, manifest: Manifest) -> None:
    """Finish what a run killed after its commit left (docs/design.md, invariant 8): the
    files of the previous version the new manifest no longer names, and the journal and
    spool of the run that committed it (the version it built is there: nothing to resume).
    A rerun then ends as an uninterrupted run would have, byte for byte."""
    removed = remove_unnamed(output, {entry.name for entry in manifest.files()})
    if removed:
        log.info("removed %s, which the manifest does not name", ", ".join(removed))
        fsync_directory(output)
    Journal(output, {}).discard()


def make_job(scanned: ScanResult, config: Config, source: Location, output: Path,
             previous: Manifest | None, started: float) -> Job:
    """The scan made a job: classes new in this scan go after the previous version's (labels
    keep their meaning), annotations read up front, the plan, the sources fingerprint.
    Raises ShardsmithError when there is nothing to pack."""
    if previous is not None:
        files, classes = append_classes(scanned.files, previous.classes, scanned.classes)
        scanned = replace(scanned, files=files, classes=classes)
    if not len(scanned.files):
        reasons = ", ".join(f"{n} {why}" for why, n in scanned.excluded.most_common()) or "none"
        raise ShardsmithError(f"no image files to pack under {source} (left out: {reasons})"
                              + _flat_folder_hint(scanned, config))
    notes = prepare(scanned.files.relpaths, scanned.classes, source, config,
                    previous.object_classes if previous is not None else None,
                    scanned.annotation_objects)
    plan = make_plan(scanned.files, config.splits, config.seed, config.split_group,
                     config.split_folder, notes.records)
    fingerprint = sources_fingerprint(_source_entries(plan.table, notes, config,
                                                      is_url(source)))
    if notes.problems:
        scanned = replace(scanned, bad_annotations=scanned.bad_annotations
                          + tuple(notes.problems))
    return Job(config, source, output, scanned, notes, plan, fingerprint, started)


def find_delta(job: Job, previous: Manifest | None) -> Delta:
    """What this version changes against ``previous``: its shards checked on disk, its
    sample index streamed (twice in rare cases, see ``diff``)."""
    if previous is None:
        return diff(None, (), job.plan, job.facts())
    damaged = frozenset(shard.name for shard in previous.shards
                        if not files_intact(job.output, shard.files()))
    return diff(previous, SampleIndex(job.output, previous), job.plan,
                job.facts(damaged, previous))


@dataclass(frozen=True)
class SampleIndex:
    """The sample index of the version ``manifest`` in ``output``, streamed anew by every
    iteration (``diff`` may read it twice)."""

    output: Path
    manifest: Manifest

    def __iter__(self) -> Iterator[SampleRecord]:
        return iter_sample_index(self.output, self.manifest)


def _rewrite(job: Job, outcome: Outcome, execution: Execution) -> Rewritten:
    """The shards of the new version: the previous ones kept, this run's, and those the
    rewrite (stale shards, and with --compact small ones) makes; every one with an index."""
    config, output = job.config, job.output
    fmt = shard_format(config.output.format)
    limits = ShardLimits(config.output.shard_bytes, config.output.shard_samples)
    previous = outcome.delta.previous
    before = list(previous.shards) if previous is not None else []
    done = rewrite(outcome, before + execution.state.shards, output,
                   ShardRoller(fmt, output, limits, Counter(execution.numbers)),
                   limits if config.run.compact else None, [name for name, _ in config.splits])
    # shards of a dataset written before indexes existed get one
    return replace(done, shards=tuple(shard if shard.index is not None
                                      else write_index(fmt, output, shard)
                                      for shard in done.shards))


def _together(job: Job, done: Rewritten, placement: nearsplit.Placement, near: NearHashes,
              pool: WorkerPool) -> tuple[Rewritten, dict[str, str], dict[str, str], list[str]]:
    """``splits.near_duplicates: together``: the version's shards with each sample that joins
    its near-duplicates' split moved there, the new split of each and the split before of
    the kept ones among them (by key), and the note its history entry gets."""
    config = job.config
    with PreviousJpegs(shard_format(config.output.format), job.output, done.shards) as jpegs:
        placed = nearsplit.settle(placement, near, jpegs, pool, config.run.quiet,
                                  move=not config.split_folder)
    resplit = ["resplit: splits.near_duplicates together"] if placement.resplit else []
    if not placed.moves:
        return done, {}, {}, resplit
    names = list(placement.number)  # the config's splits first: a sample goes to one only
    seen = near.seen
    split_of = {seen.keys[at]: names[split] for at, split in placed.moves.items()
                if split < len(config.splits)}
    moved_from = {seen.keys[at]: names[placement.split[at]] for at in placed.moves
                  if at < placement.kept_lines and seen.keys[at] in split_of}
    done = _relocate(job, done, split_of,
                     {seen.keys[at]: seen.shard_of(at) for at in placed.moves})
    moved = placed.moved_originals
    return done, split_of, moved_from, resplit + ([
        f"{plural(moved, 'original')} put in the split of their near-duplicates"]
        if moved else [])


def _relocate(job: Job, done: Rewritten, split_of: Mapping[str, str],
              shard_of: Mapping[str, str]) -> Rewritten:
    """``done`` with the samples of ``split_of`` (key -> split) moved there from their shards
    (``shard_of``), in new shards of the output's format and limits."""
    config = job.config
    return nearsplit.relocate(
        done, split_of, shard_of, job.output, shard_format(config.output.format),
        ShardLimits(config.output.shard_bytes, config.output.shard_samples),
        [name for name, _ in config.splits])


def _source_entries(table: SourceTable, notes: Prepared, config: Config,
                    objects: bool = False) -> Iterator[tuple]:
    """What the sources fingerprint hashes per file: path, size, mtime; with annotations also
    the annotation digest and the label (a labels file can change one without the other).
    ``objects`` (an ``s3://`` source): also the ETag (``scan.object_tag``), so an object
    rewritten at its size within the second of its ``LastModified`` is a change too."""
    columns = [table.relpaths, table.sizes, table.mtimes] + ([table.inodes] if objects else [])
    if notes.digests is not None or config.source.labels == "file":
        columns += [notes.digests if notes.digests is not None
                    else np.zeros(len(table), np.uint64), table.labels]
    return zip(*columns, strict=True)


def up_to_date(output: Path, previous: Manifest, job: Job) -> bool:
    """Nothing to do: same sources, same settings (classes appended to are not: a reject may
    be packed now), this schema, these annotation rules and near-duplicate hashes, and every
    listed file there at its size."""
    hashed = nearhash.CURRENT if job.config.output.near_hashes else None  # or made now
    together = "together" if job.config.split_near_duplicates == "together" else None
    if not previous.current or previous.sources_fingerprint != job.sources_fingerprint \
            or previous.near_duplicates != together \
            or previous.fingerprint != job.config.fingerprint() \
            or (hashed is not None and previous.near_hash != hashed) \
            or (previous.rules is not None and previous.rules != ANNOTATION_RULES):
        return False
    damaged = [shard.name for shard in previous.shards
               if not files_intact(output, shard.files())]
    index = previous.samples_index
    index_ok = sample_index_intact(output, previous)
    if damaged:
        log.warning("%d listed shards are missing or damaged (%s): their samples are packed "
                    "again", len(damaged), ", ".join(damaged[:3]))
    if not index_ok:
        raise OutputStateError(
            f"{output}: the sample index {index.name} is missing or damaged, so the samples "
            "cannot be told apart; pass --overwrite to rebuild the dataset"
        )
    return not damaged


def execute(delta: Delta, job: Job, journal: Journal, state: JournalState,
            pool: WorkerPool) -> Execution:
    """Process the Delta's work, in plan order, into shards; checkpoint each published shard
    in ``journal`` (``state``: where it stands, advanced as shards are published).

    An image may give several samples (its tiles); a shard can close between two of them,
    so a checkpoint records how many of the next image's samples are already published.
    Candidates are decoded only if their content differs; the others come back
    ``Unchanged`` and are counted and recorded as such.
    """
    config, source = job.config, job.source
    writer = _Writer(delta, job, journal, state)
    work = delta.items()
    start, published = state.next_index, state.next_part
    remaining = work[start:]
    # Read-ahead warms this machine's page cache: it helps local workers only.
    local = config.run.backend == "local" and not is_url(source)
    window = 4 * config.run.worker_count if config.run.readahead and local else 0
    readahead = ReadAhead(str(source), remaining, window, config.source.follow_symlinks,
                          original_cap(config.image))
    backends = dict(BACKENDS) if is_url(source) else {}  # the workers' way to a store's URL
    results = pool.map_ordered(process_item, remaining, str(source), config, writer.vocabulary,
                               backends, batch_size=_batch_size(work))
    progress = Progress(len(work), start, "img", "pack", config.run.quiet)
    previous = delta.previous
    jpegs = PreviousJpegs(writer.roller.fmt, job.output, previous.shards if previous else ())
    try:
        for index, (item, result) in enumerate(zip(remaining, results, strict=True), start):
            if isinstance(result, Rederived) or isinstance(item, RederiveItem):
                result = writer.copied_or_decoded(result, jpegs, item)
            if isinstance(result, Sample):
                result = (result,)
            if isinstance(result, tuple):
                writer.samples(index, item, result, published if index == start else 0)
            elif isinstance(result, Reject):
                writer.reject(item, result)
                progress.note(rejected=len(state.rejects) + len(writer.pending_rejects))
            else:
                writer.unchanged(result)
            progress.update(1)
            readahead.consumed(index + 1 - start)
        writer.checkpoint(len(work), writer.roller.close())
    finally:
        jpegs.close()
        readahead.close()
        progress.close()
        writer.roller.discard()
        journal.close()
    return writer.execution(start)


class _Writer:
    """``execute``'s side in the driver: results in plan order into shards, sample lines
    into the journal's spool, rejects and unchanged sources into its next checkpoint."""

    def __init__(self, delta: Delta, job: Job, journal: Journal, state: JournalState):
        config = job.config
        self.job, self.journal, self.state = job, journal, state
        self.numbers = Counter(delta.next_numbers) + Counter(shard.split
                                                             for shard in state.shards)
        self.roller = ShardRoller(shard_format(config.output.format), job.output,
                                  ShardLimits(config.output.shard_bytes,
                                              config.output.shard_samples),
                                  self.numbers)
        self.object_classes = ObjectClasses(job.notes.known + tuple(state.object_classes)) \
            if config.source.annotations.has_objects else None
        self.classes = job.scanned.classes
        self.vocabulary = Vocabulary(self.classes, tuple(self.object_classes.names)
                                     if self.object_classes is not None else ())
        self.annotation_digest = _annotation_digests(job)
        self.pending_rejects: list[RejectEntry] = []
        self.pending_unchanged: dict[str, list] = {}
        self.unchanged_count = self.copied = self.copy_decoded = 0

    def copied_or_decoded(self, result: Any, jpegs: PreviousJpegs, item: PlanItem) -> Any:
        """A re-annotated source: its samples with the previous JPEG bytes, or decoded (its
        bytes could not be copied); counted either way."""
        if not isinstance(result, Rederived):
            self.copy_decoded += 1
            return result
        result = copy_jpegs(result, jpegs, item, str(self.job.source), self.job.config,
                            self.vocabulary)
        if isinstance(result, Decoded):
            self.copy_decoded += 1
            return result.decoded
        self.copied += 1
        return result

    def samples(self, index: int, item: PlanItem, samples: tuple[Sample, ...],
                published: int) -> None:
        """The samples of plan item ``index``, less the first ``published`` (in a shard
        published before the run was interrupted)."""
        object_classes = self.object_classes
        for part, sample in enumerate(samples):
            if part < published:
                continue
            if object_classes is not None and sample.objects is not None:
                sample = replace(sample, objects=object_classes.resolve(sample.objects))
            record = self.roller.fmt.encode(sample, self.classes, object_classes)
            shard, closed = self.roller.add(item.split, record)
            if closed is not None:
                self.checkpoint(index, closed, part)
            line = _sample_record(sample, shard, item.group)
            if object_classes is not None and sample.objects is not None:
                line |= object_counts(sample.objects, object_classes)
                line |= cut_fields(sample.objects, object_classes, sample.height, sample.width)
            self.journal.add_sample(line, part == 0)

    def reject(self, item: PlanItem, result: Reject) -> None:
        self.pending_rejects.append(RejectEntry(
            result.relpath, result.reason, result.detail, item.source.size,
            item.source.mtime_ns, self.annotation_digest(item.source.relpath)))

    def unchanged(self, result: Unchanged) -> None:
        self.pending_unchanged[result.relpath] = [result.source_digest, result.source_size,
                                                  result.source_mtime_ns]
        self.unchanged_count += 1

    def checkpoint(self, next_index: int, shard: ShardEntry | None, part: int = 0) -> None:
        if shard is not None or self.pending_rejects or self.pending_unchanged:
            names = list(self.object_classes.names) if self.object_classes else None
            self.journal.checkpoint(self.state, next_index, shard, self.pending_rejects,
                                    self.pending_unchanged, part, names)
        self.pending_rejects.clear()
        self.pending_unchanged.clear()

    def execution(self, start: int) -> Execution:
        names = tuple(self.object_classes.names) if self.object_classes is not None else None
        return Execution(self.state, start, self.unchanged_count,
                         MappingProxyType(dict(self.numbers)), names, self.copied,
                         self.copy_decoded)


def with_copies(manifest: Manifest, execution: Execution) -> Manifest:
    """The manifest with this run's re-annotated sources whose JPEG bytes were copied counted
    apart from those decoded (``run.jpeg_copied``; ``run.decoded`` counts decodes only).  The
    history is left as it is: a resumed run copies only what is left, and its version must
    equal an uninterrupted run's (docs/design.md, invariant 3)."""
    if not execution.copied and not execution.copy_decoded:
        return manifest
    run = dict(manifest.run, decoded=manifest.run.get("decoded", 0) - execution.copied,
               jpeg_copied=execution.copied)
    return replace(manifest, run=run)


def _batch_size(work) -> int:
    """Images per worker task: ~1 MB of originals (one 20 MB original alone; 64 thumbnails),
    so dispatch costs stay small next to decoding, and results waiting stay few."""
    if isinstance(work, Plan):
        sizes = work.table.sizes[work.order] if len(work) else work.table.sizes[:0]
        mean = float(sizes.mean()) if len(sizes) else 1.0
    elif isinstance(work, WorkItems):
        mean = work.mean_size()
    else:
        mean = sum(item.source.size for item in work) / max(1, len(work))
    return max(1, min(64, int(TASK_BYTES // max(mean, 1.0))))


def process_item(item: PlanItem, root: str, config: Config, vocabulary: Vocabulary,
                 backends: Mapping[str, Callable] = BACKENDS
                 ) -> Sample | tuple[Sample, ...] | Reject | Unchanged:
    """The per-image work, as the worker pool runs it (``root``: a folder, or a store's URL
    that the worker opens with its own client, by the driver's ``backends``: no image bytes
    pass the driver)."""
    use_storage(config.storage.options(), backends)  # a bucket's originals: our client
    if isinstance(item, RederiveItem):
        from .rederive import rederive

        return rederive(item, root, config, vocabulary)
    if config.source.annotations.has_objects or config.image.tiles.enabled:
        from .annotated import process_annotated

        return process_annotated(item, root, config, vocabulary)
    from .imaging import process

    return process(item, root, config.image, config.source.follow_symlinks,
                   config.run.change_detection)


def _sample_record(sample: Sample, shard: str, group: str | None) -> dict[str, Any]:
    record = {
        "key": sample.key,
        "path": sample.relpath,
        "label": sample.label,
        "split": sample.split,
        "shard": shard,
        "width": sample.width,
        "height": sample.height,
        "jpeg_bytes": len(sample.jpeg),
        "source_size": sample.source_size,
        "source_mtime_ns": sample.source_mtime_ns,
        "source_digest": sample.source_digest,
    }
    if group is not None:
        record["group"] = group
    if sample.annotation_digest is not None:
        record["annotation_digest"] = sample.annotation_digest
    return record


def _annotation_digests(job: Job) -> Callable[[str], str | None]:
    """relpath -> the image's annotation digest as samples record it (None without
    annotations): kept with a reject, so that it is judged again once its annotations
    change (a fixed label file changes no image)."""
    digests, table = job.notes.digests, job.plan.table

    def digest_of(relpath: str) -> str | None:
        at = table.index_of(relpath) if digests is not None else None
        return None if at is None else f"{int(digests[at]):016x}"

    return digest_of


def _flat_folder_hint(scanned: ScanResult, config: Config) -> str:
    if config.source.labels == "folders" and scanned.excluded.get("not in a class folder"):
        return ("; the images are not in class folders: pass --labels none (source.labels: "
                "none) to pack them without labels")
    return ""
