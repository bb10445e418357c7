"""Originals through the door: one larger than its decode budget is refused before it is read,
and a folder of the source swapped for a symlink after the scan never brings files from
outside into the shards (locally, through the Dask backend and on a FUSE mount)."""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import shardsmith.packing.pipeline
from shardsmith.cli import main
from shardsmith.config import ImageConfig
from shardsmith.dataset.records import Reject, Sample, content_digest
from shardsmith.door import OpenFile
from shardsmith.packing.imaging import process
from shardsmith.packing.plan import PlanItem
from shardsmith.packing.scan import SourceFile, scan

import images
from images import manifest_of, samples_of

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from slowfs import fuse_available, slow_mount  # noqa: E402

MIB = 1 << 20
PACK_ARGS = ("--size", "32", "--shard-samples", "3", "--split", "train=0.5,val=0.5", "--quiet")


def pack(source: Path, output: Path, *extra: object) -> Result:
    result = CliRunner().invoke(main, ["pack", str(source), str(output), *PACK_ARGS,
                                       *map(str, extra)])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        pytest.fail("".join(traceback.format_exception(*result.exc_info)))
    return result


def originals(root: Path) -> Path:
    """Six small JPEGs in two class folders, a and b."""
    for number in range(6):
        images.write(root / "ab"[number % 2] / f"{number}.jpg", images.jpeg(96, 64, number))
    return root


def sparse_jpeg(path: Path, size: int) -> Path:
    """A real JPEG header, then holes up to ``size`` bytes (nothing on disk)."""
    images.write(path, images.jpeg(96, 64, 7))
    with open(path, "r+b") as handle:
        handle.truncate(size)
    return path


def rejects_of(output: Path) -> dict[str, tuple[str, str]]:
    return {r["path"]: (r["reason"], r["detail"]) for r in manifest_of(output)["rejects"]}


def yaml(tmp_path: Path, text: str) -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(text)
    return config


# --------------------------------------------------------------- the decode budget caps the read

def test_an_original_larger_than_its_decode_budget_is_rejected_without_being_read(
    tmp_path, monkeypatch
):
    source = tmp_path / "source"
    sparse_jpeg(source / "a" / "huge.jpg", 17 * MIB)
    images.write(source / "a" / "small.jpg", images.jpeg(96, 64, 1))
    read = []
    real_read = OpenFile.read
    monkeypatch.setattr(OpenFile, "read", lambda handle: read.append(handle.path)
                        or real_read(handle))

    result = pack(source, tmp_path / "out", "--workers", "1", "--max-reject-fraction", "1",
                  "--config", yaml(tmp_path, "image:\n  max_decoded_mb: 16\n"))

    assert result.exit_code == 0, result.output
    reason, detail = rejects_of(tmp_path / "out")["a/huge.jpg"]
    assert reason == "too_large"
    assert "image.max_decoded_mb" in detail and "not read" in detail
    originals_read = [Path(path).name for path in read if str(path).startswith(str(source))]
    assert originals_read == ["small.jpg"]  # the job file goes through the door too
    assert [r["path"] for r in samples_of(tmp_path / "out")] == ["a/small.jpg"]


def test_the_image_path_refuses_an_original_over_its_budget_before_reading(tmp_path,
                                                                          monkeypatch):
    path = sparse_jpeg(tmp_path / "a" / "huge.jpg", 2 * MIB + 1)
    info = path.stat()
    monkeypatch.setattr(OpenFile, "read", lambda handle: pytest.fail("read"))
    item = PlanItem(SourceFile("a/huge.jpg", info.st_size, info.st_mtime_ns, 0), "train")

    result = process(item, str(tmp_path), ImageConfig(max_decoded_mb=2))

    assert isinstance(result, Reject) and result.reason == "too_large"


def test_a_bmp_within_its_decode_budget_is_still_packed(tmp_path):
    """BMP holds its pixels 1:1: the byte cap is never tighter than the decode check.  (The
    budget also holds the 300x300 output and the encoder's buffer: about 2.2 MB.)"""
    path = images.write(tmp_path / "a" / "flat.bmp", images.bmp(300, 300, 1))  # 270 kB
    info = path.stat()
    item = PlanItem(SourceFile("a/flat.bmp", info.st_size, info.st_mtime_ns, 0), "train")

    assert isinstance(process(item, str(tmp_path), ImageConfig(max_decoded_mb=3)), Sample)


# ------------------------------------------------------------------------ the scan's identity

def test_the_scan_keeps_each_files_inode_number_and_size(tmp_path):
    source = originals(tmp_path / "source")
    from shardsmith.config import SourceConfig

    table = scan(source, SourceConfig()).files

    for at, relpath in enumerate(table.relpaths):
        info = (source / relpath).stat()
        assert (int(table.inodes[at]), int(table.sizes[at])) == (info.st_ino, info.st_size)
        assert table[at].identity.inode == info.st_ino
    assert table.inodes.dtype.name == "int64"


# --------------------------------------------------------- a folder swapped for a link meanwhile

def swap_folder_after_the_scan(monkeypatch, folder: Path, outside: Path, stash: Path) -> None:
    """Once the scan has listed the tree, ``folder`` becomes a symlink to ``outside``."""
    real_scan = shardsmith.packing.pipeline.scan

    def scan_then_swap(*args, **kwargs):
        scanned = real_scan(*args, **kwargs)
        folder.rename(stash)
        folder.symlink_to(outside, target_is_directory=True)
        return scanned

    monkeypatch.setattr(shardsmith.packing.pipeline, "scan", scan_then_swap)


def outside_twins(source: Path, outside: Path) -> set[str]:
    """Same-named images with other pixels in ``outside``; their content digests."""
    digests = set()
    for path in sorted((source / "a").iterdir()):
        twin = images.write(outside / path.name, images.jpeg(96, 64, 100 + int(path.stem)))
        digests.add(content_digest(twin.read_bytes()))
    return digests


def assert_the_folder_was_refused(output: Path, outside_digests: set[str]) -> None:
    rejects = rejects_of(output)
    assert sorted(rejects) == ["a/0.jpg", "a/2.jpg", "a/4.jpg"]
    for reason, detail in rejects.values():
        assert reason == "not_a_file"
        assert "folder 'a'" in detail and "symbolic link" in detail
    packed = samples_of(output)
    assert sorted(r["path"] for r in packed) == ["b/1.jpg", "b/3.jpg", "b/5.jpg"]
    assert not {r["source_digest"] for r in packed} & outside_digests


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_folder_swapped_for_a_symlink_after_the_scan_packs_nothing_from_outside(
    tmp_path, monkeypatch, workers
):
    source = originals(tmp_path / "source")
    outside = outside_twins(source, tmp_path / "outside")
    swap_folder_after_the_scan(monkeypatch, source / "a", tmp_path / "outside",
                               tmp_path / "stash")

    result = pack(source, tmp_path / "out", "--workers", workers, "--max-reject-fraction", "1")

    assert result.exit_code == 0, result.output
    assert_the_folder_was_refused(tmp_path / "out", outside)


def test_the_rejects_of_a_swapped_folder_count_against_the_reject_budget(tmp_path, monkeypatch):
    source = originals(tmp_path / "source")
    outside_twins(source, tmp_path / "outside")
    swap_folder_after_the_scan(monkeypatch, source / "a", tmp_path / "outside",
                               tmp_path / "stash")

    result = pack(source, tmp_path / "out", "--workers", "1")

    assert result.exit_code == 3, result.output
    assert "a/0.jpg" in rejects_of(tmp_path / "out")


def test_the_readahead_never_opens_a_file_through_a_swapped_folder(tmp_path, monkeypatch):
    if not hasattr(os, "posix_fadvise"):
        pytest.skip("no posix_fadvise on this platform: there is no read-ahead")
    source = originals(tmp_path / "source")
    outside_twins(source, tmp_path / "outside")
    swap_folder_after_the_scan(monkeypatch, source / "a", tmp_path / "outside",
                               tmp_path / "stash")
    hinted = []
    real_fadvise = os.posix_fadvise

    def recording_fadvise(fd, offset, length, advice):
        hinted.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real_fadvise(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", recording_fadvise)

    result = pack(source, tmp_path / "out", "--workers", "2", "--max-reject-fraction", "1",
                  "--config", yaml(tmp_path, "run:\n  readahead: true\n"))

    assert result.exit_code == 0, result.output
    assert hinted, "the read-ahead hinted nothing"
    assert not [path for path in hinted if "outside" in path], hinted


def test_a_file_replaced_after_the_scan_is_packed_with_its_new_content(tmp_path, monkeypatch):
    """Another inode and size, but reached without a link: a legitimate edit, not a reject."""
    source = originals(tmp_path / "source")
    victim, replacement = source / "a" / "0.jpg", images.jpeg(128, 96, 55)
    real_scan = shardsmith.packing.pipeline.scan

    def scan_then_replace(*args, **kwargs):
        scanned = real_scan(*args, **kwargs)
        images.write(source / "a" / "0.tmp", replacement).rename(victim)  # a new inode
        return scanned

    monkeypatch.setattr(shardsmith.packing.pipeline, "scan", scan_then_replace)

    result = pack(source, tmp_path / "out", "--workers", "1")

    assert result.exit_code == 0, result.output
    assert manifest_of(tmp_path / "out")["rejects"] == []
    record = {r["path"]: r for r in samples_of(tmp_path / "out")}["a/0.jpg"]
    assert record["source_digest"] == content_digest(replacement)
    assert record["source_size"] == len(replacement)


def test_a_folder_recreated_as_a_real_folder_after_the_scan_is_packed(tmp_path, monkeypatch):
    source = originals(tmp_path / "source")
    real_scan = shardsmith.packing.pipeline.scan

    def scan_then_recreate(*args, **kwargs):
        scanned = real_scan(*args, **kwargs)
        (source / "a").rename(tmp_path / "old-a")
        (tmp_path / "old-a").rename(source / "a")  # same files, the walk finds them
        for path in (source / "a").iterdir():  # new inodes, same bytes
            data = path.read_bytes()
            path.unlink()
            path.write_bytes(data)
        return scanned

    monkeypatch.setattr(shardsmith.packing.pipeline, "scan", scan_then_recreate)

    result = pack(source, tmp_path / "out", "--workers", "1")

    assert result.exit_code == 0, result.output
    assert manifest_of(tmp_path / "out")["rejects"] == []
    assert len(samples_of(tmp_path / "out")) == 6


def test_with_follow_symlinks_a_folder_swapped_for_a_link_is_followed(tmp_path, monkeypatch):
    source = originals(tmp_path / "source")
    outside = outside_twins(source, tmp_path / "outside")
    swap_folder_after_the_scan(monkeypatch, source / "a", tmp_path / "outside",
                               tmp_path / "stash")

    result = pack(source, tmp_path / "out", "--workers", "1",
                  "--config", yaml(tmp_path, "source:\n  follow_symlinks: true\n"))

    assert result.exit_code == 0, result.output
    assert manifest_of(tmp_path / "out")["rejects"] == []
    packed = {r["path"]: r["source_digest"] for r in samples_of(tmp_path / "out")}
    assert {packed[f"a/{n}.jpg"] for n in (0, 2, 4)} == outside


@pytest.mark.slow
def test_through_the_dask_backend_a_swapped_folder_packs_nothing_from_outside(
    tmp_path, monkeypatch
):
    distributed = pytest.importorskip("distributed", reason="the dask extra is not installed")
    source = originals(tmp_path / "source")
    outside = outside_twins(source, tmp_path / "outside")
    swap_folder_after_the_scan(monkeypatch, source / "a", tmp_path / "outside",
                               tmp_path / "stash")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        result = pack(source, tmp_path / "out", "--backend", "dask",
                      "--scheduler", cluster.scheduler_address, "--max-reject-fraction", "1")

    assert result.exit_code == 0, result.output
    assert_the_folder_was_refused(tmp_path / "out", outside)


def test_on_a_fuse_mount_a_swapped_folder_packs_nothing_from_outside(tmp_path, monkeypatch):
    reason = fuse_available()
    if reason is not None:
        pytest.skip(reason)
    backing = originals(tmp_path / "backing")
    outside = outside_twins(backing, tmp_path / "outside")
    with slow_mount(backing, tmp_path / "mnt", latency=0.0) as fs:
        # The mount is read-only: the swap happens in the folder it passes through.
        swap_folder_after_the_scan(monkeypatch, backing / "a", tmp_path / "outside",
                                   tmp_path / "stash")
        result = pack(fs.mountpoint, tmp_path / "out", "--workers", "2",
                      "--max-reject-fraction", "1")

    assert result.exit_code == 0, result.output
    assert_the_folder_was_refused(tmp_path / "out", outside)
