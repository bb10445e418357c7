"""``shardsmith export`` against hostile destinations, records and datasets: each is one line
on stderr and exit 2, never a traceback, and nothing outside DEST is written or removed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import defects
import images

TILES = {"image.size": 96}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hostile-export")
    for split, name in (("train", "a"), ("train", "b"), ("val", "c")):
        path = images.write(root / "source" / split / "defect" / f"{name}.jpg",
                            defects.corpus_original("jpeg8", 1))
        defects.write_corpus_annotations(path.with_suffix(""))
    defects.pack_with(root / "source", root / "dataset",
                      {**defects.CORPUS_ANNOTATIONS, **TILES, "splits.folder": True,
                       "splits": "train=0.8,val=0.2"})
    return root / "dataset"


def shardsmith(*args: object) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    return subprocess.run([sys.executable, "-m", "shardsmith", "export",
                           *map(str, args), "--quiet"], capture_output=True, text=True,
                          env=env, timeout=120)


def refused(result: subprocess.CompletedProcess, *words: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardsmith: error: "), result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0]


def listing(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


def test_a_destination_that_is_a_file_is_refused(dataset, tmp_path):
    (tmp_path / "dest").write_text("mine")
    refused(shardsmith(dataset, tmp_path / "dest", "--layout", "yolo"), "not a folder")
    assert (tmp_path / "dest").read_text() == "mine"


def test_a_destination_that_is_a_link_is_refused(dataset, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "dest").symlink_to(tmp_path / "elsewhere")
    refused(shardsmith(dataset, tmp_path / "dest", "--layout", "yolo"), "symbolic link")
    assert listing(tmp_path / "elsewhere") == []


def test_unrelated_files_in_the_destination_are_refused_and_kept(dataset, tmp_path):
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest" / "thesis.pdf").write_text("years of work")
    refused(shardsmith(dataset, tmp_path / "dest", "--layout", "yolo"), "thesis.pdf")
    assert (tmp_path / "dest" / "thesis.pdf").read_text() == "years of work"
    assert listing(tmp_path / "dest") == ["thesis.pdf"]


def test_another_layouts_export_is_refused(dataset, tmp_path):
    assert shardsmith(dataset, tmp_path / "dest", "--layout", "coco").returncode == 0
    before = listing(tmp_path / "dest")
    refused(shardsmith(dataset, tmp_path / "dest", "--layout", "yolo"), "coco export")
    assert listing(tmp_path / "dest") == before


def test_current_as_a_real_folder_is_refused(dataset, tmp_path):
    (tmp_path / "dest" / "current").mkdir(parents=True)
    (tmp_path / "dest" / "current" / "notes.txt").write_text("mine")
    refused(shardsmith(dataset, tmp_path / "dest", "--layout", "yolo"), "current")
    assert (tmp_path / "dest" / "current" / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("damage", [
    b"not json",
    b'{"format": "one"}',
    "paths with ..",
    "absolute path",
    "huge number",
])
def test_a_damaged_export_record_is_refused(dataset, tmp_path, damage):
    assert shardsmith(dataset, tmp_path / "dest", "--layout", "yolo").returncode == 0
    path = tmp_path / "dest" / "v1" / ".export" / "record.json"
    record = json.loads(path.read_text())
    if damage == "paths with ..":
        record["samples"][0]["files"][0]["path"] = "../../outside.jpg"
    elif damage == "absolute path":
        record["samples"][0]["files"][0]["path"] = str(tmp_path / "outside.jpg")
    elif damage == "huge number":
        record["samples"][0]["files"][0]["bytes"] = 10**40
    path.write_bytes(damage if isinstance(damage, bytes) else json.dumps(record).encode())
    refused(shardsmith(dataset, tmp_path / "dest", "--layout", "yolo"), "record.json")
    assert not (tmp_path / "outside.jpg").exists()


def interrupted_partial(dataset: Path, dest: Path) -> Path:
    """An export stopped after its first shard: DEST/v1.partial with a journal."""
    from shardsmith.ops import export as package

    original = package._Run._read_shard
    calls = {"count": 0}

    def stop_after_one(self, *args, **kwargs):
        calls["count"] += 1
        if calls["count"] == 2:
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    package._Run._read_shard = stop_after_one
    try:
        with pytest.raises(KeyboardInterrupt):
            package.export(dataset, dest, "yolo", quiet=True)
    finally:
        package._Run._read_shard = original
    return dest / "v1.partial"


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_a_fifo_or_link_where_an_exported_file_is_resumed_is_refused(dataset, tmp_path, kind):
    partial = interrupted_partial(dataset, tmp_path / "dest")
    victim = next(partial.rglob("*.jpg"))
    victim.unlink()
    if kind == "fifo":
        os.mkfifo(victim)
    else:
        (tmp_path / "secret").write_text("outside")
        victim.symlink_to(tmp_path / "secret")
    refused(shardsmith(dataset, tmp_path / "dest", "--layout", "yolo"), victim.name)
    assert not (tmp_path / "dest" / "current").exists()
    if kind == "symlink":
        assert (tmp_path / "secret").read_text() == "outside"


def test_a_class_name_that_is_no_folder_name_is_refused(tmp_path):
    source = tmp_path / "source"
    for name in ("a", "b"):
        images.write(source / "train" / ".." / "train" / name / f"{name}.jpg", images.jpeg())
    defects.pack_with(source, tmp_path / "dataset", {"splits.folder": True,
                                                     "splits": "train=1.0"})
    manifest_path = tmp_path / "dataset" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["classes"] = ["..", "b"]
    manifest_path.write_text(json.dumps(manifest))
    refused(shardsmith(tmp_path / "dataset", tmp_path / "dest", "--layout", "yolo"),
            "folder name")
    assert not (tmp_path / "dest" / "current").exists()


def test_a_folder_that_is_not_a_dataset_is_refused(tmp_path):
    (tmp_path / "not-a-dataset").mkdir()
    refused(shardsmith(tmp_path / "not-a-dataset", tmp_path / "dest", "--layout", "coco"),
            "not a packed dataset")
    assert not (tmp_path / "dest").exists()


def test_a_destination_inside_the_dataset_is_refused(dataset):
    before = listing(dataset)
    refused(shardsmith(dataset, dataset / "export", "--layout", "coco"), "inside the dataset")
    assert listing(dataset) == before
