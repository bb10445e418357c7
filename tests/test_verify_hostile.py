"""``verify`` trusts nothing: shard lists and label maps come through the door (a FIFO does
not hang it, a link to ``/dev/zero`` is not read), a shard must hold the samples the sample
index lists for it with labels among the classes, a TFRecord of one endless varint is parsed
in bounded time, and a label map keeps any class name readable by protobuf."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest
from hostile_data import cli, mixed_annotated, rebuild_shard, sha256, small_dataset
from hostile_data import write_manifest as save_manifest

from shardsmith.dataset.formats.tfrecord import frame_record
from shardsmith.dataset.manifest import label_map

import images


def problems(process) -> list[str]:
    """The problem lines of a failed verify (exit 1), after checking it did not crash."""
    assert process.returncode == 1, (process.returncode, process.stdout, process.stderr)
    assert "Traceback" not in process.stderr, process.stderr
    return process.stdout.strip().splitlines()


def test_a_fifo_shard_list_is_a_problem_not_a_hang(tmp_path):
    output = small_dataset(tmp_path)
    (output / "train-shards.txt").unlink()
    os.mkfifo(output / "train-shards.txt")
    lines = problems(cli("verify", output, timeout=60))
    assert any(line.startswith("train-shards.txt") and "FIFO" in line for line in lines)


@pytest.mark.slow
def test_a_shard_list_linked_to_dev_zero_is_not_read(tmp_path):
    output = small_dataset(tmp_path)
    (output / "train-shards.txt").unlink()
    (output / "train-shards.txt").symlink_to("/dev/zero")
    limit = 1 << 30  # a read without bound runs into this instead of the machine's memory

    def cap_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    process = subprocess.run(
        [sys.executable, "-c", "import sys\nfrom shardsmith.cli import main\n"
         "main(sys.argv[1:], prog_name='shardsmith')\n", "verify", str(output)],
        capture_output=True, text=True, timeout=60, preexec_fn=cap_memory)
    lines = problems(process)
    assert any(line.startswith("train-shards.txt") and "symbolic link" in line
               for line in lines)


@pytest.mark.slow
def test_a_fifo_label_map_is_a_problem_not_a_hang(tmp_path):
    output = mixed_annotated(tmp_path, "tfrecord")
    (output / "label_map.pbtxt").unlink()
    os.mkfifo(output / "label_map.pbtxt")
    lines = problems(cli("verify", output, timeout=60))
    assert any(line.startswith("label_map.pbtxt") and "FIFO" in line for line in lines)


def test_a_label_past_the_classes_is_a_problem(tmp_path):
    output = small_dataset(tmp_path)
    name = next(s["name"] for s in images.manifest_of(output)["shards"])
    rebuild_shard(output, name, lambda key, members: {**members, "cls": b"7"})
    lines = problems(cli("verify", output))
    assert any(line.startswith(name) and "label 7, not one of the 2 classes" in line
               for line in lines)


def test_a_shard_swapped_with_its_index_for_another_splits_is_a_problem(tmp_path):
    """A val shard and its index copied over a train shard's, the manifest's sizes and
    digests following: only the sample index still says which samples belong there."""
    output = small_dataset(tmp_path, same_content=True)
    manifest = images.manifest_of(output)
    train = next(s for s in manifest["shards"] if s["split"] == "train")
    val = next(s for s in manifest["shards"] if s["split"] == "val")
    for entry in ("name", "index"):
        source = val[entry] if entry == "name" else val["index"]["name"]
        target = train[entry] if entry == "name" else train["index"]["name"]
        (output / target).write_bytes((output / source).read_bytes())
    train.update(bytes=val["bytes"], sha256=val["sha256"])
    train["index"].update(bytes=val["index"]["bytes"], sha256=val["index"]["sha256"])
    save_manifest(output, manifest)
    lines = problems(cli("verify", output))
    assert any(line.startswith(train["name"]) and "not the ones the sample index lists" in line
               for line in lines)


def test_a_record_of_one_endless_varint_is_a_problem_found_in_bounded_time(tmp_path):
    """A 4 MB varint: a parser that shifts a growing integer per byte takes minutes (and
    hits the timeout); one that stops after ten bytes answers at once."""
    output = small_dataset(tmp_path, "tfrecord")
    manifest = images.manifest_of(output)
    shard = manifest["shards"][0]
    record = frame_record(b"\x80" * (4 << 20) + b"\x01")
    (output / shard["name"]).write_bytes(record)
    shard.update(bytes=len(record), sha256=sha256(record))
    save_manifest(output, manifest)
    lines = problems(cli("verify", output, timeout=60))
    assert any(line.startswith(shard["name"]) and "varint" in line for line in lines)


def test_the_label_map_names_every_class_so_protobuf_reads_it_back():
    """Names outside the Basic Multilingual Plane, quotes and backslashes, read back with
    protobuf's own text format into the Object Detection API's StringIntLabelMap."""
    text_format = pytest.importorskip("google.protobuf.text_format",
                                      reason="needs protobuf to read the label map")
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    names = ("scratch", "fissure \U0001F52C", "d\u00e9faut", 'say "no"', "back\\slash")
    file = descriptor_pb2.FileDescriptorProto(name="label_map_test.proto", package="t",
                                              syntax="proto2")
    item = file.message_type.add(name="Item")
    item.field.add(name="name", number=1, type=9, label=1)
    item.field.add(name="id", number=2, type=5, label=1)
    whole = file.message_type.add(name="LabelMap")
    whole.field.add(name="item", number=1, type=11, label=3, type_name=".t.Item")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    LabelMap = message_factory.GetMessageClass(pool.FindMessageTypeByName("t.LabelMap"))
    parsed = text_format.Parse(label_map(names).decode("ascii"), LabelMap())
    assert [(entry.id, entry.name) for entry in parsed.item] == list(enumerate(names, 1))


@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord"])
@pytest.mark.parametrize("decode", [False, True])
@pytest.mark.slow
def test_verify_passes_a_dataset_of_images_with_and_without_objects(tmp_path, fmt, decode):
    output = mixed_annotated(tmp_path, fmt)
    process = cli("verify", output, *(["--decode"] if decode else []))
    assert process.returncode == 0, process.stderr
