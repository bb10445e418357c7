"""The unchanged shards' files hard-linked from the previous export (``ExportTree.link``), a
group per shard: only a file as the export wrote it is linked, and a group with any other is
made from its shard, whole."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from shardsmith.ops.export.record import ExportedFile, ExportedSample, ExportedShard
from shardsmith.ops.export.tree import ExportTree
from shardsmith.progress import Progress


def group_of(source: Path, *names: str, size: int = 3) -> ExportedShard:
    """A shard's group whose samples have one file each, ``images/NAME``, recorded as ``size``
    bytes in the inode ``source/images/NAME`` has now (0 where there is none)."""
    samples = []
    for name in names:
        path = source / "images" / name
        inode = path.lstat().st_ino if os.path.lexists(path) else 0
        samples.append(ExportedSample(name, "train", 1, 1,
                                      (ExportedFile(f"images/{name}", size, inode),), None))
    return ExportedShard(f"train-{names[0]}", "0" * 64, "0" * 64, tuple(samples))


def linked(source: Path, target: Path, groups: list[ExportedShard]) -> list[str]:
    """The shards whose groups are linked, by their first file's name."""
    progress = Progress(len(groups), 0, "samples", "export", True)
    with ExportTree(target).linking(source, groups, progress) as links:
        return [group.samples[0].key for group in links()]


def test_only_files_as_written_are_linked_and_nothing_else_is_left_linked(tmp_path):
    source, target = tmp_path / "v1", tmp_path / "v2.partial"
    (source / "images").mkdir(parents=True)
    (source / "images" / "a b.jpg").write_bytes(b"abc")
    (source / "images" / "short.jpg").write_bytes(b"ab")  # recorded as 3 bytes: cut short
    (source / "images" / "run.jpg").write_bytes(b"abc")
    (source / "images" / "run.jpg").chmod(0o755)  # executable: a fresh export would not
    (source / "images" / "elsewhere.jpg").symlink_to(source / "images" / "a b.jpg")
    (source / "images" / "folder.jpg").mkdir()
    names = ["a b.jpg", "short.jpg", "run.jpg", "elsewhere.jpg", "folder.jpg", "gone.jpg"]
    assert linked(source, target, [group_of(source, name) for name in names]) == ["a b.jpg"]
    assert ((target / "images" / "a b.jpg").stat().st_ino
            == (source / "images" / "a b.jpg").stat().st_ino)
    assert os.listdir(target / "images") == ["a b.jpg"]


def test_one_file_not_as_written_keeps_its_whole_group_from_being_linked(tmp_path):
    source, target = tmp_path / "v1", tmp_path / "v2.partial"
    (source / "images").mkdir(parents=True)
    for name in ("a.jpg", "b.jpg", "c.jpg", "d.jpg"):
        (source / "images" / name).write_bytes(b"abc")
    (source / "images" / "c.jpg").chmod(0o755)
    groups = [group_of(source, "a.jpg", "b.jpg"), group_of(source, "c.jpg", "d.jpg")]
    assert linked(source, target, groups) == ["a.jpg"]


def test_a_file_on_another_file_system_is_not_linked_and_the_export_goes_on(tmp_path):
    """A version folder someone mounted from elsewhere: its files cannot be linked (EXDEV),
    the samples are made from their shards, and the export does not fail on every rerun."""
    other = Path("/dev/shm")
    if not other.is_dir() or other.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("no second file system at /dev/shm to link across")
    source = Path(tempfile.mkdtemp(dir=other))
    try:
        (source / "images").mkdir()
        (source / "images" / "a.jpg").write_bytes(b"abc")
        assert linked(source, tmp_path / "v2.partial", [group_of(source, "a.jpg")]) == []
    finally:
        shutil.rmtree(source)


def test_a_missing_folder_of_the_previous_version_lends_nothing(tmp_path):
    (tmp_path / "v1").mkdir()
    groups = [group_of(tmp_path / "v1", "a.jpg")]
    assert linked(tmp_path / "v1", tmp_path / "v2.partial", groups) == []


def test_progress_counts_each_sample_once_when_links_fail(tmp_path, monkeypatch):
    """Files of the previous version made executable are not linked: their samples are
    made from their shards and counted there, not also as linked."""
    from shardsmith.ops import export as package

    counted = []

    class Counted(Progress):
        def update(self, count: int = 1) -> None:
            counted.append(count)
            super().update(count)

    from test_export import exported_then_one_more

    exported_then_one_more(tmp_path)
    for path in (tmp_path / "yolo" / "v1" / "images").rglob("*.jpg"):
        path.chmod(0o755)
    monkeypatch.setattr(package, "Progress", Counted)
    result = package.export(tmp_path / "dataset", tmp_path / "yolo", "yolo", quiet=True)
    assert result.linked == 0 and result.written == result.samples
    assert sum(counted) == result.samples and min(counted) >= 0
