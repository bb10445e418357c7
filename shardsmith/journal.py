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

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .atomic import fsync_directory, naming, write_bytes_atomic
from .door import MANIFEST_CAP
from .errors import ManifestError
from .jsonmodel import MAX_EXACT, parse, to_json
from .manifest import STATE_DIR, RejectEntry, ShardEntry, files_intact, sample_line
from .statedir import bounded_lines, open_state_file, read_state, state_folder
from .text import shown

JOURNAL_NAME = "journal.jsonl"
SAMPLES_NAME = "samples.jsonl"
# A checkpoint line per shard, with its rejects and touched sources: of the order of the
# manifest, which holds the same rejects.  The sample spool is read only up to a checkpoint.
JOURNAL_CAP = MANIFEST_CAP
SPOOL_CAP = 1 << 62


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
        write (a count that is not a count, a part missing)."""
        for name in ("next", "packed", "bytes_in", "samples_end", "part", "sources"):
            value = entry.get(name, 0)
            if not isinstance(value, int) or isinstance(value, bool) \
                    or not 0 <= value <= MAX_EXACT:
                raise TypeError(f"{name}: not a count")
        if not isinstance(entry["rejects"], list) or not isinstance(entry.get("unchanged", {}),
                                                                      dict):
            raise TypeError("rejects or unchanged: not a list or mapping")
        shard = None if entry["shard"] is None else parse(ShardEntry, entry["shard"], "journal")
        rejects = [parse(RejectEntry, reject, "journal") for reject in entry["rejects"]]
        self.next_index = entry["next"]
        self.next_part = entry.get("part", 0)
        self.sources += entry.get("sources", entry["packed"])
        self.object_classes = entry.get("object_classes", self.object_classes)
        if shard is not None:
            self.shards.append(shard)
        self.rejects += rejects
        self.unchanged.update(entry.get("unchanged", {}))
        self.packed += entry["packed"]
        self.bytes_in += entry["bytes_in"]
        self.samples_end = entry["samples_end"]


class Journal:
    """Append-only record of published shards, so a killed pack resumes where it stopped.

    The first line identifies the run (config, sources and base fingerprints); each further
    line is a checkpoint written after a shard was published: the plan position reached, the
    shard, the rejects and unchanged sources, and the count and end of its sample records.  A
    torn last line is cut off on load, and so are sample records after the last checkpoint.
    """

    def __init__(self, output: Path, identity: dict[str, Any]):
        self.output = output
        self.path = output / STATE_DIR / JOURNAL_NAME
        self.samples_path = output / STATE_DIR / SAMPLES_NAME
        self.identity = identity
        self._spool = None
        self._pending = (0, 0, 0)  # samples, originals, source bytes since the last checkpoint

    def load(self) -> JournalState | None:
        """The state to resume from, or None when there is no journal of this same run."""
        try:
            handle = read_state(self.path, JOURNAL_CAP)
        except OSError:
            return None
        state, valid_bytes = None, 0
        with handle:
            for line in bounded_lines(handle):
                try:
                    entry = json.loads(line)
                except ValueError:
                    break  # torn by a kill mid-write: nothing after it is reliable
                if state is None:
                    if entry != {"run": self.identity}:
                        return None
                    state = JournalState()
                else:
                    try:
                        shard = entry["shard"]
                        if shard is not None and not files_intact(
                                self.output, parse(ShardEntry, shard, "journal").files()):
                            break
                        state.apply(entry)
                    except (KeyError, TypeError, ManifestError):
                        break  # not a line this version wrote: resume before it
                valid_bytes += len(line)
        if state is None:
            return None
        try:
            spool = open_state_file(self.samples_path, create=False)
        except FileNotFoundError:
            return None
        try:
            if os.fstat(spool).st_size < state.samples_end:
                return None  # the records of a checkpointed shard are gone: start afresh
            journal = open_state_file(self.path, create=False)
            try:
                with naming(self.path):
                    os.ftruncate(journal, valid_bytes)
            finally:
                os.close(journal)
            with naming(self.samples_path):
                os.ftruncate(spool, state.samples_end)
        except BaseException:
            os.close(spool)
            raise
        self._open_spool(spool)
        return state

    def start(self) -> JournalState:
        """Begin a new journal for this run."""
        state_folder(self.path.parent)
        write_bytes_atomic(self.samples_path, b"")
        write_bytes_atomic(self.path, (json.dumps({"run": self.identity}) + "\n").encode())
        self._open_spool(open_state_file(self.samples_path, create=False))
        return JournalState()

    def _open_spool(self, fd: int) -> None:
        """Append to the spool through ``fd``, checked by ``open_state_file``."""
        try:
            os.lseek(fd, 0, os.SEEK_END)
            self._spool = os.fdopen(fd, "wb")
        except BaseException:
            os.close(fd)
            raise

    def add_sample(self, record: dict[str, Any], first: bool = True) -> None:
        """Record a sample written to the open shard (made durable by the next checkpoint);
        ``first``: the first sample of its original (the others are more tiles of it)."""
        with naming(self.samples_path):
            self._spool.write(sample_line(record))
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
                 "bytes_in": source_bytes, "samples_end": self._spool.tell()}
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
        state.apply(json.loads(line))
        self._pending = (0, 0, 0)

    def samples(self, end: int) -> Iterator[dict[str, Any]]:
        """Every sample record of the checkpointed shards, in order, streamed (never a byte
        past ``end``)."""
        handle = read_state(self.samples_path, SPOOL_CAP)
        for number, line in enumerate(bounded_lines(handle, min(end, handle.size)), 1):
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise ManifestError(f"{self.samples_path}: line {number}: not valid JSON: "
                                    f"{shown(str(exc), 80)}") from None
            # Written by this run's driver, so only its shape is checked here: the sample
            # index it goes into is validated line by line whenever it is read.
            if not isinstance(record, dict) or not isinstance(record.get("key"), str):
                raise ManifestError(f"{self.samples_path}: line {number}: not a sample record "
                                    "(remove the folder's journal.jsonl to pack afresh)")
            yield record

    def close(self) -> None:
        if self._spool is not None:
            try:
                self._spool.close()
            except OSError:
                pass  # unflushed records of an unpublished shard: a resume cuts them anyway
            self._spool = None

    def remove(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
        self.samples_path.unlink(missing_ok=True)
        fsync_directory(self.path.parent)
