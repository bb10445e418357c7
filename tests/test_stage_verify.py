"""`shardsmith stage` and `shardsmith verify` on real packed datasets."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from shardsmith.cli import main
from shardsmith.dataset.formats.webdataset import iter_members
from shardsmith.errors import LockedError, ShardFormatError, StageError
from shardsmith.ops.stage import stage
from shardsmith.ops.verify import verify

import images

REPO = Path(__file__).resolve().parents[1]


def packed(tmp_path: Path, fmt: str = "webdataset", name: str = "packed") -> Path:
    source = tmp_path / "source"
    if not source.exists():
        for number in range(12):
            images.write(source / ("ab"[number % 2]) / f"{number}.jpg",
                         images.jpeg(300, 200, number))
    return images.pack_small(source, tmp_path / name, fmt, 64, "train=0.5,val=0.5")


def flip_byte(path: Path, offset: int) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)
        handle.seek(offset)
        handle.write(bytes([byte[0] ^ 0xFF]))


def shard_names(directory: Path) -> list[str]:
    return [s["name"] for s in json.loads((directory / "manifest.json").read_text())["shards"]]


@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord"])
def test_stage_copies_everything_then_a_restage_copies_nothing(tmp_path, fmt):
    dataset = packed(tmp_path, fmt)
    first = stage(dataset, tmp_path / "nvme", quiet=True)
    files = 2 * len(shard_names(dataset))  # every shard and its index
    assert first.copied == files and first.present == 0 and first.bytes_copied > 0
    second = stage(dataset, tmp_path / "nvme", quiet=True)
    assert second.copied == 0 and second.present == files and second.bytes_copied == 0
    report = verify(tmp_path / "nvme", decode=True)
    assert report.ok, report.problems
    assert report.samples == 12


@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord"])
def test_verify_with_decode_passes_on_a_packed_dataset(tmp_path, fmt):
    report = verify(packed(tmp_path, fmt), decode=True)
    assert report.ok, report.problems
    assert report.samples == 12 and report.shards >= 4


def test_a_shard_corrupted_in_the_source_is_detected_and_not_published(tmp_path):
    dataset = packed(tmp_path)
    bad = shard_names(dataset)[1]
    flip_byte(dataset / bad, 2000)
    with pytest.raises(StageError, match=f"{bad}: after 3 copies"):
        stage(dataset, tmp_path / "nvme", quiet=True)
    staged = tmp_path / "nvme"
    assert not (staged / bad).exists()
    assert not (staged / "manifest.json").exists()
    assert not list(staged.glob(".*.tmp"))


def test_a_shard_corrupted_at_the_destination_is_found_by_verify_and_repaired_by_stage(tmp_path):
    dataset = packed(tmp_path)
    staged = tmp_path / "nvme"
    stage(dataset, staged, quiet=True)
    victim = shard_names(dataset)[0]
    flip_byte(staged / victim, 3000)
    report = verify(staged)
    assert not report.ok
    assert any(victim in problem and "sha256" in problem for problem in report.problems)
    repaired = stage(dataset, staged, quiet=True)
    assert repaired.copied == 1
    assert verify(staged, decode=True).ok


def test_rehash_finds_silent_corruption_that_kept_the_mtime(tmp_path):
    dataset = packed(tmp_path)
    staged = tmp_path / "nvme"
    stage(dataset, staged, quiet=True)
    victim = staged / shard_names(dataset)[0]
    before = victim.stat()
    flip_byte(victim, 3000)
    os.utime(victim, ns=(before.st_atime_ns, before.st_mtime_ns))  # bit rot: no mtime change
    assert stage(dataset, staged, quiet=True).copied == 0  # the quick check trusts the record
    assert stage(dataset, staged, quiet=True, rehash=True).copied == 1
    assert verify(staged).ok


def test_not_enough_free_space_is_refused_before_copying(tmp_path):
    dataset = packed(tmp_path)
    with pytest.raises(StageError, match=r"not enough free space: [\d.]+ kB to copy, 10.0 kB free"):
        stage(dataset, tmp_path / "nvme", quiet=True, free_space=lambda path: 10_000)
    assert not [p for p in (tmp_path / "nvme").iterdir() if not p.name.startswith(".")]


def test_destination_inside_the_source_is_refused(tmp_path):
    dataset = packed(tmp_path)
    result = CliRunner().invoke(main, ["stage", str(dataset), "--to", str(dataset / "copy")])
    assert result.exit_code == 2
    assert "is inside the source dataset" in result.output


def test_a_second_stage_on_the_same_destination_refuses_naming_the_holder(tmp_path):
    dataset = packed(tmp_path)
    staged = tmp_path / "nvme"
    lock_path = staged / ".shardsmith" / "lock"
    lock_path.parent.mkdir(parents=True)
    with open(lock_path, "a+") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        holder.write("pid 4242 on trainbox since 2026-01-01T00:00:00\n")
        holder.flush()
        with pytest.raises(LockedError, match="being staged by pid 4242 on trainbox"):
            stage(dataset, staged, quiet=True)
    stage(dataset, staged, quiet=True)  # free again once the holder is gone


def test_one_split_can_be_staged_alone(tmp_path):
    dataset = packed(tmp_path)
    staged = tmp_path / "nvme"
    stage(dataset, staged, split="val", quiet=True)
    manifest = json.loads((staged / "manifest.json").read_text())
    assert {s["split"] for s in manifest["shards"]} == {"val"}
    assert all(sample["split"] == "val" for sample in images.samples_of(staged))
    assert verify(staged, decode=True).ok
    with pytest.raises(Exception, match="no split 'test'"):
        stage(dataset, staged, split="test", quiet=True)


def test_shards_no_longer_listed_are_kept_unless_prune(tmp_path):
    dataset = packed(tmp_path)
    staged = tmp_path / "nvme"
    stage(dataset, staged, quiet=True)
    shutil.copy(staged / shard_names(dataset)[0], staged / "train-000042.tar")
    kept = stage(dataset, staged, quiet=True)
    assert kept.stale == ("train-000042.tar",) and (staged / "train-000042.tar").exists()
    report = verify(staged)  # a leftover of an earlier stage is a note, not corruption
    assert report.ok and report.notes == [
        "train-000042.tar: not listed, left from an earlier stage; stage --prune removes it"]
    pruned = stage(dataset, staged, quiet=True, prune=True)
    assert pruned.removed == 1 and not (staged / "train-000042.tar").exists()
    assert verify(staged).ok
    assert (dataset / shard_names(dataset)[0]).exists()  # never touches the source


def test_verify_reports_a_missing_and_an_extra_shard(tmp_path):
    dataset = packed(tmp_path)
    names = shard_names(dataset)
    (dataset / names[0]).unlink()
    shutil.copy(dataset / names[1], dataset / "val-000077.tar")
    problems = verify(dataset).problems
    assert f"{names[0]}: missing" in problems
    assert "val-000077.tar: shard file not listed in the manifest" in problems


def test_verify_reports_a_truncated_tar(tmp_path):
    dataset = packed(tmp_path)
    name = shard_names(dataset)[0]
    os.truncate(dataset / name, 3000)
    problems = verify(dataset).problems
    assert any(p.startswith(f"{name}: 3000 bytes, manifest says") for p in problems)
    with pytest.raises(ShardFormatError, match="cut short|unreadable"):
        list(iter_members(dataset / name))


def test_verify_reports_a_tfrecord_with_a_bad_crc(tmp_path):
    dataset = packed(tmp_path, "tfrecord")
    name = shard_names(dataset)[0]
    flip_byte(dataset / name, 200)  # inside the first record's payload
    problems = verify(dataset).problems
    assert any(name in p and "bad data CRC" in p for p in problems)
    assert any(name in p and "sha256" in p for p in problems)


def test_verify_cli_exit_codes(tmp_path):
    dataset = packed(tmp_path)
    ok = CliRunner().invoke(main, ["verify", str(dataset), "--decode"])
    assert ok.exit_code == 0 and "OK" in ok.output
    (dataset / shard_names(dataset)[0]).unlink()
    bad = CliRunner().invoke(main, ["verify", str(dataset)])
    assert bad.exit_code == 1 and "missing" in bad.output


def make_big_dataset(root: Path, shards: int = 3, shard_bytes: int = 96 * 2**20) -> Path:
    """A manifest over large opaque shards: enough bytes to kill a copy in the middle."""
    root.mkdir(parents=True)
    block = os.urandom(2**20)
    entries = []
    for number in range(shards):
        name = f"train-{number:06d}.tar"
        digest = hashlib.sha256()
        with open(root / name, "wb") as handle:
            for index in range(shard_bytes // 2**20):
                chunk = bytes([number, index % 256]) + block[2:]
                handle.write(chunk)
                digest.update(chunk)
        entries.append({"name": name, "split": "train", "samples": 1, "bytes": shard_bytes,
                        "sha256": digest.hexdigest()})
    (root / "samples.jsonl").write_text("")
    totals = {"seen": shards, "packed": shards, "rejected": 0, "excluded": 0, "bytes_in": 0,
              "bytes_out": shards * shard_bytes}
    manifest = {"schema_version": 1, "format": "webdataset", "fingerprint": "x", "classes": [],
                "totals": totals, "rejects": [], "shards": entries, "splits": {"train": {}},
                "samples_index": {"name": "samples.jsonl", "samples": 0, "bytes": 0,
                                  "sha256": hashlib.sha256(b"").hexdigest()}}
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


@pytest.mark.slow
def test_killed_stage_leaves_no_partial_file_and_the_rerun_completes(tmp_path):
    dataset = make_big_dataset(tmp_path / "big")
    staged = tmp_path / "nvme"
    command = [sys.executable, "-m", "shardsmith.cli", "stage", str(dataset), "--to",
               str(staged), "--workers", "1", "--quiet"]
    process = subprocess.Popen(command, cwd=REPO)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None and not (
        staged.is_dir() and list(staged.glob(".train-000001.tar.*.tmp"))
    ):
        time.sleep(0.005)
    if process.poll() is None:
        os.kill(process.pid, signal.SIGKILL)
    process.wait()
    manifest = json.loads((dataset / "manifest.json").read_text())
    for entry in manifest["shards"]:  # whatever is under a final name is complete
        path = staged / entry["name"]
        if path.exists():
            assert hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"]
    assert not (staged / "manifest.json").exists()
    subprocess.run(command, cwd=REPO, check=True)
    assert not list(staged.glob(".*.tmp"))
    for entry in manifest["shards"]:
        assert hashlib.sha256((staged / entry["name"]).read_bytes()).hexdigest() == entry["sha256"]
    assert (staged / "manifest.json").exists()
