"""A forged dataset whose digests all match (the manifest re-signed after the edit) is still
caught: ``verify`` cross-checks the manifest's own numbers, the sample index's splits and,
under ``--decode``, the TFRecord features the readers parse; ``read_manifest`` refuses free-form
fields nested past reason; ``sheet`` shows a decompression bomb or a huge class name as a tile
or a clipped caption, never a traceback, and never writes into the dataset it draws."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hostile_data import cli, mixed_annotated, one_error_line, sha256, small_dataset
from hostile_data import write_manifest as save_manifest

from shardsmith.dataset.formats import Placed, index_bytes
from shardsmith.dataset.formats.tfrecord import (
    ByteStrings,
    Floats,
    Ints,
    TFRecordFormat,
    encode_example,
    feature_lists,
    frame_record,
)

import images


def problems(process) -> list[str]:
    """The problem lines of a failed verify (exit 1), after checking it did not crash."""
    assert process.returncode == 1, (process.returncode, process.stdout, process.stderr)
    assert "Traceback" not in process.stderr, process.stderr
    return process.stdout.strip().splitlines()


def edit_manifest(dataset: Path, edit) -> None:
    manifest = images.manifest_of(dataset)
    edit(manifest)
    save_manifest(dataset, manifest)


def edit_sample_index(dataset: Path, edit) -> None:
    """Each sample index line passed through ``edit(dict)``; the manifest's size and digest
    follow (its line count does not)."""
    manifest = images.manifest_of(dataset)
    entry = manifest["samples_index"]
    lines = [json.loads(line) for line in (dataset / entry["name"]).read_text().splitlines()]
    data = "".join(json.dumps(edit(line)) + "\n" for line in lines).encode()
    (dataset / entry["name"]).write_bytes(data)
    entry.update(bytes=len(data), sha256=sha256(data))
    save_manifest(dataset, manifest)


def _feature(values: list) -> object:
    if values and isinstance(values[0], bytes):
        return ByteStrings(values)
    if values and isinstance(values[0], float):
        return Floats(values)
    return Ints(values)


def rebuild_tfrecord(dataset: Path, edit) -> str:
    """The first TFRecord shard rewritten with its first record's features passed through
    ``edit({name: [values]})``; index and manifest follow.  Returns the shard's name."""
    fmt = TFRecordFormat()
    manifest = images.manifest_of(dataset)
    shard = manifest["shards"][0]
    path = dataset / shard["name"]
    records = [record.data for _, record in fmt.records(path, shard["bytes"])]
    features = feature_lists(records[0][12:-4])
    edit(features)
    records[0] = frame_record(encode_example({name: _feature(values)
                                              for name, values in features.items()}))
    data = b"".join(records)
    path.write_bytes(data)
    placed = [Placed(offset, len(record.data), record.key, record.members)
              for offset, record in fmt.records(path, len(data))]
    index = index_bytes(fmt, placed)
    (dataset / shard["index"]["name"]).write_bytes(index)
    shard.update(bytes=len(data), sha256=sha256(data))
    shard["index"].update(bytes=len(index), sha256=sha256(index))
    save_manifest(dataset, manifest)
    return shard["name"]


def bomb_jpeg() -> bytes:
    """A small JPEG whose frame header claims 65500 x 65500 pixels."""
    data = bytearray(images.jpeg(32, 32))
    start = data.index(b"\xff\xc0")
    data[start + 5 : start + 9] = (65500).to_bytes(2, "big") * 2
    return bytes(data)


# Counts the manifest holds about itself


def test_a_split_total_its_shards_do_not_give_is_a_problem(tmp_path):
    output = small_dataset(tmp_path)
    edit_manifest(output, lambda m: m["splits"]["train"].update(samples=2**53 - 1))
    lines = problems(cli("verify", output))
    assert any("splits.train.samples" in line for line in lines)


def test_seen_that_is_not_packed_rejected_and_excluded_is_a_problem(tmp_path):
    output = small_dataset(tmp_path)
    edit_manifest(output, lambda m: m["totals"].update(seen=999))
    lines = problems(cli("verify", output))
    assert any("totals.seen is 999" in line for line in lines)


def test_a_sample_index_count_that_is_not_its_line_count_is_a_problem(tmp_path):
    output = small_dataset(tmp_path)
    edit_manifest(output, lambda m: m["samples_index"].update(samples=5))
    lines = problems(cli("verify", output))
    assert any("6 lines, manifest says 5" in line for line in lines)


@pytest.mark.parametrize("shard_lists", [[], ["zzz-shards.txt"],
                                         ["train-shards.txt", "train-shards.txt"]])
@pytest.mark.slow
def test_shard_lists_other_than_the_splits_give_are_a_problem(tmp_path, shard_lists):
    output = small_dataset(tmp_path)
    edit_manifest(output, lambda m: m.update(shard_lists=shard_lists))
    lines = problems(cli("verify", output))
    assert any(line.startswith("manifest: shard_lists") for line in lines)


# Splits in the sample index


def test_a_sample_split_that_is_not_a_split_name_is_refused(tmp_path):
    output = small_dataset(tmp_path)
    edit_sample_index(output, lambda line: {**line, "split": "A B"})
    lines = problems(cli("verify", output))
    assert any("'A B' is not a split name" in line for line in lines)


@pytest.mark.slow
def test_a_sample_split_other_than_its_shards_is_refused(tmp_path):
    output = small_dataset(tmp_path)
    edit_sample_index(output, lambda line: {**line, "split": "val" if line["split"] == "train"
                                            else "train"})
    lines = problems(cli("verify", output))
    assert any("a shard of another split" in line for line in lines)


# TFRecord features under --decode


def test_a_label_of_three_values_is_a_problem(tmp_path):
    output = small_dataset(tmp_path, "tfrecord")
    name = rebuild_tfrecord(output, lambda f: f.update({"image/class/label": [0, 1, 1]}))
    lines = problems(cli("verify", "--decode", output))
    assert any(line.startswith(name) and "image/class/label holds 3 values" in line
               for line in lines)


def test_a_height_other_than_the_index_records_is_a_problem(tmp_path):
    output = small_dataset(tmp_path, "tfrecord")
    name = rebuild_tfrecord(output, lambda f: f.update({"image/height": [2**40]}))
    lines = problems(cli("verify", "--decode", output))
    assert any(line.startswith(name) and f"image/height is {2**40}" in line for line in lines)


def test_box_lists_of_unequal_length_are_a_problem(tmp_path):
    output = mixed_annotated(tmp_path, "tfrecord")

    def edit(features: dict) -> None:
        features["image/object/bbox/xmin"] = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]

    name = rebuild_tfrecord(output, edit)
    lines = problems(cli("verify", "--decode", output))
    assert any(line.startswith(name) and "object lists of unequal length" in line
               for line in lines)


@pytest.mark.slow
def test_an_object_label_past_the_object_classes_is_a_problem(tmp_path):
    output = mixed_annotated(tmp_path, "tfrecord")

    def edit(features: dict) -> None:
        labels = features.get("image/object/class/label") or [1]
        features["image/object/class/label"] = [999] * len(labels)

    name = rebuild_tfrecord(output, edit)
    lines = problems(cli("verify", "--decode", output))
    assert any(line.startswith(name) and "object label 999" in line for line in lines)


@pytest.mark.slow
def test_a_mask_that_is_not_a_png_is_a_problem(tmp_path):
    output = mixed_annotated(tmp_path, "tfrecord")
    name = rebuild_tfrecord(output, lambda f: f.update(
        {"image/segmentation/class/encoded": [b"not a png at all"],
         "image/segmentation/class/format": [b"png"]}))
    lines = problems(cli("verify", "--decode", output))
    assert any(line.startswith(name) and "not a PNG that decodes" in line for line in lines)


@pytest.mark.slow
def test_an_annotated_tfrecord_dataset_as_packed_verifies(tmp_path):
    output = mixed_annotated(tmp_path, "tfrecord")
    process = cli("verify", "--decode", output)
    assert process.returncode == 0, (process.stdout, process.stderr)


# Free-form manifest fields


@pytest.mark.slow
def test_a_config_nested_950_deep_is_refused_in_one_line(tmp_path):
    output = small_dataset(tmp_path)
    # Spliced in as text: json's own recursion would meet pytest-xdist's deeper stack first.
    edit_manifest(output, lambda m: m["config"].update(x="NESTED"))
    manifest = output / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"NESTED"', "[" * 950 + "]" * 950))
    assert "nested deeper than" in one_error_line(cli("verify", output))
    line = one_error_line(cli("stage", output, "--to", tmp_path / "staged"))
    assert "nested deeper than" in line


# The sheet


@pytest.mark.slow
def test_a_jpeg_claiming_a_huge_size_is_an_unreadable_tile(tmp_path):
    from hostile_data import rebuild_shard

    output = small_dataset(tmp_path)
    name = images.manifest_of(output)["shards"][0]["name"]
    rebuild_shard(output, name, lambda key, members: {**members, "jpg": bomb_jpeg()})
    process = cli("sheet", output, "-o", tmp_path / "sheet.png")
    assert process.returncode == 0, process.stderr
    assert (tmp_path / "sheet.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow
def test_a_jpeg_claiming_a_huge_size_in_a_tfrecord_is_an_unreadable_tile(tmp_path):
    output = small_dataset(tmp_path, "tfrecord")
    rebuild_tfrecord(output, lambda f: f.update({"image/encoded": [bomb_jpeg()]}))
    process = cli("sheet", output, "-o", tmp_path / "sheet.png")
    assert process.returncode == 0, process.stderr
    assert (tmp_path / "sheet.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow
def test_a_class_name_of_a_million_characters_is_clipped_on_the_sheet(tmp_path):
    output = small_dataset(tmp_path)
    edit_manifest(output, lambda m: m["classes"].__setitem__(0, "A" * 1_000_001))
    process = cli("sheet", output, "-o", tmp_path / "sheet.png")
    assert process.returncode == 0, process.stderr
    assert (tmp_path / "sheet.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("target", ["manifest.json", "sheet.png", "../webdataset/x.png"])
@pytest.mark.slow
def test_a_sheet_inside_the_dataset_is_refused(tmp_path, target):
    output = small_dataset(tmp_path)
    before = images.dataset_bytes(output)
    line = one_error_line(cli("sheet", output, "-o", output / target))
    assert "inside the dataset" in line
    assert images.dataset_bytes(output) == before


def test_object_labels_that_are_not_integers_are_a_problem_not_a_traceback():
    from shardsmith.dataset.formats.example_check import example_problems
    from shardsmith.dataset.formats.tfrecord import ByteStrings, encode_example

    payload = encode_example({"image/object/class/label": ByteStrings([b"x"])})
    assert example_problems(feature_lists(payload), None, 2) == [
        "image/object/class/label holds other values than integers"]
