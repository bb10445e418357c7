"""The export's fast paths give what the slow ones give: the WebDataset format's own walk of a
tar the same samples, bytes and members as ``tarfile`` reads in a shard shardsmith wrote, and
one clear error for anything else; a version made durable by fsyncs where ``syncfs`` is
missing or fails."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import msgspec
import pytest
from test_export import pack_corpus, write_corpus

from shardsmith.dataset.formats import shard_format
from shardsmith.dataset.manifest import read_manifest
from shardsmith.errors import OutputStateError, ShardFormatError
from shardsmith.ops.export import export, layouts, record, tree
from shardsmith.text import shown


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tarwalk")
    write_corpus(root / "source")
    pack_corpus(root / "source", root / "dataset", "webdataset")
    return root / "dataset"


def walked(path: Path) -> list:
    return list(shard_format("webdataset").records(path, path.stat().st_size))


def test_a_shard_shardsmith_wrote_reads_as_tarfile_reads_it(dataset):
    shards = read_manifest(dataset).shards
    assert shards
    for shard in shards:
        path = dataset / shard.name
        with tarfile.open(path) as tar:
            expected = [(info.name, info.offset, info.offset_data, info.size) for info in tar]
        records = walked(path)
        assert [(f"{packed.key}.{m.extension}", offset + m.header, offset + m.data, m.size)
                for offset, packed in records for m in packed.members] == expected
        data = path.read_bytes()
        assert all(packed.data == data[offset : offset + len(packed.data)]
                   for offset, packed in records)
        assert any(len(packed.members) == 4 for _, packed in records)  # with mask.png


def tar_of(members: list[tuple[str, bytes]], pax: bool = False) -> bytes:
    buffer = io.BytesIO()
    fmt = tarfile.PAX_FORMAT if pax else tarfile.USTAR_FORMAT
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            if pax:
                info.pax_headers = {"comment": "an extended header"}
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


SAMPLE = [("k.jpg", b"\xff\xd8"), ("k.cls", b"1"), ("k.json", b"{}")]


@pytest.mark.parametrize("data", [
    tar_of(SAMPLE, pax=True),  # a pax header before each member
    tar_of(SAMPLE[:2]),  # a sample without its .json
    tar_of(SAMPLE + [("j.jpg", b"x"), ("j.cls", b"1"), ("j.json", b"{}"),
                     ("k.txt", b"again")]),  # a key in two runs
    tar_of([("../k.jpg", b"x")] + SAMPLE[1:]),  # a name the format refuses
    tar_of(SAMPLE)[:1000],  # cut short
    bytes(511) + b"\x01" + tar_of(SAMPLE)[512:],  # a header whose checksum does not add up
    b"",  # a shard of 0 bytes
    bytes(20 * 512),  # a shard of zero blocks only
], ids=["pax", "incomplete", "key twice", "unsafe name", "cut short", "checksum", "empty",
        "zero blocks"])
def test_anything_else_is_refused_by_the_format_reader(tmp_path, data):
    path = tmp_path / "shard.tar"
    path.write_bytes(data)
    with pytest.raises(ShardFormatError):
        walked(path)


def test_a_plain_tar_of_shardsmith_members_is_walked(tmp_path):
    path = tmp_path / "shard.tar"
    path.write_bytes(tar_of(SAMPLE))
    [(offset, record)] = walked(path)
    assert offset == 0 and record.key == "k"
    assert [member.extension for member in record.members] == ["jpg", "cls", "json"]


def fails(fd: int) -> int:
    return -1


@pytest.mark.parametrize("syncfs", [None, fails], ids=["missing", "failing"])
def test_without_syncfs_every_file_is_fsynced(dataset, tmp_path, monkeypatch, syncfs):
    synced = []
    original = tree._fsync_file
    monkeypatch.setattr(tree, "_SYNCFS", syncfs)
    monkeypatch.setattr(tree, "_fsync_file", lambda path: synced.append(path) or original(path))
    result = export(dataset, tmp_path / "dest", "yolo")
    files = {str(path.relative_to(result.folder)) for path in result.folder.rglob("*")
             if path.is_file()}
    assert files and files <= {os.path.relpath(path, tmp_path / "dest" / "v1.partial")
                               for path in synced}


def one_shard_record(*files: record.ExportedFile) -> record.ExportRecord:
    """A yolo record of one shard holding one sample ``k`` with ``files``."""
    sample = record.ExportedSample("k", "train", 4, 4, files)
    group = record.ExportedShard("train-000000.tar", "b" * 64, "e" * 64, (sample,))
    return record.ExportRecord(record.RECORD_FORMAT, record.ExportOptions("yolo", "detect"),
                               "c" * 64, "d" * 64, 1, ("ok",), ("scratch",), (group,))


def test_a_record_with_one_bad_sha256_among_sound_ones_names_it(tmp_path):
    exported = one_shard_record(record.ExportedFile("images/train/k.jpg", 3, 1))
    exported = msgspec.structs.replace(exported, shared=(
        record.SharedFile("data.yaml", 3, 2, "a" * 64),
        record.SharedFile("data.yaml", 3, 2, "A" * 64)))
    with pytest.raises(OutputStateError, match=r"shared\[1\]\.sha256: 'A+\.\.\. is not a sha256"):
        record.parse_record(record.record_bytes(exported), tmp_path / "record.json", tmp_path)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda r: r["shards"][0]["samples"][0]["files"][0].update(bytes=-1),
     "shards[0].samples[0].files[0].bytes: -1 is out of range (from 0 to 9007199254740991)"),
    (lambda r: r["shards"][0]["samples"][0]["files"][0].update(mode="0777"),
     "shards[0].samples[0].files[0].mode: not a field of this record"),
    (lambda r: r.update(format="one"), "format: expected an integer, got 'one'"),
    (lambda r: r.update(shards="all"), "shards: expected a list, got 'all'"),
    (lambda r: r["shards"][0]["samples"][0].pop("key"), "shards[0].samples[0].key: missing"),
    (lambda r: r["shards"][0].update(index="E" * 64), "shards[0].index: 'EEEE"),
    (lambda r: r["shards"][0]["samples"][0]["files"][0].update(sha256="a" * 64),
     "shards[0].samples[0].files[0].sha256: not a field of this record"),
    (lambda r: r["shards"][0]["samples"][0]["files"][0].pop("inode"),
     "shards[0].samples[0].files[0].inode: missing"),
])
def test_a_damaged_record_is_named_by_the_field_in_our_own_words(tmp_path, edit, message):
    file = record.ExportedFile("images/train/k.jpg", 3, 1)
    document = json.loads(record.record_bytes(one_shard_record(file)))
    edit(document)
    with pytest.raises(OutputStateError) as caught:
        record.parse_record(json.dumps(document).encode(), tmp_path / "record.json", tmp_path)
    assert str(caught.value).startswith(f"{tmp_path / 'record.json'}: {message}")
    assert "not an export record shardsmith wrote" in str(caught.value)


@pytest.mark.parametrize("bad", ["A" * 64, "a" * 63, "a" * 65, "g" * 64, "\u0660" * 64,
                                 "a" * 63 + "\n", ""])
def test_only_a_sha256_passes_as_a_shards_digest(tmp_path, bad):
    sound = one_shard_record(record.ExportedFile("images/train/k.jpg", 3, 1))
    assert record.sha256_problem(sound.shards) is None
    damaged = msgspec.structs.replace(sound.shards[0], sha256=bad)
    assert record.sha256_problem((damaged,)) == f"shards[0].sha256: {shown(bad)} is not a sha256"


def test_a_coco_instances_file_is_ascii_json_even_for_class_names_beyond_it():
    box = record.CocoObject(1, (1.5, 2.0, 3.25, 4.0), 13.0, ((1.5, 2.0, 4.75, 2.0, 4.75, 6.0),))
    mask = record.CocoObject(2, (0.0, 0.0, 2.0, 2.0), 4.0, None, "04")
    samples = [record.ExportedSample("b", "train", 8, 6, (), (box, mask)),
               record.ExportedSample("a", "train", 8, 6, (), ())]
    data = layouts.instances(("Kratzer", "Delle \u00e4"), samples)
    assert data.isascii() and data.endswith(b"}\n")
    document = json.loads(data)
    assert [image["file_name"] for image in document["images"]] == ["a.jpg", "b.jpg"]
    assert document["annotations"] == [
        {"id": 1, "image_id": layouts.coco_image_id("b"), "category_id": 1,
         "bbox": [1.5, 2.0, 3.25, 4.0], "area": 13.0,
         "segmentation": [[1.5, 2.0, 4.75, 2.0, 4.75, 6.0]], "iscrowd": 0},
        {"id": 2, "image_id": layouts.coco_image_id("b"), "category_id": 2,
         "bbox": [0.0, 0.0, 2.0, 2.0], "area": 4.0,
         "segmentation": {"size": [6, 8], "counts": "04"}, "iscrowd": 0}]
    assert document["categories"][1] == {"id": 2, "name": "Delle \u00e4",
                                          "supercategory": "defect"}
