"""``stage``: copy a dataset's shards to local NVMe, verified and incrementally.

Every file the manifest lists is copied under a temporary name, fsynced, checked against the
manifest's size and sha256, and only then renamed into place; the manifest is written last, so
a reader never sees a manifest whose shards are not all present and verified.  Files already
staged (same size and sha256, remembered with their mtime so a re-stage need not re-read
them) are skipped.  A lock keeps two stage runs off one destination; an interrupted run leaves
only temporary files, which the next run removes before it resumes.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .atomic import (
    fsync_directory,
    remove_stale_tmp,
    tmp_path_for,
    write_bytes_atomic,
    write_json_atomic,
)
from .errors import ConfigError, ShardsmithError
from .lock import DirectoryLock
from .manifest import (
    LOCK_NAME,
    MANIFEST_NAME,
    SAMPLES_NAME,
    STATE_DIR,
    is_shard_file,
    read_manifest,
)
from .progress import Progress
from .verify import file_sha256

log = logging.getLogger(__name__)

COPY_CHUNK = 64 * 1024 * 1024
ATTEMPTS = 3
RECORD_NAME = "staged.json"
FREE_SPACE_MARGIN = 64 * 1024 * 1024


class StageError(ShardsmithError):
    """A copy that could not be verified, a full disk, or a busy destination."""


@dataclass(frozen=True)
class StageResult:
    destination: Path
    copied: int
    present: int
    removed: int
    bytes_copied: int
    seconds: float
    stale: tuple[str, ...] = ()


def stage(
    source: str | Path,
    destination: str | Path,
    split: str | None = None,
    prune: bool = False,
    workers: int = 4,
    quiet: bool = False,
    rehash: bool = False,
    free_space: Callable[[Path], int] = lambda path: shutil.disk_usage(path).free,
) -> StageResult:
    """Copy the dataset in ``source`` (its manifest) to ``destination``, verified.

    ``split`` stages one split only; ``prune`` removes shards the manifest no longer lists;
    ``rehash`` re-reads already staged files instead of trusting their size and mtime.
    """
    started = time.monotonic()
    source, destination = _check_locations(Path(source), Path(destination))
    manifest = read_manifest(source)
    if split is not None:
        manifest = _only_split(manifest, split)
    destination.mkdir(parents=True, exist_ok=True)
    with DirectoryLock(destination / STATE_DIR / LOCK_NAME, "staged"):
        remove_stale_tmp(destination)
        record = _StagedRecord(destination)
        files = _listed_files(manifest)
        todo = [f for f in files if not record.is_staged(f, rehash)]
        present = len(files) - len(todo)
        stale = sorted(
            p.name for p in destination.iterdir()
            if is_shard_file(p.name) and p.name not in {f["name"] for f in files}
        )
        needed = sum(f["bytes"] for f in todo)
        available = free_space(destination)
        if needed + FREE_SPACE_MARGIN > available:
            raise StageError(
                f"{destination}: not enough free space: {needed / 1e9:,.2f} GB to copy, "
                f"{available / 1e9:,.2f} GB free (keeping {FREE_SPACE_MARGIN // 2**20} MB spare)"
            )
        if todo:
            # The destination stops being a dataset until every new file is in place.
            (destination / MANIFEST_NAME).unlink(missing_ok=True)
            _copy_all(source, destination, todo, record, workers, quiet)
        _write_samples_index(source, destination, manifest, split)
        record.save()
        staged_manifest = dict(manifest, staged={
            "from": str(source),
            "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "split": split,
        })
        write_json_atomic(destination / MANIFEST_NAME, staged_manifest)
        removed = 0
        if prune:  # only now: the published manifest no longer refers to them
            for name in stale:
                (destination / name).unlink(missing_ok=True)
                record.forget(name)
                removed += 1
            stale = []
            record.save()
        fsync_directory(destination)
    return StageResult(
        destination, len(todo), present, removed, needed, time.monotonic() - started,
        tuple(stale),
    )


def _check_locations(source: Path, destination: Path) -> tuple[Path, Path]:
    source, destination = source.expanduser().resolve(), destination.expanduser().resolve()
    if not (source / MANIFEST_NAME).is_file():
        raise ConfigError(f"{source}: no {MANIFEST_NAME}: not a packed dataset")
    if destination == source:
        raise ConfigError(f"stage.to: {destination} is the source dataset itself")
    if source in destination.parents:
        raise ConfigError(f"stage.to: {destination} is inside the source dataset {source}")
    if destination in source.parents:
        raise ConfigError(f"stage.to: {destination} contains the source dataset {source}")
    return source, destination


def _only_split(manifest: dict[str, Any], split: str) -> dict[str, Any]:
    shards = [s for s in manifest["shards"] if s["split"] == split]
    if split not in manifest.get("splits", {}):
        known = ", ".join(manifest.get("splits", {})) or "none"
        raise ConfigError(f"--split: the dataset has no split {split!r} (splits: {known})")
    return dict(manifest, shards=shards, splits={split: manifest["splits"][split]})


def _listed_files(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    files = []
    for shard in manifest["shards"]:
        files.append({"name": shard["name"], "bytes": shard["bytes"], "sha256": shard["sha256"]})
        if "index" in shard:
            files.append(dict(shard["index"]))
    return files


def _copy_all(source: Path, destination: Path, files: list[dict], record, workers: int,
              quiet: bool) -> None:
    total = sum(f["bytes"] for f in files)
    progress = Progress(total, 0, "B", "stage", quiet, unit_scale=True)
    try:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            futures = [pool.submit(_copy_verified, source, destination, f, progress.update)
                       for f in files]
            for file_info, future in zip(files, futures, strict=True):
                record.remember(destination, file_info, future.result())
    finally:
        progress.close()
    fsync_directory(destination)


def _copy_verified(source: Path, destination: Path, file_info: dict, advance) -> str:
    """Copy one file under a temporary name, verify it, publish it; returns its sha256."""
    name = file_info["name"]
    final = destination / name
    tmp = tmp_path_for(final)
    for attempt in range(1, ATTEMPTS + 1):
        try:
            _copy_file(source / name, tmp, advance)
            size = tmp.stat().st_size
            digest = file_sha256(tmp)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if size == file_info["bytes"] and digest == file_info["sha256"]:
            os.replace(tmp, final)
            return digest
        tmp.unlink(missing_ok=True)
        log.warning("%s: copy %d of %d does not match the manifest (size %d, sha256 %s)",
                    name, attempt, ATTEMPTS, size, digest[:12])
    raise StageError(
        f"{name}: after {ATTEMPTS} copies the data still differs from the manifest "
        f"(expected {file_info['bytes']} bytes, sha256 {file_info['sha256'][:12]}..., got "
        f"{size} bytes, {digest[:12]}...): the source shard is corrupt; nothing was published"
    )


def _copy_file(source: Path, target: Path, advance) -> None:
    """Kernel-side copy (copy_file_range: zero-copy, server-side on NFS 4.2) or big buffers."""
    with open(source, "rb") as reader, open(target, "wb") as writer:
        use_kernel = hasattr(os, "copy_file_range")
        while True:
            if use_kernel:
                try:
                    copied = os.copy_file_range(reader.fileno(), writer.fileno(), COPY_CHUNK)
                except OSError:
                    use_kernel = False  # e.g. across filesystems on old kernels
                    continue
            else:
                chunk = reader.read(COPY_CHUNK)
                writer.write(chunk)
                copied = len(chunk)
            if not copied:
                break
            advance(copied)
        writer.flush()
        os.fsync(writer.fileno())


def _write_samples_index(source: Path, destination: Path, manifest: dict, split: str | None):
    """The staged sample index: the source's, or its lines for the staged split."""
    with open(source / SAMPLES_NAME, "rb") as handle:
        lines = [line for line in handle
                 if split is None or json.loads(line)["split"] == split]
    blob = b"".join(lines)
    sha256 = write_bytes_atomic(destination / SAMPLES_NAME, blob)
    manifest["samples_index"] = dict(manifest["samples_index"], samples=len(lines),
                                     bytes=len(blob), sha256=sha256)


class _StagedRecord:
    """What this destination holds, verified: name → size, mtime_ns, sha256.

    Lets a re-stage skip re-reading files that nobody touched since they were verified.
    """

    def __init__(self, destination: Path):
        self.path = destination / STATE_DIR / RECORD_NAME
        try:
            self.entries: dict[str, dict] = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self.entries = {}

    def is_staged(self, file_info: dict, rehash: bool) -> bool:
        path = self.path.parent.parent / file_info["name"]
        try:
            stat = path.stat()
        except OSError:
            return False
        if stat.st_size != file_info["bytes"]:
            return False
        known = self.entries.get(file_info["name"])
        if not rehash and known and known["mtime_ns"] == stat.st_mtime_ns \
                and known["sha256"] == file_info["sha256"]:
            return True
        if file_sha256(path) != file_info["sha256"]:
            return False
        self.entries[file_info["name"]] = {"sha256": file_info["sha256"],
                                           "mtime_ns": stat.st_mtime_ns}
        return True

    def remember(self, destination: Path, file_info: dict, sha256: str) -> None:
        stat = (destination / file_info["name"]).stat()
        self.entries[file_info["name"]] = {"sha256": sha256, "mtime_ns": stat.st_mtime_ns}

    def forget(self, name: str) -> None:
        self.entries.pop(name, None)

    def save(self) -> None:
        self.path.parent.mkdir(exist_ok=True)
        write_json_atomic(self.path, self.entries)
