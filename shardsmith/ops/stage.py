"""``stage``: copy a dataset's shards to local NVMe, verified and incrementally.

The destination keeps the same commit point as a pack (docs/design.md, invariant 8): every new
file is copied under a temporary name, fsynced, checked against the manifest's size and sha256
and renamed into place; then the manifest is swapped in; then what it no longer names is removed.
A training job reading the destination meanwhile sees the old version or the new one.

The source manifest is untrusted: names are validated before any file is touched, a source
file must be a regular file of exactly the listed size (a link to ``/dev/zero`` is refused,
not copied until the disk is full), and copies never read past the listed byte count.
Files already staged (same size and sha256, remembered with their mtime so a re-stage need
not re-read them) are skipped.  A lock keeps two stages off one destination, and a shared
lock on the source keeps a pack from changing it mid-copy; Ctrl-C stops within a second.

The source may be an ``s3://`` dataset (``storage.Location``): each object is downloaded
in ranged GETs of ``door.CHUNK`` bytes (memory stays at one chunk a worker), within the size
the manifest lists, retried by the client; the commit order is the same.  A bucket has no
lock: a stage that meets a manifest changed mid-copy fails and is rerun, as locally.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import BinaryIO

from .. import door
from ..atomic import (
    CopyMismatch,
    check_replaceable,
    copy_verified,
    discard_tmp,
    naming,
    open_new,
    remove_stale_tmp,
    tmp_path_for,
    write_json_atomic,
)
from ..dataset.formats import SHARD_CAP
from ..dataset.lock import DirectoryLock, reading
from ..dataset.manifest import (
    MANIFEST_NAME,
    FileEntry,
    Manifest,
    commit,
    is_shard_file,
    iter_sample_index,
    no_longer_named,
    read_manifest,
    samples_index_name,
    write_sample_index,
)
from ..dataset.statedir import DatasetDir, read_state, state_folder
from ..door import STATE_CAP, Refused, open_file, sha256_of
from ..errors import ConfigError, ManifestError, StageError
from ..progress import Progress
from ..storage import Location, location
from ..text import human_bytes, plural

log = logging.getLogger(__name__)

ATTEMPTS = 3
FREE_SPACE_MARGIN = 64 * 1024 * 1024


@dataclass(frozen=True)
class StageResult:
    destination: Path
    copied: int  # shard files (shards and indexes); changes files are copied uncounted
    present: int
    removed: int
    bytes_copied: int
    seconds: float
    stale: tuple[str, ...] = ()
    copy_seconds: float = 0.0  # the copies alone, over which the progress line gives the rate

    def summary(self) -> str:
        """Files copied / already present / removed, bytes, time and throughput (over the
        copies alone, as the progress line measures it)."""
        rate = self.bytes_copied / self.copy_seconds if self.copy_seconds > 0 else 0.0
        lines = [
            f"{self.destination}: staged",
            f"  copied {plural(self.copied, 'file')} ({human_bytes(self.bytes_copied)}), "
            f"{self.present:,} already present and verified, {self.removed:,} removed",
            f"  time   {self.seconds:.1f}s" + (
                f", copying {self.copy_seconds:.1f}s at {human_bytes(rate)}/s" if self.copied
                else " (nothing to copy)"),
        ]
        if self.stale:
            lines.append(f"  {plural(len(self.stale), 'staged shard')} no longer listed "
                         "(--prune removes them)")
        return "\n".join(lines)


def stage(
    source: str | Location,
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
    source, destination = _check_locations(location(source), Path(destination))
    with reading(source, "packed"):
        manifest = read_manifest(source)
        if split is not None:
            if split not in manifest.splits:
                known = ", ".join(manifest.splits) or "none"
                raise ConfigError(f"--split: the dataset has no split {split!r} "
                                  f"(splits: {known})")
            manifest = manifest.only_split(split)
        destination.mkdir(parents=True, exist_ok=True)
        with DirectoryLock(DatasetDir(destination).lock, "staged"):
            return _stage_locked(source, destination, manifest, split, prune, workers, quiet,
                                 rehash, free_space, started)


def _stage_locked(source: Path, destination: Path, manifest: Manifest, split: str | None,
                  prune: bool, workers: int, quiet: bool, rehash: bool,
                  free_space: Callable[[Path], int], started: float) -> StageResult:
    remove_stale_tmp(destination)
    current = _current_manifest(destination)
    record = _StagedRecord(destination)
    files = [entry for shard in manifest.shards for entry in shard.files()]
    changes = [entry.file for entry in manifest.changes]  # copied and verified like a shard
    todo = [entry for entry in files + changes if not record.is_staged(entry, rehash)]
    index_name = samples_index_name(manifest.version, split)
    for entry in todo:  # a folder under a name we copy to is refused before any copy
        check_replaceable(destination / entry.name)
    needed = sum(entry.bytes for entry in todo) + manifest.samples_index.bytes
    available = free_space(destination)
    if needed + FREE_SPACE_MARGIN > available:
        raise StageError(
            f"{destination}: not enough free space: {human_bytes(needed)} to copy, "
            f"{human_bytes(available)} free (keeping {human_bytes(FREE_SPACE_MARGIN)} spare)"
        )
    if current is not None and _replaces_named_files(current, todo, index_name):
        # Another dataset under the same names: the old manifest cannot stay true meanwhile.
        (destination / MANIFEST_NAME).unlink(missing_ok=True)
    copy_seconds = _copy_all(source, destination, todo, record, workers, quiet,
                             manifest) if todo else 0.0
    index = _stage_sample_index(source, destination, manifest, index_name, split)
    staged = replace(manifest, samples_index=index, staged={
        "from": str(source),
        "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "split": split,
    }).with_content_fingerprint()
    listed = {entry.name for entry in staged.files()}
    unlisted = sorted(entry.name for entry in os.scandir(destination)
                      if is_shard_file(entry.name) and entry.name not in listed
                      and not entry.is_dir(follow_symlinks=False))  # a folder is not ours
    stale = tuple(name for name in unlisted if not name.endswith(".idx"))  # shards, not indexes
    obsolete = [name for name in no_longer_named(current, staged) if not is_shard_file(name)]
    commit(destination, staged, obsolete + (unlisted if prune else []))
    for name in unlisted if prune else ():
        record.forget(name)
    record.save()
    shards_copied = sum(is_shard_file(entry.name) for entry in todo)  # what the counts say
    return StageResult(destination, shards_copied, len(files) - shards_copied,
                       len(stale) if prune else 0, sum(entry.bytes for entry in todo),
                       time.monotonic() - started, () if prune else stale, copy_seconds)


def _check_locations(source: Location, destination: Path) -> tuple[Location, Path]:
    source, destination = source.expanduser().resolve(), destination.expanduser().resolve()
    if not (source / MANIFEST_NAME).is_file():
        raise ConfigError(f"{source}: no {MANIFEST_NAME}: not a packed dataset")
    if destination == source:
        raise ConfigError(f"stage.to: {destination} is the source dataset itself")
    if source in destination.parents:
        raise ConfigError(f"stage.to: {destination} is inside the source dataset {source}")
    if destination in source.parents:
        raise ConfigError(f"stage.to: {destination} contains the source dataset {source}")
    if destination.exists() and not destination.is_dir():
        raise ConfigError(f"stage.to: {destination} exists and is not a directory")
    return source, destination


def _current_manifest(destination: Path) -> Manifest | None:
    if not (destination / MANIFEST_NAME).exists():
        return None
    try:
        return read_manifest(destination)
    except ManifestError as exc:
        log.warning("the staged manifest is unreadable and will be replaced: %s", exc)
        return None


def _replaces_named_files(current: Manifest, todo: list[FileEntry], index_name: str) -> bool:
    named = {entry.name: entry.sha256 for entry in current.files()}
    return index_name in named or any(
        entry.name in named and named[entry.name] != entry.sha256 for entry in todo)


def _copy_all(source: Path, destination: Path, files: list[FileEntry], record: _StagedRecord,
              workers: int, quiet: bool, manifest: Manifest) -> float:
    """Copy in parallel; on Ctrl-C, SIGTERM or the first failure, stop every copy at once.
    Returns the seconds the copies took, as the progress line measures them."""
    total = sum(entry.bytes for entry in files)
    progress = Progress(total, 0, "B", "stage", quiet, unit_scale=True)
    cancel = threading.Event()
    pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="shardsmith-copy")
    try:
        futures = {pool.submit(_copy_verified, source, destination, entry, progress.update,
                               cancel): entry for entry in files}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=0.2, return_when="FIRST_EXCEPTION")
            for future in done:
                record.remember(destination, futures[future], future.result())
        return progress.seconds
    except FileNotFoundError as exc:
        if _source_changed(source, manifest):
            raise StageError(f"{source}: the dataset changed while staging (a new version "
                             "was packed); rerun the stage") from None
        raise StageError(f"{source}: {Path(exc.filename or '?').name} is missing: the "
                         "dataset is damaged (shardsmith verify shows what)") from None
    finally:
        cancel.set()  # no-op after success; stops running copies after an error or interrupt
        pool.shutdown(wait=True, cancel_futures=True)
        progress.close()


def _source_changed(source: Path, manifest: Manifest) -> bool:
    try:
        return read_manifest(source).content_fingerprint != manifest.content_fingerprint
    except ManifestError:
        return True


class _Cancelled(Exception):
    pass


def _copy_verified(source: Path, destination: Path, entry: FileEntry, advance,
                   cancel: threading.Event) -> str:
    """Copy one file under a temporary name, verify it, publish it; returns its sha256."""

    def step(copied: int) -> None:
        advance(copied)
        if cancel.is_set():
            raise _Cancelled()

    for attempt in range(1, ATTEMPTS + 1):
        try:
            return _copy_file(source / entry.name, destination / entry.name, entry, step)
        except CopyMismatch as exc:
            digest = exc.sha256
        log.warning("%s: copy %d of %d does not match the manifest (sha256 %s)",
                    entry.name, attempt, ATTEMPTS, digest[:12])
    raise StageError(
        f"{entry.name}: after {ATTEMPTS} copies the data still differs from the manifest "
        f"(expected sha256 {entry.sha256[:12]}..., got {digest[:12]}...): the source shard "
        "is corrupt; nothing was published"
    )


def _copy_file(source: Location, final: Path, entry: FileEntry, step) -> str:
    """Copy exactly ``entry.bytes`` bytes of a regular file to ``final`` if its sha256 is the
    manifest's (CopyMismatch otherwise) and return it.

    An object comes in by ranged GETs, hashed as it comes (``atomic.copy_verified``).  A local
    file is copied kernel-side (``copy_file_range``: zero-copy, server-side on NFS 4.2) where
    offered, big buffers otherwise; the copy is re-read from the page cache for the digest, so
    what is verified is what landed on the destination.
    """
    try:
        handle = open_file(source, SHARD_CAP)
    except Refused as exc:  # a link, a device or a prefix where a shard should be
        raise StageError(f"{source.name}: refused: it {exc.detail}") from None
    with handle:
        if handle.size != entry.bytes:
            raise StageError(f"{source.name}: {handle.size:,} bytes in the source, the "
                             f"manifest says {entry.bytes:,}: the source shard is damaged")
        if handle.fd < 0:  # an object: no descriptor to copy from in the kernel
            return copy_verified(handle, final, entry.bytes, entry.sha256, step)
        tmp = tmp_path_for(final)
        try:
            with naming(tmp), open_new(tmp) as writer:
                _copy_range(handle.fd, writer, entry.bytes, step, source.name)
                writer.flush()
                os.fsync(writer.fileno())
            digest = _sha256_of(tmp, entry.bytes)
            if digest != entry.sha256:
                raise CopyMismatch(final, entry.bytes, digest)
        except BaseException:
            discard_tmp(tmp)
            raise
        os.replace(tmp, final)
        return digest


def _copy_range(reader: int, writer: BinaryIO, size: int, step, name: str) -> None:
    """``size`` bytes from descriptor to descriptor, in kernel where the kernel can."""
    remaining, use_kernel = size, hasattr(os, "copy_file_range")
    while remaining:
        chunk = min(door.CHUNK, remaining)
        if use_kernel:
            try:
                copied = os.copy_file_range(reader, writer.fileno(), chunk)
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO):
                    raise
                use_kernel = False  # e.g. across filesystems on old kernels
                continue
        else:
            copied = writer.write(os.read(reader, chunk))
        if not copied:
            raise StageError(f"{name}: ended {remaining:,} bytes early while copying")
        remaining -= copied
        step(copied)


def _sha256_of(path: Path, size: int) -> str:
    """The sha256 of the ``size``-byte regular file ``path``, read through the door (a link, a
    FIFO or a file of another size raises Refused)."""
    with open_file(path, size) as handle:
        if handle.size != size:
            raise Refused("changed", f"holds {handle.size:,} bytes, not {size:,}", str(path))
        return sha256_of(handle, size)


def _stage_sample_index(source: Path, destination: Path, manifest: Manifest, name: str,
                        split: str | None):
    """The staged sample index (the source's, or its lines of one split), written under a
    new name; the source's sha256 is checked on the way (ManifestError if it differs)."""
    records = iter_sample_index(source, manifest)
    if split is not None:
        records = (record for record in records if record.split == split)
    return write_sample_index(destination, name, records)


class _StagedRecord:
    """What this destination holds, verified: name → size, mtime_ns, sha256.

    Lets a re-stage skip re-reading files that nobody touched since they were verified.
    """

    def __init__(self, destination: Path):
        self.path = DatasetDir(destination).staged
        try:  # OutputStateError (a link or a FIFO in its place) is not ours to read: refused
            with read_state(self.path, STATE_CAP) as handle:
                entries = json.loads(handle.read())
            self.entries: dict[str, dict] = entries if isinstance(entries, dict) else {}
        except (OSError, Refused, ValueError, RecursionError):
            self.entries = {}

    def is_staged(self, entry: FileEntry, rehash: bool) -> bool:
        path = self.path.parent.parent / entry.name
        try:
            info = os.lstat(path)
        except OSError:
            return False
        if not stat.S_ISREG(info.st_mode) or info.st_size != entry.bytes:
            return False
        known = self.entries.get(entry.name)
        if not rehash and isinstance(known, dict) and known.get("mtime_ns") == info.st_mtime_ns \
                and known.get("sha256") == entry.sha256:
            return True
        try:
            if _sha256_of(path, entry.bytes) != entry.sha256:
                return False
        except (OSError, Refused):
            return False
        self.entries[entry.name] = {"sha256": entry.sha256, "mtime_ns": info.st_mtime_ns}
        return True

    def remember(self, destination: Path, entry: FileEntry, sha256: str) -> None:
        info = (destination / entry.name).stat()
        self.entries[entry.name] = {"sha256": sha256, "mtime_ns": info.st_mtime_ns}

    def forget(self, name: str) -> None:
        self.entries.pop(name, None)

    def save(self) -> None:
        state_folder(self.path.parent)
        write_json_atomic(self.path, self.entries)
