"""The journal that makes packing resumable: one checkpoint per published shard.

Per-sample records never wait in memory (a shard of tiny samples holds a hundred thousand):
each is appended to ``samples.jsonl`` in the state directory as soon as it is written to its
shard.  A checkpoint, written after a shard is published, fsyncs that file and records how far
it is valid; a resumed run cuts it back to that point.  The records are streamed into the
sample index when the version is committed.

Both files live in our own state folder and are never followed out of it: they are opened
without following a link or blocking (``statedir``), read within their size, and cut back on
the descriptor that was checked, not by name.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import stat
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..atomic import fsync_directory, naming, write_bytes_atomic
from ..dataset.manifest import (
    FileEntry,
    RejectEntry,
    SampleRecord,
    ShardEntry,
    files_intact,
    sample_line,
    shard_name,
)
from ..dataset.statedir import DatasetDir, bounded_lines, open_state_file, read_state, state_folder
from ..door import MANIFEST_CAP, Refused, open_file, sha256_of
from ..errors import ManifestError
from ..schema import LINE_CAP, MAX_EXACT, decode, parse, to_json

log = logging.getLogger(__name__)

# A checkpoint line per shard, with its rejects and touched sources: of the order of the
# manifest, which holds the same rejects.  The sample spool is read only up to a checkpoint.
JOURNAL_CAP = MANIFEST_CAP
SPOOL_CAP = 1 << 62
# The first line names the format and the run (the digest of its Delta).  Journals of older
# releases begin {"run": {"config": ..., "sources": ..., "base": ...}}, or name an older
# format (2: checkpoints without the spool's sha256): not resumed from.
JOURNAL_FORMAT = 3
SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass
class JournalState:
    """Where a run stands: plan position reached, shards, rejects and unchanged sources."""

    next_index: int = 0
    next_part: int = 0  # samples of the image at next_index already published (its tiles)
    shards: list[ShardEntry] = field(default_factory=list)
    rejects: list[RejectEntry] = field(default_factory=list)
    unchanged: dict[str, list] = field(default_factory=dict)  # relpath: [digest, size, mtime]
    packed: int = 0
    sources: int = 0  # originals packed (more samples than that when tiled)
    bytes_in: int = 0
    samples_end: int = 0  # bytes of the samples file that checkpoints account for
    object_classes: list[str] = field(default_factory=list)  # as the writer had them

    def apply(self, entry: dict[str, Any]) -> None:
        """Advance by one checkpoint; TypeError or KeyError for a line this version did not
        write (a count that is not a count, a part missing), ManifestError for a shard or
        reject that is not one."""
        for name in ("next", "packed", "bytes_in", "samples_end", "part", "sources"):
            value = entry.get(name, 0)
            if not isinstance(value, int) or isinstance(value, bool) \
                    or not 0 <= value <= MAX_EXACT:
                raise TypeError(f"{name}: not a count")
        if not isinstance(entry["rejects"], list) or not isinstance(entry.get("unchanged", {}),
                                                                      dict):
            raise TypeError("rejects or unchanged: not a list or mapping")
        for relpath, facts in entry.get("unchanged", {}).items():
            if not (isinstance(facts, list) and len(facts) == 3 and isinstance(facts[0], str)
                    and all(_is_int(value) for value in facts[1:])):
                raise TypeError(f"unchanged {relpath!r}: not [digest, size, mtime]")
        object_classes = entry.get("object_classes", self.object_classes)
        if not isinstance(object_classes, list) \
                or not all(isinstance(name, str) for name in object_classes) \
                or object_classes[:len(self.object_classes)] != self.object_classes:
            raise TypeError("object_classes: not the list of names so far, appended to")
        shard = None if entry["shard"] is None else parse(ShardEntry, entry["shard"], "journal")
        rejects = [parse(RejectEntry, reject, "journal") for reject in entry["rejects"]]
        self.next_index = entry["next"]
        self.next_part = entry.get("part", 0)
        self.sources += entry.get("sources", entry["packed"])
        self.object_classes = object_classes
        if shard is not None:
            self.shards.append(shard)
        self.rejects += rejects
        self.unchanged.update(entry.get("unchanged", {}))
        self.packed += entry["packed"]
        self.bytes_in += entry["bytes_in"]
        self.samples_end = entry["samples_end"]


# A line of the journal as a mirror gets it: its bytes, the range of the sample spool its
# checkpoint accounts for (start, end), and its shard (None for the first line, or a
# checkpoint of rejects alone).
MirroredLine = tuple[bytes, int, int, "ShardEntry | None"]


class JournalMirror(Protocol):
    """Where a journal's durable lines are copied as they are written (a bucket:
    ``s3journal.BucketJournal``); a local output has none."""

    def begin(self, identity: dict[str, Any], lines: list[MirroredLine]) -> None:
        """The journal as it stands once started (its first line) or resumed from."""

    def checkpoint(self, line: bytes, start: int, end: int, shard: ShardEntry | None) -> None:
        """A checkpoint made durable: its line, the spool's bytes ``start:end`` it accounts
        for, its shard; raises when the mirror failed (the pack stops)."""


class Journal:
    """Append-only record of published shards, so a killed pack resumes where it stopped.

    The first line names the journal's format and identifies the run (the digest of the
    Delta it executes: config, sources, the version it builds on, the work); each further
    line is a checkpoint written after a shard was published: the plan position reached, the
    shard, the rejects and unchanged sources, and the count and end of its sample records.  A
    torn last line is cut off on load, and so are sample records after the last checkpoint.
    ``mirror``: told of each durable line (``JournalMirror``), or None.
    """

    def __init__(self, output: Path, identity: dict[str, Any],
                 mirror: JournalMirror | None = None):
        self.output = output
        self.mirror = mirror
        self.path, self.samples_path = DatasetDir(output).journal, DatasetDir(output).samples
        self.identity = identity
        self._spool = None
        self._pending = (0, 0, 0)  # samples, originals, source bytes since the last checkpoint
        self._spool_hash = hashlib.sha256()  # of the spool so far, as checkpoints record it

    def load(self, work: Sequence[Any], next_numbers: Mapping[str, int],
             extension: str) -> JournalState | None:
        """The state to resume from, or None when there is no journal of this same run.

        ``work``: the plan items of this run (each with ``source`` and ``split``), and
        ``next_numbers`` and ``extension`` how its shards are named.  The journal is our own
        file but read like any dataset file: a checkpoint that does not fit the plan, or a
        spool that does not hold exactly the records the checkpoints count, is not resumed
        from (resuming would lose originals or publish records no shard holds).  It is
        discarded with one warning naming why, and the run packs afresh: that costs time
        only, and a pack left unattended still finishes.
        """
        try:
            handle = read_state(self.path, JOURNAL_CAP)
        except OSError:
            return None
        try:
            found = self._checkpoints(handle, work, next_numbers, extension)
            if found is None:
                return None
            state, checkpoints, valid_bytes, accepted = found
            spool = open_state_file(self.samples_path, create=False)
        except FileNotFoundError:
            return None
        except _Mismatch as exc:
            log.warning("%s: not resumed from (%s); packing afresh", self.path, exc)
            return None
        try:
            if os.fstat(spool).st_size < state.samples_end:
                raise _Mismatch(f"the sample spool holds fewer than the {state.samples_end:,} "
                                "bytes its checkpoints account for")
            spool_hash = self._check_spool(state, checkpoints, work)
            journal = open_state_file(self.path, create=False)
            try:
                with naming(self.path):
                    os.ftruncate(journal, valid_bytes)
            finally:
                os.close(journal)
            with naming(self.samples_path):
                os.ftruncate(spool, state.samples_end)
        except _Mismatch as exc:
            os.close(spool)
            log.warning("%s: not resumed from (%s); packing afresh", self.path, exc)
            return None
        except BaseException:
            os.close(spool)
            raise
        self._open_spool(spool)
        self._spool_hash = spool_hash
        if self.mirror is not None:
            starts = [0] + [stop.samples_end for stop in checkpoints]
            self.mirror.begin(self.identity, [(accepted[0], 0, 0, None)] + [
                (line, start, stop.samples_end, stop.shard)
                for line, start, stop in zip(accepted[1:], starts[:-1], checkpoints, strict=True)])
        return state

    def _checkpoints(self, handle: Any, work: Sequence[Any], next_numbers: Mapping[str, int],
                     extension: str
                     ) -> tuple[JournalState, list[_Checkpoint], int, list[bytes]] | None:
        """The journal's checkpoints up to the first torn line or the first one whose shard is
        not intact (resumed before: it is written again), the bytes they take and the lines
        (the first one too); None for another run's journal; _Mismatch for a line that is not
        a checkpoint of this plan."""
        state, checkpoints, valid_bytes, accepted = None, [], 0, []
        numbers: dict[str, int] = {}
        with closing(_lines(handle, JOURNAL_CAP)) as lines:
            for number, line in enumerate(lines, 1):
                if not line.endswith(b"\n"):
                    break  # torn by a kill mid-write: the last line, and only that, may be
                try:
                    entry = decode(line, f"line {number}")
                except ManifestError as exc:
                    raise _Mismatch(str(exc)) from None
                if state is None:
                    if isinstance(entry, dict) and "run" in entry and "journal" not in entry:
                        log.warning("%s: written by an older release, not resumed from; "
                                    "packing afresh", self.path)
                        return None
                    if isinstance(entry, dict) and _is_int(entry.get("journal")) \
                            and entry["journal"] < JOURNAL_FORMAT:
                        log.warning("%s: written by an older release (journal format %d), "
                                    "not resumed from; packing afresh", self.path,
                                    entry["journal"])
                        return None
                    if entry != {"journal": JOURNAL_FORMAT, "run": self.identity}:
                        return None
                    state = JournalState()
                    valid_bytes += len(line)
                    accepted.append(line)
                    continue
                try:
                    shard = entry["shard"]
                    if shard is not None:
                        files = parse(ShardEntry, shard, "shard").files()
                        if not files_intact(self.output, files):
                            break
                        self._check_published(files, f"line {number}")
                    spool_sha256 = entry["spool_sha256"]
                    if not isinstance(spool_sha256, str) or not SHA256.fullmatch(spool_sha256):
                        raise TypeError("spool_sha256: not a sha256 hex digest")
                    before = (state.next_index, state.samples_end, len(state.shards))
                    state.apply(entry)
                except (KeyError, TypeError, AttributeError) as exc:
                    raise _Mismatch(f"line {number}: not a checkpoint: {exc}") from None
                except ManifestError as exc:
                    raise _Mismatch(f"line {number}: {exc}") from None
                if state.next_index < before[0] or state.next_index > len(work):
                    raise _Mismatch(f"line {number}: position {state.next_index:,} is not "
                                    f"between {before[0]:,} and the plan's {len(work):,} images")
                if state.samples_end < before[1]:
                    raise _Mismatch(f"line {number}: the sample spool's end goes back")
                packed = entry["packed"]
                shard = state.shards[-1] if len(state.shards) > before[2] else None
                if shard is None and packed:
                    raise _Mismatch(f"line {number}: {packed} samples in no shard")
                if shard is not None:
                    at = numbers.get(shard.split, next_numbers.get(shard.split, 0))
                    if shard.name != shard_name(shard.split, at, extension):
                        raise _Mismatch(f"line {number}: shard {shard.name} is not the one this "
                                        f"run writes next in {shard.split}")
                    numbers[shard.split] = at + 1
                    if shard.samples != packed:
                        raise _Mismatch(f"line {number}: shard {shard.name} holds {shard.samples} "
                                        f"samples, the checkpoint counts {packed}")
                if entry.get("sources", packed) > packed:
                    raise _Mismatch(f"line {number}: more originals than samples")
                checkpoints.append(_Checkpoint(state.next_index, state.next_part, shard, packed,
                                               state.samples_end, spool_sha256))
                valid_bytes += len(line)
                accepted.append(line)
        if state is None:
            return None
        return state, checkpoints, valid_bytes, accepted

    def _check_published(self, files: Sequence[FileEntry], where: str) -> None:
        """Each published file of a checkpoint's shard holds what the checkpoint says it
        does (its sha256, read through the door): a shard changed since, or a checkpoint
        edited, is never resumed from, or its digest would be published.  _Mismatch
        otherwise."""
        for entry in files:
            try:
                with open_file(self.output / entry.name, entry.bytes) as handle:
                    digest = sha256_of(handle, entry.bytes)
            except (OSError, Refused) as exc:
                raise _Mismatch(f"{where}: {entry.name} cannot be read: {exc}") from None
            if digest != entry.sha256:
                raise _Mismatch(f"{where}: {entry.name} does not hold what the checkpoint "
                                "says (its sha256 differs)")

    def _check_spool(self, state: JournalState, checkpoints: list[_Checkpoint],
                     work: Sequence[Any]) -> Any:
        """The spool up to ``state.samples_end`` holds exactly the records the checkpoints
        count, with the sha256 each checkpoint recorded, each a valid sample record of its
        checkpoint's shard and of the plan item the checkpoints account for; every original
        before the resume point is packed, rejected or unchanged.  Returns the running hash
        of the spool up to there (appending continues it); _Mismatch otherwise."""
        walk = _PlanWalk(work, state)
        stops = iter(checkpoints)
        stop = next(stops, None)
        offset = counted = 0
        hasher = hashlib.sha256()

        def reached(stop: _Checkpoint, counted: int) -> None:
            if counted != stop.packed:
                raise _Mismatch(f"a checkpoint counts {stop.packed} samples, the spool holds "
                                f"{counted}")
            if offset != stop.samples_end or hasher.hexdigest() != stop.spool_sha256:
                raise _Mismatch(f"the sample spool up to byte {stop.samples_end:,} is not "
                                "what its checkpoint recorded (its sha256 differs)")

        try:
            handle = read_state(self.samples_path, SPOOL_CAP)
            with closing(_lines(handle, LINE_CAP, state.samples_end)) as lines:
                for number, line in enumerate(lines, 1):
                    while stop is not None and offset >= stop.samples_end:
                        reached(stop, counted)
                        stop, counted = next(stops, None), 0
                    offset += len(line)
                    hasher.update(line)
                    if stop is None or offset > stop.samples_end:
                        raise _Mismatch(f"spool line {number} crosses a checkpoint")
                    where = f"spool line {number}"
                    record = parse(SampleRecord, decode(line, where), where)
                    if stop.shard is None or (record.shard, record.split) != (stop.shard.name,
                                                                              stop.shard.split):
                        raise _Mismatch(f"{where}: shard {record.shard} of split {record.split} is "
                                        "not the checkpoint's")
                    walk.record(record, stop, where)
                    counted += 1
        except ManifestError as exc:
            raise _Mismatch(str(exc)) from None
        while stop is not None:
            reached(stop, counted)
            stop, counted = next(stops, None), 0
        walk.finish()
        return hasher

    def start(self) -> JournalState:
        """Begin a new journal for this run."""
        state_folder(self.path.parent)
        write_bytes_atomic(self.samples_path, b"")
        self._spool_hash = hashlib.sha256()
        first = (json.dumps({"journal": JOURNAL_FORMAT, "run": self.identity}) + "\n").encode()
        write_bytes_atomic(self.path, first)
        self._open_spool(open_state_file(self.samples_path, create=False))
        if self.mirror is not None:
            self.mirror.begin(self.identity, [(first, 0, 0, None)])
        return JournalState()

    def _open_spool(self, fd: int) -> None:
        """Append to the spool through ``fd``, checked by ``open_state_file``."""
        try:
            os.lseek(fd, 0, os.SEEK_END)
        except BaseException:
            os.close(fd)
            raise
        # Not under the except above: once fdopen has the descriptor, its file closes it, and
        # a Ctrl-C landing inside fdopen then made a second close replace the interrupt with
        # "Bad file descriptor" (exit 1).
        self._spool = os.fdopen(fd, "wb")

    def add_sample(self, record: dict[str, Any], first: bool = True) -> None:
        """Record a sample written to the open shard (made durable by the next checkpoint);
        ``first``: the first sample of its original (the others are more tiles of it)."""
        line = sample_line(record)
        with naming(self.samples_path):
            self._spool.write(line)
        self._spool_hash.update(line)
        samples, sources, source_bytes = self._pending
        self._pending = (samples + 1, sources + first,
                         source_bytes + (record["source_size"] if first else 0))

    def checkpoint(self, state: JournalState, next_index: int, shard: ShardEntry | None,
                   rejects: list[RejectEntry], unchanged: dict[str, list], part: int = 0,
                   object_classes: list[str] | None = None) -> None:
        """Durably record a published shard (or only rejects), then advance ``state``.

        ``part``: samples of the image at ``next_index`` the shard already holds (tiles);
        ``object_classes``: the writer's object classes so far (a resume keeps their ids)."""
        with naming(self.samples_path):
            self._spool.flush()
            os.fsync(self._spool.fileno())
        samples, sources, source_bytes = self._pending
        entry = {"next": next_index, "shard": to_json(shard) if shard else None,
                 "rejects": to_json(rejects), "unchanged": unchanged, "packed": samples,
                 "bytes_in": source_bytes, "samples_end": self._spool.tell(),
                 "spool_sha256": self._spool_hash.hexdigest()}
        if samples != sources or part:
            entry.update(sources=sources, part=part)
        if object_classes is not None:
            entry["object_classes"] = object_classes
        line = json.dumps(entry, sort_keys=True, separators=(",", ":")) + "\n"
        fd = open_state_file(self.path, create=False)
        try:
            with naming(self.path):
                os.lseek(fd, 0, os.SEEK_END)
                data = line.encode("ascii")
                while data:
                    data = data[os.write(fd, data):]
                os.fsync(fd)
        finally:
            os.close(fd)
        start = state.samples_end
        state.apply(json.loads(line))
        self._pending = (0, 0, 0)
        if self.mirror is not None:
            self.mirror.checkpoint(line.encode("ascii"), start, state.samples_end, shard)

    def samples(self, end: int) -> Iterator[dict[str, Any]]:
        """Every sample record of the checkpointed shards, in order, streamed (never a byte
        past ``end``)."""
        handle = read_state(self.samples_path, SPOOL_CAP)
        lines = bounded_lines(handle, min(end, handle.size), LINE_CAP)
        for number, line in enumerate(lines, 1):
            where = f"{self.samples_path}: line {number}"
            # Checked against the plan when the journal was loaded; checked again here, as
            # the sample index it goes into must be valid whatever happened since.
            try:
                record = parse(SampleRecord, decode(line, where), where)
            except ManifestError as exc:
                raise ManifestError(f"{exc} (remove the folder's journal.jsonl to pack "
                                    "afresh)") from None
            yield to_json(record)

    def close(self) -> None:
        if self._spool is not None:
            try:
                self._spool.close()
            except OSError:
                pass  # unflushed records of an unpublished shard: a resume cuts them anyway
            self._spool = None

    def discard(self) -> None:
        """Remove the journal and spool, if there are any: a run's that committed (or that
        nothing can resume any more)."""
        if not state_folder(self.path.parent, create=False):
            return
        self.close()
        removed = False
        for path in (self.path, self.samples_path):
            try:
                if not stat.S_ISDIR(os.lstat(path).st_mode):  # a folder there is not ours
                    os.unlink(path)
                    removed = True
            except FileNotFoundError:
                pass
        if removed:
            fsync_directory(self.path.parent)

    def remove(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
        self.samples_path.unlink(missing_ok=True)
        fsync_directory(self.path.parent)


class _Mismatch(Exception):
    """Why a journal does not fit this run (resuming from it would not be safe)."""


@dataclass(frozen=True)
class _Checkpoint:
    """What a checkpoint line says, as the spool check needs it."""

    next_index: int
    part: int
    shard: ShardEntry | None
    packed: int
    samples_end: int
    spool_sha256: str


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _lines(handle: Any, line_cap: int, end: int | None = None) -> Iterator[bytes]:
    """``bounded_lines`` with ``line_cap``; the file's problems are a _Mismatch."""
    try:
        yield from bounded_lines(handle, end, line_cap)
    except ManifestError as exc:
        raise _Mismatch(str(exc)) from None
    finally:
        handle.close()  # when the lines were not read to the end


class _PlanWalk:
    """Follows the plan as the spool's records go: each record is of the next original
    packed (or another tile of the current one), every original passed over is one the
    checkpoints reject or found unchanged, in plan order."""

    def __init__(self, work: Sequence[Any], state: JournalState):
        self.work, self.state = work, state
        self.position = -1  # plan position of the original of the last record
        self.parts = 0  # its records so far
        self.keys: set[str] = set()
        self.rejected = 0  # state.rejects accounted for
        self.unchanged = 0
        self.sources = self.bytes_in = 0

    def _pass_over(self, position: int) -> None:
        relpath = self.work[position].source.relpath
        rejects = self.state.rejects
        if self.rejected < len(rejects) and rejects[self.rejected].path == relpath:
            self.rejected += 1
        elif relpath in self.state.unchanged:
            self.unchanged += 1
        else:
            raise _Mismatch(f"{relpath} is neither packed, rejected nor unchanged in it")

    def record(self, record: SampleRecord, stop: _Checkpoint, where: str) -> None:
        """Account for one spool record of the checkpoint ``stop``."""
        current = self.work[self.position] if self.position >= 0 else None
        if current is not None and record.path == current.source.relpath:
            if record.key in self.keys or _TILE.fullmatch(record.key) is None \
                    or not record.key.startswith(current.key + "_"):
                raise _Mismatch(f"{where}: key {record.key} is not another tile of "
                                f"{current.key}")
            self.parts += 1
        else:
            position = self.position + 1
            last = min(stop.next_index, len(self.work) - 1)
            while position <= last and self.work[position].source.relpath != record.path:
                self._pass_over(position)
                position += 1
            if position > last:
                raise _Mismatch(f"{where}: {record.path} is not an original of the plan "
                                "where the checkpoints place it")
            item = self.work[position]
            if record.split != item.split or not (
                    record.key == item.key or record.key.startswith(item.key + "_")
                    and _TILE.fullmatch(record.key) is not None):
                raise _Mismatch(f"{where}: split {record.split} or key {record.key} is not "
                                f"the plan's for {record.path}")
            self.position, self.parts, self.keys = position, 1, set()
            self.sources += 1
            self.bytes_in += record.source_size
        self.keys.add(record.key)
        if self.parts > 1 and self.work[self.position].key in self.keys:
            raise _Mismatch(f"{where}: {record.path} has a whole-image sample and tiles")
        if self.position == stop.next_index and self.parts > stop.part:
            raise _Mismatch(f"{where}: more samples of {record.path} than the checkpoint "
                            "says were published")

    def finish(self) -> None:
        """Every original before the resume point accounted for, every count matched."""
        state = self.state
        if state.next_part:
            if self.position != state.next_index or self.parts != state.next_part:
                raise _Mismatch(f"{state.next_part} samples of the original at "
                                f"{state.next_index:,} are said to be published, the spool "
                                "does not hold them")
        for position in range(self.position + 1, state.next_index):
            self._pass_over(position)
        if self.rejected != len(state.rejects) or self.unchanged != len(state.unchanged):
            raise _Mismatch("it rejects or finds unchanged files the plan does not hold there")
        if (self.sources, self.bytes_in) != (state.sources, state.bytes_in):
            raise _Mismatch("its counts of originals and bytes differ from the spool's")


_TILE = re.compile(r".+_r\d{3}c\d{3}")
