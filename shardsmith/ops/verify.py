"""``verify``: does a packed or staged directory hold exactly what its manifest promises?

Checks, per shard: a regular file of the listed size and sha256, that parses as its format
(tar members complete, with safe names; TFRecord framing with both CRCs), the listed sample
count, and its per-record index equal to the one its records give.  Across the directory: the
sample index intact and in agreement with the shards, the shard lists current, and no unlisted
shard files (in a staged copy, those are leftovers of an earlier stage: a note, not a
problem).  ``decode`` also decodes every image and compares its size with the sample index.

A missing or malformed manifest is a ``ManifestError`` (one line, exit 2); damaged content is
reported, one line per problem.

A dataset in a store (``s3://`` or another ``storage.BACKENDS`` location) is checked for what a
download would meet: every listed object there at its size and sha256 (streamed in ranged GETs),
the sample index, the shard lists and unlisted shard objects (its ``names()``).  Its records
are not parsed: stage it and verify the copy for that.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..dataset.agreement import IndexedObjects, disagreement, indexed_objects
from ..dataset.formats import SHARD_CAP, Placed, index_bytes, shard_format
from ..dataset.manifest import (
    LABEL_MAP_NAME,
    MANIFEST_NAME,
    FileEntry,
    Manifest,
    ShardEntry,
    SplitTotals,
    derived_contents,
    is_shard_file,
    iter_sample_index,
    kept_objects,
    read_manifest,
    shard_list_names,
)
from ..dataset.statedir import DatasetDir
from ..door import (
    LABEL_MAP_CAP,
    MANIFEST_CAP,
    SHARD_LIST_CAP,
    Refused,
    open_file,
    read_file,
    sha256_of,
)
from ..errors import ManifestError, ShardFormatError
from ..packing.changes import Tally, totals_found
from ..readers.sample_jpeg import MAX_SAMPLE_PIXELS
from ..storage import Location, is_url, location
from ..text import human_bytes, plural

DIGEST_MASK = (1 << 64) - 1
MAX_LABEL_PROBLEMS = 20  # label problems listed per shard (and for the sample index)


@dataclass
class VerifyReport:
    """What was checked, every problem found (one line each), and notes that are not."""

    directory: Path
    shards: int = 0
    samples: int = 0
    bytes: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        """``DIR: OK: 3 shards, 120 samples, 4.1 MB`` (or the number of problems)."""
        verdict = "OK" if self.ok else plural(len(self.problems), "problem")
        return (f"{self.directory}: {verdict}: {plural(self.shards, 'shard')}, "
                f"{plural(self.samples, 'sample')}, {human_bytes(self.bytes)}")


def _key_digest(key: str) -> int:
    """A 64-bit digest of a key; summed over a shard's keys, an order-free fingerprint of
    which samples it holds (one integer per shard, whatever its size)."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()[:8],
                          "big")


@dataclass
class _Expected:
    """What the sample index says a shard holds: its keys' summed digest, and with
    ``decode`` each key's (width, height)."""

    keys: int = 0
    sizes: dict[str, tuple[int, int]] = field(default_factory=dict)
    objects: dict[str, IndexedObjects] = field(default_factory=dict)


def verify(directory: str | Location, decode: bool = False,
           workers: int = 4) -> VerifyReport:
    """Check ``directory`` (a folder, an ``s3://`` URL or a location) against its manifest;
    the report lists every problem found.

    Raises ManifestError when there is no readable, valid manifest.
    """
    directory = location(directory)
    manifest = read_manifest(directory)
    report = VerifyReport(directory)
    expected, index_problems = _read_sample_index(directory, manifest, decode)
    report.problems += index_problems
    report.problems += count_problems(manifest)

    remote = is_url(directory)  # opened without a descriptor: its records are not parsed
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        results = pool.map(
            lambda shard: [problem for entry in shard.files()  # in a bucket: sizes, sha256
                           if (problem := _check_file(directory, entry)) is not None]
            if remote else _check_shard(directory, manifest, shard, expected.get(shard.name),
                                        decode),
            manifest.shards,
        )
        for shard, problems in zip(manifest.shards, results, strict=True):
            report.problems += problems
            report.shards += 1
            report.samples += shard.samples
            report.bytes += shard.bytes

    for name, content in (derived_contents(manifest).items() if manifest.current else ()):
        cap = LABEL_MAP_CAP if name == LABEL_MAP_NAME else SHARD_LIST_CAP
        try:
            if read_file(directory / name, cap) != content:
                report.problems.append(f"{name}: does not list the manifest's " + (
                    "object classes" if name == LABEL_MAP_NAME else "shards"))
        except Refused as exc:
            report.problems.append(f"{name}: {exc.detail}")
        except OSError:
            report.problems.append(f"{name}: missing")

    report.problems += _changes_problems(directory, manifest)
    listed = {entry.name for entry in manifest.files()}
    present = directory.names() if remote else [entry.name for entry in os.scandir(directory)]
    unlisted = sorted(name for name in present if is_shard_file(name) and name not in listed)
    unfinished = DatasetDir(directory).journal.exists()
    kept = _kept_in_bucket(directory) if remote and unlisted else frozenset()
    if remote and decode:
        report.notes.append("--decode: records in a bucket are not decoded; stage the "
                            "dataset and verify the copy")
    for name in unlisted:
        if manifest.staged is not None:
            report.notes.append(f"{name}: not listed, left from an earlier stage; "
                                "stage --prune removes it")
        elif name in kept:
            report.notes.append(f"{name}: not listed, kept from the previous version for a "
                                "stage copying it; the next pack removes it")
        elif unfinished:
            report.notes.append(f"{name}: not listed yet, written by a pack that has not "
                                "finished; rerun the pack to finish (or it removes it)")
        else:
            report.problems.append(f"{name}: shard file not listed in the manifest")
    return report


def _changes_problems(directory: Path, manifest: Manifest) -> list[str]:
    """Each changes file the manifest names: a regular file of its size and sha256."""
    problems = []
    for entry in manifest.changes:
        try:
            with open_file(directory / entry.name, entry.bytes) as handle:
                if handle.size != entry.bytes:
                    problems.append(f"{entry.name}: {handle.size:,} bytes, manifest says "
                                    f"{entry.bytes:,}")
                elif sha256_of(handle, entry.bytes) != entry.sha256:
                    problems.append(f"{entry.name}: sha256 differs from the manifest")
        except Refused as exc:
            problems.append(f"{entry.name}: {exc.detail}")
        except OSError:
            problems.append(f"{entry.name}: missing")
    return problems


def _read_sample_index(directory: Path, manifest: Manifest,
                       decode: bool) -> tuple[dict[str, _Expected], list[str]]:
    """Check the sample index against the manifest: its bytes, its lines, its counts, its
    labels.

    Returns, per shard, what it should hold (``_Expected``).
    """
    per_shard: dict[str, _Expected] = defaultdict(_Expected)
    counts: Counter = Counter()
    problems = []
    classes = len(manifest.classes)
    tally = Tally(manifest.classes, manifest.object_classes)
    try:
        for record in iter_sample_index(directory, manifest):
            counts[record.shard] += 1
            tally.add(record.split, record.label, record.objects, record.path,
                      record.source_size)
            expected = per_shard[record.shard]
            expected.keys = (expected.keys + _key_digest(record.key)) & DIGEST_MASK
            if decode:
                expected.sizes[record.key] = (record.width, record.height)
                expected.objects[record.key] = indexed_objects(record)
            if not -1 <= record.label < classes and len(problems) < MAX_LABEL_PROBLEMS:
                problems.append(f"{manifest.samples_index.name}: sample {record.key} has "
                                f"label {record.label}, not one of the {classes} classes")
    except ManifestError as exc:
        return {}, [str(exc)]
    listed = {shard.name: shard.samples for shard in manifest.shards}
    name = manifest.samples_index.name
    lines = sum(counts.values())
    if manifest.current and lines != manifest.samples_index.samples:
        problems.append(f"{name}: {plural(lines, 'line')}, manifest says "
                        f"{manifest.samples_index.samples}")
    for shard, count in sorted(counts.items()):
        if shard not in listed:
            problems.append(f"{name}: {plural(count, 'sample')} in {shard}, a shard not "
                            "listed")
        elif count != listed[shard]:
            problems.append(f"{name}: {plural(count, 'sample')} in {shard}, manifest says "
                            f"{listed[shard]}")
    for shard in sorted(set(listed) - set(counts)):
        if listed[shard]:
            problems.append(f"{name}: no samples in {shard}, manifest says {listed[shard]}")
    recorded, counted = totals_found(manifest.totals, tally)["bytes in"]
    if (manifest.staged is None or manifest.staged.get("split") is None) \
            and recorded != counted:
        problems.append(f"manifest: totals.bytes_in is {recorded}, its sample index gives "
                        f"{counted} (the next pack corrects it)")
    return per_shard, problems


def count_problems(manifest: Manifest) -> list[str]:
    """Where the manifest's own numbers disagree: each split's totals with its shards, the
    dataset's totals with its shards, rejects and exclusions, and the shard lists with the
    names its splits give (each one once)."""
    problems = []
    for split, totals in manifest.splits.items():
        shards = [shard for shard in manifest.shards if shard.split == split]
        actual = SplitTotals(sum(shard.samples for shard in shards), len(shards),
                             sum(shard.bytes for shard in shards))
        for what in ("samples", "shards", "bytes"):
            if getattr(totals, what) != getattr(actual, what):
                problems.append(f"manifest: splits.{split}.{what} is {getattr(totals, what)}, "
                                f"its shards give {getattr(actual, what)}")
    totals = manifest.totals
    whole = manifest.staged is None or manifest.staged.get("split") is None
    packed = sum(shard.samples for shard in manifest.shards)
    if whole and totals.packed != packed:
        problems.append(f"manifest: totals.packed is {totals.packed}, its shards hold {packed}")
    originals = totals.packed if totals.sources is None else totals.sources
    if totals.seen != originals + totals.rejected + totals.excluded:
        problems.append(f"manifest: totals.seen is {totals.seen}, not "
                        f"{'packed' if totals.sources is None else 'sources'} + rejected + "
                        f"excluded ({originals + totals.rejected + totals.excluded})")
    if totals.rejected != len(manifest.rejects):
        problems.append(f"manifest: totals.rejected is {totals.rejected}, it lists "
                        f"{len(manifest.rejects)} rejects")
    if manifest.current:
        expected = [name for split in manifest.splits
                    for name in shard_list_names(split, manifest.format)]
        if sorted(manifest.shard_lists) != sorted(expected):
            problems.append("manifest: shard_lists is [" + ", ".join(manifest.shard_lists)
                            + "], its splits give [" + ", ".join(expected) + "]")
    return problems


def _check_file(directory: Path, entry: FileEntry) -> str | None:
    """A problem with a listed file's presence, kind, size or digest, or None (the file
    opened through the door: a link, FIFO or device is a problem, never read)."""
    try:
        handle = open_file(directory / entry.name, SHARD_CAP)
    except Refused as exc:
        return f"{entry.name}: not a regular file ({exc.detail})"
    except FileNotFoundError:
        return f"{entry.name}: missing"
    except OSError:
        if is_url(directory):
            raise  # an unreachable store is not a missing object: one line, not a report
        return f"{entry.name}: missing"
    with handle:
        if handle.size != entry.bytes:
            return f"{entry.name}: {handle.size} bytes, manifest says {entry.bytes}"
        if sha256_of(handle, entry.bytes) != entry.sha256:
            return f"{entry.name}: sha256 differs from the manifest (corrupt)"
    return None


def _check_shard(directory: Path, manifest: Manifest, shard: ShardEntry,
                 expected: _Expected | None, decode: bool) -> list[str]:
    classes = len(manifest.classes)
    object_classes = len(manifest.object_classes or ())
    problem = _check_file(directory, shard.file)
    if problem is not None and not problem.endswith("(corrupt)"):
        return [problem]
    problems = [problem] if problem else []
    fmt = shard_format(manifest.format)
    placed = []
    keys = 0
    try:
        for offset, record in fmt.records(directory / shard.name, shard.bytes):
            placed.append(Placed(offset, len(record.data), record.key, record.members))
            keys = (keys + _key_digest(record.key)) & DIGEST_MASK
            label = fmt.label(record)
            if not -1 <= label < classes and len(problems) < MAX_LABEL_PROBLEMS:
                problems.append(f"{shard.name}: sample {record.key} has label {label}, not "
                                f"one of the {classes} classes")
            if decode:
                sizes = expected.sizes if expected is not None else None
                _check_image(shard.name, record.key, fmt.jpeg(record), sizes, problems)
                _check_metadata(fmt, shard.name, record, problems,
                                expected.objects if expected is not None else {})
                if len(problems) < MAX_LABEL_PROBLEMS:
                    problems += [f"{shard.name}: sample {record.key}: {problem}" for problem in
                                 fmt.record_problems(record, (sizes or {}).get(record.key),
                                                     object_classes)]
    except ShardFormatError as exc:
        return problems + [f"{shard.name}: {exc}"]
    if len(placed) != shard.samples:
        problems.append(f"{shard.name}: holds {plural(len(placed), 'sample')}, manifest says "
                        f"{shard.samples}")
    elif expected is not None and keys != expected.keys:
        problems.append(f"{shard.name}: its samples are not the ones the sample index lists "
                        "for it (a shard of another split or version copied over it?)")
    if shard.index is None:
        return problems  # a tar of a dataset packed before indexes existed
    index_problem = _check_file(directory, shard.index)
    if index_problem is not None:
        problems.append(index_problem)
    elif _read_index(directory, shard) != index_bytes(fmt, placed):
        problems.append(f"{shard.index.name}: does not match the records of {shard.name}")
    return problems


def _check_metadata(fmt, shard: str, record, problems: list[str],
                    indexed: dict[str, IndexedObjects]) -> None:
    """The sample's metadata as every consumer reads it (``ShardFormat.metadata``: its
    objects' boxes held to the one geometry check), and its objects as its index line
    (``indexed``) says them (``dataset.agreement``): a problem when it is not."""
    if len(problems) >= MAX_LABEL_PROBLEMS:
        return
    try:
        metadata = fmt.metadata(record)
    except ShardFormatError as exc:
        problems.append(f"{shard}: {exc}")
        return
    listed = indexed.get(record.key)
    problem = disagreement(listed, metadata) if listed is not None else None
    if problem is not None:
        problems.append(f"{shard}: sample {record.key}: {problem}")


def _read_index(directory: Path, shard: ShardEntry) -> bytes | None:
    """The per-record index of ``shard`` through the door, within its listed size."""
    try:
        return read_file(directory / shard.index.name, shard.index.bytes)
    except (Refused, OSError):
        return None


def _check_image(shard: str, key: str, jpeg: bytes, expected: dict | None,
                 problems: list[str]) -> None:
    import simplejpeg

    try:
        height, width, _, _ = simplejpeg.decode_jpeg_header(jpeg)
    except ValueError as exc:
        problems.append(f"{shard}: sample {key} does not decode ({exc})")
        return
    if expected is not None and expected.get(key) != (width, height):
        problems.append(  # not decoded: its header may claim any size (a 16 px bomb)
            f"{shard}: sample {key} is {width}x{height}, the index says {expected.get(key)}"
        )
        return
    if height * width > MAX_SAMPLE_PIXELS:
        problems.append(f"{shard}: sample {key} claims {width}x{height} pixels (not decoded)")
        return
    try:
        simplejpeg.decode_jpeg(jpeg, colorspace="GRAY", strict=True)
    except ValueError as exc:
        problems.append(f"{shard}: sample {key} does not decode ({exc})")


def _kept_in_bucket(directory: Location) -> frozenset[str]:
    """The previous version's objects a bucket keeps until its next commit."""
    try:
        manifest = read_file(directory / MANIFEST_NAME, MANIFEST_CAP)
    except (OSError, Refused):
        return frozenset()
    return kept_objects(directory, hashlib.sha256(manifest).hexdigest())
