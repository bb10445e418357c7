"""Upgrades keep datasets (issue 9): a dataset written by the previous release verifies, stages,
reads, and the next pack upgrades it without decoding or overwriting a shard.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from hostile_helpers import (
    cli,
    crashed,
    index_bytes,
    pack_cli,
    packed,
    sha256,
    write_manifest,
)

from images import manifest_of, samples_of

# ``Config.fingerprint()`` of PACK_ARGS as release 51667eb (schema 1) computed it.
PREVIOUS_RELEASE_FINGERPRINT = "537c544b24948269ff5afda8a01b36d90b5f2d97849f0925b8dbb31da61e392d"


def previous_release_digest(path: Path) -> str:
    """51667eb's ``quick_digest``: sha256 of the size, the first and the last 64 KiB."""
    data, edge = path.read_bytes(), 64 * 1024
    digest = hashlib.sha256(str(len(data)).encode())
    digest.update(data[:edge])
    if len(data) > edge:
        digest.update(data[max(edge, len(data) - edge) :][:edge])
    return digest.hexdigest()[:32]


def as_previous_release(dataset: Path, source: Path) -> None:
    """Rewrite a fresh dataset as 51667eb wrote it: schema 1, ``samples.jsonl``, no ``.idx``
    beside tars, no shard lists, no ``index`` key on tar shards, head/tail source digests."""
    manifest = manifest_of(dataset)
    records = [dict(record, source_digest=previous_release_digest(source / record["path"]))
               for record in samples_of(dataset)]
    data = index_bytes(records)
    (dataset / manifest["samples_index"]["name"]).unlink()
    (dataset / "samples.jsonl").write_bytes(data)
    for shard in manifest["shards"]:
        (dataset / shard.pop("index")["name"]).unlink()
    for shard_list in dataset.glob("*-shards.*"):
        shard_list.unlink()
    manifest["schema_version"] = 1
    for fact in ("image_size", "image_resize", "has_masks"):  # recorded since issue 17
        del manifest[fact]
    manifest["samples_index"] = {"name": "samples.jsonl", "samples": len(records),
                                 "bytes": len(data), "sha256": sha256(data)}
    for version in manifest["history"]:
        version.pop("repaired", None)
        version.pop("note", None)
    listing = [(shard["name"], shard["sha256"]) for shard in manifest["shards"]]
    listing.append(("samples.jsonl", sha256(data)))
    manifest["content_fingerprint"] = sha256(json.dumps(listing).encode())
    write_manifest(dataset, manifest)


def previous_release_dataset(tmp_path: Path) -> Path:
    dataset = packed(tmp_path)
    as_previous_release(dataset, tmp_path / "source")
    return dataset


def test_a_dataset_of_the_previous_release_passes_verify(tmp_path):
    dataset = previous_release_dataset(tmp_path)
    result = cli("verify", dataset, "--decode")
    assert result.exit_code == 0, result.output + crashed(result)


def test_a_dataset_of_the_previous_release_stages_and_its_copy_verifies(tmp_path):
    dataset = previous_release_dataset(tmp_path)
    staged = tmp_path / "nvme"
    result = cli("stage", dataset, "--to", staged, "--quiet")
    assert result.exit_code == 0, result.output + crashed(result)
    verified = cli("verify", staged, "--decode")
    assert verified.exit_code == 0, verified.output


def test_the_torch_reader_reads_a_dataset_of_the_previous_release(tmp_path):
    from shardsmith.readers.torch import dataset as torch_dataset

    dataset = previous_release_dataset(tmp_path)
    samples = list(torch_dataset(dataset, shuffle=False))
    assert len(samples) == 6
    assert all(image.shape[0] == 3 and max(image.shape[1:]) == 32 for image, _ in samples)


def test_the_next_pack_upgrades_the_previous_release_without_decoding_or_overwrite(tmp_path):
    dataset = previous_release_dataset(tmp_path)
    before = {s["name"]: (s["bytes"], s["sha256"]) for s in manifest_of(dataset)["shards"]}
    result = pack_cli(tmp_path / "source", dataset)
    assert result.exit_code == 0, result.output + crashed(result)
    manifest = manifest_of(dataset)
    assert manifest["schema_version"] == 2 and manifest["version"] == 2
    assert manifest["run"]["decoded"] == 0
    assert manifest["image_size"] == 32 and manifest["has_masks"] is False  # facts recorded
    assert {s["name"]: (s["bytes"], s["sha256"]) for s in manifest["shards"]} == before
    assert all((dataset / s["index"]["name"]).exists() for s in manifest["shards"])
    assert cli("verify", dataset, "--decode").exit_code == 0


def test_new_settings_at_their_defaults_keep_the_fingerprint_of_the_previous_release(tmp_path):
    assert manifest_of(packed(tmp_path))["fingerprint"] == PREVIOUS_RELEASE_FINGERPRINT
