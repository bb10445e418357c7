"""Readers against shards forged by a hostile author (digests re-signed so they pass): a JPEG
whose header claims 65500x65500 is never decoded (torch reader, bench-read, inspect --quality);
the tf.data reader checks every shard through the door and its framing against its index
before anything reads it, and a record that does not parse is a named, skipped sample, never a
TensorFlow error, a crash or a hang; object class ids outside the object classes are corrupt."""

from __future__ import annotations

import json
import logging
import os
import struct
import tarfile
from collections.abc import Callable
from io import BytesIO
from pathlib import Path

import pytest
from hostile_data import mixed_annotated, python, rebuild_shard, sha256, small_dataset
from hostile_data import write_manifest as save_manifest
from PIL import Image

import images

# A subprocess that would decode a bomb fails with MemoryError past this, instead of taking
# a shared test machine's memory (a 65500x65500 RGB decode is 12.9 GB).
MEMORY_LIMIT = 8 << 30
LIMITED = f"import resource\nresource.setrlimit(resource.RLIMIT_AS, ({MEMORY_LIMIT}, " \
          f"{MEMORY_LIMIT}))\n"


def bomb_jpeg() -> bytes:
    """16x16 pixels of JPEG whose frame header says 65500x65500."""
    out = BytesIO()
    Image.new("RGB", (16, 16)).save(out, "JPEG")
    data = bytearray(out.getvalue())
    struct.pack_into(">HH", data, data.find(b"\xff\xc0") + 5, 65500, 65500)
    return bytes(data)


def first_shard(output: Path, split: str = "train") -> dict:
    return next(s for s in images.manifest_of(output)["shards"] if s["split"] == split)


def bombed(root: Path) -> tuple[Path, str]:
    """A WebDataset dataset whose first train sample is a bomb."""
    output = small_dataset(root)
    name = first_shard(output)["name"]
    first: list[str] = []

    def bomb_first(key: str, members: dict[str, bytes]) -> dict[str, bytes]:
        if not first:
            first.append(key)
            members["jpg"] = bomb_jpeg()
        return members

    rebuild_shard(output, name, bomb_first)
    return output, name


# --- A: a JPEG header is bounded before decoding ------------------------------------------


@pytest.mark.slow
def test_a_jpeg_header_larger_than_any_recorded_sample_is_a_named_corrupt_sample(tmp_path):
    output, name = bombed(tmp_path)
    result = python(LIMITED + f"""
import logging
logging.basicConfig(level=logging.WARNING)
from shardsmith.readers.torch import dataset
print(sum(1 for _ in dataset({str(output)!r}, split="train", shuffle=False)))
""")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "3"  # the bomb replaced, the epoch whole
    assert f"{name}: sample" in result.stderr and "65500x65500" in result.stderr


def test_a_jpeg_header_other_than_the_batch_size_is_a_corrupt_sample_replaced(tmp_path,
                                                                                caplog):
    pytest.importorskip("torch", reason="the torch reader needs PyTorch")
    from shardsmith.readers.torch import dataset

    output = small_dataset(tmp_path)
    name = first_shard(output)["name"]
    first: list[str] = []

    def other_size(key: str, members: dict[str, bytes]) -> dict[str, bytes]:
        if not first:
            first.append(key)
            members["jpg"] = images.jpeg(48, 32)
        return members

    rebuild_shard(output, name, other_size)
    with caplog.at_level(logging.WARNING):
        (batch, labels), = list(dataset(output, split="train", batch_size=3, shuffle=False))
    assert len(labels) == 3
    assert any(f"{name}: sample {first[0]}" in r.getMessage() and "48x32" in r.getMessage()
               for r in caplog.records)


def run_cli(*args: object) -> object:
    return python(LIMITED + f"""
import sys
from shardsmith.cli import main
main({[str(arg) for arg in args]!r}, prog_name="shardsmith")
""")


@pytest.mark.slow
def test_bench_read_names_a_bombed_sample_in_one_line(tmp_path):
    pytest.importorskip("torch", reason="bench-read reads with the torch reader")
    output, name = bombed(tmp_path)
    result = run_cli("bench-read", output, "--seconds", "0.05")
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("shardsmith:")]
    assert len(errors) == 1 and name in errors[0] and "65500x65500" in errors[0]


@pytest.mark.slow
def test_inspect_quality_skips_a_bombed_sample_with_why(tmp_path):
    output, _ = bombed(tmp_path)
    result = run_cli("inspect", "--quality", "6", output, "--source", output.parent / "source")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout.count("its JPEG header says 65500x65500") == 1


# --- G: object class ids ------------------------------------------------------------------


def test_an_object_class_id_past_the_object_classes_is_a_corrupt_sample(tmp_path):
    pytest.importorskip("torch", reason="the torch reader needs PyTorch")
    from shardsmith.errors import CorruptSampleError
    from shardsmith.readers.torch import dataset

    output = mixed_annotated(tmp_path, "webdataset")
    name = first_shard(output)["name"]

    def huge_class(key: str, members: dict[str, bytes]) -> dict[str, bytes]:
        meta = json.loads(members["json"])
        if meta.get("labels"):
            meta["labels"][0] = 2**62
        return {**members, "json": json.dumps(meta).encode()}

    rebuild_shard(output, name, huge_class)
    with pytest.raises(CorruptSampleError, match=f"{name}: sample .*object class id "
                                                 "4611686018427387904"):
        list(dataset(output, targets=True, shuffle=False, on_corrupt="raise"))


# --- B: the tf.data reader ----------------------------------------------------------------


def reindex(output: Path, shard: dict, data: bytes) -> None:
    """Write ``data`` as the shard with an index of its length fields (as a forger would),
    and re-sign both in the manifest."""
    lines, offset = [], 0
    while offset + 12 <= len(data):
        length = struct.unpack_from("<Q", data, offset)[0]
        lines.append(f"{offset} {min(length + 16, len(data) - offset)}")
        offset += length + 16
    index = ("\n".join(lines) + "\n").encode()
    (output / shard["name"]).write_bytes(data)
    (output / shard["index"]["name"]).write_bytes(index)
    manifest = images.manifest_of(output)
    entry = next(s for s in manifest["shards"] if s["name"] == shard["name"])
    entry.update(bytes=len(data), sha256=sha256(data))
    entry["index"].update(bytes=len(index), sha256=sha256(index))
    save_manifest(output, manifest)


def edit_first_record(output: Path, edit: Callable[[bytes], bytes]) -> str:
    """Replace the first train record's payload by ``edit(payload)``, framed with valid CRCs."""
    from shardsmith.dataset.formats.tfrecord import frame_record

    shard = first_shard(output)
    data = (output / shard["name"]).read_bytes()
    length = struct.unpack_from("<Q", data)[0]
    reindex(output, shard, frame_record(edit(data[12 : 12 + length])) + data[16 + length :])
    return shard["name"]


def edit_first_example(output: Path, edit: Callable[[object], None]) -> str:
    tf = pytest.importorskip("tensorflow", reason="the tf.data reader needs TensorFlow")

    def change(payload: bytes) -> bytes:
        example = tf.train.Example.FromString(payload)
        edit(example.features.feature)
        return example.SerializeToString()

    return edit_first_record(output, change)


def set_values(name: str, kind: str, values: list) -> Callable[[object], None]:
    def edit(feature) -> None:
        target = getattr(feature[name], kind).value
        del target[:]
        target.extend(values)

    return edit


def tf_samples(output: Path, **options) -> list:
    from shardsmith.readers.tf import dataset as tf_dataset

    return list(tf_dataset(output, split="train", shuffle=False, **options))


CORRUPT_RECORDS = {
    "three labels": set_values("image/class/label", "int64_list", [1, 2, 3]),
    "two images": set_values("image/encoded", "bytes_list", [b"a", b"b"]),
    "no image": lambda feature: feature.pop("image/encoded"),
    "a garbage JPEG": set_values("image/encoded", "bytes_list", [b"garbage"]),
    "a JPEG bomb": set_values("image/encoded", "bytes_list", [bomb_jpeg()]),
}


@pytest.mark.parametrize("damage", sorted(CORRUPT_RECORDS))
@pytest.mark.slow
def test_a_tf_record_that_does_not_parse_is_named_and_skipped(tmp_path, caplog, damage):
    pytest.importorskip("tensorflow", reason="the tf.data reader needs TensorFlow")
    output = small_dataset(tmp_path, "tfrecord")
    name = edit_first_example(output, CORRUPT_RECORDS[damage])
    with caplog.at_level(logging.WARNING, logger="shardsmith.readers.tf"):
        samples = tf_samples(output)
    assert len(samples) == 3  # the epoch stays whole: a fresh pass fills the skipped place
    assert any(f"{name}: sample" in r.getMessage() and "skipped" in r.getMessage()
               for r in caplog.records)


def test_a_jpeg_whose_header_passes_but_whose_data_does_not_decode_is_skipped(tmp_path):
    pytest.importorskip("tensorflow", reason="the tf.data reader needs TensorFlow")
    output = small_dataset(tmp_path, "tfrecord")

    def break_the_scan(feature) -> None:
        jpeg = feature["image/encoded"].bytes_list.value[0]
        scan = jpeg.index(b"\xff\xda")  # the header (with the size) stays whole
        broken = jpeg[: scan + 12] + b"\xff\xd9"  # the entropy-coded data cut off
        set_values("image/encoded", "bytes_list", [broken])(feature)

    edit_first_example(output, break_the_scan)
    samples = tf_samples(output)  # TensorFlow's decode kernel fails on it: skipped, no raise
    assert len(samples) == 3  # the epoch stays whole: a fresh pass fills the skipped place


@pytest.mark.parametrize("payload", [b"", b"\xff" * 50], ids=["empty", "garbage"])
def test_a_crc_valid_payload_that_is_no_example_is_named_and_skipped(tmp_path, caplog,
                                                                      payload):
    pytest.importorskip("tensorflow", reason="the tf.data reader needs TensorFlow")
    output = small_dataset(tmp_path, "tfrecord")
    name = edit_first_record(output, lambda _: payload)
    with caplog.at_level(logging.WARNING, logger="shardsmith.readers.tf"):
        samples = tf_samples(output)
    assert len(samples) == 3  # the epoch stays whole: a fresh pass fills the skipped place
    assert any(name in r.getMessage() and "skipped" in r.getMessage() for r in caplog.records)


def test_a_bad_data_crc_is_a_skipped_sample_not_a_data_loss_error(tmp_path, caplog):
    pytest.importorskip("tensorflow", reason="the tf.data reader needs TensorFlow")
    output = small_dataset(tmp_path, "tfrecord")
    shard = first_shard(output)
    data = bytearray((output / shard["name"]).read_bytes())
    data[-1] ^= 0xFF  # the last record's payload CRC
    reindex(output, shard, bytes(data))
    with caplog.at_level(logging.WARNING, logger="shardsmith.readers.tf"):
        samples = tf_samples(output)
    assert len(samples) == 3  # the epoch stays whole: a fresh pass fills the skipped place
    # named by shard and key (the key the sample table read), though its record does not read
    assert any(f"{shard['name']}: sample " in r.getMessage() and "bad data CRC" in r.getMessage()
               for r in caplog.records)


def tf_script(output: Path, *options: str) -> str:
    return f"""
from shardsmith.errors import ManifestError
from shardsmith.readers.tf import dataset
try:
    print("samples:", sum(1 for _ in dataset({str(output)!r}, split="train", {", ".join(options)})))
except ManifestError as exc:
    print("refused:", exc)
"""


@pytest.mark.slow
def test_a_length_field_of_2_40_with_a_valid_crc_is_refused_not_a_crash(tmp_path):
    pytest.importorskip("tensorflow", reason="the tf.data reader needs TensorFlow")
    from shardsmith.dataset.formats.tfrecord import masked_crc

    output = small_dataset(tmp_path, "tfrecord")
    shard = first_shard(output)
    data = (output / shard["name"]).read_bytes()
    length = struct.pack("<Q", 2**40)
    reindex(output, shard, length + struct.pack("<I", masked_crc(length)) + data[12:])
    result = python(tf_script(output))
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("refused:") and shard["name"] in result.stdout


@pytest.mark.slow
def test_a_shard_symlinked_out_of_the_dataset_is_refused(tmp_path):
    pytest.importorskip("tensorflow", reason="the tf.data reader needs TensorFlow")
    output = small_dataset(tmp_path, "tfrecord")
    name = first_shard(output)["name"]
    outside = tmp_path / "outside.tfrecord"
    (output / name).rename(outside)
    (output / name).symlink_to(outside)
    result = python(tf_script(output))
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("refused:") and name in result.stdout
    assert "symbolic link" in result.stdout


@pytest.mark.slow
def test_a_fifo_in_place_of_a_tf_shard_is_refused_not_a_hang(tmp_path):
    pytest.importorskip("tensorflow", reason="the tf.data reader needs TensorFlow")
    output = small_dataset(tmp_path, "tfrecord")
    name = first_shard(output)["name"]
    (output / name).unlink()
    os.mkfifo(output / name)
    result = python(tf_script(output), timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("refused:") and "FIFO" in result.stdout


@pytest.mark.slow
def test_a_truncated_tf_shard_is_refused(tmp_path):
    pytest.importorskip("tensorflow", reason="the tf.data reader needs TensorFlow")
    output = small_dataset(tmp_path, "tfrecord")
    shard = first_shard(output)
    data = (output / shard["name"]).read_bytes()
    reindex(output, shard, data[: len(data) // 2])
    result = python(tf_script(output))
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("refused:") and shard["name"] in result.stdout


def test_a_tf_shard_of_another_split_copied_over_one_of_the_same_layout_is_refused(tmp_path):
    """Its framing agrees with the index it took the place of (the same layout), but the keys
    it holds are not those the sample index puts there: refused, as the torch reader refuses
    it, not read as train samples."""
    pytest.importorskip("tensorflow", reason="the tf.data reader needs TensorFlow")
    from shardsmith.errors import ManifestError

    output = small_dataset(tmp_path, "tfrecord", same_content=True)
    train, val = first_shard(output, "train"), first_shard(output, "val")
    assert train["bytes"] == val["bytes"]
    (output / train["name"]).write_bytes((output / val["name"]).read_bytes())
    with pytest.raises(ManifestError, match=f"{train['name']}: holds sample .*which the "
                                            "sample index does not put there"):
        tf_samples(output)


# --- targets in the tf.data reader --------------------------------------------------------


def one_object(class_id: int) -> Callable[[object], None]:
    """The record holds one object, of class ``class_id``."""
    def edit(feature) -> None:
        for edge, value in (("xmin", 0.1), ("ymin", 0.1), ("xmax", 0.5), ("ymax", 0.5)):
            set_values(f"image/object/bbox/{edge}", "float_list", [value])(feature)
        set_values("image/object/class/label", "int64_list", [class_id])(feature)
        set_values("image/object/class/text", "bytes_list", [b"scratch"])(feature)

    return edit


@pytest.mark.parametrize("edit, problem", [
    (one_object(999), "object class id 999"),
    (set_values("image/object/bbox/xmin", "float_list", [0.1, 0.2, 0.3]), "one length"),
], ids=["class id past the object classes", "box lists of unequal length"])
def test_tf_targets_that_do_not_agree_are_named_and_skipped(tmp_path, caplog, edit, problem):
    pytest.importorskip("tensorflow", reason="the tf.data reader needs TensorFlow")
    from shardsmith.readers.tf import dataset as tf_dataset

    output = mixed_annotated(tmp_path, "tfrecord")
    total = sum(s["samples"] for s in images.manifest_of(output)["shards"])
    edit_first_example(output, edit)
    with caplog.at_level(logging.WARNING, logger="shardsmith.readers.tf"):
        elements = list(tf_dataset(output, targets=True, shuffle=False))
    assert len(elements) == total  # the epoch stays whole: a fresh pass fills its place
    assert all(1 <= int(c) <= 2 for element in elements for c in element["classes"])
    assert any(problem in r.getMessage() for r in caplog.records)


# --- a corrupt sample is named by its key, whatever its shard has become ------------------


def shard_keys(path: Path) -> set[str]:
    with tarfile.open(path) as tar:
        return {member.name.split(".", 1)[0] for member in tar.getmembers()}


def damage(output: Path, name: str, how: str) -> None:
    """The shard ``name`` cut short after its first sample's image began, replaced by a FIFO,
    or by a link to its own bytes elsewhere (the readers follow no link)."""
    path = output / name
    if how == "truncated":
        os.truncate(path, 3000)
    elif how == "fifo":
        path.unlink()
        os.mkfifo(path)
    else:
        outside = output.parent / f"outside-{name}"
        path.rename(outside)
        path.symlink_to(outside)


def first_corrupt(output: Path, reader: str) -> str:
    """The message of the first corrupt sample of the train split, raised."""
    from shardsmith.errors import CorruptSampleError

    with pytest.raises(CorruptSampleError) as raised:
        if reader == "dali":
            from shardsmith.readers.dali import loader

            for _ in loader(output, split="train", batch_size=2, device="cpu", shuffle=False,
                            num_threads=1):
                pass
        else:
            from shardsmith.readers.torch import dataset

            batch_size = 2 if reader == "torch batches" else None
            for _ in dataset(output, split="train", shuffle=False, on_corrupt="raise",
                             batch_size=batch_size):
                pass
    return str(raised.value)


@pytest.mark.parametrize("how", ["truncated", "fifo", "symlink"])
@pytest.mark.parametrize("reader", ["torch", "torch batches", "dali"])
def test_a_corrupt_sample_of_a_damaged_shard_is_named_by_shard_and_key(tmp_path, how,
                                                                        reader):
    pytest.importorskip("torch", reason="the torch and DALI readers need PyTorch")
    if reader == "dali":
        pytest.importorskip("nvidia.dali", reason="the DALI reader needs NVIDIA DALI")
    output = small_dataset(tmp_path)
    name = first_shard(output)["name"]
    keys = shard_keys(output / name)
    damage(output, name, how)
    message = first_corrupt(output, reader)
    assert "sample ?" not in message, message
    assert any(f"{name}: sample {key}: unreadable" in message for key in keys), message


def test_a_tf_record_whose_features_are_in_another_order_keeps_its_sample(tmp_path):
    """Another writer (TensorFlow's own) orders an Example's features as it likes: the key
    after a later name is still found, the sample read, not skipped as keyless."""
    pytest.importorskip("torch", reason="the torch reader needs PyTorch")
    from shardsmith.dataset.formats.tfrecord import _field, _fields
    from shardsmith.readers.torch import dataset

    def reversed_features(payload: bytes) -> bytes:
        (_, _, features), = _fields(memoryview(payload))
        entries = [_field(1, bytes(entry)) for _, _, entry in _fields(features)]
        return _field(1, b"".join(reversed(entries)))

    output = small_dataset(tmp_path, "tfrecord")
    edit_first_record(output, reversed_features)
    assert len(list(dataset(output, split="train", shuffle=False, decode=False))) == 3


@pytest.mark.parametrize("how", ["truncated", "fifo", "symlink"])
def test_a_damaged_tf_shard_keeps_its_samples_places_in_the_torch_epoch(tmp_path, how):
    """A TFRecord shard cut short, or a FIFO or a link in its place, keeps its samples'
    places: read as corrupt samples and replaced, as a WebDataset shard's are, so that a node
    whose copy is damaged draws as many samples as the others (DDP waits on the shortest)."""
    pytest.importorskip("torch", reason="the torch reader needs PyTorch")
    from shardsmith.readers.torch import dataset

    output = small_dataset(tmp_path, "tfrecord")
    name = first_shard(output)["name"]
    damage(output, name, how)
    read = dataset(output, shuffle=False, decode=False)
    assert len(read) == 6 and len(list(read)) == 6
    assert f"{name}: sample " in first_corrupt(output, "torch")


@pytest.mark.slow
def test_the_tf_reader_is_made_without_tensorflow_s_autograph_warning(tmp_path, caplog, capfd):
    """The filter and map that drop skipped records are functions AutoGraph can read: it
    printed a warning of 18 lines, twice, each time a dataset was made."""
    pytest.importorskip("tensorflow")
    from shardsmith.readers.tf import dataset

    output = small_dataset(tmp_path, "tfrecord")
    with caplog.at_level(logging.WARNING):
        assert len(list(dataset(output, split="train", shuffle=False))) == 3
    printed = capfd.readouterr()
    assert "AutoGraph" not in caplog.text + printed.out + printed.err
