"""`shardsmith pack` end to end through the CLI, read back with the real readers."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from shardsmith.cli import main

import images

REPO = Path(__file__).resolve().parents[1]


def run_pack(*args: str, expect: int = 0) -> str:
    result = CliRunner().invoke(main, ["pack", *args])
    assert result.exit_code == expect, result.output
    return result.output


from images import dataset_bytes, manifest_of, samples_of  # noqa: E402


def check_manifest_accounts_for_everything(output: Path, expected: dict[str, str]) -> dict:
    manifest = manifest_of(output)
    totals = manifest["totals"]
    assert totals["seen"] == totals["packed"] + totals["rejected"] + totals["excluded"]
    assert totals["packed"] == sum(1 for v in expected.values() if v == "ok")
    assert {r["path"]: r["reason"] for r in manifest["rejects"]} == {
        path: outcome for path, outcome in expected.items() if outcome != "ok"}
    assert all(r["detail"] for r in manifest["rejects"])
    assert sum(s["samples"] for s in manifest["shards"]) == totals["packed"]
    packed_paths = {s["path"] for s in samples_of(output)}
    assert packed_paths == {path for path, outcome in expected.items() if outcome == "ok"}
    assert manifest["classes"] == ["dent", "ok", "scratch"]
    for shard in manifest["shards"]:
        assert (output / shard["name"]).stat().st_size == shard["bytes"]
    return manifest


@pytest.mark.slow
def test_webdataset_output_reads_back_with_webdataset(mixed_source, tmp_path):
    import webdataset as wds

    source, expected = mixed_source
    output = tmp_path / "shards"
    summary = run_pack(str(source), str(output), "--size", "96", "--shard-samples", "5",
                       "--split", "train=0.7,val=0.3", "--workers", "2",
                       "--max-reject-fraction", "0.5")
    assert "packed" in summary and "rejected" in summary
    manifest = check_manifest_accounts_for_everything(output, expected)
    assert all(s["name"].endswith(".tar") for s in manifest["shards"])
    index = {s["key"]: s for s in samples_of(output)}

    urls = [str(output / s["name"]) for s in manifest["shards"]]
    seen = []
    for sample in wds.WebDataset(urls, shardshuffle=False, empty_check=False):
        meta = json.loads(sample["json"])
        entry = index[sample["__key__"]]
        image = Image.open(io.BytesIO(sample["jpg"]))
        assert image.format == "JPEG"
        assert image.size == (entry["width"], entry["height"]) == (meta["width"], meta["height"])
        assert max(image.size) == 96 or max(meta["original"]["width"],
                                            meta["original"]["height"]) < 96
        assert int(sample["cls"]) == entry["label"] == meta["label"]
        assert manifest["classes"][meta["label"]] == meta["path"].split("/")[0] == meta["class"]
        assert meta["path"] == entry["path"] and meta["split"] == entry["split"]
        seen.append(sample["__key__"])
    assert sorted(seen) == sorted(index)
    for split, totals in manifest["splits"].items():
        assert totals["samples"] == sum(1 for s in index.values() if s["split"] == split)


@pytest.mark.slow
def test_tfrecord_output_reads_back_with_tensorflow(mixed_source, tmp_path):
    tf = pytest.importorskip("tensorflow", reason="needs TensorFlow (the tf extra)")

    source, expected = mixed_source
    output = tmp_path / "records"
    run_pack(str(source), str(output), "--format", "tfrecord", "--size", "64",
             "--resize", "center_crop", "--shard-samples", "4", "--max-reject-fraction", "0.5")
    manifest = check_manifest_accounts_for_everything(output, expected)
    index = {s["path"]: s for s in samples_of(output)}
    features = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/format": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        "image/class/text": tf.io.FixedLenFeature([], tf.string),
        "image/height": tf.io.FixedLenFeature([], tf.int64),
        "image/width": tf.io.FixedLenFeature([], tf.int64),
        "image/channels": tf.io.FixedLenFeature([], tf.int64),
        "image/filename": tf.io.FixedLenFeature([], tf.string),
        "image/key": tf.io.FixedLenFeature([], tf.string),
    }
    read = 0
    for shard in manifest["shards"]:
        assert shard["name"].endswith(".tfrecord")
        records = tf.data.TFRecordDataset(str(output / shard["name"]))
        for record in records:
            example = tf.io.parse_single_example(record, features)
            path = example["image/filename"].numpy().decode()
            entry = index[path]
            pixels = tf.io.decode_jpeg(example["image/encoded"]).numpy()
            assert pixels.shape == (64, 64, 3)
            assert example["image/height"].numpy() == example["image/width"].numpy() == 64
            assert example["image/class/label"].numpy() == entry["label"]
            assert example["image/class/text"].numpy().decode() == path.split("/")[0]
            assert example["image/key"].numpy().decode() == entry["key"]
            assert example["image/format"].numpy() == b"jpeg"
            read += 1
        # The DALI-style index lists every record's offset and size, back to back.
        lines = (output / shard["index"]["name"]).read_text().split("\n")[:-1]
        offsets = [tuple(map(int, line.split())) for line in lines]
        assert len(offsets) == shard["samples"]
        assert offsets[0][0] == 0
        assert all(a[0] + a[1] == b[0] for a, b in zip(offsets, offsets[1:], strict=False))
        assert offsets[-1][0] + offsets[-1][1] == shard["bytes"]
        assert shard["index"]["name"] == shard["name"].replace(".tfrecord", ".idx")
    assert read == manifest["totals"]["packed"]


@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord"])
@pytest.mark.slow
def test_output_is_byte_identical_whatever_the_worker_count(mixed_source, tmp_path, fmt):
    source, _ = mixed_source
    common = ["--format", fmt, "--size", "80", "--shard-samples", "3",
              "--split", "train=0.6,val=0.4", "--max-reject-fraction", "0.5", "--quiet"]
    run_pack(str(source), str(tmp_path / "one"), "--workers", "1", *common)
    run_pack(str(source), str(tmp_path / "two"), "--workers", "2", *common)
    assert dataset_bytes(tmp_path / "one") == dataset_bytes(tmp_path / "two")


@pytest.mark.slow
def test_rerun_with_same_settings_does_nothing_and_says_so(mixed_source, tmp_path):
    source, _ = mixed_source
    output = tmp_path / "out"
    args = [str(source), str(output), "--size", "64", "--max-reject-fraction", "0.5"]
    run_pack(*args)
    before = {p.name: p.stat().st_mtime_ns for p in output.iterdir()}
    assert "up to date, nothing to do" in run_pack(*args)
    assert {p.name: p.stat().st_mtime_ns for p in output.iterdir()} == before


@pytest.mark.slow
def test_rerun_with_changed_settings_refuses_unless_overwrite(mixed_source, tmp_path):
    source, _ = mixed_source
    output = tmp_path / "out"
    run_pack(str(source), str(output), "--size", "64", "--max-reject-fraction", "0.5")
    refused = run_pack(str(source), str(output), "--size", "128", "--max-reject-fraction", "0.5",
                       expect=2)
    assert "different settings (image.size)" in refused and "--overwrite" in refused
    run_pack(str(source), str(output), "--size", "128", "--max-reject-fraction", "0.5",
             "--overwrite")
    assert manifest_of(output)["config"]["image"]["size"] == 128
    assert all(max(s["width"], s["height"]) <= 128 for s in samples_of(output))


@pytest.mark.slow
def test_too_many_rejects_exit_with_code_3_after_recording_them(mixed_source, tmp_path):
    source, _ = mixed_source
    output = tmp_path / "out"
    result = run_pack(str(source), str(output), "--size", "64", expect=3)
    assert "rejected, more than the allowed 1.0%" in result
    assert len(manifest_of(output)["rejects"]) == 3
    # Still exceeded when the (finished) pack is run again.
    run_pack(str(source), str(output), "--size", "64", expect=3)


@pytest.mark.slow
def test_output_with_foreign_files_is_refused(mixed_source, tmp_path):
    source, _ = mixed_source
    output = tmp_path / "out"
    images.write(output / "thesis.pdf", b"%PDF")
    result = run_pack(str(source), str(output), expect=2)
    assert "holds files shardsmith did not write (thesis.pdf)" in result
    assert (output / "thesis.pdf").exists()


@pytest.mark.slow
def test_interrupted_pack_resumes_and_equals_an_uninterrupted_run(
    mixed_source, tmp_path, monkeypatch
):
    from shardsmith.dataset.formats import ShardWriter

    source, _ = mixed_source
    args = ["--size", "64", "--shard-samples", "2", "--workers", "1",
            "--max-reject-fraction", "0.5", "--quiet"]
    run_pack(str(source), str(tmp_path / "clean"), *args)

    original_close = ShardWriter.close
    closed = []

    def close_then_die(self):
        info = original_close(self)
        closed.append(info.name)
        if len(closed) == 3:
            raise KeyboardInterrupt
        return info

    monkeypatch.setattr(ShardWriter, "close", close_then_die)
    output = tmp_path / "resumed"
    result = CliRunner().invoke(main, ["pack", str(source), str(output), *args])
    assert result.exit_code == 130 and "rerun the same command to resume" in result.output
    assert not (output / "manifest.json").exists()
    monkeypatch.setattr(ShardWriter, "close", original_close)

    written_before = {p.name: p.stat().st_mtime_ns for p in output.glob("*.tar")}
    summary = run_pack(str(source), str(output), *args)
    assert "resumed after" in summary
    # Shards checkpointed before the interrupt were not redone; the one published at the very
    # moment of the interrupt (not yet in the journal) was rewritten with identical bytes.
    for name in closed[:-1]:
        assert (output / name).stat().st_mtime_ns == written_before[name]
    assert dataset_bytes(output) == dataset_bytes(tmp_path / "clean")
    assert not list(output.glob(".*.tmp")), "no temporary files are left behind"
    assert [p.name for p in (output / ".shardsmith").iterdir()] == ["lock"]  # no journal


def kill_pack_command(source: Path, output: Path) -> list[str]:
    return [sys.executable, "-m", "shardsmith.cli", "pack", str(source), str(output),
            "--size", "64", "--shard-samples", "2", "--workers", "1", "--quiet"]


@pytest.fixture(scope="module")
def large_pngs(tmp_path_factory) -> tuple[Path, Path]:
    """24 PNGs large enough for a pack to be killed mid-run, and their uninterrupted pack
    (the kill tests only read both)."""
    root = tmp_path_factory.mktemp("large-pngs")
    source = root / "source"
    for number in range(24):
        images.write(source / f"c{number % 3}" / f"{number}.png", images.png(900, 700, number))
    subprocess.run(kill_pack_command(source, root / "clean"), cwd=REPO, check=True)
    return source, root / "clean"


@pytest.mark.slow
@pytest.mark.parametrize("kill_after_shards", [0, 2, 7])
def test_killed_pack_leaves_no_partial_shard_and_resumes(large_pngs, tmp_path,
                                                          kill_after_shards):
    """kill -9 at several points of a real run; the next run finishes the same dataset."""
    source, clean = large_pngs
    output = tmp_path / "out"
    command = kill_pack_command(source, output)
    process = subprocess.Popen(command, cwd=REPO)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        if len(list(output.glob("*.tar"))) >= kill_after_shards and output.exists():
            break
        time.sleep(0.005)
    if process.poll() is None:  # (a fast machine may finish first: then nothing to kill)
        os.kill(process.pid, signal.SIGKILL)
    process.wait()
    from shardsmith.dataset.formats.webdataset import iter_members

    for shard in output.glob("*.tar"):  # every shard under a final name is complete
        assert len(list(iter_members(shard))) == 2
    subprocess.run(command, cwd=REPO, check=True)
    assert dataset_bytes(output) == dataset_bytes(clean)


@pytest.mark.slow
def test_quiet_run_prints_only_the_summary(mixed_source, tmp_path):
    source, _ = mixed_source
    result = subprocess.run(
        [sys.executable, "-m", "shardsmith.cli", "pack", str(source), str(tmp_path / "out"),
         "--size", "64", "--quiet", "--max-reject-fraction", "0.5"],
        cwd=REPO, capture_output=True, text=True, check=True)
    assert result.stderr == ""
    assert result.stdout.startswith(f"{tmp_path / 'out'}: packed")


@pytest.mark.slow
def test_a_sample_survives_the_round_trip_visually(tmp_path):
    """The packed pixels are the source pixels, resized: no channel swap, no shift."""
    source = tmp_path / "source"
    rgb = images.gradient_rgb(800, 600)
    images.write(source / "a" / "x.png", images.encode(rgb, "PNG"))
    output = tmp_path / "out"
    run_pack(str(source), str(output), "--size", "200")
    name = manifest_of(output)["shards"][0]["name"]
    import tarfile

    with tarfile.open(output / name) as tar:
        jpeg_member = next(m for m in tar.getmembers() if m.name.endswith(".jpg"))
        pixels = np.asarray(Image.open(tar.extractfile(jpeg_member)))
    reference = np.asarray(Image.fromarray(rgb).resize((200, 150), Image.BOX))
    assert np.abs(pixels.astype(int) - reference.astype(int)).mean() < 3


def test_journal_cuts_a_torn_last_line_and_resumes_from_the_last_good_checkpoint(tmp_path):
    import hashlib

    from shardsmith.dataset.manifest import RejectEntry, ShardEntry
    from shardsmith.packing.journal import Journal
    from shardsmith.packing.plan import PlanItem
    from shardsmith.packing.scan import SourceFile

    work = [PlanItem(SourceFile(f"{number}.jpg", 10 * number, 0), "train")
            for number in range(6)]

    def record(item: PlanItem) -> dict:
        return {"key": item.key, "path": item.source.relpath, "label": -1, "split": "train",
                "shard": "train-000000.tar", "width": 8, "height": 8, "jpeg_bytes": 100,
                "source_size": item.source.size, "source_mtime_ns": 0, "source_digest": ""}

    (tmp_path / "train-000000.tar").write_bytes(b"x" * 10)
    shard = ShardEntry("train-000000.tar", "train", 1, 10, hashlib.sha256(b"x" * 10).hexdigest())
    journal = Journal(tmp_path, {"config": "c", "sources": "s"})
    state = journal.start()
    reject = RejectEntry("0.jpg", "empty", "zero-byte file", 0, 0)
    journal.add_sample(record(work[1]))
    journal.checkpoint(state, 2, shard, [reject], {})
    journal.add_sample(record(work[2]))  # its shard never got published
    journal.close()
    with open(journal.path, "a") as handle:
        handle.write('{"next": 9, "shard": nu')  # killed in the middle of a write
    resumed_journal = Journal(tmp_path, {"config": "c", "sources": "s"})
    resumed = resumed_journal.load(work, {}, ".tar")
    assert resumed.next_index == 2 and resumed.rejects == [reject]
    assert (resumed.packed, resumed.bytes_in) == (1, 10)
    assert [s["key"] for s in resumed_journal.samples(resumed.samples_end)] == [work[1].key]
    assert journal.path.read_text().count("\n") == 2 and journal.path.read_text().endswith("\n")
    resumed_journal.close()
    assert Journal(tmp_path, {"config": "other", "sources": "s"}).load(work, {}, ".tar") is None


def test_the_summary_says_larger_when_the_shards_outgrow_the_originals(tmp_path):
    source = tmp_path / "source"
    for number in range(3):  # small, coarse JPEGs re-encoded at quality 100
        images.write(source / "ok" / f"{number}.jpg", images.jpeg(96, 96, number, quality=20))
    result = CliRunner().invoke(main, ["pack", str(source), str(tmp_path / "out"), "--size",
                                       "96", "--quality", "100", "--workers", "1", "--quiet"])
    assert result.exit_code == 0, result.output
    totals = manifest_of(tmp_path / "out")["totals"]
    assert totals["bytes_out"] > totals["bytes_in"]
    assert f"({totals['bytes_out'] / totals['bytes_in']:.1f}x larger)" in result.output
    assert "smaller" not in result.output
