"""``verify``: does a packed or staged directory hold exactly what its manifest promises?

Checks, per shard: present, right size, right sha256, parses as its format (tar members
complete; TFRecord framing with both CRCs), sample count as listed, TFRecord index consistent
with the records.  Across the directory: no unlisted shard files, the sample index intact and
in agreement with the shards.  ``decode`` additionally decodes every image and compares its
size with the sample index.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ManifestError
from .formats import ShardFormatError
from .manifest import MANIFEST_NAME, SAMPLES_NAME, is_shard_file, read_manifest

CHUNK = 8 * 1024 * 1024


@dataclass
class VerifyReport:
    """What was checked and every problem found (one line each)."""

    directory: Path
    shards: int = 0
    samples: int = 0
    bytes: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def file_sha256(path: Path) -> str:
    """sha256 of a file, read in large chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def verify(directory: str | Path, decode: bool = False, workers: int = 4) -> VerifyReport:
    """Check ``directory`` against its manifest; the report lists every problem found."""
    directory = Path(directory)
    report = VerifyReport(directory)
    try:
        manifest = read_manifest(directory)
    except ManifestError as exc:
        report.problems.append(str(exc))
        return report

    expected_sizes, index_problems = _read_sample_index(directory, manifest, decode)
    report.problems += index_problems

    shards = manifest["shards"]
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        results = pool.map(
            lambda shard: _check_shard(directory, manifest["format"], shard,
                                       expected_sizes.get(shard["name"]), decode),
            shards,
        )
        for shard, problems in zip(shards, results, strict=True):
            report.problems += problems
            report.shards += 1
            report.samples += shard["samples"]
            report.bytes += shard["bytes"]

    listed = {MANIFEST_NAME, SAMPLES_NAME}
    for shard in shards:
        listed.add(shard["name"])
        if "index" in shard:
            listed.add(shard["index"]["name"])
    for path in sorted(directory.iterdir()):
        if is_shard_file(path.name) and path.name not in listed:
            report.problems.append(f"{path.name}: shard file not listed in the manifest")
    return report


def _read_sample_index(
    directory: Path, manifest: dict[str, Any], decode: bool
) -> tuple[dict[str, Any], list[str]]:
    """Check samples.jsonl against the manifest.

    Returns, per shard, the expected {key: (width, height)} when decoding (else nothing).
    """
    problems: list[str] = []
    info = manifest.get("samples_index")
    path = directory / SAMPLES_NAME
    if info is None:
        return {}, [f"{MANIFEST_NAME}: no samples_index entry"]
    try:
        if path.stat().st_size != info["bytes"] or file_sha256(path) != info["sha256"]:
            problems.append(f"{SAMPLES_NAME}: size or sha256 differs from the manifest")
    except OSError as exc:
        return {}, [f"{SAMPLES_NAME}: {exc.strerror}"]
    per_shard: dict[str, Any] = defaultdict(dict) if decode else Counter()
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                sample = json.loads(line)
                if decode:
                    per_shard[sample["shard"]][sample["key"]] = (sample["width"], sample["height"])
                else:
                    per_shard[sample["shard"]] += 1
    except (ValueError, KeyError) as exc:
        return {}, problems + [f"{SAMPLES_NAME}: unreadable line ({exc})"]
    listed = {shard["name"]: shard["samples"] for shard in manifest["shards"]}
    for name, entries in per_shard.items():
        count = len(entries) if decode else entries
        if name not in listed:
            problems.append(f"{SAMPLES_NAME}: {count} samples in {name}, a shard not listed")
        elif count != listed[name]:
            problems.append(f"{SAMPLES_NAME}: {count} samples in {name}, manifest says "
                            f"{listed[name]}")
    return (per_shard if decode else {}), problems


def _check_shard(
    directory: Path, fmt: str, shard: dict[str, Any], expected: dict | None, decode: bool
) -> list[str]:
    name = shard["name"]
    path = directory / name
    try:
        size = path.stat().st_size
    except OSError:
        return [f"{name}: missing"]
    if size != shard["bytes"]:
        return [f"{name}: {size} bytes, manifest says {shard['bytes']}"]
    problems = []
    if file_sha256(path) != shard["sha256"]:
        problems.append(f"{name}: sha256 differs from the manifest (corrupt)")
    try:
        if fmt == "tfrecord":
            count = _check_tfrecord(directory, shard, expected, decode, problems)
        else:
            count = _check_tar(path, expected, decode, problems)
    except ShardFormatError as exc:
        return problems + [f"{name}: {exc}"]
    if count != shard["samples"]:
        problems.append(f"{name}: holds {count} samples, manifest says {shard['samples']}")
    return problems


def _check_tar(path: Path, expected: dict | None, decode: bool, problems: list[str]) -> int:
    from .formats.webdataset import iter_samples

    count = 0
    for key, members in iter_samples(path, with_data=decode):
        count += 1
        if decode:
            _check_image(path.name, key, members["jpg"], expected, problems)
    return count


def _check_tfrecord(
    directory: Path, shard: dict[str, Any], expected: dict | None, decode: bool,
    problems: list[str],
) -> int:
    from .formats.tfrecord import decode_example, iter_records

    path = directory / shard["name"]
    offsets = []
    for offset, payload in iter_records(path):
        offsets.append(f"{offset} {len(payload) + 16}\n")
        if decode:
            features = decode_example(payload)
            _check_image(shard["name"], features["image/key"].decode(),
                         features["image/encoded"], expected, problems)
    index = shard.get("index")
    if index is None:
        problems.append(f"{shard['name']}: manifest lists no index file")
    else:
        index_path = directory / index["name"]
        try:
            if index_path.read_text() != "".join(offsets):
                problems.append(f"{index['name']}: does not match the records of {shard['name']}")
            elif file_sha256(index_path) != index["sha256"]:
                problems.append(f"{index['name']}: sha256 differs from the manifest")
        except OSError:
            problems.append(f"{index['name']}: missing")
    return len(offsets)


def _check_image(shard: str, key: str, jpeg: bytes, expected: dict | None,
                 problems: list[str]) -> None:
    import simplejpeg

    try:
        height, width, _, _ = simplejpeg.decode_jpeg_header(jpeg)
        simplejpeg.decode_jpeg(jpeg, colorspace="GRAY", strict=True)
    except ValueError as exc:
        problems.append(f"{shard}: sample {key} does not decode ({exc})")
        return
    if expected is not None and expected.get(key) != (width, height):
        problems.append(
            f"{shard}: sample {key} is {width}x{height}, the index says {expected.get(key)}"
        )
