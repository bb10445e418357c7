"""A sample key is unique in a dataset.  One key in two splits, forged consistently (shards,
their indexes, the sample index, the counts and digests all agree), is named by ``verify`` and
refused in one line by every consumer: each export layout, the readers' sample table (the
Ultralytics dataset, torch, DALI) and the torch reader; an export never writes a file over one
it wrote in the same run."""

from __future__ import annotations

import hashlib
import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hostile_helpers import index_bytes, replace_sample_index
from test_export_task import packed, shardsmith

import defects
import images


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def key_in_two_splits(dataset: Path, copy: Path) -> str:
    """A copy of ``dataset`` where a train sample is also in the val shard (its members and
    metadata, split val), every count, size and digest made to agree; returns its key."""
    from shardsmith.dataset.formats import Placed
    from shardsmith.dataset.formats import index_bytes as shard_index
    from shardsmith.dataset.formats.webdataset import WebDatasetFormat, _record
    from shardsmith.dataset.manifest import derived_contents, read_manifest

    shutil.copytree(dataset, copy)
    fmt = WebDatasetFormat()
    members = defects.members(copy)
    manifest = images.manifest_of(copy)
    lines = images.samples_of(copy)
    twin = next(line for line in lines if line["split"] == "train")
    shard = next(entry for entry in manifest["shards"] if entry["split"] == "val")
    keys = [record.key for _, record in fmt.records(copy / shard["name"], shard["bytes"])]
    data, placed = b"", []
    for key in [*keys, twin["key"]]:
        sample = dict(members[key])
        if key == twin["key"]:
            metadata = json.loads(sample["json"])
            metadata["split"] = "val"
            sample["json"] = json.dumps(metadata).encode()
        record = _record(key, sample)
        placed.append(Placed(len(data), len(record.data), key, record.members))
        data += record.data
    data += fmt.trailer(len(data))
    index = shard_index(fmt, placed)
    (copy / shard["name"]).write_bytes(data)
    (copy / shard["index"]["name"]).write_bytes(index)
    grown = len(data) - shard["bytes"]
    shard.update(bytes=len(data), sha256=sha256(data), samples=shard["samples"] + 1)
    shard["index"].update(bytes=len(index), sha256=sha256(index))
    manifest["splits"]["val"]["samples"] += 1
    manifest["splits"]["val"]["bytes"] += grown
    manifest["totals"]["packed"] += 1
    manifest["totals"]["bytes_out"] += grown
    if manifest["totals"].get("sources") is None:
        manifest["totals"]["seen"] += 1
    (copy / "manifest.json").write_text(json.dumps(manifest, indent=1))
    lines.append({**twin, "split": "val", "shard": shard["name"]})
    replace_sample_index(copy, index_bytes(lines))
    manifest = images.manifest_of(copy)
    manifest["samples_index"]["samples"] = len(lines)
    (copy / "manifest.json").write_text(json.dumps(manifest, indent=1))
    for name, content in derived_contents(read_manifest(copy)).items():  # the shard lists
        (copy / name).write_bytes(content)
    return twin["key"]


@pytest.fixture(scope="module")
def forged(tmp_path_factory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("duplicate-key")
    dataset = packed(root, with_scratch=True)
    return root / "forged", key_in_two_splits(dataset, root / "forged")


def one_line(result, code: int) -> str:
    assert result.returncode == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardsmith: error: "), result.stderr
    return lines[0]


def test_verify_names_a_sample_key_that_is_in_two_splits(forged):
    from hostile_helpers import cli

    dataset, key = forged
    result = cli("verify", dataset, "--decode")
    assert result.exit_code == 1, result.output
    problem, summary = result.output.strip().splitlines()
    assert "1 problem" in summary, "the forgery is consistent but for the key"
    assert f"sample key {key} is in the sample index 2 times" in problem
    assert "train-000000.tar" in problem and "val-000000.tar" in problem


@pytest.mark.parametrize("layout", [("yolo",), ("coco",), ("anomalib", "--normal", "defect")],
                         ids=["yolo", "coco", "anomalib"])
@pytest.mark.slow
def test_every_export_layout_refuses_a_sample_key_in_two_splits(forged, tmp_path, layout):
    dataset, key = forged
    line = one_line(shardsmith(dataset, tmp_path / "out", "--layout", *layout), 2)
    assert f"sample key {key} is in the sample index 2 times" in line
    assert "53 bits" not in line
    assert not (tmp_path / "out" / "current").exists()


def test_the_readers_sample_table_refuses_a_key_in_two_of_its_shards(forged):
    from shardsmith.dataset.manifest import read_manifest
    from shardsmith.errors import ManifestError
    from shardsmith.readers.plan import load_table

    dataset, key = forged
    manifest = read_manifest(dataset)
    with pytest.raises(ManifestError, match=f"sample key {key} is in the shards read 2 times"):
        load_table(dataset, manifest.shards)


@pytest.mark.parametrize("split", [None, "val"])
def test_the_torch_reader_refuses_a_sample_key_in_two_splits(forged, split):
    pytest.importorskip("torch", reason="the torch reader needs torch")
    from shardsmith.errors import ManifestError
    from shardsmith.readers.torch import dataset as torch_dataset

    dataset, key = forged
    with pytest.raises(ManifestError, match=f"sample key {key} is in the"):
        torch_dataset(dataset, split, shuffle=False)


def test_an_export_never_writes_a_sample_file_over_one_it_wrote_in_the_same_run(tmp_path):
    from shardsmith.errors import ManifestError
    from shardsmith.ops.export.tree import ExportTree

    tree = ExportTree(tmp_path / "v1.partial")
    with ThreadPoolExecutor(2) as pool:
        tree.write_later(pool, "abnormal/k.jpg", b"first").result()
        with pytest.raises(ManifestError, match="two samples of the dataset give this file"):
            tree.write_later(pool, "abnormal/k.jpg", b"second")
    assert (tmp_path / "v1.partial" / "abnormal" / "k.jpg").read_bytes() == b"first"


def test_an_export_resumed_still_replaces_a_file_of_its_earlier_try(tmp_path):
    from shardsmith.ops.export.tree import ExportTree

    for data in (b"earlier try", b"this run"):
        with ThreadPoolExecutor(2) as pool:
            ExportTree(tmp_path / "v1.partial").write_later(pool, "mask/k.png", data).result()
    assert (tmp_path / "v1.partial" / "mask" / "k.png").read_bytes() == b"this run"


def test_the_line_naming_a_key_of_many_copies_stays_one_short_line():
    from shardsmith.dataset.keys import duplicate_message

    message = duplicate_message({"k": [f"train-{n:06d}.tar" for n in range(40_000)]},
                                "the sample index")
    assert "40000 times" in message and len(message) < 400 and "train-000004.tar" not in message


def test_a_pack_over_an_index_naming_an_original_under_another_path_publishes_nothing(
        tmp_path):
    """A forged index gives one original's line another original's path: the next pack
    finds the first path new and packs it under the key the forged line holds.  The version
    would hold that key twice, so it is refused in one line and nothing is published."""
    from click.testing import CliRunner

    from shardsmith.cli import main

    for name in ("a", "b", "c", "d"):
        images.write(tmp_path / "src" / f"{name}.png", images.png(64, 48, seed=ord(name)))
    out = tmp_path / "out"
    pack = ["pack", str(tmp_path / "src"), str(out), "--labels", "none", "--size", "32",
            "--quiet"]
    assert CliRunner().invoke(main, pack).exit_code == 0
    lines = images.samples_of(out)
    for line in lines:
        if line["path"] == "b.png":
            line["path"] = "a.png"
    replace_sample_index(out, index_bytes(lines))

    def verified() -> list[str]:  # what verify finds, less the notes of unlisted shards
        output = CliRunner().invoke(main, ["verify", str(out)]).output
        return [line for line in output.splitlines() if not line.startswith("note: ")]

    before = verified()  # it names the forgery
    result = CliRunner().invoke(main, pack)
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert "\n" not in line and "samples-v2.jsonl: sample key " in line
    assert "nothing was published" in line and "Traceback" not in line
    assert images.manifest_of(out)["version"] == 1
    assert not (out / "samples-v2.jsonl").exists()
    assert verified() == before  # the version stands as it was
