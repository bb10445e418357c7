"""The manifest of the version a pack run commits: what it holds, what changed, how it ran."""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from . import __version__
from .config import Config
from .errors import OutputStateError
from .incremental import Base, history_entry
from .journal import JournalState
from .manifest import (
    MAX_SHARD_NUMBER,
    MAX_VERSION,
    SCHEMA_VERSION,
    Manifest,
    RejectEntry,
    SampleIndexEntry,
    ShardEntry,
    SplitTotals,
    Totals,
    shard_list_names,
)
from .scan import ScanResult

PLACEHOLDER = "0" * 64


def version_manifest(
    config: Config,
    source: Path,
    base: Base,
    state: JournalState,
    shards: list[ShardEntry],
    scanned: ScanResult,
    plan_fingerprint: str,
    started: float,
    resumed_at: int,
    numbers: Counter,
    unchanged: int,
    planned: int,
) -> Manifest:
    """The new version's manifest, less its sample index (written next, from the records)."""
    scan_rejects = [RejectEntry(path, "unreadable", detail) for path, detail in scanned.unreadable]
    scan_rejects += [RejectEntry(path, "bad_annotation", detail)
                     for path, detail in scanned.bad_annotations]
    rejects = scan_rejects + base.kept_rejects + state.rejects
    seconds = time.monotonic() - started
    splits = {name: SplitTotals() for name, _ in config.splits}
    for shard in shards:
        totals = splits[shard.split]
        splits[shard.split] = SplitTotals(totals.samples + shard.samples, totals.shards + 1,
                                          totals.bytes + shard.bytes)
    packed = sum(shard.samples for shard in shards)
    excluded = sum(scanned.excluded.values())
    # Tiles: many samples an original; every planned original is packed or rejected.
    sources = planned - len(base.kept_rejects) - len(state.rejects) \
        if config.image.tiles.enabled else None
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    version = base.version + 1
    upgrade = None if base.previous is None or base.previous.current else \
        f"upgraded from schema {base.previous.schema_version}"
    decoded = state.next_index - resumed_at - unchanged
    _check_numbers(version, numbers)
    return Manifest(
        schema_version=SCHEMA_VERSION,
        version=version,
        created=created,
        tool={"name": "shardsmith", "version": __version__, "libraries": _library_versions()},
        source=str(source),
        config=config.dataset_settings(),
        fingerprint=config.fingerprint(),
        sources_fingerprint=plan_fingerprint,
        previous_content_fingerprint=(base.previous.content_fingerprint
                                      if base.previous else None),
        format=config.output.format,
        classes=scanned.classes,
        splits=splits,
        shards=tuple(shards),
        samples_index=_placeholder_index(),
        rejects=tuple(rejects),
        excluded=dict(sorted(scanned.excluded.items())),
        excluded_paths={reason: tuple(paths) for reason, paths in scanned.excluded_paths.items()},
        totals=Totals(
            seen=(packed if sources is None else sources) + len(rejects) + excluded,
            packed=packed,
            rejected=len(rejects),
            excluded=excluded,
            bytes_in=_bytes_in(base, state),
            bytes_out=sum(shard.bytes for shard in shards),
            sources=sources,
        ),
        history=(*(base.previous.history if base.previous else ()),
                 history_entry(base, version, created, shards, upgrade)),
        run={
            "seconds": round(seconds, 3),
            "images_per_second": round(decoded / max(seconds, 1e-9), 2),
            "decoded": decoded,
            "resumed_at": resumed_at,
            "workers": config.run.worker_count,
        },
        next_shard_numbers=dict(sorted(numbers.items())),
        shard_lists=tuple(name for split, _ in config.splits
                          for name in shard_list_names(split, config.output.format)),
    )


def _check_numbers(version: int, numbers: Counter) -> None:
    """Never publish a number the manifest model refuses on reading: the next run would fail."""
    if version > MAX_VERSION:
        raise OutputStateError(f"the dataset has reached version {version - 1}, the last one "
                               "shardsmith numbers; pack with --overwrite to start afresh")
    for split, number in numbers.items():
        if number > MAX_SHARD_NUMBER:
            raise OutputStateError(f"split {split} has used every shard number up to "
                                   f"{MAX_SHARD_NUMBER}; pack with --overwrite "
                                   "to number its shards afresh")


def _placeholder_index() -> SampleIndexEntry:
    return SampleIndexEntry("samples.jsonl", 0, PLACEHOLDER)  # replaced before the commit


def _bytes_in(base: Base, state: JournalState) -> int:
    return state.bytes_in + (base.previous.totals.bytes_in if base.previous else 0)


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
