"""Scanning the tree and planning splits, keys and order."""

from __future__ import annotations

import os
from collections import Counter

from shardsmith.config import SourceConfig
from shardsmith.packing.plan import assign_split, make_plan, sample_key
from shardsmith.packing.scan import scan

import images

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
