"""Dataset versions: what a pack run starts from, and what it must redo.

A first pack starts from an empty ``Base`` and processes the whole plan.  A later pack over a
dataset with the same settings starts from that dataset:

* sources that are new, or changed (size, or mtime plus a quick content digest), are
  processed; everything else is not read, decoded or re-encoded;
* shards holding no changed or removed source stay as they are, byte for byte;
* a shard holding one is rewritten under a new name without the stale samples (their bytes
  are copied, not re-encoded), so the manifest never lists a sample whose source is gone or
  stale, and a later ``stage`` copies only new and rewritten shards;
* new samples go into new shards, numbered after the existing ones.

The rewrite is deterministic, so an interrupted increment that is run again produces the
same files under the same names.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import OutputStateError
from .formats import open_writer, shard_extension
from .imaging import quick_digest
from .manifest import content_fingerprint, read_samples, shard_name, shard_record
from .plan import PlanItem

SHARD_NUMBER = slice(-6, None)


@dataclass
class Base:
    """The dataset a run builds on (empty for a first pack) and the work left to do."""

    work: list[PlanItem]
    version: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    shards: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    rejects: list[dict[str, Any]] = field(default_factory=list)
    next_numbers: Counter = field(default_factory=Counter)
    obsolete: list[str] = field(default_factory=list)
    previous_shards: list[str] = field(default_factory=list)
    previous_fingerprint: str | None = None
    changes: dict[str, int] = field(default_factory=dict)

    @property
    def bytes_in(self) -> int:
        return sum(sample["source_size"] for sample in self.samples)


def prepare_base(
    output: Path,
    manifest: dict[str, Any] | None,
    plan: list[PlanItem],
    root: Path,
    fmt: str,
    classes: tuple[str, ...],
) -> Base:
    """Compare the previous version with the current plan and rewrite the affected shards."""
    if manifest is None:
        return Base(work=list(plan), changes={"added": len(plan), "changed": 0, "removed": 0})
    _check_classes(output, manifest["classes"], classes)
    old_samples = {sample["path"]: sample for sample in read_samples(output)}
    old_rejects = {r["path"]: r for r in manifest["rejects"] if "source_size" in r}
    current = {item.source.relpath: item for item in plan}

    stale: set[str] = set(old_samples) - set(current)  # removed sources
    removed = len(stale) + len(set(old_rejects) - set(current))
    redo: set[str] = set()
    kept_rejects = []
    touched: dict[str, int] = {}
    for path, item in current.items():
        if path in old_samples:
            before = old_samples[path]
            if (before["source_size"], before["source_mtime_ns"]) == (
                item.source.size, item.source.mtime_ns
            ):
                continue
            if before["source_size"] == item.source.size and before.get(
                "source_digest"
            ) == quick_digest(os.path.join(root, path)):
                touched[path] = item.source.mtime_ns  # same content, new mtime
                continue
            stale.add(path)
            redo.add(path)
        elif path in old_rejects:
            before = old_rejects[path]
            if (before["source_size"], before["source_mtime_ns"]) == (
                item.source.size, item.source.mtime_ns
            ):
                kept_rejects.append(before)
            else:
                redo.add(path)
        else:
            redo.add(path)
    added = sum(1 for path in redo if path not in old_samples and path not in old_rejects)

    base = Base(
        work=[item for item in plan if item.source.relpath in redo],
        version=manifest.get("version", 1),
        history=list(manifest.get("history", [])),
        rejects=kept_rejects,
        previous_fingerprint=content_fingerprint(manifest),
        previous_shards=[shard["name"] for shard in manifest["shards"]],
        changes={"added": added, "changed": len(redo) - added, "removed": removed,
                 "touched": len(touched)},
    )
    # Numbers only grow: a name, once used, never stands for other content.
    base.next_numbers.update(next_shard_numbers(manifest["shards"]))
    for split, number in manifest.get("next_shard_numbers", {}).items():
        base.next_numbers[split] = max(base.next_numbers[split], number)

    # One pass: the kept samples grouped by their shard, which shards hold stale ones.
    kept_by_shard: dict[str, list[dict[str, Any]]] = {}
    stale_shards = {old_samples[path]["shard"] for path in stale & set(old_samples)}
    for path, sample in old_samples.items():
        if path in stale:
            continue
        if path in touched:
            sample = dict(sample, source_mtime_ns=touched[path])
        kept_by_shard.setdefault(sample["shard"], []).append(sample)

    for shard in manifest["shards"]:
        kept = kept_by_shard.get(shard["name"], [])
        if shard["name"] not in stale_shards:
            base.shards.append(shard)
            base.samples += kept
            continue
        base.obsolete += [shard["name"]] + ([shard["index"]["name"]] if "index" in shard else [])
        if not kept:
            continue
        new_name = shard_name(shard["split"], base.next_numbers[shard["split"]],
                              shard_extension(fmt))
        base.next_numbers[shard["split"]] += 1
        writer = open_writer(fmt, output, new_name, shard["split"], classes)
        try:
            writer.copy_from(output / shard["name"], {sample["key"] for sample in kept})
        except BaseException:
            writer.discard()
            raise
        base.shards.append(shard_record(writer.close()))
        base.samples += [dict(sample, shard=new_name) for sample in kept]
    return base


def history_entry(base: Base, version: int, created: str, shards: list[dict]) -> dict[str, Any]:
    """What one version changed, for the manifest's history and ``shardsmith log``."""
    now = [shard["name"] for shard in shards]
    return {
        "version": version,
        "created": created,
        **base.changes,
        "shards_added": sorted(set(now) - set(base.previous_shards)),
        "shards_removed": sorted(set(base.previous_shards) - set(now)),
        "previous_content_fingerprint": base.previous_fingerprint,
    }


def _check_classes(output: Path, before: list[str], now: tuple[str, ...]) -> None:
    """Labels are indices into the class list: existing ones must keep their meaning."""
    if list(now[: len(before)]) != before:
        gone = sorted(set(before) - set(now))
        new = sorted(set(now) - set(before))
        raise OutputStateError(
            f"{output}: the class folders changed (new: {', '.join(new) or 'none'}; gone: "
            f"{', '.join(gone) or 'none'}) so existing labels would change meaning; pass "
            "--overwrite to rebuild, or choose a new output directory"
        )


def next_shard_numbers(shards: list[dict[str, Any]]) -> Counter:
    """Per split, one past the highest shard number in ``shards``."""
    numbers: Counter = Counter()
    for shard in shards:
        number = int(Path(shard["name"]).stem[SHARD_NUMBER])
        numbers[shard["split"]] = max(numbers[shard["split"]], number + 1)
    return numbers


def compact(
    shards: list[dict[str, Any]],
    numbers: Counter,
    output: Path,
    fmt: str,
    classes: tuple[str, ...],
    target_bytes: int,
    target_samples: int | None,
) -> tuple[list[dict[str, Any]], dict[str, str], list[str]]:
    """Merge shards under half the target size, per split, into full ones.

    Small shards pile up when every nightly increment adds a few hundred images.  Whole
    shards are merged in manifest order (their samples' bytes copied), so the result is
    deterministic.  ``numbers`` (next shard number per split) is advanced in place.
    Returns the new shard list, old name → new name, and obsolete files.
    """
    def small(shard: dict[str, Any]) -> bool:
        if target_samples is not None:
            return shard["samples"] < target_samples / 2
        return shard["bytes"] < target_bytes / 2

    by_split: dict[str, list[dict[str, Any]]] = {}
    for shard in shards:
        if small(shard):
            by_split.setdefault(shard["split"], []).append(shard)
    merge = {name for group in by_split.values() if len(group) > 1
             for name in (s["name"] for s in group)}
    if not merge:
        return shards, {}, []

    renamed: dict[str, str] = {}
    obsolete: list[str] = []
    merged: list[dict[str, Any]] = []
    for split, group in by_split.items():
        if len(group) < 2:
            continue
        writer = None
        for shard in group:
            too_big = writer is not None and (
                writer.samples + shard["samples"] > target_samples if target_samples
                else writer.bytes_written + shard["bytes"] > target_bytes
            )
            if too_big:
                merged.append(shard_record(writer.close()))
                writer = None
            if writer is None:
                name = shard_name(split, numbers[split], shard_extension(fmt))
                numbers[split] += 1
                writer = open_writer(fmt, output, name, split, classes)
            writer.copy_from(output / shard["name"])
            renamed[shard["name"]] = writer.name
            obsolete += [shard["name"]] + ([shard["index"]["name"]] if "index" in shard else [])
        merged.append(shard_record(writer.close()))
    kept = [shard for shard in shards if shard["name"] not in merge]
    return kept + merged, renamed, obsolete
