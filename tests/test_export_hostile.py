"""``shardsmith export`` against hostile destinations, records and datasets: each is one line
on stderr and exit 2, never a traceback, and nothing outside DEST is written or removed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hostile_data import classified
from hostile_helpers import as_process

from shardsmith.errors import OutputStateError
from shardsmith.ops.export import export

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
    return as_process("export", *args, "--quiet")


def refused(result: subprocess.CompletedProcess, *words: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardsmith: error: "), result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in lines[0]


def listing(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


def samples_of(record: dict) -> list[dict]:
    """Every sample of an export record (its groups': one a shard), to edit in place."""
    return [sample for group in record["shards"] for sample in group["samples"]]


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


@pytest.mark.slow
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
    "another sample's file",
    "a file the layout does not name",
    "unknown field",
])
@pytest.mark.slow
def test_a_damaged_export_record_is_refused(dataset, tmp_path, damage):
    assert shardsmith(dataset, tmp_path / "dest", "--layout", "yolo").returncode == 0
    path = tmp_path / "dest" / "v1" / ".export" / "record.json"
    record = json.loads(path.read_text())
    samples = samples_of(record)
    if damage == "paths with ..":
        samples[0]["files"][0]["path"] = "../../outside.jpg"
    elif damage == "absolute path":
        samples[0]["files"][0]["path"] = str(tmp_path / "outside.jpg")
    elif damage == "huge number":
        samples[0]["files"][0]["bytes"] = 10**40
    elif damage == "another sample's file":
        samples[0]["files"][0] = samples[1]["files"][0]
    elif damage == "a file the layout does not name":
        samples[0]["files"][0]["path"] = "images/train/elsewhere.jpg"
    elif damage == "unknown field":
        samples[0]["files"][0]["mode"] = "0777"
    path.write_bytes(damage if isinstance(damage, bytes) else json.dumps(record).encode())
    refused(shardsmith(dataset, tmp_path / "dest", "--layout", "yolo"), "record.json")
    assert not (tmp_path / "outside.jpg").exists()


@pytest.mark.parametrize("lent", ["../../outside.jpg", "absolute", "images/train/x.jpg",
                                  "images/val/{key}.jpg", "labels/train/{key}.txt"])
def test_a_file_a_record_names_outside_its_layout_is_never_linked_into_the_next_version(
        dataset, tmp_path, lent):
    # A new version links the unchanged shards' files from the current one: a shard with a
    # sample whose recorded path is not the layout's for its key and split lends nothing;
    # it is exported from its shard like a new one.  A shard a sample here, so the others
    # are linked.
    from shardsmith.ops.export import export

    source, copy, dest = tmp_path / "source", tmp_path / "dataset", tmp_path / "dest"
    overrides = {**defects.CORPUS_ANNOTATIONS, **TILES, "splits.folder": True,
                 "splits": "train=0.8,val=0.2", "output.shard_samples": 1}
    shutil.copytree(dataset.parent / "source", source)
    defects.pack_with(source, copy, overrides)
    export(copy, dest, "yolo", quiet=True)
    path = dest / "v1" / ".export" / "record.json"
    record = json.loads(path.read_text())
    victim = next(sample for sample in samples_of(record) if sample["split"] == "train")
    planted, outside = victim["files"][0], tmp_path / "outside.jpg"
    planted["path"] = str(outside) if lent == "absolute" else lent.format(key=victim["key"])
    outside.write_bytes(b"x" * planted["bytes"])
    path.write_text(json.dumps(record))
    added = images.write(source / "train" / "defect" / "d.jpg",
                         defects.corpus_original("jpeg8", 2))
    defects.write_corpus_annotations(added.with_suffix(""))
    defects.pack_with(source, copy, overrides)
    result = export(copy, dest, "yolo", quiet=True)
    assert result.version == 2 and result.linked == len(samples_of(record)) - 1
    image = dest / "v2" / "images" / "train" / f"{victim['key']}.jpg"
    assert image.read_bytes()[:2] == b"\xff\xd8" and image.stat().st_nlink == 1
    assert outside.stat().st_nlink == 1 and outside.read_bytes() == b"x" * planted["bytes"]


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
@pytest.mark.slow
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


@pytest.mark.parametrize("kind", ["fifo", "link to a file", "link to a folder"])
def test_a_fifo_or_link_no_export_makes_in_a_resumed_folder_is_refused(dataset, tmp_path,
                                                                        kind):
    """Under a name the export does not make, it would go into the new version (a trainer
    globbing ``images/train/*.jpg`` opens the FIFO, or reads the file outside): refused, kept,
    nothing switched."""
    partial = interrupted_partial(dataset, tmp_path / "dest")
    planted = partial / "images" / "train" / "planted.jpg"
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.jpg").write_text("outside")
    if kind == "fifo":
        os.mkfifo(planted)
    elif kind == "link to a file":
        planted.symlink_to(tmp_path / "outside" / "secret.jpg")
    else:
        planted.symlink_to(tmp_path / "outside")
    refused(shardsmith(dataset, tmp_path / "dest", "--layout", "yolo"), str(planted))
    assert not (tmp_path / "dest" / "current").exists() and os.path.lexists(planted)
    assert (tmp_path / "outside" / "secret.jpg").read_text() == "outside"


def test_a_resumed_file_swapped_for_a_hard_link_to_the_same_bytes_is_not_kept(dataset,
                                                                                tmp_path):
    """Its sha256 matches, but it is another file, shared with a name outside DEST (which
    may change it later): made again from its shard, the outside file untouched."""
    partial = interrupted_partial(dataset, tmp_path / "dest")
    victim = next(partial.rglob("*.jpg"))
    outside = tmp_path / "outside.jpg"
    shutil.copyfile(victim, outside)
    outside.chmod(victim.stat().st_mode & 0o777)
    victim.unlink()
    os.link(outside, victim)
    result = export(dataset, tmp_path / "dest", "yolo", quiet=True)
    made = result.folder / victim.relative_to(partial)
    assert made.read_bytes() == outside.read_bytes() and made.stat().st_nlink == 1
    assert made.stat().st_ino != outside.stat().st_ino and outside.stat().st_nlink == 1


@pytest.mark.slow
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


def forged(dataset: Path, copy: Path, patch) -> str:
    """A copy of ``dataset`` whose first sample with objects carries metadata ``patch``
    rewrote, its shard re-signed in the manifest (the sha256 matches: only the metadata lies);
    returns the sample's key."""
    import hashlib
    import io
    import shutil
    import tarfile

    shutil.copytree(dataset, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    shard = next(entry for entry in manifest["shards"] if entry["name"].endswith(".tar"))
    out = io.BytesIO()
    key = None
    with tarfile.open(copy / shard["name"]) as source, \
            tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as target:
        for member in source.getmembers():
            data = source.extractfile(member).read()
            if key is None and member.name.endswith(".json"):
                metadata = json.loads(data)
                if metadata.get("boxes"):
                    patch(metadata)
                    data = json.dumps(metadata).encode()
                    key = member.name.removesuffix(".json")
            member.size = len(data)
            target.addfile(member, io.BytesIO(data))
    raw = out.getvalue()
    (copy / shard["name"]).write_bytes(raw)
    shard["bytes"], shard["sha256"] = len(raw), hashlib.sha256(raw).hexdigest()
    (copy / "manifest.json").write_text(json.dumps(manifest))
    assert key is not None
    return key


def reverse_a_box(metadata: dict) -> None:
    x0, y0, x1, y1 = metadata["boxes"][0]
    metadata["boxes"][0] = [x1, y0, x0, y1]


def box_outside(metadata: dict) -> None:
    metadata["boxes"][0][2] = metadata["width"] + 40


def other_size(metadata: dict) -> None:
    """Twice the JPEG's width, its masks dropped so that only the JPEG's header can tell."""
    metadata["width"] *= 2
    metadata.pop("rle", None)
    metadata.pop("polygons", None)


def unparseable_labels(metadata: dict) -> None:
    metadata["labels"] = "many"


@pytest.mark.parametrize("lie", [reverse_a_box, box_outside, other_size, unparseable_labels])
@pytest.mark.parametrize("layout", ["yolo", "coco"])
@pytest.mark.slow
def test_metadata_that_lies_stops_the_export_naming_shard_and_key(dataset, tmp_path, lie,
                                                                   layout):
    key = forged(dataset, tmp_path / "forged", lie)
    result = shardsmith(tmp_path / "forged", tmp_path / "dest", "--layout", layout)
    refused(result, f"sample {key}", ".tar")
    assert result.stderr.count(f"sample {key}") == 1  # named once, not "sample K: sample K:"
    assert not (tmp_path / "dest" / "current").exists()
    assert not list((tmp_path / "dest").rglob("*.txt"))  # never a negative or empty box line


@pytest.mark.parametrize("damage", ["empty", "fifo", "flipped byte"])
@pytest.mark.slow
def test_a_damaged_shard_exits_2_and_switches_nothing(dataset, tmp_path, damage):
    shutil.copytree(dataset, tmp_path / "copy")
    shard = sorted((tmp_path / "copy").glob("*.tar"))[0]
    if damage == "empty":
        shard.write_bytes(b"")
    elif damage == "fifo":
        shard.unlink()
        os.mkfifo(shard)
    else:
        raw = bytearray(shard.read_bytes())
        raw[700] ^= 0xFF
        shard.write_bytes(bytes(raw))
    refused(shardsmith(tmp_path / "copy", tmp_path / "dest", "--layout", "yolo"), shard.name)
    assert not (tmp_path / "dest" / "current").exists()


@pytest.mark.slow
def test_a_normal_class_the_dataset_lacks_is_refused_up_front(dataset, tmp_path):
    refused(shardsmith(dataset, tmp_path / "dest", "--layout", "anomalib", "--normal", "ok"),
            "--normal", "defect")
    assert not (tmp_path / "dest").exists()


@pytest.mark.parametrize("layout", ["coco", "anomalib"])
@pytest.mark.slow
def test_a_task_for_another_layout_is_refused(dataset, tmp_path, layout):
    refused(shardsmith(dataset, tmp_path / "dest", "--layout", layout, "--task", "detect"),
            "--task")
    assert not (tmp_path / "dest").exists()


def renamed_classes(dataset: Path, copy: Path, classes=None, object_classes=None) -> Path:
    shutil.copytree(dataset, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    if classes is not None:
        manifest["classes"] = classes
    if object_classes is not None:
        manifest["object_classes"][:len(object_classes)] = object_classes
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


@pytest.mark.parametrize("name, words", [
    ("GOOD", "normal images"),
    ("a/b", "folder name"),
    ("tab\there", "folder name"),
    ("x" * 256, "folder name"),
    ("Good-ish\x00", "folder name"),
])
@pytest.mark.slow
def test_a_defect_class_that_is_no_mvtec_folder_is_refused_before_writing(dataset, tmp_path,
                                                                          name, words):
    copy = renamed_classes(dataset, tmp_path / "copy", classes=["good"],
                           object_classes=[name])
    refused(shardsmith(copy, tmp_path / "dest", "--layout", "anomalib", "--anomalib-layout",
                       "mvtec"), words)
    assert not (tmp_path / "dest").exists()


def test_defect_classes_equal_but_for_case_are_refused(dataset, tmp_path):
    copy = renamed_classes(dataset, tmp_path / "copy", classes=["good"],
                           object_classes=["Crack", "crack"])
    refused(shardsmith(copy, tmp_path / "dest", "--layout", "anomalib", "--anomalib-layout",
                       "mvtec"), "case")
    assert not (tmp_path / "dest").exists()


@pytest.mark.parametrize("target", ["/etc", "../elsewhere", "v1.bak", "notes"])
@pytest.mark.slow
def test_a_current_link_that_is_not_ours_is_refused_and_kept(dataset, tmp_path, target):
    (tmp_path / "dest").mkdir()
    (tmp_path / "dest" / "current").symlink_to(target)
    refused(shardsmith(dataset, tmp_path / "dest", "--layout", "yolo"), "current")
    assert os.readlink(tmp_path / "dest" / "current") == target
    assert listing(tmp_path / "dest") == ["current"]


@pytest.fixture(scope="module")
def two_versions(tmp_path_factory) -> tuple[Path, Path]:
    """The same dataset at version 1 and, in another folder, at version 2 (one new original):
    an export of the second links what it shares with an export of the first (the same
    classes: a class more would make every file again)."""
    root = tmp_path_factory.mktemp("two-versions")
    overrides = {**defects.CORPUS_ANNOTATIONS, **TILES, "splits.folder": True,
                 "splits": "train=0.8,val=0.2"}
    for split, name in (("train", "a"), ("val", "c")):
        path = images.write(root / "source" / split / "defect" / f"{name}.jpg",
                            defects.corpus_original("jpeg8", 1))
        defects.write_corpus_annotations(path.with_suffix(""))
    defects.pack_with(root / "source", root / "first", overrides)
    shutil.copytree(root / "first", root / "second")
    images.write(root / "source" / "train" / "defect" / "new.jpg",
                 defects.corpus_original("jpeg8", 1, with_defects=False))
    defects.pack_with(root / "source", root / "second", overrides)
    return root / "first", root / "second"


def files_of(folder: Path) -> dict[str, bytes]:
    """What a trainer reads of an export: every file but the record and ``data.yaml`` (it names
    its own folder)."""
    return {str(path.relative_to(folder)): path.read_bytes()
            for path in sorted(folder.rglob("*")) if path.is_file()
            and ".export" not in path.parts and path.name != "data.yaml"}


@pytest.mark.slow
def test_a_folder_of_the_previous_version_that_is_a_link_lends_no_file(two_versions,
                                                                      tmp_path):
    first, second = two_versions
    assert shardsmith(first, tmp_path / "dest", "--layout", "yolo").returncode == 0
    images_folder = tmp_path / "dest" / "v1" / "images"
    shutil.copytree(images_folder, tmp_path / "outside")
    for path in (tmp_path / "outside").rglob("*.jpg"):  # same names and sizes, other bytes
        path.write_bytes(b"O" * path.stat().st_size)
    shutil.rmtree(images_folder)
    images_folder.symlink_to(tmp_path / "outside")
    outside = {path: path.stat().st_ino for path in (tmp_path / "outside").rglob("*.jpg")}
    assert shardsmith(second, tmp_path / "dest", "--layout", "yolo").returncode == 0
    assert shardsmith(second, tmp_path / "fresh", "--layout", "yolo").returncode == 0
    assert files_of(tmp_path / "dest" / "v2") == files_of(tmp_path / "fresh" / "v2")
    assert not {path.stat().st_ino for path in (tmp_path / "dest" / "v2").rglob("*")} \
        & set(outside.values())


@pytest.mark.slow
def test_an_up_to_date_version_with_a_folder_that_is_a_link_is_made_again(two_versions,
                                                                         tmp_path):
    first, _ = two_versions
    assert shardsmith(first, tmp_path / "dest", "--layout", "yolo").returncode == 0
    expected = files_of(tmp_path / "dest" / "v1")
    train = tmp_path / "dest" / "v1" / "images" / "train"
    shutil.copytree(train, tmp_path / "outside")
    for path in (tmp_path / "outside").iterdir():
        path.write_bytes(b"O" * path.stat().st_size)
    shutil.rmtree(train)
    train.symlink_to(tmp_path / "outside")
    result = shardsmith(first, tmp_path / "dest", "--layout", "yolo")
    assert result.returncode == 0 and "up to date" not in result.stdout
    assert files_of(tmp_path / "dest" / "current") == expected
    assert not (tmp_path / "dest" / "v1" / "images" / "train").is_symlink()
    assert all(set(path.read_bytes()) == {ord("O")} for path in (tmp_path / "outside").iterdir())


@pytest.mark.slow
def test_an_unreadable_file_of_the_previous_version_is_not_linked(two_versions, tmp_path):
    first, second = two_versions
    assert shardsmith(first, tmp_path / "dest", "--layout", "yolo").returncode == 0
    locked = sorted((tmp_path / "dest" / "v1" / "images" / "train").iterdir())[0]
    locked.chmod(0)
    assert shardsmith(second, tmp_path / "dest", "--layout", "yolo").returncode == 0
    made = tmp_path / "dest" / "v2" / locked.relative_to(tmp_path / "dest" / "v1")
    assert made.stat().st_mode & 0o777 == 0o644 & ~current_umask()
    assert made.stat().st_ino != locked.stat().st_ino


@pytest.mark.parametrize("swap", ["link out", "fifo", "cut short", "executable"])
@pytest.mark.slow
def test_a_file_of_the_previous_version_that_is_not_as_written_is_made_again(two_versions,
                                                                            tmp_path, swap):
    first, second = two_versions
    assert shardsmith(first, tmp_path / "dest", "--layout", "yolo").returncode == 0
    victim = sorted((tmp_path / "dest" / "v1" / "labels" / "train").iterdir())[0]
    size = victim.stat().st_size
    if swap == "link out":
        (tmp_path / "outside.txt").write_bytes(b"O" * size)
        victim.unlink()
        victim.symlink_to(tmp_path / "outside.txt")
    elif swap == "fifo":
        victim.unlink()
        os.mkfifo(victim)
    elif swap == "cut short":
        victim.write_bytes(victim.read_bytes()[:-1])
    else:
        victim.chmod(0o755)
    assert shardsmith(second, tmp_path / "dest", "--layout", "yolo").returncode == 0
    assert shardsmith(second, tmp_path / "fresh", "--layout", "yolo").returncode == 0
    assert files_of(tmp_path / "dest" / "v2") == files_of(tmp_path / "fresh" / "v2")
    made = tmp_path / "dest" / "v2" / victim.relative_to(tmp_path / "dest" / "v1")
    assert made.is_file() and not made.is_symlink() and made.stat().st_nlink == 1
    assert made.stat().st_mode & 0o777 == 0o644 & ~current_umask()


def swap_for_a_hard_link(victim: Path, outside: Path) -> None:
    """``victim`` replaced by a hard link to ``outside``, a file made outside DEST with its
    size and mode and other bytes."""
    info = victim.stat()
    outside.write_bytes(b"O" * info.st_size)
    outside.chmod(info.st_mode & 0o777)
    victim.unlink()
    os.link(outside, victim)


@pytest.mark.parametrize("lie", ["a sample left out", "a sample of another split"])
def test_a_group_whose_samples_are_not_its_shards_lends_no_file(two_versions, tmp_path, lie):
    """A record whose group of the unchanged val shard leaves a sample out (it would be
    missing from the new version) or gives one another split: the shard is read again."""
    first, second = two_versions
    export(first, tmp_path / "dest", "yolo", quiet=True)
    path = tmp_path / "dest" / "v1" / ".export" / "record.json"
    record = json.loads(path.read_text())
    group = next(group for group in record["shards"] if group["shard"].startswith("val-"))
    if lie == "a sample left out":
        group["samples"].pop()
    else:
        group["samples"][0]["split"] = "train"
    path.write_text(json.dumps(record))
    before = {path.name: path.stat().st_ino
              for path in (tmp_path / "dest" / "v1" / "images" / "val").iterdir()}
    result = export(second, tmp_path / "dest", "yolo", quiet=True)
    export(second, tmp_path / "fresh", "yolo", quiet=True)
    assert files_of(tmp_path / "dest" / "v2") == files_of(tmp_path / "fresh" / "v2")
    assert result.linked > 0  # the unchanged train shard's
    made = {path.name: path.stat().st_ino
            for path in (tmp_path / "dest" / "v2" / "images" / "val").iterdir()}
    assert made.keys() == before.keys() and not set(made.values()) & set(before.values())


def test_a_shard_the_record_names_twice_lends_no_file(two_versions, tmp_path):
    """Both groups fit the unchanged shard: linking both would trip on the first's files
    (an error naming a file in DEST). Neither is linked; the shard is read again."""
    first, second = two_versions
    export(first, tmp_path / "dest", "yolo", quiet=True)
    path = tmp_path / "dest" / "v1" / ".export" / "record.json"
    record = json.loads(path.read_text())
    group = next(group for group in record["shards"] if group["shard"].startswith("val-"))
    record["shards"].append(group)
    path.write_text(json.dumps(record))
    result = export(second, tmp_path / "dest", "yolo", quiet=True)
    export(second, tmp_path / "fresh", "yolo", quiet=True)
    assert files_of(tmp_path / "dest" / "v2") == files_of(tmp_path / "fresh" / "v2")
    assert result.linked == 1 and result.shards_read == 2  # the train shard's linked


@pytest.mark.parametrize("side", ["width", "height"])
def test_a_recorded_image_size_not_the_sample_indexs_lends_no_file(two_versions, tmp_path,
                                                                    side):
    """COCO's instances files take a linked sample's size from the record, its shard unread:
    a group giving its sample another size than its index line is read again, and the
    instances files are a fresh export's."""
    first, second = two_versions
    export(first, tmp_path / "dest", "coco", quiet=True)
    path = tmp_path / "dest" / "v1" / ".export" / "record.json"
    record = json.loads(path.read_text())
    group = next(group for group in record["shards"] if group["shard"].startswith("val-"))
    group["samples"][0][side] -= 1  # the objects still inside the image: plausible
    path.write_text(json.dumps(record))
    result = export(second, tmp_path / "dest", "coco", quiet=True)
    export(second, tmp_path / "fresh", "coco", quiet=True)
    assert files_of(tmp_path / "dest" / "v2") == files_of(tmp_path / "fresh" / "v2")
    assert result.linked == 1 and result.shards_read == 2  # the train shard's linked


def test_a_file_of_the_previous_version_swapped_for_a_hard_link_is_not_linked(
        two_versions, tmp_path):
    """The new version would share the outside file (its bytes under a record naming ours):
    its sample is made from its shard."""
    first, second = two_versions
    export(first, tmp_path / "dest", "yolo", quiet=True)
    victim = sorted((tmp_path / "dest" / "v1" / "images" / "train").iterdir())[0]
    outside = tmp_path / "outside.jpg"
    swap_for_a_hard_link(victim, outside)
    result = export(second, tmp_path / "dest", "yolo", quiet=True)
    assert result.linked > 0
    export(second, tmp_path / "fresh", "yolo", quiet=True)
    assert files_of(tmp_path / "dest" / "v2") == files_of(tmp_path / "fresh" / "v2")
    made = tmp_path / "dest" / "v2" / victim.relative_to(tmp_path / "dest" / "v1")
    assert made.stat().st_ino != outside.stat().st_ino and made.stat().st_nlink == 1
    assert set(outside.read_bytes()) == {ord("O")}


def test_an_up_to_date_version_with_a_file_swapped_for_a_hard_link_is_made_again(
        two_versions, tmp_path):
    first, _ = two_versions
    export(first, tmp_path / "dest", "yolo", quiet=True)
    expected = files_of(tmp_path / "dest" / "v1")
    victim = sorted((tmp_path / "dest" / "v1" / "labels" / "train").iterdir())[0]
    outside = tmp_path / "outside.txt"
    swap_for_a_hard_link(victim, outside)
    result = export(first, tmp_path / "dest", "yolo", quiet=True)
    assert not result.up_to_date and result.linked > 0
    assert files_of(tmp_path / "dest" / "current") == expected
    assert victim.stat().st_ino != outside.stat().st_ino
    assert set(outside.read_bytes()) == {ord("O")}


def test_a_version_recorded_by_the_previous_format_lends_no_file_and_is_made_again_once(
        two_versions, tmp_path):
    """A record of format 1 (an entry per sample, a digest of its index line each) is read for
    what it is and its layout only: its files are made again, and recorded in groups."""
    first, _ = two_versions
    export(first, tmp_path / "dest", "yolo", quiet=True)
    path = tmp_path / "dest" / "v1" / ".export" / "record.json"
    record = json.loads(path.read_text())
    record["samples"] = [{**sample, "digest": "0" * 64} for sample in samples_of(record)]
    record["format"] = 1
    del record["shards"]
    path.write_text(json.dumps(record))
    again = export(first, tmp_path / "dest", "yolo", quiet=True)
    assert not again.up_to_date and again.linked == 0 and again.written == again.samples
    assert export(first, tmp_path / "dest", "yolo", quiet=True).up_to_date


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.slow
def test_a_record_folder_that_is_a_link_out_of_dest_is_not_read(two_versions, tmp_path):
    first, second = two_versions
    assert shardsmith(first, tmp_path / "dest", "--layout", "yolo").returncode == 0
    record_folder = tmp_path / "dest" / "v1" / ".export"
    shutil.copytree(record_folder, tmp_path / "outside")
    shutil.rmtree(record_folder)
    record_folder.symlink_to(tmp_path / "outside")
    (tmp_path / "outside" / "record.json").unlink()
    os.mkfifo(tmp_path / "outside" / "record.json")  # the link is refused before this is seen
    result = shardsmith(second, tmp_path / "dest", "--layout", "yolo")
    refused(result, ".export", "link")
    assert os.readlink(tmp_path / "dest" / "current") == "v1"


@pytest.mark.slow
def test_a_full_disk_while_linking_names_the_file_in_dest(two_versions, tmp_path):
    """Links fail as on a file system out of inodes."""
    first, second = two_versions
    assert shardsmith(first, tmp_path / "dest", "--layout", "yolo").returncode == 0
    fail = ("import errno, os, sys\n"
            "real = os.link\n"
            "def link(source, target, **where):\n"
            "    if where.get('dst_dir_fd') is not None:\n"
            "        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), source)\n"
            "    return real(source, target, **where)\n"
            "os.link = link\n")
    full = (fail + "import sys\nfrom shardsmith.__main__ import run\n"
            "sys.argv[0] = 'shardsmith'\n"
            "run()\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    result = subprocess.run([sys.executable, "-c", full, "export", str(second),
                             str(tmp_path / "dest"), "--layout", "yolo", "--quiet"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert f"{tmp_path / 'dest' / 'v2.partial'}/images/" in line and "free some space" in line
    assert os.readlink(tmp_path / "dest" / "current") == "v1"
    assert shardsmith(second, tmp_path / "dest", "--layout", "yolo").returncode == 0
    assert os.readlink(tmp_path / "dest" / "current") == "v2"


@pytest.mark.slow
def test_a_switch_of_current_killed_before_its_rename_does_not_block_the_next_run(
        two_versions, tmp_path):
    first, second = two_versions
    assert shardsmith(first, tmp_path / "dest", "--layout", "yolo").returncode == 0
    # what a kill -9 between the new link and its rename over ``current`` leaves
    (tmp_path / "dest" / ".current.4242.tmp").symlink_to("v1")
    result = shardsmith(second, tmp_path / "dest", "--layout", "yolo")
    assert result.returncode == 0, result.stderr
    assert os.readlink(tmp_path / "dest" / "current") == "v2"
    assert sorted(os.listdir(tmp_path / "dest")) == [".export", "current", "v1", "v2"]


@pytest.mark.parametrize("planted", ["file", "folder", "link out"])
@pytest.mark.slow
def test_anything_else_under_a_switch_links_name_is_refused_and_kept(dataset, tmp_path,
                                                                    planted):
    (tmp_path / "dest").mkdir()
    stranger = tmp_path / "dest" / ".current.4242.tmp"
    if planted == "file":
        stranger.write_text("mine")
    elif planted == "folder":
        stranger.mkdir()
    else:
        stranger.symlink_to(tmp_path)
    refused(shardsmith(dataset, tmp_path / "dest", "--layout", "yolo"), ".current.4242.tmp")
    assert os.path.lexists(stranger)


def test_a_record_too_large_for_the_fixed_cap_is_read_back_when_the_dataset_is_that_large(
        dataset, tmp_path, monkeypatch):
    # At the real sizes: 256 MiB and ~500 bytes a YOLO sample, so 500,000 samples wrote a
    # record their next export refused ("move v1 away").  The same at a small scale: a cap of
    # 1 KiB, far under this dataset's record, and the per-sample allowance that scales it.
    from shardsmith.ops.export import export, record

    monkeypatch.setattr(record, "RECORD_CAP", 1024)
    dest = tmp_path / "dest"
    first = export(dataset, dest, "coco", quiet=True)
    size = (first.folder / ".export" / "record.json").stat().st_size
    assert size > 1024
    again = export(dataset, dest, "coco", quiet=True)  # reads v1's record back
    assert again.up_to_date and again.folder == first.folder

    # An allowance the record outgrows: refused before anything is switched (no current).
    monkeypatch.setattr(record, "RECORD_BYTES_PER_SAMPLE", 1)
    shutil.rmtree(dest)
    with pytest.raises(OutputStateError, match="record would be .* a dataset of"):
        export(dataset, dest, "coco", quiet=True)
    assert not (dest / "current").exists()


@pytest.mark.parametrize("old", ["there", "renamed", "gone"])
def test_a_repair_killed_with_current_on_its_partial_folder_is_finished_not_rewritten(
        dataset, tmp_path, old):
    # ``publish`` repairing a damaged v1 points current at the finished v1.partial, removes
    # v1 (renamed to .v1.removing, then deleted) and renames the partial folder into place: a
    # kill at each step.  The next run must not export into the folder current names.
    from shardsmith.ops.export import export

    dest = tmp_path / "dest"
    version = export(dataset, dest, "yolo", quiet=True).folder
    partial = dest / f"{version.name}.partial"
    # the finished partial folder holds the files its record names (their inodes): links
    shutil.copytree(version, partial, copy_function=os.link)
    (dest / "next").symlink_to(partial.name)
    os.replace(dest / "next", dest / "current")
    if old == "renamed":
        os.rename(version, dest / f".{version.name}.removing")
    elif old == "gone":
        shutil.rmtree(version)

    def identities(folder: Path) -> dict:  # a number can be reused, with a time besides not
        return {path.relative_to(folder): (path.stat().st_ino, path.stat().st_mtime_ns)
                for path in folder.rglob("*") if path.is_file()}

    time.sleep(0.01)  # a rewrite would get another modification time
    files = identities(partial)
    export(dataset, dest, "yolo", quiet=True)
    assert os.readlink(dest / "current") == version.name
    assert sorted(path.name for path in dest.iterdir()) == [".export", "current", "v1"]
    assert identities(version) == files  # moved, not rewritten


def negative_box(sample: dict) -> None:
    sample["coco"][0]["bbox"] = [10.0, 10.0, -5.0, -5.0]


def no_such_category(sample: dict) -> None:
    sample["coco"][0]["category_id"] = 99


def box_outside_the_image(sample: dict) -> None:
    sample["coco"][0]["bbox"][2] = sample["width"] + 40.0


def zero_width(sample: dict) -> None:
    sample["width"] = 0


def neither_polygons_nor_rle(sample: dict) -> None:
    sample["coco"][0]["polygons"] = sample["coco"][0]["rle"] = None


def a_polygon_of_one_number(sample: dict) -> None:
    sample["coco"][0]["polygons"], sample["coco"][0]["rle"] = [[1.0]], None


def negative_area(sample: dict) -> None:
    sample["coco"][0]["area"] = -3.0


def no_coco_objects(sample: dict) -> None:
    sample["coco"] = None


@pytest.mark.parametrize("lie", [negative_box, no_such_category, box_outside_the_image,
                                 zero_width, neither_polygons_nor_rle, a_polygon_of_one_number,
                                 negative_area, no_coco_objects])
@pytest.mark.slow
def test_coco_objects_a_record_lies_about_never_reach_the_next_versions_annotations(
        two_versions, tmp_path, lie):
    # A new COCO version writes its instances files again, a linked sample's annotations
    # taken from the current version's record: an object this release cannot have written
    # (a box of negative size or outside its image, a category the dataset lacks, no
    # segmentation) makes the sample one to export from its shard, as a fresh export does.
    first, second = two_versions
    assert shardsmith(first, tmp_path / "dest", "--layout", "coco").returncode == 0
    path = tmp_path / "dest" / "v1" / ".export" / "record.json"
    record = json.loads(path.read_text())
    lie(next(sample for sample in samples_of(record) if sample["coco"]))
    path.write_text(json.dumps(record))
    assert shardsmith(second, tmp_path / "dest", "--layout", "coco").returncode == 0
    assert shardsmith(second, tmp_path / "fresh", "--layout", "coco").returncode == 0
    for split in ("train", "val"):
        relpath = f"annotations/instances_{split}.json"
        assert (tmp_path / "dest" / "v2" / relpath).read_bytes() \
            == (tmp_path / "fresh" / "v2" / relpath).read_bytes()


@pytest.mark.slow
def test_a_partial_folder_whose_record_folder_is_a_link_is_never_deleted(dataset, tmp_path):
    dest = tmp_path / "dest"
    assert shardsmith(dataset, dest, "--layout", "yolo").returncode == 0
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "notes").mkdir(parents=True)
    mine = dest / "v2.partial"
    mine.mkdir()
    (mine / "thesis.pdf").write_text("years of work")
    (mine / ".export").symlink_to(elsewhere)  # a real ``.export`` there would make it ours

    refused(shardsmith(dataset, dest, "--layout", "yolo"), "v2.partial")
    assert (mine / "thesis.pdf").read_text() == "years of work"
    assert (elsewhere / "notes").is_dir()


@pytest.mark.parametrize("first, second", [
    ("caf\u00e9", "cafe\u0301"),  # NFC and NFD: one folder on macOS
    ("scratch", "scratch."),  # SMB drops trailing dots
    ("a", "a "),  # and trailing spaces
    ("STRA\u1e9eE", "stra\u00dfe"),  # case folded one character at a time: ẞ is ß
    ("\u03a3", "\u03c2"),  # and capital sigma the final one
], ids=["nfc-nfd", "trailing-dot", "trailing-space", "capital-sharp-s", "final-sigma"])
@pytest.mark.slow
def test_class_names_that_are_one_folder_on_a_share_are_refused_like_case_twins(
        tmp_path, first, second):
    refused(shardsmith(classified(tmp_path, (first, second)), tmp_path / "dest", "--layout",
                       "yolo", "--task", "classify"), "one folder on a share")
    assert not (tmp_path / "dest").exists()


def relabel_first_sample(dataset: Path, label: int) -> None:
    """The sample index says ``label`` for its first sample, re-signed in the manifest."""
    import hashlib

    manifest = json.loads((dataset / "manifest.json").read_text())
    index = dataset / manifest["samples_index"]["name"]
    lines = index.read_text().splitlines()
    first = json.loads(lines[0])
    first["label"] = label
    lines[0] = json.dumps(first, sort_keys=True, separators=(",", ":"))
    raw = ("\n".join(lines) + "\n").encode()
    index.write_bytes(raw)
    manifest["samples_index"].update(bytes=len(raw), sha256=hashlib.sha256(raw).hexdigest())
    (dataset / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("label, words", [(-1, ("without an image class", "label -1")),
                                          (99, ("label 99 is not a class", "damaged"))])
def test_a_classify_export_of_a_sample_without_a_class_folder_is_refused_before_writing(
        tmp_path, label, words):
    dataset = classified(tmp_path)
    relabel_first_sample(dataset, label)
    refused(shardsmith(dataset, tmp_path / "dest", "--layout", "yolo", "--task", "classify"),
            *words)
    assert not (tmp_path / "dest" / "current").exists()
    assert not list((tmp_path / "dest").glob("v*/train/*.jpg"))  # nothing loose in train/
