"""The dataset's manifest, its per-sample index, and the journal that makes packing resumable.

Layout of a packed (or staged) directory::

    manifest.json          written last: a directory without it is not a dataset
    samples.jsonl          one line per sample (key, path, label, split, shard, ...)
    SPLIT-NNNNNN.tar       or SPLIT-NNNNNN.tfrecord + SPLIT-NNNNNN.idx
    .shardsmith/journal.jsonl   only while a pack is unfinished
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .atomic import HashingFile, fsync_directory, write_bytes_atomic, write_json_atomic
from .errors import ManifestError
from .formats import ShardInfo

SCHEMA_VERSION = 1
MANIFEST_NAME = "manifest.json"
SAMPLES_NAME = "samples.jsonl"
STATE_DIR = ".shardsmith"
JOURNAL_NAME = "journal.jsonl"
LOCK_NAME = "lock"
SHARD_FILE = re.compile(r"^[a-z][a-z0-9_]*-\d{6}\.(tar|tfrecord|idx)$")


def shard_name(split: str, number: int, extension: str) -> str:
    return f"{split}-{number:06d}{extension}"


def is_shard_file(name: str) -> bool:
    """True for file names that shardsmith writes as shards or shard indexes."""
    return bool(SHARD_FILE.match(name))


def shard_record(info: ShardInfo) -> dict[str, Any]:
    record = dataclasses.asdict(info)
    if info.index is None:
        del record["index"]
    return record


def sources_fingerprint(entries: Iterable[tuple[str, int, int]]) -> str:
    """Hash of (relpath, size, mtime_ns) of every candidate source: equal means unchanged."""
    digest = hashlib.sha256()
    for relpath, size, mtime_ns in sorted(entries):
        digest.update(f"{relpath}\0{size}\0{mtime_ns}\n".encode())
    return digest.hexdigest()


def content_fingerprint(manifest: dict[str, Any]) -> str:
    """Hash of what a dataset version holds (shards and sample index), free of timestamps."""
    listing = [(shard["name"], shard["sha256"]) for shard in manifest["shards"]]
    listing.append((SAMPLES_NAME, manifest["samples_index"]["sha256"]))
    return hashlib.sha256(json.dumps(listing).encode()).hexdigest()


def read_manifest(directory: Path) -> dict[str, Any]:
    """Load and sanity-check ``directory/manifest.json``; raises ManifestError."""
    path = directory / MANIFEST_NAME
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ManifestError(f"{directory}: no {MANIFEST_NAME} (not a finished dataset)") from None
    except (OSError, ValueError) as exc:
        raise ManifestError(f"{path}: unreadable manifest: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("schema_version") != SCHEMA_VERSION:
        raise ManifestError(
            f"{path}: unsupported manifest schema {manifest.get('schema_version')!r} "
            f"(this shardsmith reads version {SCHEMA_VERSION})"
        )
    for key in ("shards", "classes", "totals", "rejects", "fingerprint"):
        if key not in manifest:
            raise ManifestError(f"{path}: manifest lacks the key {key!r}")
    return manifest


def read_samples(directory: Path) -> list[dict[str, Any]]:
    """The per-sample index of a dataset."""
    path = directory / SAMPLES_NAME
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def write_dataset_files(
    directory: Path, manifest: dict[str, Any], samples: Iterable[dict[str, Any]]
) -> None:
    """Publish the sample index (streamed), then the manifest: last, it makes the dataset."""
    index = HashingFile(directory / SAMPLES_NAME)
    count = 0
    try:
        for sample in samples:
            index.write((json.dumps(sample, sort_keys=True, separators=(",", ":")) + "\n").encode())
            count += 1
    except BaseException:
        index.discard()
        raise
    manifest["samples_index"] = {
        "name": SAMPLES_NAME,
        "samples": count,
        "bytes": index.bytes_written,
        "sha256": index.publish(),
    }
    manifest["content_fingerprint"] = content_fingerprint(manifest)
    write_json_atomic(directory / MANIFEST_NAME, manifest)


@dataclass
class JournalState:
    """Where a run stands: plan position reached, shards and rejects so far, running totals.

    Per-sample records are not kept here (memory must not grow with the image count); they
    live in the journal file and are streamed into the sample index at the end.
    """

    next_index: int = 0
    shards: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    rejects: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    packed: int = 0
    bytes_in: int = 0

    def apply(self, entry: dict[str, Any]) -> None:
        self.next_index = entry["next"]
        if entry["shard"] is not None:
            self.shards.append(entry["shard"])
        self.rejects.extend(entry["rejects"])
        self.packed += len(entry["samples"])
        self.bytes_in += sum(sample["source_size"] for sample in entry["samples"])


class Journal:
    """Append-only record of published shards, so a killed pack resumes where it stopped.

    The first line identifies the run (config and sources fingerprints); each further line is
    a checkpoint written after a shard was published: the plan position reached, the shard,
    and the samples and rejects it accounts for.  A torn last line is cut off on load.
    """

    def __init__(self, output: Path, identity: dict[str, str]):
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
                elif entry["shard"] is not None and not _published_intact(self.output, entry):
                    break
                else:
                    state.apply(entry)
                valid_bytes += len(line)
        if state is not None:
            os.truncate(self.path, valid_bytes)
        return state

    def start(self) -> JournalState:
        """Begin a new journal for this run."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(self.path, (json.dumps({"run": self.identity}) + "\n").encode())
        return JournalState()

    def checkpoint(self, state: JournalState, next_index: int, shard, samples, rejects) -> None:
        """Durably record a published shard (or only rejects), then advance ``state``."""
        entry = {"next": next_index, "shard": shard, "samples": samples, "rejects": rejects}
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry, sort_keys=True, separators=(",", ":")) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        state.apply(entry)

    def samples(self) -> Iterator[dict[str, Any]]:
        """Every sample record, in shard order, streamed from the journal file."""
        with open(self.path, encoding="utf-8") as handle:
            next(handle)  # the run identity
            for line in handle:
                yield from json.loads(line)["samples"]

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
        try:
            self.path.parent.rmdir()
        except OSError:
            pass  # not empty: leave other state alone
        fsync_directory(self.output)


def _published_intact(output: Path, entry: dict[str, Any]) -> bool:
    """Cheap check that a journalled shard (and its index) is still there at its size."""
    shard = entry["shard"]
    files = [shard] + ([shard["index"]] if "index" in shard else [])
    for entry in files:
        try:
            if (output / entry["name"]).stat().st_size != entry["bytes"]:
                return False
        except OSError:
            return False
    return True
