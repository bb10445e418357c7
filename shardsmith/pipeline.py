"""``pack``: scan → plan → process (worker processes) → write shards → manifest.

One driver process owns the writers; images are processed by a bounded, ordered parallel map,
so shards are byte-identical whatever the worker count and memory stays flat.
"""

from __future__ import annotations

import itertools
import logging
import shutil
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import __version__
from .atomic import remove_stale_tmp
from .config import Config, check_paths
from .errors import OutputStateError, ShardsmithError
from .formats import ShardWriter, open_writer, shard_extension
from .imaging import Reject, Sample, process
from .incremental import Base, compact, history_entry, prepare_base
from .lock import DirectoryLock
from .manifest import (
    LOCK_NAME,
    MANIFEST_NAME,
    SAMPLES_NAME,
    SCHEMA_VERSION,
    STATE_DIR,
    Journal,
    JournalState,
    content_fingerprint,
    is_shard_file,
    read_manifest,
    shard_name,
    shard_record,
    sources_fingerprint,
    write_dataset_files,
)
from .parallel import WorkerPool
from .plan import PlanItem, make_plan
from .progress import Progress
from .readahead import ReadAhead
from .scan import ScanResult, scan

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PackResult:
    """What a pack run did; ``manifest`` is the dataset's manifest as written (or found)."""

    manifest: dict[str, Any]
    output: Path
    up_to_date: bool = False
    resumed_at: int = 0

    @property
    def reject_fraction(self) -> float:
        totals = self.manifest["totals"]
        candidates = totals["packed"] + totals["rejected"]
        return totals["rejected"] / candidates if candidates else 0.0


def pack(config: Config) -> PackResult:
    """Pack the source tree into shards and a manifest, as ``config`` says.

    Re-running on a finished output with the same config and unchanged sources does nothing;
    with changed sources it adds a dataset version (only new or changed sources processed);
    after an interruption it resumes from the last published shard.
    """
    started = time.monotonic()
    source, output = check_paths(config)
    with DirectoryLock(output / STATE_DIR / LOCK_NAME, "packed"):
        return _pack_locked(config, source, output, started)


def _pack_locked(config: Config, source: Path, output: Path, started: float) -> PackResult:
    with WorkerPool(config.run) as pool:  # local workers start while the tree is scanned
        scanned = scan(source, config.source)
        return _pack_scanned(pool, scanned, config, source, output, started)


def _pack_scanned(
    pool: WorkerPool, scanned: ScanResult, config: Config, source: Path, output: Path,
    started: float,
) -> PackResult:
    plan = make_plan(scanned.files, config.splits, config.seed)
    if not plan:
        reasons = ", ".join(f"{n} {why}" for why, n in scanned.excluded.most_common()) or "none"
        raise ShardsmithError(f"no image files to pack under {source} (left out: {reasons})")
    plan_fingerprint = sources_fingerprint(
        (item.source.relpath, item.source.size, item.source.mtime_ns) for item in plan
    )
    previous = _previous_dataset(output, config)
    if previous is not None and previous.get("sources_fingerprint") == plan_fingerprint:
        return PackResult(previous, output, up_to_date=True)

    journal = Journal(output, {
        "config": config.fingerprint(),
        "sources": plan_fingerprint,
        "base": content_fingerprint(previous) if previous is not None else None,
    })
    state = journal.load()
    if state is None:
        if previous is None:
            _clear_previous_output(output)
        else:
            _remove_unlisted_shards(output, previous)  # left by an unfinished increment
        state = journal.start()
    else:
        log.info("resuming at image %d", state.next_index)
    remove_stale_tmp(output)
    base = prepare_base(output, previous, plan, source, config.output.format, scanned.classes)

    resumed_at = state.next_index
    _write_shards(base, state, journal, pool, source, output, config, scanned.classes)
    shards, renamed, obsolete = base.shards + state.shards, {}, list(base.obsolete)
    numbers = base.next_numbers + Counter(shard["split"] for shard in state.shards)
    if config.run.compact:
        shards, renamed, merged_away = compact(
            shards, numbers, output, config.output.format, scanned.classes,
            config.output.shard_bytes, config.output.shard_samples,
        )
        obsolete += merged_away
    manifest = _build_manifest(
        config, source, base, state, shards, scanned, plan_fingerprint, started, resumed_at
    )
    manifest["next_shard_numbers"] = dict(sorted(numbers.items()))
    samples = itertools.chain(base.samples, journal.samples())
    if renamed:
        samples = (dict(s, shard=renamed.get(s["shard"], s["shard"])) for s in samples)
    write_dataset_files(output, manifest, samples)
    for name in obsolete:  # rewritten or merged shards: the new manifest no longer lists them
        (output / name).unlink(missing_ok=True)
    journal.remove()
    return PackResult(manifest, output, resumed_at=resumed_at)


def _write_shards(
    base: Base,
    state: JournalState,
    journal: Journal,
    pool: WorkerPool,
    source: Path,
    output: Path,
    config: Config,
    classes: tuple[str, ...],
) -> None:
    """Stream processed images, in plan order, into shards; checkpoint each published shard."""
    plan = base.work
    extension = shard_extension(config.output.format)
    shard_numbers = base.next_numbers + Counter(shard["split"] for shard in state.shards)
    writer: ShardWriter | None = None
    pending_samples: list[dict[str, Any]] = []
    pending_rejects: list[dict[str, Any]] = []

    def close_shard(next_index: int) -> None:
        nonlocal writer
        record = shard_record(writer.close()) if writer is not None else None
        writer = None
        if record is not None or pending_rejects:
            journal.checkpoint(state, next_index, record, pending_samples, pending_rejects)
        pending_samples.clear()
        pending_rejects.clear()

    remaining = plan[state.next_index :]
    # Read-ahead warms this machine's page cache: it helps local workers only.
    local = config.run.backend == "local"
    window = 4 * config.run.worker_count if config.run.readahead and local else 0
    readahead = ReadAhead(str(source), remaining, window)
    results = pool.map_ordered(process, remaining, str(source), config.image)
    progress = Progress(len(plan), state.next_index, "img", "pack", config.run.quiet)
    try:
        paired = zip(remaining, results, strict=True)
        for index, (item, result) in enumerate(paired, state.next_index):
            if writer is not None and writer.split != item.split:
                close_shard(index)
            if isinstance(result, Reject):
                pending_rejects.append(_reject_record(result, item))
                progress.note(rejected=len(state.rejects) + len(pending_rejects))
            else:
                if writer is not None and _shard_full(writer, result, config):
                    close_shard(index)
                if writer is None:
                    name = shard_name(item.split, shard_numbers[item.split], extension)
                    shard_numbers[item.split] += 1
                    writer = open_writer(config.output.format, output, name, item.split, classes)
                writer.add(result)
                pending_samples.append(_sample_record(result, writer.name))
            progress.update(1)
            readahead.consumed(index + 1 - state.next_index)
        close_shard(len(plan))
    finally:
        readahead.close()
        progress.close()
        if writer is not None:
            writer.discard()


def _shard_full(writer: ShardWriter, sample: Sample, config: Config) -> bool:
    if config.output.shard_samples is not None:
        return writer.samples >= config.output.shard_samples
    return writer.bytes_written + writer.record_size(sample) > config.output.shard_bytes


def _sample_record(sample: Sample, shard: str) -> dict[str, Any]:
    return {
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


def _reject_record(reject: Reject, item: PlanItem) -> dict[str, Any]:
    return {
        "path": reject.relpath,
        "reason": reject.reason,
        "detail": reject.detail,
        "source_size": item.source.size,
        "source_mtime_ns": item.source.mtime_ns,
    }


def _build_manifest(
    config: Config,
    source: Path,
    base: Base,
    state: JournalState,
    shards: list[dict[str, Any]],
    scanned: ScanResult,
    plan_fingerprint: str,
    started: float,
    resumed_at: int,
) -> dict[str, Any]:
    scan_rejects = [
        {"path": path, "reason": "unreadable", "detail": detail}
        for path, detail in scanned.unreadable
    ]
    rejects = scan_rejects + base.rejects + state.rejects
    seconds = time.monotonic() - started
    splits: dict[str, dict[str, int]] = {
        name: {"samples": 0, "shards": 0, "bytes": 0} for name, _ in config.splits
    }
    for shard in shards:
        splits[shard["split"]]["samples"] += shard["samples"]
        splits[shard["split"]]["shards"] += 1
        splits[shard["split"]]["bytes"] += shard["bytes"]
    packed = len(base.samples) + state.packed
    excluded = sum(scanned.excluded.values())
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    version = base.version + 1
    return {
        "schema_version": SCHEMA_VERSION,
        "version": version,
        "created": created,
        "tool": {"name": "shardsmith", "version": __version__, "libraries": _library_versions()},
        "source": str(source),
        "config": config.dataset_settings(),
        "fingerprint": config.fingerprint(),
        "sources_fingerprint": plan_fingerprint,
        "previous_content_fingerprint": base.previous_fingerprint,
        "format": config.output.format,
        "classes": list(scanned.classes),
        "splits": splits,
        "shards": shards,
        "rejects": rejects,
        "excluded": dict(sorted(scanned.excluded.items())),
        "totals": {
            "seen": packed + len(rejects) + excluded,
            "packed": packed,
            "rejected": len(rejects),
            "excluded": excluded,
            "bytes_in": base.bytes_in + state.bytes_in,
            "bytes_out": sum(s["bytes"] for s in shards),
        },
        "history": base.history + [history_entry(base, version, created, shards)],
        "run": {
            "seconds": round(seconds, 3),
            "images_per_second": round((state.next_index - resumed_at) / max(seconds, 1e-9), 2),
            "decoded": state.next_index - resumed_at,
            "resumed_at": resumed_at,
            "workers": config.run.worker_count,
        },
    }


def _library_versions() -> dict[str, str]:
    import cv2
    import numpy
    import PIL
    import simplejpeg

    return {
        "pillow": PIL.__version__,
        "opencv": cv2.__version__,
        "simplejpeg": simplejpeg.__version__,
        "numpy": numpy.__version__,
    }


def _previous_dataset(output: Path, config: Config) -> dict | None:
    """The finished dataset in ``output`` to build on, or None for a fresh build.

    Raises OutputStateError when it was packed with other settings (unless --overwrite).
    """
    if config.run.overwrite or not (output / MANIFEST_NAME).exists():
        return None
    manifest = read_manifest(output)
    if manifest["fingerprint"] != config.fingerprint():
        changed = ", ".join(_changed_keys(manifest.get("config", {}), config.dataset_settings()))
        raise OutputStateError(
            f"{output} holds a dataset packed with different settings ({changed or 'version'}); "
            "pass --overwrite to replace it, or choose a new output directory"
        )
    return manifest


def _changed_keys(old: dict, new: dict, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two settings trees."""
    changed = []
    for key in sorted(set(old) | set(new)):
        before, after = old.get(key), new.get(key)
        if isinstance(before, dict) and isinstance(after, dict) and key != "splits":
            changed += _changed_keys(before, after, f"{prefix}{key}.")
        elif before != after:
            changed.append(f"{prefix}{key}")
    return changed


def _remove_unlisted_shards(output: Path, manifest: dict) -> None:
    listed = {shard["name"] for shard in manifest["shards"]}
    listed |= {shard["index"]["name"] for shard in manifest["shards"] if "index" in shard}
    for path in output.iterdir():
        if is_shard_file(path.name) and path.name not in listed:
            path.unlink()


def _clear_previous_output(output: Path) -> None:
    """Remove an earlier dataset's files (ours only) before a fresh run; refuse foreign files."""
    ours, foreign = [], []
    for entry in sorted(output.iterdir()):
        name = entry.name
        if name == STATE_DIR:
            continue  # holds our lock; the journal in it is started afresh
        if name in (MANIFEST_NAME, SAMPLES_NAME) or is_shard_file(name):
            ours.append(entry)
        elif name.startswith(".") and name.endswith(".tmp"):
            ours.append(entry)
        else:
            foreign.append(name)
    if foreign:
        shown = ", ".join(foreign[:3]) + (" ..." if len(foreign) > 3 else "")
        raise OutputStateError(
            f"{output} is not empty and holds files shardsmith did not write ({shown}); "
            "choose an empty or new output directory"
        )
    for entry in ours:
        if entry.is_dir():
            shutil.rmtree(entry)
        else:
            entry.unlink()
