"""The journal that makes packing resumable: one checkpoint per published shard.

Per-sample records are not kept in memory (it must not grow with the image count); they live
in the journal file and are streamed into the sample index when the version is committed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .atomic import fsync_directory, write_bytes_atomic
from .errors import ManifestError
from .jsonmodel import parse, to_json
from .manifest import STATE_DIR, RejectEntry, ShardEntry

JOURNAL_NAME = "journal.jsonl"


@dataclass
class JournalState:
    """Where a run stands: plan position reached, shards, rejects and unchanged sources."""

    next_index: int = 0
    shards: list[ShardEntry] = field(default_factory=list)
    rejects: list[RejectEntry] = field(default_factory=list)
    unchanged: dict[str, list] = field(default_factory=dict)  # relpath: [digest, size, mtime]
    packed: int = 0
    bytes_in: int = 0

    def apply(self, entry: dict[str, Any]) -> None:
        self.next_index = entry["next"]
        if entry["shard"] is not None:
            self.shards.append(parse(ShardEntry, entry["shard"], "journal"))
        self.rejects += [parse(RejectEntry, reject, "journal") for reject in entry["rejects"]]
        self.unchanged.update(entry.get("unchanged", {}))
        self.packed += len(entry["samples"])
        self.bytes_in += sum(sample["source_size"] for sample in entry["samples"])


class Journal:
    """Append-only record of published shards, so a killed pack resumes where it stopped.

    The first line identifies the run (config, sources and base fingerprints); each further
    line is a checkpoint written after a shard was published: the plan position reached, the
    shard, and the samples, rejects and unchanged sources it accounts for.  A torn last line
    is cut off on load.
    """

    def __init__(self, output: Path, identity: dict[str, Any]):
        self.output = output
        self.path = output / STATE_DIR / JOURNAL_NAME
        self.identity = identity

    def load(self) -> JournalState | None:
        """The state to resume from, or None when there is no journal of this same run."""
        try:
            handle = open(self.path, "rb")
        except OSError:
            return None
        state, valid_bytes = None, 0
        with handle:
            for line in handle:
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
                        if shard is not None and not _published_intact(
                                self.output, parse(ShardEntry, shard, "journal")):
                            break
                        state.apply(entry)
                    except (KeyError, TypeError, ManifestError):
                        break  # not a line this version wrote: resume before it
                valid_bytes += len(line)
        if state is not None:
            os.truncate(self.path, valid_bytes)
        return state

    def start(self) -> JournalState:
        """Begin a new journal for this run."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(self.path, (json.dumps({"run": self.identity}) + "\n").encode())
        return JournalState()

    def checkpoint(self, state: JournalState, next_index: int, shard: ShardEntry | None,
                   samples: list[dict], rejects: list[RejectEntry],
                   unchanged: dict[str, list]) -> None:
        """Durably record a published shard (or only rejects), then advance ``state``."""
        entry = {"next": next_index, "shard": to_json(shard) if shard else None,
                 "samples": samples, "rejects": to_json(rejects), "unchanged": unchanged}
        line = json.dumps(entry, sort_keys=True, separators=(",", ":")) + "\n"
        with open(self.path, "a", encoding="ascii") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
        state.apply(json.loads(line))

    def samples(self) -> Iterator[dict[str, Any]]:
        """Every sample record, in shard order, streamed from the journal file."""
        with open(self.path, encoding="ascii") as handle:
            next(handle)  # the run identity
            for line in handle:
                yield from json.loads(line)["samples"]

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
        fsync_directory(self.path.parent)


def _published_intact(output: Path, shard: ShardEntry) -> bool:
    """Cheap check that a journalled shard (and its index) is still there at its size."""
    for entry in shard.files():
        try:
            if (output / entry.name).stat().st_size != entry.bytes:
                return False
        except OSError:
            return False
    return True
