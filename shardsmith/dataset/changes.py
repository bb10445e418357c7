"""The changes file of a dataset version: ``changes-vN.jsonl``, what version N changed.

Written by ``pack`` beside the manifest, before the manifest that names it (docs/design.md,
invariant 8), and read by ``shardsmith diff``.  JSON Lines, ASCII (docs/format.md):

* line 1, the header: the format number, the version, and the totals of the version before
  it (``before``; absent for version 1) and of this one (``after``): classes, object classes,
  samples per split and class, objects per object class, rejects;
* then one line per change, by source path: a sample ``added``, ``removed``, ``changed``
  (its content), ``relabelled`` (``was``: its class before) or ``reannotated`` (the same
  pixels, other objects: edited annotations, a class appended, new annotation rules), with its
  key, split and class (an original cut into tiles: its first key and ``samples``, how many);
  a changed, relabelled or re-annotated source of a dataset with objects has its objects per
  object class before and after (``objects_before``, ``objects_after``); a reject
  ``rejected`` (new, with reason and detail) or ``fixed`` (a reject no longer).

Format 2 added ``reannotated`` and the objects before and after; a format 1 file is read as
it was written (a re-annotation there is a ``changed`` line, without objects).

A changes file is untrusted input like the manifest: every line is typed and checked here,
read within the size the manifest records, and hashed against its sha256.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from ..annotations.limits import MAX_OBJECT_CLASSES
from ..door import Refused, chunks, open_file
from ..errors import ManifestError
from ..schema import LINE_CAP, Count, line_reader, to_json
from ..storage import Location, is_url
from ..text import shown
from .manifest import (
    SAMPLE_KEY,
    SPLIT_NAME,
    ChangeCounts,
    ChangesEntry,
    Manifest,
    Version,
    VersionEntry,
)

log = logging.getLogger(__name__)

# 1: before ``reannotated`` and the objects before and after; 2: before ``moved`` and
# ``split_before``, which only a file holding one is written in (older releases read it)
CHANGES_FORMAT, MOVES_FORMAT = 2, 3
READ_FORMATS = (1, 2, 3)
SAMPLE_CHANGES = ("added", "removed", "changed", "relabelled", "reannotated", "moved")
REJECT_CHANGES = ("rejected", "fixed")
ALL_CHANGES = frozenset(SAMPLE_CHANGES + REJECT_CHANGES)
# Bytes read and hashed at once while streaming the lines: a chunk is held ~3 times while it
# is split (4 MiB chunks made 18 MB of a 9 MB file of rejects; 1 MiB, 5.5 MB).
LINES_CHUNK = 1 << 20
# The header holds the class lists and a count per split and class: a few KiB for 100
# classes, 16 MiB for ~200,000 of them, far past any dataset of ours.
HEADER_CAP = 16 << 20
# An object class the pack had no name for is counted as ``#N`` (its id, 1-based).
UNNAMED_OBJECT_CLASS = re.compile(r"#[1-9][0-9]{0,2}")


@dataclass(frozen=True)
class VersionTotals:
    """What a version holds: its classes and object classes, its samples (``counts``: per
    split, per class name; "" for samples without a class), objects per object class, and
    how many rejects."""

    classes: tuple[str, ...] = ()
    object_classes: tuple[str, ...] | None = None
    samples: Count = 0
    counts: dict[str, dict[str, Count]] = field(default_factory=dict)
    objects: dict[str, Count] = field(default_factory=dict)
    rejects: Count = 0

    def check(self, where: str) -> None:
        for split in self.counts:
            if SPLIT_NAME.fullmatch(split) is None:
                raise ManifestError(f"{where}.counts: {shown(split)} is not a split name")


@dataclass(frozen=True)
class ChangesHeader:
    """The first line of a changes file."""

    format: int
    version: Version
    after: VersionTotals
    before: VersionTotals | None = None

    def check(self, where: str) -> None:
        if self.format not in READ_FORMATS:
            raise ManifestError(f"{where}.format: {self.format} is not a changes format this "
                                f"shardsmith reads ({', '.join(map(str, READ_FORMATS))})")
        if (self.before is None) != (self.version == 1):
            raise ManifestError(f"{where}.before: version {self.version} "
                                + ("has no version before it" if self.version == 1
                                   else "needs the totals of the version before it"))


@dataclass(frozen=True, slots=True)
class ChangeLine:
    """One change: ``change`` is one of ``SAMPLE_CHANGES`` or ``REJECT_CHANGES``; ``label``
    the class name (absent: none), ``was`` the class before a relabelling ("" for none);
    ``samples`` how many samples the source made (tiles; absent: one); ``objects_before``
    and ``objects_after`` its objects per object class (a changed, relabelled or
    re-annotated source of a dataset with objects); ``split_before`` the split it left (a
    ``moved`` one, the same pixels in another split; or a changed one that moved too);
    ``reason`` and ``detail`` those of a reject.  Fields that do not apply are left out of
    the line."""

    change: str
    path: str
    key: str | None = None
    split: str | None = None
    label: str | None = None
    was: str | None = None
    samples: Count | None = None
    reason: str | None = None
    detail: str | None = None
    objects_before: dict[str, Count] | None = None
    objects_after: dict[str, Count] | None = None
    split_before: str | None = None

    def check(self, where: str) -> None:
        if self.change in SAMPLE_CHANGES:
            if self.key is None or SAMPLE_KEY.fullmatch(self.key) is None:
                raise ManifestError(f"{where}.key: {shown(str(self.key))} is not a sample key")
            if self.split is None or SPLIT_NAME.fullmatch(self.split) is None:
                raise ManifestError(f"{where}.split: {shown(str(self.split))} is not a split "
                                    "name")
            if (self.was is None) != (self.change != "relabelled"):
                raise ManifestError(f"{where}.was: a relabelled sample has one, no other")
            if not _split_before_ok(self.change, self.split, self.split_before):
                raise ManifestError(f"{where}.split_before: a moved sample names the other "
                                    "split it was in; an added or removed one, none")
        elif self.change in REJECT_CHANGES:
            if self.reason is None:
                raise ManifestError(f"{where}.reason: a reject's reason is missing")
        else:
            raise ManifestError(f"{where}.change: {shown(self.change)} is not one of "
                                f"{', '.join(SAMPLE_CHANGES + REJECT_CHANGES)}")


def _split_before_ok(change: str, split: str | None, before: str | None) -> bool:
    """A moved sample names the other split it was in; an added or removed one, none."""
    if before is None:
        return change != "moved"
    return change not in ("added", "removed") and before != split \
        and SPLIT_NAME.fullmatch(before) is not None


def json_line(record: Any) -> bytes:
    """A record as one JSON line (ASCII: odd bytes in names are escaped, not lost)."""
    return (json.dumps(to_json(record), sort_keys=True, separators=(",", ":")) + "\n"
            ).encode("ascii")


class BriefLine(msgspec.Struct, frozen=True):
    """The fields of a change line that composing versions needs (``ChangesFile.lines``)."""

    change: str
    path: str
    split: str | None = None
    label: str | None = None
    was: str | None = None
    samples: Count | None = None
    reason: str | None = None
    split_before: str | None = None


_brief_decoder = msgspec.json.Decoder(BriefLine, strict=True)


def _brief_ok(line: BriefLine) -> bool:
    """What ``ChangeLine.check`` says of the fields a ``BriefLine`` has."""
    if line.change in REJECT_CHANGES:
        return line.reason is not None
    return line.change in ALL_CHANGES and (line.was is None) != (line.change == "relabelled") \
        and line.split is not None \
        and _split_before_ok(line.change, line.split, line.split_before)


def count_changes(changes: ChangesFile) -> tuple[ChangeCounts, ChangeCounts]:
    """The originals and the samples each kind of sample change in ``changes`` counts (its
    lines read to the end, the sha256 checked: ManifestError when damaged)."""
    originals = dict.fromkeys(SAMPLE_CHANGES, 0)
    samples = dict.fromkeys(SAMPLE_CHANGES, 0)
    for _, line in changes.lines(brief=True):
        if line.change in originals:
            originals[line.change] += 1
            samples[line.change] += 1 if line.samples is None else line.samples
    return counts_of(originals), counts_of(samples)


def counts_of(counts: dict[str, int]) -> ChangeCounts:
    """``ChangeCounts`` of a count per kind, ``moved`` left out when none moved."""
    return ChangeCounts(**counts | {"moved": counts.get("moved") or None})


_read_header = line_reader(ChangesHeader)
_read_line = line_reader(ChangeLine)


class ChangesFile:
    """A changes file the manifest names, read through the door within its recorded size:
    ``header`` on opening, then ``lines()`` streams (byte offset, ``ChangeLine``) and checks
    the sha256 after the last one; ``line_at`` reads one line again.  ManifestError when the
    file is missing, of another size, damaged, or not the named version's."""

    def __init__(self, directory: Path, entry: ChangesEntry):
        self.entry, self.path = entry, directory / entry.name
        try:
            self._file = open_file(self.path, entry.bytes)
        except Refused as exc:
            raise ManifestError(f"{self.path}: not the {entry.bytes:,}-byte changes file "
                                f"the manifest names: {exc.detail}") from None
        except FileNotFoundError:
            raise ManifestError(f"{self.path}: missing (the manifest names it)") from None
        except OSError as exc:
            raise ManifestError(f"{self.path}: cannot read: {exc.strerror or exc}") from None
        if self._file.size != entry.bytes:
            self._file.close()
            raise ManifestError(f"{self.path}: {self._file.size:,} bytes, not the "
                                f"{entry.bytes:,} the manifest names: damaged")
        self._handle = os.fdopen(os.dup(self._file.fd), "rb")
        self._digest = hashlib.sha256()
        try:
            self.header = self._read_header()
        except BaseException:
            self.close()
            raise
        totals = (self.header.before, self.header.after)
        self._object_classes = frozenset(name for version in totals if version is not None
                                         for name in version.object_classes or ())

    def _read_header(self) -> ChangesHeader:
        entry = self.entry
        line = self._handle.readline(min(entry.bytes, HEADER_CAP) + 1)
        self._digest.update(line)
        self._offset = len(line)
        if not line.endswith(b"\n"):
            raise self._damaged(1, "no header line")
        header = self._parse(_read_header, line, 1)
        if header.version != entry.version:
            raise self._damaged(1, f"the header is of version {header.version}")
        return header

    def lines(self, brief: bool = False) -> Iterator[tuple[int, Any]]:
        """Every change line with its byte offset, in file order; the sha256 is checked
        after the last (ManifestError), so act on them only once the loop has ended.

        ``brief``: each line as a ``BriefLine`` (its change, path and classes, typed; the
        rest of the line is checked when it is read again with ``line_at``): ~3x faster, for
        a pass over a million lines that keeps a few of them."""
        decoder = _brief_decoder if brief else None
        digest, number, offset, partial = self._digest, 1, self._offset, b""
        for chunk in chunks(self._file, self.entry.bytes, self._offset, LINES_CHUNK):
            digest.update(chunk)
            pieces = (partial + chunk).split(b"\n")
            partial = pieces.pop()
            if len(partial) > LINE_CAP:
                raise self._damaged(number + len(pieces) + 1, "longer than any line of ours")
            for piece in pieces:
                number += 1
                if len(piece) >= LINE_CAP:
                    raise self._damaged(number, "longer than any line of ours")
                record = None
                if decoder is not None:
                    try:
                        record = decoder.decode(piece)
                    except (msgspec.MsgspecError, RecursionError):
                        pass  # the full reader says what is wrong (nesting too, guarded)
                    else:
                        if not _brief_ok(record):
                            record = None
                if record is None:
                    record = self._parse(_read_line, piece + b"\n", number)
                yield offset, record
                offset += len(piece) + 1
        if partial:
            raise self._damaged(number + 1, "not a whole line of ours")
        if digest.hexdigest() != self.entry.sha256:
            raise ManifestError(f"{self.path}: damaged: its sha256 is not the one the "
                                "manifest records (edited or overwritten since it was packed)")

    def line_at(self, offset: int) -> ChangeLine:
        """The change line at byte ``offset`` (one ``lines()`` gave), read again."""
        data = self._file.pread(min(LINE_CAP + 1, self.entry.bytes - offset), offset)
        line = data[: data.find(b"\n") + 1]
        if not line:
            raise self._damaged(0, f"no line at byte {offset:,} (changed while read)")
        return self._parse(_read_line, line, 0)

    def close(self) -> None:
        self._handle.close()
        self._file.close()

    def __enter__(self) -> ChangesFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _parse(self, reader: Any, line: bytes, number: int) -> Any:
        where = f"line {number}" if number else "a line read again"
        try:
            record = reader(line, where)
            if isinstance(record, ChangeLine):
                for name in ("objects_before", "objects_after"):
                    check_object_counts(getattr(record, name), self._object_classes,
                                        f"{where}.{name}")
            return record
        except ManifestError as exc:
            raise ManifestError(f"{self.path}: damaged: {exc}") from None

    def _damaged(self, number: int, why: str) -> ManifestError:
        return ManifestError(f"{self.path}: damaged: line {number}: {why}")


def check_object_counts(counts: dict[str, Count] | None, known: frozenset[str],
                        where: str) -> None:
    """ManifestError unless ``counts`` names object classes of ``known`` (the header's) or
    ``#N``, at most ``MAX_OBJECT_CLASSES`` of them: a forged line naming thousands of
    classes is refused here, not printed whole by ``diff``."""
    if not counts:
        return
    if len(counts) > MAX_OBJECT_CLASSES:
        raise ManifestError(f"{where}: {len(counts):,} object classes, more than a dataset "
                            f"has ({MAX_OBJECT_CLASSES})")
    for name in counts:
        if name not in known and UNNAMED_OBJECT_CLASS.fullmatch(name) is None:
            raise ManifestError(f"{where}: {shown(name)} is not an object class of the "
                                "header")


def history_counts(directory: Location | None, manifest: Manifest
                   ) -> dict[int, tuple[ChangeCounts, ChangeCounts]]:
    """Per version of ``manifest.history``, what it changed in originals and in samples: as
    its entry records them, or for an entry of an earlier release (whose counts mixed the
    two) counted from its changes file where one is kept in ``directory`` (a local folder;
    None or a location in a store: none is read).  A version with neither is left out: show
    its entry as recorded, never reinterpreted."""
    kept = {} if directory is None or is_url(directory) else \
        {entry.version: entry for entry in manifest.changes}
    counts: dict[int, tuple[ChangeCounts, ChangeCounts]] = {}
    for entry in manifest.history:
        if entry.originals is not None and entry.samples is not None:
            counts[entry.version] = (entry.originals, entry.samples)
        elif entry.version in kept:
            try:
                with ChangesFile(Path(directory), kept[entry.version]) as changes:
                    counts[entry.version] = count_changes(changes)
            except ManifestError as exc:
                log.warning("version %d shown as recorded: %s", entry.version, exc)
    return counts


def as_recorded(entry: VersionEntry) -> str:
    """Why an entry is shown with the counts it recorded: their units are not known."""
    return (f"v{entry.version} as recorded: its added, changed and removed are not in one "
            "unit (removed counted samples and rejects) and no changes file is kept")


def change_line(entry: VersionEntry) -> str:
    """What a version changed, each count in its unit: "originals: 6 added, 0 changed, 1
    relabelled, 2 removed, 1 rejected; samples: 24 added, 4 relabelled, 8 removed" (the
    samples part when they are not the originals: tiles); an entry of an earlier release,
    its counts as recorded, said so."""
    if entry.originals is None or entry.samples is None:
        return (f"{entry.added:,} added, {entry.changed:,} changed, {entry.removed:,} removed "
                "(as recorded)")
    originals, samples = entry.originals, entry.samples
    parts = [f"{originals.added:,} added", f"{originals.changed:,} changed"]
    parts += [f"{value:,} {name}" for name, value in (
        ("relabelled", originals.relabelled), ("re-annotated", originals.reannotated)) if value]
    parts.append(f"{originals.removed:,} removed")
    parts += [f"{originals.moved:,} moved to another split"] if originals.moved else []
    parts += [f"{value:,} {name}" for name, value in (
        ("rejected", entry.rejected), ("touched (same content)", entry.touched)) if value]
    line = "originals: " + ", ".join(parts)
    if samples != originals or entry.repaired:
        tiles = [f"{value:,} {name}" for name, value in change_kinds(samples) if value]
        tiles += [f"{entry.repaired:,} repaired"] if entry.repaired else []
        line += "; samples: " + (", ".join(tiles) or "none changed")
    return line


def change_kinds(counts: ChangeCounts) -> list[tuple[str, int]]:
    """(kind as written, count) of ``counts`` in the order every command shows them."""
    return [("added", counts.added), ("changed", counts.changed),
            ("relabelled", counts.relabelled), ("re-annotated", counts.reannotated),
            ("removed", counts.removed), ("moved", counts.moved or 0)]
