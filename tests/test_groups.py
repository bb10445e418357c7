"""Leakage-safe splits: ``splits.group`` / ``--group`` keeps a part, lot or session in one split."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from shardsmith.cli import main
from shardsmith.config import load_config
from shardsmith.errors import ConfigError
from shardsmith.packing.plan import assign_split, group_of, make_plan
from shardsmith.packing.scan import SourceFile, SourceTable

import images
from images import samples_of

PART = r"^[^/]+/(?P<group>part\d+)_"
SPLITS = (("train", 0.5), ("val", 0.5))


def files(paths: list[str]) -> SourceTable:
    return SourceTable.of(SourceFile(path, 1, 1, 0) for path in paths)


def parts(count: int, shots: int = 4) -> list[str]:
    return [f"ok/part{part:03d}_shot{shot}.jpg" for part in range(count) for shot in range(shots)]


def test_every_image_of_a_group_lands_in_the_same_split():
    plan = make_plan(files(parts(40)), SPLITS, 0, PART)
    split_of_part: dict[str, set[str]] = {}
    for item in plan:
        split_of_part.setdefault(item.group, set()).add(item.split)
    assert len(split_of_part) == 40
    assert all(len(splits) == 1 for splits in split_of_part.values())
    assert {split for splits in split_of_part.values() for split in splits} == {"train", "val"}


def test_a_group_keeps_its_split_when_groups_and_images_are_added():
    before = {item.source.relpath: item.split for item in make_plan(files(parts(30)), SPLITS,
                                                                    0, PART)}
    more = parts(60, shots=6)
    after = {item.source.relpath: item.split for item in make_plan(files(more), SPLITS, 0, PART)}
    assert all(after[path] == split for path, split in before.items())


def test_without_a_group_each_file_is_split_by_its_own_path_as_before():
    paths = parts(10)
    plan = make_plan(files(paths), SPLITS, 0)
    assert {item.source.relpath: item.split for item in plan} == {
        path: assign_split(path, SPLITS) for path in paths}
    assert all(item.group is None for item in plan)
    # Pinned (computed before splits.group existed): packed files must never change split.
    assert [assign_split(f"ok/{n}.jpg", (("train", 0.9), ("val", 0.1))) for n in range(12)] == [
        "train", "train", "train", "val", "train", "train", "train", "train", "train", "train",
        "train", "val"]


def test_a_path_matching_no_group_is_a_group_of_its_own():
    plan = make_plan(files(["ok/part001_a.jpg", "ok/loose.jpg"]), SPLITS, 0, PART)
    loose = next(item for item in plan if item.source.relpath == "ok/loose.jpg")
    assert loose.group is None and loose.split == assign_split("ok/loose.jpg", SPLITS)


def test_the_group_id_is_the_named_group_or_else_the_whole_match():
    import re

    assert group_of("ok/part007_shot2.jpg", re.compile(PART)) == "part007"
    assert group_of("ok/part007_shot2.jpg", re.compile(r"part\d+")) == "part007"
    assert group_of("ok/shot2.jpg", re.compile(r"part\d+")) is None
    assert group_of("ok/shot2.jpg", re.compile(r"(?P<group>part\d*)|shot")) is None  # empty id


def test_default_settings_keep_their_fingerprint():
    config = load_config()
    assert config.dataset_settings()["splits"] == {"train": 1.0}
    # Pinned: a dataset packed with the defaults before splits.group existed stays current.
    assert config.fingerprint() == (
        "e7d3da46b61ce05c4b43e375ade07fa1f33f43d2d4a65ff5fd9601866042ece7")


def test_a_group_is_part_of_the_dataset_settings():
    grouped = load_config(None, {"splits": "train=0.8,val=0.2", "splits.group": PART})
    plain = load_config(None, {"splits": "train=0.8,val=0.2"})
    assert grouped.split_group == PART
    assert grouped.dataset_settings()["splits"] == {"train": 0.8, "val": 0.2, "group": PART}
    assert grouped.fingerprint() != plain.fingerprint()


def test_split_on_the_command_line_keeps_the_group_of_the_file(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(f"splits:\n  train: 0.9\n  val: 0.1\n  group: '{PART}'\n")
    config = load_config(path, {"splits": "train=0.7,val=0.3"})
    assert config.splits == (("train", 0.7), ("val", 0.3)) and config.split_group == PART


@pytest.mark.parametrize("text", ["splits:\n  train: 1.0\n  group: '(unclosed'\n",
                                  "splits:\n  train: 0.5\n  group: 0.5\n"])
def test_a_bad_group_names_the_key(tmp_path, text):
    path = tmp_path / "job.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).startswith("splits.group:")


def test_pack_with_group_reports_groups_per_split_and_inspect_agrees(tmp_path):
    source, output = tmp_path / "source", tmp_path / "out"
    for number, path in enumerate(parts(8, shots=3)):
        images.write(source / path, images.jpeg(48, 32, number))
    images.write(source / "ok" / "loose.jpg", images.jpeg(48, 32, 99))
    result = CliRunner().invoke(main, ["pack", str(source), str(output), "--size", "32",
                                       "--split", "train=0.5,val=0.5", "--group", PART,
                                       "--workers", "1", "--quiet"])
    assert result.exit_code == 0, result.output
    records = samples_of(output)
    by_group: dict[str, set[str]] = {}
    for record in records:
        by_group.setdefault(record.get("group"), set()).add(record["split"])
    assert by_group.pop(None) and len(by_group) == 8
    assert all(len(splits) == 1 for splits in by_group.values())
    expected = {split: sum(1 for splits in by_group.values() if split in splits)
                for split in ("train", "val")}
    assert f"groups       train: {expected['train']}, val: {expected['val']}" in result.output
    assert "1 sample match no group" in result.output

    report = json.loads(CliRunner().invoke(main, ["inspect", str(output), "--json"]).output)
    assert report["groups"]["per_split"] == expected
    assert report["groups"]["in_several_splits"] == []
    assert report["splits"]["train"]["groups"] == expected["train"]
