"""What a version changed, recorded as it is committed: ``changes-vN.jsonl`` (docs/format.md).

Made from what the commit streams anyway, never from a second read of an index: the previous
version's sample records as ``kept_samples`` reads them (each one, and whether it leaves the
dataset), then this run's sample records from the journal's spool (in plan order, the tiles
of one original one after another).  A source of this run whose previous samples left is
changed (its content), relabelled, or re-annotated (the same content, other objects), or none
of these (repaired, or newer rules that found the same objects); one without is added; a
source whose samples left and that made none is removed.  Rejects new and fixed come from the
two manifests.  The same two streams give the version's totals (``settle``: originals,
samples and bytes in, as a fresh pack counts them) and its history counts in both units.

Memory: the leaving samples are held by path until this run's samples are judged (as many as
the Delta's leaving keys, which it holds already), the change lines are spooled to an
anonymous file in the state folder, and the totals are a count per split and class.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..atomic import HashingFile
from ..dataset.changes import (
    CHANGES_FORMAT,
    MOVES_FORMAT,
    SAMPLE_CHANGES,
    ChangeLine,
    ChangesHeader,
    VersionTotals,
    counts_of,
    json_line,
)
from ..dataset.formats.base import class_name
from ..dataset.manifest import (
    ChangesEntry,
    Manifest,
    SampleRecord,
    Totals,
    changes_name,
    iter_sample_index,
)
from ..dataset.statedir import DatasetDir, state_folder
from ..door import chunks

log = logging.getLogger(__name__)


class Tally:
    """Samples per (split, label) and objects per object class id, counted as they stream."""

    def __init__(self, classes: tuple[str, ...], object_classes: tuple[str, ...] | None):
        self.classes, self.object_classes = classes, object_classes
        self.counts: Counter = Counter()
        self.objects: list[int] = [0] * len(object_classes or ())
        # originals and their bytes: an index holds the samples of one original one after
        # another (kept, then packed, each in index order), so a new path is a new original
        self.originals = self.bytes_in = 0
        self._last_path: str | None = None

    def add(self, split: str, label: int, objects: Iterable[int] | None, path: str,
            source_size: int) -> None:
        self.counts[split, label] += 1
        if path != self._last_path:
            self._last_path = path
            self.originals += 1
            self.bytes_in += source_size
        if objects:
            _add_counts(self.objects, objects)

    def totals(self, rejects: int) -> VersionTotals:
        counts: dict[str, dict[str, int]] = {}
        for (split, label), count in sorted(self.counts.items()):
            per_class = counts.setdefault(split, {})
            name = class_name(self.classes, label)
            per_class[name] = per_class.get(name, 0) + count
        objects = _named(self.object_classes, self.objects) or {}
        return VersionTotals(self.classes, self.object_classes, sum(self.counts.values()),
                             counts, objects, rejects)


def _add_counts(tally: list[int], counts: Iterable[int]) -> None:
    """Add the object counts per class id ``counts`` into ``tally`` (grown as needed: past
    the list, a damaged index tells it)."""
    for number, count in enumerate(counts):
        if count:
            if number >= len(tally):
                tally.extend([0] * (number + 1 - len(tally)))
            tally[number] += count


def _named(names: tuple[str, ...] | None, counts: list[int] | None) -> dict[str, int] | None:
    """Object counts per class id as counts per object class name (None: no objects)."""
    if counts is None:
        return None
    names = names or ()
    return {(names[number] if number < len(names) else f"#{number + 1}"): count
            for number, count in enumerate(counts) if count}


def _label(classes: tuple[str, ...], label: int) -> str | None:
    return class_name(classes, label) or None


def _count(samples: int) -> int | None:
    return samples if samples != 1 else None


def totals_found(totals: Totals, tally: Tally) -> dict[str, tuple[int, int]]:
    """Each of ``totals`` (a manifest's) beside what its sample index, tallied in ``tally``,
    gives it: name -> (recorded, counted)."""
    packed = sum(tally.counts.values())
    sources = tally.originals if totals.sources is not None else None
    found = {"samples": (totals.packed, packed), "bytes in": (totals.bytes_in, tally.bytes_in),
             "originals seen": (totals.seen, (packed if sources is None else sources)
                                + totals.rejected + totals.excluded)}
    if sources is not None:
        found["originals packed"] = (totals.sources, sources)
    return found


def wrong_totals(manifest: Manifest, tally: Tally) -> list[str]:
    """``samples 123,456 -> 5``: each total of ``manifest`` its sample index (tallied in
    ``tally``) does not bear out."""
    return [f"{name} {recorded:,} -> {counted:,}"
            for name, (recorded, counted) in totals_found(manifest.totals, tally).items()
            if recorded != counted]


def index_tally(directory: Path, manifest: Manifest) -> Tally:
    """``manifest``'s sample index tallied as a commit tallies it, in one more pass: what a
    pack that changes nothing holds the recorded totals to (the only read of an index here
    that no commit streams)."""
    tally = Tally(manifest.classes, manifest.object_classes)
    for record in iter_sample_index(directory, manifest):
        tally.add(record.split, record.label, record.objects, record.path, record.source_size)
    return tally


class ChangesRecorder:
    """Records version ``manifest.version``'s changes against ``previous`` while its sample
    index is written: ``previous_sample`` is ``kept_samples``'s observer, ``kept`` and
    ``packed`` wrap the two streams of the new index; then ``publish`` writes the file."""

    def __init__(self, output: Path, previous: Manifest | None, manifest: Manifest,
                 moved_from: Mapping[str, str] | None = None):
        self.previous, self.manifest = previous, manifest
        # key -> split before, of the kept samples this version moves to another split;
        # path -> [key, split, split before, label, samples] of their originals
        self.moved_from = moved_from or {}
        self.moved: dict[str, list[Any]] = {}
        self.split_moved = False  # a line names the split it left: the format that reads it
        self.before = Tally(previous.classes, previous.object_classes) \
            if previous is not None else None
        self.after = Tally(manifest.classes, manifest.object_classes)
        # path -> [key, split, label, source digest, annotation digest, samples, objects]
        self.leaving: dict[str, list[Any]] = {}
        self.counts: Counter = Counter()  # (kind, 0): originals; (kind, 1): samples
        self.spool_folder = DatasetDir(output).state
        state_folder(self.spool_folder)
        self.spool = tempfile.TemporaryFile(dir=self.spool_folder)

    def previous_sample(self, record: SampleRecord, leaves: bool) -> None:
        """One sample of the previous version, and whether it leaves this one."""
        self.before.add(record.split, record.label, record.objects, record.path,
                        record.source_size)
        if leaves:
            known = self.leaving.get(record.path)
            if known is None:
                known = self.leaving[record.path] = [
                    record.key, record.split, record.label, record.source_digest,
                    record.annotation_digest, 0, None if record.objects is None else []]
            known[5] += 1
            if record.objects is not None:
                _add_counts(known[6], record.objects)

    def kept(self, records: Iterable[SampleRecord]) -> Iterator[SampleRecord]:
        """The previous samples that stay, counted; those moved to another split noted."""
        for record in records:
            self.after.add(record.split, record.label, record.objects, record.path,
                           record.source_size)
            if record.key in self.moved_from:
                known = self.moved.setdefault(record.path, [
                    record.key, record.split, self.moved_from[record.key], record.label, 0])
                known[4] += 1
            yield record

    def packed(self, records: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """This run's sample records, counted and judged source by source."""
        group: list[Any] | None = None
        for record in records:
            objects = record.get("objects")
            self.after.add(record["split"], record["label"], objects, record["path"],
                           record["source_size"])
            if group is None or group[0] != record["path"]:
                if group is not None:
                    self._judge(*group)
                group = [record["path"], record["key"], record["split"], record["label"],
                         record.get("source_digest", ""), record.get("annotation_digest"), 0,
                         None if objects is None else []]
            group[6] += 1
            if objects is not None:
                _add_counts(group[7], objects)
            yield record
        if group is not None:
            self._judge(*group)

    def _judge(self, path: str, key: str, split: str, label: int, digest: str,
               annotation: str | None, samples: int, objects: list[int] | None) -> None:
        classes = self.manifest.classes
        before = self.leaving.pop(path, None)
        line = ChangeLine("added", path, key, split, _label(classes, label),
                          samples=_count(samples))
        if before is not None:
            _, old_split, old_label, old_digest, old_annotation, old_samples, old_objects = \
                before
            moved = {"split_before": old_split} if old_split != split else {}
            self.split_moved = self.split_moved or bool(moved)
            was = _named(self.previous.object_classes, old_objects)
            now = _named(self.manifest.object_classes, objects)
            shown = {"objects_before": was, "objects_after": now} \
                if was is not None or now is not None else {}
            if old_label != label:
                line = ChangeLine("relabelled", path, key, split, _label(classes, label),
                                  class_name(self.previous.classes, old_label),
                                  _count(samples), **shown, **moved)
            elif old_digest != digest:
                line = ChangeLine("changed", path, key, split, _label(classes, label),
                                  samples=_count(samples), **shown, **moved)
            elif (old_annotation, old_samples, was) != (annotation, samples, now):
                line = ChangeLine("reannotated", path, key, split, _label(classes, label),
                                  samples=_count(samples), **shown, **moved)
            elif moved:  # the same content and objects, packed again in another split
                line = ChangeLine("moved", path, key, split, _label(classes, label),
                                  samples=_count(samples), **moved)
            else:  # the same content and objects packed again: repaired, or new rules
                return
        self.counts[line.change, 0] += 1
        self.counts[line.change, 1] += samples
        with self._named():
            self.spool.write(json_line(line))

    @contextlib.contextmanager
    def _named(self) -> Iterator[None]:
        """An error of the anonymous spool (a full disk) names the folder it lives in, so the
        one line the command prints says where space ran out."""
        try:
            yield
        except OSError as exc:
            if exc.filename is not None:
                raise
            raise OSError(exc.errno, exc.strerror, str(self.spool_folder)) from None

    def lines(self) -> Iterator[bytes]:
        """Every change line: this run's sources in plan order, then the kept sources moved
        to another split and the sources removed (both in the previous index's order), the
        new rejects and the fixed ones."""
        with self._named():
            self.spool.flush()
            yield from chunks(self.spool.fileno(), self.spool.tell())
        classes = self.manifest.classes
        for path, (key, split, before, label, samples) in self.moved.items():
            yield json_line(ChangeLine("moved", path, key, split, _label(classes, label),
                                       samples=_count(samples), split_before=before))
        classes = self.previous.classes if self.previous is not None else ()
        for path, (key, split, label, _, _, samples, _) in self.leaving.items():
            yield json_line(ChangeLine("removed", path, key, split, _label(classes, label),
                                       samples=_count(samples)))
        before = {reject.path: reject for reject in
                  (self.previous.rejects if self.previous is not None else ())}
        after = {reject.path: reject for reject in self.manifest.rejects}
        for path, reject in after.items():
            if path not in before:
                yield json_line(ChangeLine("rejected", path, reason=reject.reason,
                                           detail=reject.detail))
        for path, reject in before.items():
            if path not in after:
                yield json_line(ChangeLine("fixed", path, reason=reject.reason))

    def settle(self, manifest: Manifest) -> Manifest:
        """``manifest`` once its sample index is written: its totals of originals, samples
        and bytes in as the index holds them (what a fresh pack of the same tree says), its
        history entry counting each change in originals and in samples (as its changes file
        does), and a note when the previous version's recorded totals were not its index's."""
        after, totals = self.after, manifest.totals
        sources = after.originals if totals.sources is not None else None
        packed = sum(after.counts.values())
        totals = replace(totals, sources=sources, bytes_in=after.bytes_in, packed=packed,
                         seen=(packed if sources is None else sources) + totals.rejected
                         + totals.excluded)
        manifest = replace(manifest, totals=totals)
        if not manifest.history or manifest.history[-1].version != manifest.version:
            return manifest
        counts = self.counts
        for samples in self.leaving.values():
            counts["removed", 0] += 1
            counts["removed", 1] += samples[5]
        for moved in self.moved.values():
            counts["moved", 0] += 1
            counts["moved", 1] += moved[4]
        originals, samples = (counts_of({kind: counts[kind, unit] for kind in SAMPLE_CHANGES})
                              for unit in (0, 1))
        entry = manifest.history[-1]
        notes = [entry.note] if entry.note else []
        if self.previous is not None:
            notes += self._corrected(self.previous)
        entry = replace(entry, originals=originals, samples=samples,
                        added=originals.added, removed=originals.removed,
                        changed=originals.changed + originals.relabelled
                        + originals.reannotated, note="; ".join(notes) or None)
        return replace(manifest, history=(*manifest.history[:-1], entry))

    def _corrected(self, previous: Manifest) -> list[str]:
        """A note for each total of ``previous`` its sample index does not bear out (an
        earlier release added the previous bytes in and never took the removed out)."""
        wrong = wrong_totals(previous, self.before)
        if not wrong:
            return []
        log.warning("the totals version %d recorded are not its sample index's: %s; "
                    "counted again", previous.version, ", ".join(wrong))
        return [f"totals of v{previous.version} corrected from its sample index: "
                + ", ".join(wrong)]

    def header(self) -> ChangesHeader:
        previous, manifest = self.previous, self.manifest
        return ChangesHeader(
            MOVES_FORMAT if self.moved or self.split_moved else CHANGES_FORMAT,
            manifest.version, self.after.totals(len(manifest.rejects)),
            self.before.totals(len(previous.rejects)) if self.before is not None else None)

    def publish(self, output: Path, keep: int) -> tuple[ChangesEntry, ...]:
        """Write the changes file (a new name, published atomically, before the manifest
        that names it); returns the changes files the new manifest names: the last ``keep``
        versions'.  With ``keep`` 0 none is written."""
        if keep <= 0:
            return ()
        entry = write_changes(output, self.header(), self.lines())
        kept = tuple(known for known in (self.previous.changes if self.previous else ())
                     if known.version > entry.version - keep and known.version < entry.version)
        return (*kept, entry)

    def close(self) -> None:
        """Let the spool go (an anonymous file: nothing is left behind).  Closing flushes what
        is buffered; when that fails (a full disk) the lines are not wanted any more, and the
        error that stopped the pack, naming its file, is the one to report."""
        with contextlib.suppress(OSError):
            self.spool.close()


def write_changes(output: Path, header: ChangesHeader, lines: Iterable[bytes]) -> ChangesEntry:
    """Publish ``changes-vN.jsonl`` for ``header.version``: the header, then ``lines`` (JSON
    lines of ``ChangeLine``s, as bytes); returns the manifest's entry for it."""
    name = changes_name(header.version)
    written = HashingFile(output / name)
    try:
        written.write(json_line(header))
        for data in lines:
            written.write(data)
        sha256 = written.publish()
    except BaseException:
        written.discard()
        raise
    return ChangesEntry(header.version, name, written.bytes_written, sha256)

