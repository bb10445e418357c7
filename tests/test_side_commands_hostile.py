"""The side commands (inspect, inspect --quality, sheet, bench-read) trust nothing either:
they read datasets that mix images with and without objects in both formats, bench-read
reads no original outside its source, a sheet of many classes stays a bounded image, and a
TFRecord of one endless varint is one clean answer, not minutes of work."""

from __future__ import annotations

import json
import os

import pytest
from hostile_data import cli, mixed_annotated, one_error_line, sha256, small_dataset
from hostile_data import write_manifest as save_manifest
from PIL import Image

from shardsmith.dataset.formats.tfrecord import frame_record

import images


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("mixed")
    return {fmt: mixed_annotated(root, fmt) for fmt in ("webdataset", "tfrecord")}


@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord"])
@pytest.mark.parametrize("quality", [False, True], ids=["plain", "quality"])
@pytest.mark.slow
def test_inspect_reads_images_with_and_without_objects(mixed, fmt, quality):
    options = ("--quality", "4", "--source", mixed[fmt].parent / "source") if quality else ()
    process = cli("inspect", mixed[fmt], *options)
    assert process.returncode == 0, process.stderr
    assert "Traceback" not in process.stderr


@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord"])
@pytest.mark.slow
def test_sheet_draws_images_with_and_without_objects(mixed, fmt, tmp_path):
    process = cli("sheet", mixed[fmt], "-o", tmp_path / "sheet.png")
    assert process.returncode == 0, process.stderr
    assert "4 samples" in process.stdout


def test_bench_read_refuses_an_original_that_leads_out_of_the_source(tmp_path):
    """The sample index names an original that is a link to a file outside the source: the
    same rule as sheet and inspect --quality refuses it before anything is timed."""
    output = small_dataset(tmp_path)
    source = tmp_path / "source"
    record = images.samples_of(output)[0]
    outside = tmp_path / "secret.jpg"
    original = source / record["path"]
    outside.write_bytes(original.read_bytes())
    original.unlink()
    original.symlink_to(outside)
    line = one_error_line(cli("bench-read", output, "--source", source, "--seconds", "0.05",
                              "--workers", "1"))
    assert "leads out of the source" in line


def test_bench_read_refuses_a_fifo_as_its_json_file_before_timing_not_a_hang(tmp_path):
    """--json names a FIFO (or a link): refused in one line, as sheet -o and report -o
    refuse one, before anything is timed; writing into it would wait for a reader forever."""
    output = small_dataset(tmp_path)
    fifo = tmp_path / "results.json"
    os.mkfifo(fifo)
    line = one_error_line(cli("bench-read", output, "--json", fifo, "--seconds", "0.05",
                              "--workers", "0", timeout=60))
    assert "a FIFO where the output file belongs" in line


@pytest.mark.slow
def test_a_sheet_of_600_classes_is_bounded_and_says_what_it_left_out(tmp_path):
    output = small_dataset(tmp_path)
    manifest = images.manifest_of(output)
    records = images.samples_of(output)
    manifest["classes"] = [f"class{number:03d}" for number in range(600)]
    lines = []
    for number in range(600):
        record = dict(records[number % len(records)], label=number)
        record["key"] = f"{record['key']}x{number}"
        lines.append(json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n")
    data = "".join(lines).encode()
    (output / manifest["samples_index"]["name"]).write_bytes(data)
    manifest["samples_index"].update(bytes=len(data), sha256=sha256(data))
    save_manifest(output, manifest)
    process = cli("sheet", output, "-o", tmp_path / "sheet.png")
    assert process.returncode == 0, process.stderr
    assert "classes of 600 not drawn" in process.stderr
    with Image.open(tmp_path / "sheet.png") as sheet:  # under Pillow's bomb limit
        assert sheet.width * sheet.height <= 60_000_000


def test_sheet_answers_at_once_for_a_record_of_one_endless_varint(tmp_path):
    output = small_dataset(tmp_path, "tfrecord")
    manifest = images.manifest_of(output)
    for shard in manifest["shards"]:
        record = frame_record(b"\x80" * (4 << 20) + b"\x01")
        (output / shard["name"]).write_bytes(record)
        shard.update(bytes=len(record), sha256=sha256(record))
    save_manifest(output, manifest)
    line = one_error_line(cli("sheet", output, "-o", tmp_path / "sheet.png", timeout=60), 1)
    assert "varint" in line


@pytest.mark.parametrize("option", [("--workers", "-1"), ("--batch-size", str(10**30)),
                                    ("--seconds", "nan"), ("--seconds", "inf")])
def test_bench_read_refuses_a_value_out_of_bounds_in_one_line(tmp_path, option):
    """-1 workers and a batch of 10**30 were torch's tracebacks, --seconds inf a run that
    never ends, nan one that times nothing."""
    output = small_dataset(tmp_path)
    line = one_error_line(cli("bench-read", output, *option, timeout=60))
    assert line.startswith(f"shardsmith: error: {option[0]}: expected"), line
