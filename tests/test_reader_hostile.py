"""The readers trust nothing in a dataset directory: shards and indexes come through the door
(a FIFO neither hangs nor is read), offsets, labels and masks that could not be real are
corrupt samples (named, replaced, one warning), a shard swapped for another is refused, and
datasets that mix images with and without objects read in both formats."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
from hostile_data import mixed_annotated, python, rebuild_shard, sha256, small_dataset
from hostile_data import write_manifest as save_manifest

import images

torch = pytest.importorskip("torch", reason="the torch reader needs PyTorch")

from shardsmith.errors import ManifestError  # noqa: E402
from shardsmith.readers.torch import dataset  # noqa: E402


def first_shard(output: Path, split: str = "train") -> dict:
    return next(s for s in images.manifest_of(output)["shards"] if s["split"] == split)


def replace_with_fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


@pytest.mark.slow
def test_a_fifo_in_place_of_a_shard_is_a_named_corrupt_sample_not_a_hang(tmp_path):
    output = small_dataset(tmp_path)
    name = first_shard(output)["name"]
    replace_with_fifo(output / name)
    result = python(f"""
from shardsmith.errors import CorruptSampleError
from shardsmith.readers.torch import dataset
try:
    list(dataset({str(output)!r}, split="train", shuffle=False, on_corrupt="raise"))
except CorruptSampleError as exc:
    print("corrupt:", exc)
""")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("corrupt:") and name in result.stdout
    assert "FIFO" in result.stdout


@pytest.mark.slow
def test_a_fifo_in_place_of_a_tar_index_is_one_manifest_error_not_a_hang(tmp_path):
    output = small_dataset(tmp_path)
    index = first_shard(output)["index"]["name"]
    replace_with_fifo(output / index)
    result = python(f"""
from shardsmith.errors import ManifestError
from shardsmith.readers.torch import dataset
try:
    dataset({str(output)!r}, split="train")
except ManifestError as exc:
    print("refused:", exc)
""")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("refused:") and index in result.stdout


def test_an_index_offset_past_the_real_shard_is_a_corrupt_sample(tmp_path, caplog):
    """A manifest that claims a huge shard lets a forged index point far past the file: the
    read stays within the file's real size (no MemoryError, no OverflowError)."""
    output = small_dataset(tmp_path)
    manifest = images.manifest_of(output)
    shard = first_shard(output)
    index_path = output / shard["index"]["name"]
    lines = index_path.read_text().splitlines()
    fields = lines[1].split()
    fields[2] = str(1 << 48)  # the first sample's .jpg: 256 TiB
    fields[5] = str(int(fields[1]) + (1 << 48) + 512)  # its .cls after it
    lines[1] = " ".join(fields)
    data = ("\n".join(lines) + "\n").encode()
    index_path.write_bytes(data)
    entry = next(s for s in manifest["shards"] if s["name"] == shard["name"])
    entry["bytes"] = 1 << 49
    entry["index"].update(bytes=len(data), sha256=sha256(data))
    save_manifest(output, manifest)
    data = dataset(output, split="train", batch_size=3, shuffle=False)
    with caplog.at_level(logging.WARNING):
        batches = list(data)
    assert sum(len(labels) for _, labels in batches) == 3
    assert any("1 corrupt" in r.getMessage() and shard["name"] in r.getMessage()
               for r in caplog.records)


def test_a_thirty_digit_label_is_a_corrupt_sample_replaced_in_its_batch(tmp_path, caplog):
    output = small_dataset(tmp_path)
    name = first_shard(output)["name"]
    first = []

    def huge_label(key: str, members: dict[str, bytes]) -> dict[str, bytes]:
        if not first:
            first.append(key)
            members["cls"] = b"1" * 30
        return members

    rebuild_shard(output, name, huge_label)
    data = dataset(output, split="train", batch_size=3, shuffle=False)
    with caplog.at_level(logging.WARNING):
        (batch, labels), = list(data)
    assert len(labels) == 3 and set(labels.tolist()) <= {0, 1}
    assert any(f"{name}: sample {first[0]}" in r.getMessage() for r in caplog.records)


def test_a_label_past_the_classes_is_a_corrupt_sample(tmp_path):
    output = small_dataset(tmp_path)
    name = first_shard(output)["name"]
    rebuild_shard(output, name, lambda key, members: {**members, "cls": b"7"})
    from shardsmith.errors import CorruptSampleError

    with pytest.raises(CorruptSampleError, match="label 7 is not one of the 2 classes"):
        list(dataset(output, split="train", shuffle=False, on_corrupt="raise"))


@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord"])
def test_a_shard_swapped_for_another_of_the_same_size_is_refused_not_served(tmp_path, fmt):
    """A staged train shard overwritten by a val shard of the same size: the reader does not
    hash shards, but it checks that a shard holds the sample its index starts with (a
    TFRecord index, offsets alone, the samples the sample index puts in it)."""
    output = small_dataset(tmp_path, fmt, same_content=True)
    train, val = first_shard(output, "train"), first_shard(output, "val")
    assert train["bytes"] == val["bytes"]
    (output / train["name"]).write_bytes((output / val["name"]).read_bytes())
    with pytest.raises(ManifestError, match=f"{train['name']}: holds .*(where its index has"
                                            "|which the sample index does not put there)"):
        dataset(output, split="train")


@pytest.mark.slow
def test_rle_counts_that_wrap_int64_are_a_corrupt_sample_not_a_crash(tmp_path):
    """Counts whose int64 sum wraps around to the image's pixel count would make NumPy
    repeat past any memory (a MemoryError, or worse): checked first, in Python integers."""
    output = mixed_annotated(tmp_path, "webdataset")
    shard = images.manifest_of(output)["shards"][0]["name"]

    def wrapped(key: str, members: dict[str, bytes]) -> dict[str, bytes]:
        meta = json.loads(members["json"])
        for rle in meta.get("rle", []):
            if rle is not None:
                height, width = rle["size"]
                rle["counts"] = [(1 << 63) - 1, (1 << 63) - 1, height * width + 2]
        members["json"] = json.dumps(meta).encode()
        return members

    rebuild_shard(output, shard, wrapped)
    result = python(f"""
import logging
logging.basicConfig(level=logging.WARNING)
from shardsmith.readers.torch import dataset
count = sum(1 for _ in dataset({str(output)!r}, targets=True, shuffle=False))
batches = list(dataset({str(output)!r}, targets=True, shuffle=False, batch_size=4))
print("samples", count, sum(len(targets) for _, targets in batches))
""")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["samples", "4", "4"]
    assert "RLE counts" in result.stderr and shard in result.stderr


# --- datasets that mix images with and without objects --------------------------------------


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("mixed")
    return {fmt: mixed_annotated(root, fmt) for fmt in ("webdataset", "tfrecord")}


def test_torch_reader_reads_images_with_and_without_objects(mixed):
    pairs = list(dataset(mixed["webdataset"], shuffle=False))
    assert len(pairs) == 4 and all(image.shape == (3, 64, 64) for image, _ in pairs)
    targets = [target for _, target in dataset(mixed["webdataset"], targets=True,
                                                shuffle=False)]
    assert sorted(len(target["boxes"]) for target in targets)[0] == 0
    assert len(targets) == 4 and any(len(target["boxes"]) for target in targets)
    (batch, labels), = list(dataset(mixed["webdataset"], batch_size=4, shuffle=False))
    assert batch.shape == (4, 3, 64, 64) and len(labels) == 4


@pytest.mark.slow
def test_tf_reader_reads_images_with_and_without_objects(mixed):
    pytest.importorskip("tensorflow", reason="the tf.data reader needs TensorFlow")
    from shardsmith.readers.tf import dataset as tf_dataset

    assert sum(1 for _ in tf_dataset(mixed["tfrecord"], shuffle=False)) == 4
    objects = sorted(int(element["boxes"].shape[0])
                     for element in tf_dataset(mixed["tfrecord"], targets=True, shuffle=False))
    assert len(objects) == 4 and objects[0] == 0 and objects[-1] > 0
