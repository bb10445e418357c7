"""Scanning the tree and planning splits, keys and order."""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

import pytest

import shardsmith.packing.scan as scan_module
from shardsmith.config import SourceConfig
from shardsmith.packing.plan import assign_split, make_plan, sample_key
from shardsmith.packing.scan import _batches, _Folder, _stat_batch, scan

import images

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from slowfs import fuse_available, slow_mount  # noqa: E402

SPLITS = (("train", 0.8), ("val", 0.1), ("test", 0.1))


def tree(root, names):
    for name in names:
        images.write(root / name, b"x")


def test_scan_selects_image_extensions_case_insensitively_and_skips_hidden(tmp_path):
    tree(tmp_path, ["a/1.jpg", "a/2.JPEG", "a/3.Png", "b/4.tif", "b/5.TIFF", "b/6.bmp",
                    "b/7.webp", "b/readme.txt", "a/.hidden.jpg", ".cache/8.jpg"])
    result = scan(tmp_path, SourceConfig())
    assert [f.relpath for f in result.files] == [
        "a/1.jpg", "a/2.JPEG", "a/3.Png", "b/4.tif", "b/5.TIFF", "b/6.bmp", "b/7.webp"]
    assert result.excluded == Counter({"hidden": 2, "extension": 1})


def test_labels_come_from_first_level_folders(tmp_path):
    tree(tmp_path, ["scratch/x/1.jpg", "dent/2.jpg", "ok/3.jpg", "loose.jpg"])
    result = scan(tmp_path, SourceConfig())
    assert result.classes == ("dent", "ok", "scratch")
    assert {f.relpath: f.label for f in result.files} == {
        "dent/2.jpg": 0, "ok/3.jpg": 1, "scratch/x/1.jpg": 2}
    assert result.excluded["not in a class folder"] == 1


def test_without_labels_every_file_is_taken_with_label_minus_one(tmp_path):
    tree(tmp_path, ["scratch/1.jpg", "loose.jpg"])
    result = scan(tmp_path, SourceConfig(labels="none"))
    assert result.classes == ()
    assert [(f.relpath, f.label) for f in result.files] == [("loose.jpg", -1),
                                                            ("scratch/1.jpg", -1)]


def test_include_and_exclude_patterns(tmp_path):
    tree(tmp_path, ["a/cam1_1.jpg", "a/cam2_1.jpg", "b/cam1_2.jpg", "b/cam1_tmp.jpg"])
    config = SourceConfig(include=("*/cam1_*",), exclude=("*_tmp.jpg",))
    assert [f.relpath for f in scan(tmp_path, config).files] == ["a/cam1_1.jpg", "b/cam1_2.jpg"]


def test_symlinks_are_not_followed_unless_asked(tmp_path):
    outside = tmp_path / "outside"
    tree(outside, ["9.jpg"])
    root = tmp_path / "root"
    tree(root, ["a/1.jpg"])
    os.symlink(outside, root / "linked")
    os.symlink(outside / "9.jpg", root / "a" / "link.jpg")
    skipped = scan(root, SourceConfig())
    assert [f.relpath for f in skipped.files] == ["a/1.jpg"]
    assert skipped.excluded["symlink"] == 2
    followed = scan(root, SourceConfig(follow_symlinks=True))
    assert [f.relpath for f in followed.files] == ["a/1.jpg", "a/link.jpg", "linked/9.jpg"]


def test_symlink_loops_do_not_hang_the_scan(tmp_path):
    tree(tmp_path, ["a/1.jpg"])
    os.symlink(tmp_path / "a", tmp_path / "a" / "loop")
    result = scan(tmp_path, SourceConfig(follow_symlinks=True))
    assert [f.relpath for f in result.files] == ["a/1.jpg"]


def test_keys_are_unique_stable_and_free_of_dots_and_slashes():
    paths = ["a/b.c/d.jpg", "a/b_c/d.jpg", "a/b.c/d.png", "x y/ü.tif"]
    keys = [sample_key(p) for p in paths]
    assert len(set(keys)) == len(keys)
    assert all("." not in k and "/" not in k for k in keys)
    assert keys == [sample_key(p) for p in paths]


def test_split_of_a_file_is_stable_when_other_files_are_added():
    before = {f"c/{i}.jpg": assign_split(f"c/{i}.jpg", SPLITS) for i in range(500)}
    after = {f"c/{i}.jpg": assign_split(f"c/{i}.jpg", SPLITS) for i in range(1000)}
    assert all(after[path] == split for path, split in before.items())
    counts = Counter(after.values())
    assert 720 < counts["train"] < 880 and 50 < counts["val"] < 150


def test_plan_groups_by_split_and_shuffles_with_the_seed(tmp_path):
    tree(tmp_path, [f"{c}/{i}.jpg" for c in ("a", "b", "c") for i in range(40)])
    files = scan(tmp_path, SourceConfig()).files
    plan = make_plan(files, SPLITS, seed=1)
    assert [item.split for item in plan] == sorted(
        (item.split for item in plan), key=["train", "val", "test"].index)
    first_ten = {item.source.label for item in plan[:10]}
    assert len(first_ten) > 1  # classes are mixed, not one folder after another
    assert plan == make_plan(files, SPLITS, seed=1)
    assert plan != make_plan(files, SPLITS, seed=2)


def test_files_are_stat_by_name_in_their_folder_with_the_same_result_as_by_path(tmp_path):
    tree(tmp_path, ["a/1.jpg", "a/deep/er/2.jpg", "b/3.jpg"])
    (tmp_path / "a" / "deep" / "er" / "2.jpg").write_bytes(b"longer")
    result = scan(tmp_path, SourceConfig(labels="none"))
    by_path = {f.relpath: os.stat(tmp_path / f.relpath) for f in result.files}
    assert [(f.relpath, f.size, f.mtime_ns, f.inode) for f in result.files] == [
        (relpath, info.st_size, info.st_mtime_ns, info.st_ino)
        for relpath, info in sorted(by_path.items())]


def test_files_of_a_folder_gone_before_its_stat_are_unreadable_with_the_reason(tmp_path):
    tree(tmp_path, ["a/1.jpg"])
    stats = _stat_batch([_Folder(str(tmp_path / "gone"), ["gone/1.jpg", "gone/2.jpg"]),
                         _Folder(str(tmp_path / "a"), ["a/1.jpg"])])
    assert sorted(stats.errors) == ["gone/1.jpg", "gone/2.jpg"]
    assert all(isinstance(error, FileNotFoundError) for error in stats.errors.values())
    assert list(stats.sizes) == [0, 0, 1]


def test_a_file_replaced_by_a_folder_before_its_stat_is_left_out_as_not_a_regular_file(
        tmp_path, monkeypatch):
    tree(tmp_path, ["a/1.jpg", "a/2.jpg"])
    real_list = scan_module._list

    def list_then_swap(path):
        listing = real_list(path)
        if path.endswith("/a"):
            os.remove(os.path.join(path, "2.jpg"))
            os.mkdir(os.path.join(path, "2.jpg"))
        return listing

    monkeypatch.setattr(scan_module, "_list", list_then_swap)
    result = scan(tmp_path, SourceConfig())
    assert [f.relpath for f in result.files] == ["a/1.jpg"]
    assert result.excluded["not a regular file"] == 1


def test_stat_batches_split_big_folders_and_let_small_ones_share_a_batch():
    folders = [_Folder("/r/a", ["a/1", "a/2"]), _Folder("/r/b", [f"b/{i}" for i in range(5)]),
               _Folder("/r/c", ["c/1"])]
    batches = _batches(folders, 3)
    assert [[(folder.path, folder.relpaths) for folder in batch] for batch in batches] == [
        [("/r/a", ["a/1", "a/2"]), ("/r/b", ["b/0"])],
        [("/r/b", ["b/1", "b/2", "b/3"])],
        [("/r/b", ["b/4"]), ("/r/c", ["c/1"])],
    ]


def test_files_at_several_depths_come_sorted_by_path_each_with_its_own_size(tmp_path):
    names = ["b/x.jpg", "a/z.jpg", "a/b/c.jpg", "a/b/d/e.jpg", "top.jpg"]
    for length, name in enumerate(names, 1):
        images.write(tmp_path / name, b"x" * length)
    result = scan(tmp_path, SourceConfig(labels="none"))
    assert [(f.relpath, f.size) for f in result.files] == sorted(
        (name, length) for length, name in enumerate(names, 1))


def test_a_tree_of_one_depth_keeps_path_order_and_sizes_without_a_sort(tmp_path):
    names = [f"{folder}/{number:02d}.jpg" for folder in ("b", "a", "c") for number in (3, 1, 2)]
    for length, name in enumerate(names, 1):
        images.write(tmp_path / name, b"x" * length)
    result = scan(tmp_path, SourceConfig())
    assert [(f.relpath, f.size, f.label) for f in result.files] == sorted(
        (name, length, "abc".index(name[0])) for length, name in enumerate(names, 1))


def test_a_folder_gone_between_listing_and_stat_leaves_its_files_unreadable(tmp_path, monkeypatch):
    tree(tmp_path, ["a/1.jpg", "b/2.jpg", "b/3.jpg"])
    real_list = scan_module._list

    def list_then_remove(path):
        listing = real_list(path)
        if path.endswith("/b"):
            for name in os.listdir(path):
                os.remove(os.path.join(path, name))
            os.rmdir(path)
        return listing

    monkeypatch.setattr(scan_module, "_list", list_then_remove)
    result = scan(tmp_path, SourceConfig())
    assert [f.relpath for f in result.files] == ["a/1.jpg"]
    assert [(path, why.split(":")[0]) for path, why in result.unreadable] == [
        ("b/2.jpg", "cannot stat"), ("b/3.jpg", "cannot stat")]


def test_without_an_attribute_cache_a_file_costs_two_requests_not_one_per_folder_above(tmp_path):
    reason = fuse_available()
    if reason is not None:
        pytest.skip(reason)
    files = [f"c{folder}/deep/{number:02d}.jpg" for folder in range(2) for number in range(30)]
    tree(tmp_path / "backing", files)
    with slow_mount(tmp_path / "backing", tmp_path / "mnt", latency=0.0,
                    attr_timeout=0.0) as fs:
        fs.reset()
        result = scan(fs.mountpoint, SourceConfig())
        requests = fs.stats()["getattr"]
    assert len(result.files) == len(files)
    # By path, each stat revalidated both folders above the file too: 4 a file.  By name in
    # its folder: the lookup and the attributes, plus a few for each folder.
    assert requests <= 2 * len(files) + 10 * 4
