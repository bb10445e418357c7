"""What a version changed, recorded as it is committed: ``changes-vN.jsonl`` (docs/format.md).

Made from what the commit streams anyway, never from a second read of an index: the previous
version's sample records as ``kept_samples`` reads them (each one, and whether it leaves the
dataset), then this run's sample records from the journal's spool (in plan order, the tiles
of one original one after another).  A source of this run whose previous samples left is
changed or relabelled (or neither: repaired, re-annotated under new rules); one without is
added; a source whose samples left and that made none is removed.  Rejects new and fixed come
from the two manifests.

Memory: the leaving samples are held by path until this run's samples are judged (as many as
the Delta's leaving keys, which it holds already), the change lines are spooled to an
anonymous file in the state folder, and the totals are a count per split and class.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..atomic import HashingFile
from ..dataset.changes import CHANGES_FORMAT, ChangeLine, ChangesHeader, VersionTotals, json_line
from ..dataset.formats.base import class_name
from ..dataset.manifest import STATE_DIR, ChangesEntry, Manifest, SampleRecord, changes_name
from ..dataset.statedir import state_folder

COPY_CHUNK = 1 << 20


class Tally:
    """Samples per (split, label) and objects per object class id, counted as they stream."""

    def __init__(self, classes: tuple[str, ...], object_classes: tuple[str, ...] | None):
        self.classes, self.object_classes = classes, object_classes
        self.counts: Counter = Counter()
        self.objects: list[int] = [0] * len(object_classes or ())

    def add(self, split: str, label: int, objects: Iterable[int] | None) -> None:
        self.counts[split, label] += 1
        if objects:
            tally = self.objects
            for number, count in enumerate(objects):
                if count:
                    if number >= len(tally):  # past the list: a damaged index tells it
                        tally.extend([0] * (number + 1 - len(tally)))
                    tally[number] += count

    def totals(self, rejects: int) -> VersionTotals:
        counts: dict[str, dict[str, int]] = {}
        for (split, label), count in sorted(self.counts.items()):
            per_class = counts.setdefault(split, {})
            name = class_name(self.classes, label)
            per_class[name] = per_class.get(name, 0) + count
        names = self.object_classes or ()
        objects = {(names[number] if number < len(names) else f"#{number + 1}"): count
                   for number, count in enumerate(self.objects) if count}
        return VersionTotals(self.classes, self.object_classes, sum(self.counts.values()),
                             counts, objects, rejects)


def _label(classes: tuple[str, ...], label: int) -> str | None:
    return class_name(classes, label) or None


def _count(samples: int) -> int | None:
    return samples if samples != 1 else None


class ChangesRecorder:
    """Records version ``manifest.version``'s changes against ``previous`` while its sample
    index is written: ``previous_sample`` is ``kept_samples``'s observer, ``kept`` and
    ``packed`` wrap the two streams of the new index; then ``publish`` writes the file."""

    def __init__(self, output: Path, previous: Manifest | None, manifest: Manifest):
        self.previous, self.manifest = previous, manifest
        self.before = Tally(previous.classes, previous.object_classes) \
            if previous is not None else None
        self.after = Tally(manifest.classes, manifest.object_classes)
        # path -> [key, split, label, source digest, annotation digest, samples]
        self.leaving: dict[str, list[Any]] = {}
        self.spool_folder = output / STATE_DIR
        state_folder(self.spool_folder)
        self.spool = tempfile.TemporaryFile(dir=self.spool_folder)

    def previous_sample(self, record: SampleRecord, leaves: bool) -> None:
        """One sample of the previous version, and whether it leaves this one."""
        self.before.add(record.split, record.label, record.objects)
        if leaves:
            known = self.leaving.get(record.path)
            if known is None:
                self.leaving[record.path] = [record.key, record.split, record.label,
                                             record.source_digest, record.annotation_digest, 1]
            else:
                known[5] += 1

    def kept(self, records: Iterable[SampleRecord]) -> Iterator[SampleRecord]:
        """The previous samples that stay, counted."""
        for record in records:
            self.after.add(record.split, record.label, record.objects)
            yield record

    def packed(self, records: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """This run's sample records, counted and judged source by source."""
        group: list[Any] | None = None
        for record in records:
            self.after.add(record["split"], record["label"], record.get("objects"))
            if group is not None and group[0] == record["path"]:
                group[-1] += 1
            else:
                if group is not None:
                    self._judge(*group)
                group = [record["path"], record["key"], record["split"], record["label"],
                         record.get("source_digest", ""), record.get("annotation_digest"), 1]
            yield record
        if group is not None:
            self._judge(*group)

    def _judge(self, path: str, key: str, split: str, label: int, digest: str,
               annotation: str | None, samples: int) -> None:
        classes = self.manifest.classes
        before = self.leaving.pop(path, None)
        line = ChangeLine("added", path, key, split, _label(classes, label),
                          samples=_count(samples))
        if before is not None:
            _, _, old_label, old_digest, old_annotation, old_samples = before
            if old_label != label:
                line = ChangeLine("relabelled", path, key, split, _label(classes, label),
                                  class_name(self.previous.classes, old_label), _count(samples))
            elif (old_digest, old_annotation, old_samples) != (digest, annotation, samples):
                line = ChangeLine("changed", path, key, split, _label(classes, label),
                                  samples=_count(samples))
            else:  # the same content packed again: repaired, or re-annotated by new rules
                return
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
        """Every change line: this run's sources in plan order, then the sources removed (in
        the previous index's order), the new rejects and the fixed ones."""
        with self._named():
            self.spool.seek(0)
        while True:
            with self._named():
                chunk = self.spool.read(COPY_CHUNK)
            if not chunk:
                break
            yield chunk
        classes = self.previous.classes if self.previous is not None else ()
        for path, (key, split, label, _, _, samples) in self.leaving.items():
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

    def header(self) -> ChangesHeader:
        previous, manifest = self.previous, self.manifest
        return ChangesHeader(
            CHANGES_FORMAT, manifest.version, self.after.totals(len(manifest.rejects)),
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

