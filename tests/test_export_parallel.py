"""What the export's speed-ups must not change: files written and linked by threads give the
same folder as one after another, a previous file that cannot be linked is made again from its
shard, the bulk look at a record's paths refuses what the look a sample did, and the paused
garbage collector comes back as it was."""

from __future__ import annotations

import gc
import os
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
from test_export import exported_then_one_more, pack_corpus, tree_of, write_corpus
from test_export_fastpaths import SAMPLE, tar_of

from shardsmith import door
from shardsmith.dataset.formats import shard_format
from shardsmith.dataset.manifest import read_manifest
from shardsmith.errors import ConfigError, ShardFormatError
from shardsmith.ops import export as package
from shardsmith.ops.export import export
from shardsmith.ops.export.layouts import LAYOUTS, check_record_paths, layout_of
from shardsmith.ops.export.record import ExportedFile, ExportedSample, ExportOptions

SHA = "0" * 64


def test_a_file_of_the_previous_version_cut_short_is_made_again_from_its_shard(tmp_path):
    exported_then_one_more(tmp_path)
    label = sorted((tmp_path / "yolo" / "v1" / "labels" / "val").iterdir())[0]
    label.write_bytes(label.read_bytes()[:-1])  # its image still links, its label does not
    result = export(tmp_path / "dataset", tmp_path / "yolo", "yolo", quiet=True)
    fresh = export(tmp_path / "dataset", tmp_path / "fresh", "yolo", quiet=True)
    made, expected = tree_of(result.folder), tree_of(fresh.folder)
    assert made.pop("data.yaml") != expected.pop("data.yaml")  # its absolute path only
    assert made == expected
    relative = label.relative_to(tmp_path / "yolo" / "v1")
    assert (result.folder / relative).stat().st_ino != label.stat().st_ino
    # its shard's group is made again whole: the val samples, not only the label's
    val = sum(1 for path in (result.folder / "images" / "val").iterdir())
    assert result.linked == fresh.samples - result.written and result.written >= 1 + val


def test_one_write_thread_or_many_give_the_same_bytes(tmp_path, monkeypatch):
    write_corpus(tmp_path / "source")
    pack_corpus(tmp_path / "source", tmp_path / "dataset", "tfrecord")
    monkeypatch.setattr(package, "WRITE_THREADS", 1)
    one = export(tmp_path / "dataset", tmp_path / "one", "coco", quiet=True)
    monkeypatch.setattr(package, "WRITE_THREADS", 8)
    many = export(tmp_path / "dataset", tmp_path / "many", "coco", quiet=True)
    assert tree_of(one.folder) == tree_of(many.folder)
    assert record_less_inodes(one.folder) == record_less_inodes(many.folder)


def record_less_inodes(folder) -> bytes:
    """The export record of ``folder`` less its files' inode numbers (each folder's own)."""
    return re.sub(rb'"inode":\d+', b"", (folder / ".export" / "record.json").read_bytes())


def sample(key: str, split: str, *paths: str) -> ExportedSample:
    return ExportedSample(key, split, 8, 8,
                          tuple(ExportedFile(path, 1, 1) for path in paths))


def layout_paths(options: ExportOptions, key: str, split: str, classes: tuple[str, ...],
                 object_classes: tuple[str, ...] | None) -> list[tuple[str, ...]]:
    """Every list of files the layout can give the sample ``key`` of ``split``, written out."""
    layout = layout_of(options)
    folders = dict.fromkeys(layout.folders(classes, object_classes, options.normal or ""))
    return [tuple(template.format(split=split, key=key, folder=folder) for template in scheme)
            for scheme in layout.schemes
            for folder in (folders if "{folder}" in scheme[0] else [""])]


@pytest.mark.parametrize("options", [ExportOptions("coco"), ExportOptions("yolo", "detect"),
                                     ExportOptions("yolo", "segment")],
                         ids=["coco", "detect", "segment"])
@pytest.mark.parametrize("paths", [
    ("images/train/k.jpg", "labels/train/k.txt"),
    ("labels/train/k.txt", "images/train/k.jpg"),
    ("images/train/k.jpg",),
    ("images/val/k.jpg", "labels/val/k.txt"),
    ("images/val/k.jpg",),
    ("images/train/j.jpg", "labels/train/j.txt"),
    ("images/train/k.png",),
    (),
])
def test_the_bulk_look_at_a_records_paths_agrees_with_the_layouts_list(options, paths):
    fits = paths in layout_paths(options, "k", "train", ("a",), ("x",))
    found = check_record_paths(options, ("a",), ("x",), [sample("k", "train", *paths)])
    assert (found is None) == fits


CLASS_LAYOUTS = [ExportOptions("yolo", "classify"),
                 ExportOptions("anomalib", normal="good", anomalib_layout="mvtec"),
                 ExportOptions("anomalib", normal="good", anomalib_layout="folder")]


@pytest.mark.parametrize("options", CLASS_LAYOUTS, ids=["classify", "mvtec", "folder"])
@pytest.mark.parametrize("paths", [
    ("train/a/k.jpg",), ("train/b/k.jpg",), ("val/a/k.jpg",), ("train/a/j.jpg",),
    ("train//k.jpg",), ("train/k.jpg",), ("train/a/b/k.jpg",), ("train/a/k.jpg", "x"),
    ("train/good/k.png",), ("test/good/k.png",), ("test/a/k.png",), ("test/x/k.png",),
    ("test/x/k.png", "ground_truth/x/k_mask.png"),
    ("test/cut_defect/k.png", "ground_truth/cut_defect/k_mask.png"),
    ("test/x/k.png", "ground_truth/a/k_mask.png"),
    ("test/good/k.png", "ground_truth/good/k_mask.png"),
    ("test//k.png", "ground_truth//k_mask.png"),
    ("normal/k.jpg",), ("abnormal/k.jpg", "mask/k.png"), ("abnormal/k.jpg",), (),
])
def test_the_look_at_paths_of_a_layout_with_a_folder_per_class_agrees_with_its_list(
        options, paths):
    classes, object_classes = ("a", "good", "b/c"), ("x",)
    fits = paths in layout_paths(options, "k", "train", classes, object_classes)
    found = check_record_paths(options, classes, object_classes, [sample("k", "train", *paths)])
    assert (found is None) == fits


class WalkedClasses(tuple):
    """Class names that count how often they are walked."""

    walks = 0

    def __iter__(self):
        WalkedClasses.walks += 1
        return super().__iter__()


@pytest.mark.parametrize("options, paths", [
    (CLASS_LAYOUTS[0], lambda key, name: (f"train/{name}/{key}.jpg",)),
    (CLASS_LAYOUTS[1], lambda key, name: (f"test/{name}/{key}.png",
                                          f"ground_truth/{name}/{key}_mask.png")),
], ids=["classify", "mvtec"])
def test_a_record_of_many_classes_is_checked_without_a_walk_of_the_classes_per_sample(
        monkeypatch, options, paths):
    """An up-to-date classify re-export of 8,000 samples in 10,000 classes took 10 to 12 s,
    the classes walked for every sample: they are walked once, whatever the samples."""
    monkeypatch.setattr(WalkedClasses, "walks", 0)
    classes = WalkedClasses(["good", *(f"c{number}" for number in range(2_000))])
    samples = [sample(f"k{number}", "train", *paths(f"k{number}", f"c{number * 7 % 2_000}"))
               for number in range(200)]
    assert check_record_paths(options, classes, None, samples) is None
    assert WalkedClasses.walks <= 1


def test_the_command_lines_layout_choices_are_the_registrys():
    from shardsmith.cli import main

    choices = {param.name: tuple(param.type.choices) for param in main.commands["export"].params
               if hasattr(param.type, "choices")}
    assert choices["layout"] == tuple(dict.fromkeys(name for name, _ in LAYOUTS))
    assert choices["task"] == ("auto", *(variant for name, variant in LAYOUTS if name == "yolo"))
    assert choices["anomalib_layout"] == tuple(variant for name, variant in LAYOUTS
                                               if name == "anomalib")


@pytest.mark.parametrize("options, path, fits", [
    (ExportOptions("yolo", "detect"), "data.yaml", True),
    (ExportOptions("yolo", "segment"), "annotations/instances_train.json", False),
    (ExportOptions("coco"), "annotations/instances_train.json", True),
    (ExportOptions("coco"), "annotations/instances_.json", False),
    (ExportOptions("coco"), "annotations/instances_../x.json", False),
    (ExportOptions("coco"), "data.yaml", False),
    (ExportOptions("yolo", "classify"), "data.yaml", False),
    (ExportOptions("anomalib", normal="good", anomalib_layout="folder"), "", False),
])
def test_a_records_split_wide_files_are_the_layouts(options, path, fits):
    assert (check_record_paths(options, ("a",), ("x",), [], [path]) is None) == fits


def test_a_record_of_no_layout_of_this_release_is_refused():
    found = check_record_paths(ExportOptions("coco", "detect"), ("a",), ("x",),
                               [sample("k", "train", "images/train/k.jpg")])
    assert found is not None and "not a layout" in found


def test_a_split_that_is_no_folder_name_is_refused_in_every_sample():
    good = sample("k", "train", "images/train/k.jpg")
    bad = sample("j", "..", "images/../j.jpg")
    found = check_record_paths(ExportOptions("coco"), (), ("x",), [good, bad])
    assert found is not None and "is not a folder name" in found


@pytest.mark.parametrize("enabled", [True, False])
def test_the_garbage_collector_is_as_it_was_after_an_export(tmp_path, enabled):
    write_corpus(tmp_path / "source", annotated=False)
    pack_corpus(tmp_path / "source", tmp_path / "dataset", "webdataset", annotated=False)
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        export(tmp_path / "dataset", tmp_path / "ok", "yolo", quiet=True)
        assert gc.isenabled() is enabled
        with pytest.raises(ConfigError):
            export(tmp_path / "dataset", tmp_path / "bad", "coco", quiet=True)
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()
    assert not os.path.lexists(tmp_path / "bad" / "v1")



@pytest.mark.parametrize("chunk", [512, 1536, door.CHUNK], ids=["a block", "3 blocks",
                                                                     "8 MiB"])
def test_the_tar_walk_gives_every_byte_of_the_samples_once(tmp_path, monkeypatch, chunk):
    write_corpus(tmp_path / "source")
    pack_corpus(tmp_path / "source", tmp_path / "dataset", "webdataset")
    monkeypatch.setattr(door, "CHUNK", chunk)
    fmt = shard_format("webdataset")
    for shard in read_manifest(tmp_path / "dataset").shards:
        path = tmp_path / "dataset" / shard.name
        records = list(fmt.records(path, shard.bytes))
        data = b"".join(packed.data for _, packed in records)
        assert records[0][0] == 0 and len(data) == records[-1][0] + len(records[-1][1].data)
        assert data == path.read_bytes()[: len(data)]


def test_a_shard_longer_than_its_listed_size_is_read_to_that_size_only(tmp_path):
    path = tmp_path / "shard.tar"
    path.write_bytes(tar_of(SAMPLE))
    size = path.stat().st_size
    with path.open("ab") as handle:
        handle.write(b"trailing bytes")
    fmt = shard_format("webdataset")
    assert [packed.key for _, packed in fmt.records(path, size)] == ["k"]
    with pytest.raises(ShardFormatError, match="cut short"):
        list(fmt.records(path, 1000))


def test_a_tfrecord_record_is_parsed_once_for_its_metadata_and_its_mask(tmp_path, monkeypatch):
    from shardsmith.dataset.formats import tfrecord

    write_corpus(tmp_path / "source")
    pack_corpus(tmp_path / "source", tmp_path / "dataset", "tfrecord")
    fmt = shard_format("tfrecord")
    shard = read_manifest(tmp_path / "dataset").shards[0]
    records = [record for _, record in fmt.records(tmp_path / "dataset" / shard.name,
                                                   shard.bytes)]
    expected = [(fmt.metadata(record), fmt.mask_png(record)) for record in records]
    parses = []
    real = tfrecord.feature_lists
    monkeypatch.setattr(tfrecord, "feature_lists", lambda data: parses.append(1) or real(data))
    for record, (metadata, mask) in zip(records, expected, strict=True):
        assert fmt.metadata(record) == metadata and fmt.mask_png(record) == mask
    assert len(parses) == len(records)
    copy = type(records[0])(records[0].key, bytes(bytearray(records[0].data)))
    assert fmt.metadata(copy) == expected[0][0] and len(parses) == len(records) + 1
    assert any(mask is not None for _, mask in expected)


def test_the_bytes_handed_to_the_write_threads_stay_bounded(tmp_path, monkeypatch):
    from shardsmith.ops.export import tree

    monkeypatch.setattr(tree, "WRITE_AHEAD", 10)
    folder = tree.ExportTree(tmp_path / "out")
    with ThreadPoolExecutor(2) as pool:
        futures = []
        for number in range(20):
            futures.append(folder.write_later(pool, f"a/{number}.bin", bytes(4)))
            assert folder._ahead_bytes <= 10 and len(folder._ahead) <= 2
    assert [future.result().bytes for future in futures] == [4] * 20
    assert sorted(path.name for path in (tmp_path / "out" / "a").iterdir()) \
        == sorted(f"{number}.bin" for number in range(20))
