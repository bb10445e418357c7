"""The export's fast paths give what the slow ones give: its own walk of a WebDataset shard
(``ops/export/plaintar``) the same samples, bytes and members as the format's reader for a
shard shardsmith wrote, and None (the format's reader then reads it) for anything else; a
version made durable by fsyncs where ``syncfs`` is missing or fails."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest
from test_export import pack_corpus, write_corpus

from shardsmith.dataset.formats import shard_format
from shardsmith.dataset.manifest import read_manifest
from shardsmith.ops.export import export, plaintar, tree


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("plaintar")
    write_corpus(root / "source")
    pack_corpus(root / "source", root / "dataset", "webdataset")
    return root / "dataset"


def walked(path: Path) -> list | None:
    fd = os.open(path, os.O_RDONLY)
    try:
        samples = plaintar.plain_samples(fd, os.fstat(fd).st_size)
        if samples is None:
            return None
        return list(plaintar.read_samples(fd, samples, {key for key, _ in samples}))
    finally:
        os.close(fd)


def test_a_shard_shardsmith_wrote_reads_as_the_format_reads_it(dataset):
    fmt = shard_format("webdataset")
    shards = read_manifest(dataset).shards
    assert shards
    for shard in shards:
        expected = list(fmt.records(dataset / shard.name, shard.bytes))
        assert walked(dataset / shard.name) == expected
        assert any(len(record.members) == 4 for _, record in expected)  # with mask.png


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
], ids=["pax", "incomplete", "key twice", "unsafe name", "cut short", "checksum"])
def test_anything_else_is_left_to_the_format_reader(tmp_path, data):
    path = tmp_path / "shard.tar"
    path.write_bytes(data)
    assert walked(path) is None


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
