"""Nightly increments: only new or changed sources are decoded; untouched shards stay put."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from PIL import Image

from shardsmith.cli import main
from shardsmith.ops.stage import stage
from shardsmith.ops.verify import verify

import images


def pack(source: Path, output: Path, *extra: str, expect: int = 0) -> str:
    result = CliRunner().invoke(main, ["pack", str(source), str(output), "--size", "64",
                                       "--shard-samples", "3", "--split", "train=0.7,val=0.3",
                                       "--workers", "1", "--quiet", *extra])
    assert result.exit_code == expect, result.output
    return result.output


def tree(root: Path, count: int = 18) -> Path:
    for number in range(count):
        images.write(root / "abc"[number % 3] / f"{number:02d}.jpg",
                     images.jpeg(240, 180, number))
    return root


def manifest_of(output: Path) -> dict:
    return json.loads((output / "manifest.json").read_text())


def shard_digests(output: Path) -> dict[str, str]:
    return {s["name"]: hashlib.sha256((output / s["name"]).read_bytes()).hexdigest()
            for s in manifest_of(output)["shards"]}


def samples_of(output: Path) -> dict[str, dict]:
    return {sample["path"]: sample for sample in images.samples_of(output)}


@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord"])
def test_an_increment_decodes_only_new_and_changed_sources(tmp_path, fmt):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output, "--format", fmt)
    before_shards, before_samples = shard_digests(output), samples_of(output)

    images.write(source / "a" / "new1.jpg", images.jpeg(300, 200, 101))
    images.write(source / "b" / "new2.jpg", images.jpeg(300, 200, 102))
    images.write(source / "c" / "02.jpg", images.jpeg(500, 300, 103))  # changed content
    (source / "a" / "03.jpg").unlink()  # removed
    touched = source / "b" / "04.jpg"
    os.utime(touched, ns=(touched.stat().st_atime_ns, touched.stat().st_mtime_ns + 10**9))

    summary = pack(source, output, "--format", fmt)
    assert ("version 2: originals: 2 added, 1 changed, 1 removed, 1 touched (same content); "
            "3 images decoded") in summary
    manifest = manifest_of(output)
    assert manifest["version"] == 2 and manifest["run"]["decoded"] == 3
    history = manifest["history"][-1]
    assert (history["added"], history["changed"], history["removed"], history["touched"]) == (
        2, 1, 1, 1)

    after_shards, after_samples = shard_digests(output), samples_of(output)
    stale_shards = {before_samples["c/02.jpg"]["shard"], before_samples["a/03.jpg"]["shard"]}
    for name, digest in before_shards.items():
        if name in stale_shards:
            assert name not in after_shards and not (output / name).exists()
        else:
            assert after_shards[name] == digest  # untouched shards: same name, same bytes
    assert set(history["shards_removed"]) == stale_shards
    assert set(history["shards_added"]) == set(after_shards) - set(before_shards)

    assert "a/03.jpg" not in after_samples
    assert after_samples["c/02.jpg"]["width"] == 64 and after_samples["c/02.jpg"]["height"] == 38
    assert after_samples["b/04.jpg"]["source_mtime_ns"] == touched.stat().st_mtime_ns
    assert after_samples["b/04.jpg"]["shard"] == before_samples["b/04.jpg"]["shard"]
    assert {"a/new1.jpg", "b/new2.jpg"} <= set(after_samples)
    assert manifest["totals"]["packed"] == 19
    report = verify(output, decode=True)
    assert report.ok, report.problems


def test_a_changed_source_that_turned_corrupt_is_counted_rejected_not_changed(tmp_path):
    source, output = tree(tmp_path / "source", 6), tmp_path / "out"
    pack(source, output)
    (source / "a" / "03.jpg").write_bytes(b"\xff\xd8 no longer a JPEG")
    pack(source, output, "--max-reject-fraction", "0.5")
    manifest = manifest_of(output)
    history = manifest["history"][-1]
    assert (history["changed"], history["rejected"]) == (0, 1), history
    assert [reject["path"] for reject in manifest["rejects"]] == ["a/03.jpg"]
    assert "a/03.jpg" not in samples_of(output)


def test_increment_content_reads_back_right(tmp_path):
    """Samples copied into rewritten shards are the same bytes; new ones are the new image."""
    import webdataset as wds

    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output)
    (source / "a" / "00.jpg").unlink()
    images.write(source / "b" / "01.jpg", images.encode(
        images.gradient_rgb(200, 200)[:, :, ::-1], "JPEG", quality=95))
    pack(source, output)
    urls = [str(output / s["name"]) for s in manifest_of(output)["shards"]]
    seen = {}
    for sample in wds.WebDataset(urls, shardshuffle=False, empty_check=False):
        meta = json.loads(sample["json"])
        seen[meta["path"]] = Image.open(io.BytesIO(sample["jpg"])).size
    assert "a/00.jpg" not in seen and seen["b/01.jpg"] == (64, 64) and len(seen) == 17


def test_a_rerun_after_an_increment_does_nothing(tmp_path):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output)
    images.write(source / "a" / "new.jpg", images.jpeg(100, 100, 7))
    pack(source, output)
    assert "up to date, nothing to do" in pack(source, output)


def test_stage_after_an_increment_copies_only_new_and_rewritten_shards(tmp_path):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output)
    stage(output, tmp_path / "nvme", quiet=True)
    images.write(source / "c" / "new.jpg", images.jpeg(100, 100, 7))
    (source / "b" / "01.jpg").unlink()
    pack(source, output)
    history = manifest_of(output)["history"][-1]
    result = stage(output, tmp_path / "nvme", quiet=True, prune=True)
    assert result.copied == 2 * len(history["shards_added"])  # each shard and its index
    assert result.removed == len(history["shards_removed"])
    assert verify(tmp_path / "nvme", decode=True).ok


def test_shard_lists_name_the_current_shards_after_every_version_and_stage(tmp_path):
    source, output, staged = tree(tmp_path / "source"), tmp_path / "out", tmp_path / "nvme"

    def listed(directory: Path, split: str) -> list[str]:
        return (directory / f"{split}-shards.txt").read_text().split()

    def shards(directory: Path, split: str) -> list[str]:
        return [s["name"] for s in manifest_of(directory)["shards"] if s["split"] == split]

    pack(source, output, "--split", "train=0.7,val=0.3")
    (source / "b" / "01.jpg").unlink()  # the increment rewrites or drops a shard
    images.write(source / "c" / "new.jpg", images.jpeg(100, 100, 7))
    pack(source, output, "--split", "train=0.7,val=0.3")
    for split in ("train", "val"):
        assert listed(output, split) == shards(output, split)
        assert all((output / name).exists() for name in listed(output, split))
    wids = json.loads((output / "train-shards.json").read_text())
    assert [entry["url"] for entry in wids["shardlist"]] == shards(output, "train")
    assert sum(entry["nsamples"] for entry in wids["shardlist"]) == \
        manifest_of(output)["splits"]["train"]["samples"]

    stage(output, staged, quiet=True, split="train")
    stage(output, staged, quiet=True, split="val", prune=True)
    assert not (staged / "train-shards.txt").exists()  # the train shards were pruned
    assert listed(staged, "val") == shards(staged, "val")
    assert verify(staged).ok


def test_a_new_class_is_appended_and_existing_labels_keep_their_meaning(tmp_path):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output)
    before = {path: sample["label"] for path, sample in samples_of(output).items()}
    images.write(source / "Aa_first" / "x.jpg", images.jpeg(100, 100, 1))
    pack(source, output)  # sorted, it would come first and shift every label: it goes last
    assert manifest_of(output)["classes"] == ["a", "b", "c", "Aa_first"]
    after = samples_of(output)
    assert {path: after[path]["label"] for path in before} == before
    assert after["Aa_first/x.jpg"]["label"] == 3
    (source / "Aa_first" / "x.jpg").unlink()
    (source / "Aa_first").rmdir()
    images.write(source / "zz_last" / "y.jpg", images.jpeg(100, 100, 2))
    pack(source, output)  # a class without images keeps its place, and so its label
    assert manifest_of(output)["classes"] == ["a", "b", "c", "Aa_first", "zz_last"]
    assert samples_of(output)["zz_last/y.jpg"]["label"] == 4


def test_log_lists_the_versions(tmp_path):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output)
    images.write(source / "a" / "new.jpg", images.jpeg(100, 100, 7))
    pack(source, output)
    result = CliRunner().invoke(main, ["log", str(output)])
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[1].split()[0] == "1" and lines[1].split()[2] == "18"
    assert lines[2].split()[0] == "2" and lines[2].split()[2] == "1"
    assert lines[-1].startswith("current: version 2, 19 samples")


@pytest.mark.slow
def test_an_interrupted_increment_resumes_to_the_same_result(tmp_path, monkeypatch):
    from shardsmith.dataset.formats import ShardWriter

    from images import dataset_bytes

    source = tree(tmp_path / "source")
    clean, resumed = tmp_path / "clean", tmp_path / "resumed"
    pack(source, clean)
    pack(source, resumed)
    for number in range(9):
        images.write(source / "abc"[number % 3] / f"new{number}.jpg",
                     images.jpeg(150, 100, 200 + number))
    (source / "a" / "06.jpg").unlink()
    pack(source, clean)

    original_close, closed = ShardWriter.close, []

    def close_then_die(self):
        info = original_close(self)
        closed.append(info.name)
        if len(closed) == 3:  # a rewritten shard and two new ones are published
            raise KeyboardInterrupt
        return info

    monkeypatch.setattr(ShardWriter, "close", close_then_die)
    result = CliRunner().invoke(main, ["pack", str(source), str(resumed), "--size", "64",
                                       "--shard-samples", "3", "--split", "train=0.7,val=0.3",
                                       "--workers", "1", "--quiet"])
    assert result.exit_code == 130
    assert manifest_of(resumed)["version"] == 1  # the previous version is still the published one
    monkeypatch.setattr(ShardWriter, "close", original_close)
    pack(source, resumed)
    assert dataset_bytes(resumed) == dataset_bytes(clean)


def test_compact_merges_small_delta_shards(tmp_path):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output, "--shard-samples", "6")
    for night in range(3):  # three nights, one new image each: three one-sample shards
        images.write(source / "a" / f"night{night}.jpg", images.jpeg(120, 90, 300 + night))
        pack(source, output, "--shard-samples", "6")
    small = [s for s in manifest_of(output)["shards"] if s["samples"] < 3]
    assert len(small) >= 3
    before = samples_of(output)
    pack(source, output, "--shard-samples", "6", "--compact")  # sources unchanged: no-op
    images.write(source / "b" / "night3.jpg", images.jpeg(120, 90, 400))
    pack(source, output, "--shard-samples", "6", "--compact")
    manifest = manifest_of(output)
    per_split = {}
    for shard in manifest["shards"]:
        per_split.setdefault(shard["split"], []).append(shard["samples"])
    assert all(sum(1 for n in counts if n < 3) <= 1 for counts in per_split.values())
    after = samples_of(output)
    assert set(after) == set(before) | {"b/night3.jpg"}
    names = [s["name"] for s in manifest["shards"]]
    assert len(names) == len(set(names))
    assert all((output / name).exists() for name in names)
    report = verify(output, decode=True)
    assert report.ok, report.problems


def test_a_dry_run_over_an_existing_dataset_prints_what_the_pack_would_change(tmp_path):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output)
    images.write(source / "a" / "new1.jpg", images.jpeg(300, 200, 101))
    images.write(source / "b" / "new2.jpg", images.jpeg(300, 200, 102))
    (source / "a" / "03.jpg").unlink()
    touched = source / "b" / "04.jpg"
    os.utime(touched, ns=(touched.stat().st_atime_ns, touched.stat().st_mtime_ns + 10**9))
    before = sorted(path.name for path in output.iterdir())

    shown = pack(source, output, "--dry-run")
    line = next(line for line in shown.splitlines() if line.strip().startswith("changes:"))
    assert "2 new, 1 removed, up to 1 changed; " in line
    assert sorted(path.name for path in output.iterdir()) == before  # nothing written

    history = manifest_of(output)["history"]
    pack(source, output)
    after = manifest_of(output)["history"][-1]
    assert len(history) == 1 and (after["added"], after["removed"]) == (2, 1)
    assert after["changed"] + after["touched"] == 1


def tiled_pack(source: Path, output: Path) -> dict:
    """Tiles of 64 px, three to a shard: an original's tiles span several shards."""
    from defects import pack_with

    return pack_with(source, output, {}, **{"image.tiles.size": 64, "image.tiles.overlap": 0,
                                           "output.shard_samples": 3, "splits": "train=1.0"})


def keys_of(output: Path) -> list[str]:
    return sorted(sample["key"] for sample in images.samples_of(output))


def test_a_deleted_shard_of_a_tiled_original_is_repaired_every_tile_present_once(tmp_path):
    source, output = tmp_path / "source", tmp_path / "out"
    for number in range(2):
        images.write(source / "a" / f"{number}.jpg", images.jpeg(192, 128, number))
    tiled_pack(source, output)
    tile_keys = keys_of(output)
    spans = {path: {sample["shard"] for sample in images.samples_of(output)
                    if sample["path"] == path} for path in ("a/0.jpg", "a/1.jpg")}
    assert len(tile_keys) == 12 and spans["a/0.jpg"] == {"train-000000.tar", "train-000001.tar"}
    (output / "train-000001.tar").unlink()  # half of a/0.jpg's tiles; the other half kept

    after = tiled_pack(source, output)
    assert keys_of(output) == tile_keys  # each tile once: none kept beside its new copy
    assert sum(shard["samples"] for shard in after["shards"]) == 12
    names = {shard["name"] for shard in after["shards"]}
    assert spans["a/1.jpg"] <= names and "train-000000.tar" not in names  # rewritten
    report = verify(output, decode=True)
    assert report.ok, report.problems


def test_a_touched_source_packed_before_digests_were_recorded_is_replaced_not_doubled(tmp_path):
    from hostile_helpers import index_bytes, replace_sample_index

    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output)
    records = [dict(record, source_digest="") for record in images.samples_of(output)]
    replace_sample_index(output, index_bytes(records))  # as a release without digests wrote it
    touched = source / "b" / "04.jpg"
    os.utime(touched, ns=(touched.stat().st_atime_ns, touched.stat().st_mtime_ns + 10**9))

    pack(source, output)
    keys = [sample["key"] for sample in images.samples_of(output)]
    assert len(keys) == len(set(keys)) == 18
    assert manifest_of(output)["history"][-1]["changed"] == 1
    report = verify(output, decode=True)
    assert report.ok, report.problems
