"""The manifest of the version a pack run commits: what it holds, what changed, how it ran."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone

from .. import __version__
from ..dataset.manifest import (
    ANNOTATION_RULES,
    MAX_SHARD_NUMBER,
    MAX_VERSION,
    SCHEMA_VERSION,
    Manifest,
    RejectEntry,
    SampleIndexEntry,
    ShardEntry,
    SplitTotals,
    Totals,
    VersionEntry,
    shard_list_names,
)
from ..errors import OutputStateError
from . import nearhash
from .delta import Execution, Job, Outcome
from .incremental import Rewritten


def version_manifest(job: Job, outcome: Outcome, execution: Execution,
                     done: Rewritten, more_notes: Sequence[str] = ()) -> Manifest:
    """The new version's manifest, less its sample index (written next, from the records):
    what ``job`` packed, what changed (``outcome``), how the run went (``execution``), and
    the shards the version lists (``done``, with the shard numbers it used); ``more_notes``
    go into its history entry's note."""
    config, scanned, delta, shards = job.config, job.scanned, outcome.delta, done.shards
    previous, state = delta.previous, execution.state
    scan_rejects = [RejectEntry(path, "unreadable", detail) for path, detail in scanned.unreadable]
    scan_rejects += [RejectEntry(path, "bad_annotation", detail)
                     for path, detail in scanned.bad_annotations]
    rejects = scan_rejects + list(delta.kept_rejects) + state.rejects
    seconds = time.monotonic() - job.started
    splits = {name: SplitTotals() for name, _ in config.splits}
    for shard in shards:
        totals = splits[shard.split]
        splits[shard.split] = SplitTotals(totals.samples + shard.samples, totals.shards + 1,
                                          totals.bytes + shard.bytes)
    packed = sum(shard.samples for shard in shards)
    excluded = sum(scanned.excluded.values())
    # Tiles: many samples an original; every planned original is packed or rejected.
    sources = len(job.plan) - len(delta.kept_rejects) - len(state.rejects) \
        if config.image.tiles.enabled else None
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    version = delta.version + 1
    notes = [] if previous is None or previous.current else \
        [f"upgraded from schema {previous.schema_version}"]
    if previous is not None and config.output.near_hashes \
            and previous.near_hash != nearhash.CURRENT:
        notes.append("near-duplicate hashes made from the stored samples")
    reannotated = outcome.changes.get("reannotated", 0)
    if reannotated and previous is not None:
        notes.append(f"{reannotated:,} re-annotated: objects derived by annotation rules "
                     f"{ANNOTATION_RULES}, not {previous.rules}")
    notes += more_notes
    decoded = state.next_index - execution.resumed_at - execution.unchanged
    _check_numbers(version, done.numbers)
    manifest = Manifest(
        schema_version=SCHEMA_VERSION,
        version=version,
        created=created,
        tool={"name": "shardsmith", "version": __version__, "libraries": _library_versions()},
        source=str(job.source),
        config=config.dataset_settings(),
        fingerprint=config.fingerprint(),
        sources_fingerprint=job.sources_fingerprint,
        previous_content_fingerprint=previous.content_fingerprint if previous else None,
        format=config.output.format,
        classes=scanned.classes,
        splits=splits,
        shards=shards,
        samples_index=SampleIndexEntry("samples.jsonl", 0, "0" * 64),  # replaced before commit
        rejects=tuple(rejects),
        excluded=dict(sorted(scanned.excluded.items())),
        excluded_paths={reason: tuple(paths) for reason, paths in scanned.excluded_paths.items()},
        totals=Totals(
            seen=(packed if sources is None else sources) + len(rejects) + excluded,
            packed=packed,
            rejected=len(rejects),
            excluded=excluded,
            # this run's originals; what the version holds is counted from its index as it
            # is written (``ChangesRecorder.settle``): adding the previous total counted the
            # removed and the replaced originals again
            bytes_in=state.bytes_in,
            bytes_out=sum(shard.bytes for shard in shards),
            sources=sources,
        ),
        history=(*(previous.history if previous else ()),
                 _history_entry(outcome, version, created, shards, "; ".join(notes) or None)),
        run={
            "seconds": round(seconds, 3),
            "images_per_second": round(decoded / max(seconds, 1e-9), 2),
            "decoded": decoded,
            "resumed_at": execution.resumed_at,
            "workers": config.run.worker_count,
        },
        next_shard_numbers=dict(sorted(done.numbers.items())),
        shard_lists=tuple(name for split, _ in config.splits
                          for name in shard_list_names(split, config.output.format)),
    )
    if execution.object_classes is not None:
        manifest = replace(manifest, object_classes=execution.object_classes,
                           annotation_rules=ANNOTATION_RULES)
    return manifest


def _check_numbers(version: int, numbers: Mapping[str, int]) -> None:
    """Never publish a number the manifest model refuses on reading: the next run would fail."""
    if version > MAX_VERSION:
        raise OutputStateError(f"the dataset has reached version {version - 1}, the last one "
                               "shardsmith numbers; pack with --overwrite to start afresh")
    for split, number in numbers.items():
        if number > MAX_SHARD_NUMBER:
            raise OutputStateError(f"split {split} has used every shard number up to "
                                   f"{MAX_SHARD_NUMBER}; pack with --overwrite "
                                   "to number its shards afresh")


def _history_entry(outcome: Outcome, version: int, created: str,
                   shards: Sequence[ShardEntry], note: str | None) -> VersionEntry:
    """What one version changed, for the manifest's history and ``shardsmith log``."""
    previous = outcome.delta.previous
    before = {shard.name for shard in previous.shards} if previous else set()
    now = {shard.name for shard in shards}
    changes = outcome.changes
    return VersionEntry(
        version=version, created=created, added=changes.get("added", 0),
        changed=changes.get("changed", 0), removed=changes.get("removed", 0),
        rejected=changes.get("rejected", 0), touched=changes.get("touched", 0),
        repaired=changes.get("repaired", 0), reannotated=changes.get("reannotated") or None,
        shards_added=tuple(sorted(now - before)), shards_removed=tuple(sorted(before - now)),
        previous_content_fingerprint=previous.content_fingerprint if previous else None,
        note=note,
    )


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
