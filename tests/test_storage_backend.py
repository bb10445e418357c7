"""A storage backend is one module and one entry in ``storage.BACKENDS``: a location class that
answers ``storage.Location`` and opens through the guarded door (``open_guarded``), made from
its URL.  Here an in-memory backend, registered for ``mem://``, serves a packed dataset."""

from __future__ import annotations

import errno
import hashlib
import io
from pathlib import Path

import pytest
from click.testing import CliRunner

from shardsmith import storage
from shardsmith.cli import main
from shardsmith.door import Refused
from shardsmith.insight.diff import diff_versions
from shardsmith.insight.named_source import named_originals
from shardsmith.ops.stage import stage
from shardsmith.ops.verify import verify

import images


class MemoryFile:
    """An object opened through the door: bounded reads at an offset, no descriptor."""

    fd = -1

    def __init__(self, data: bytes, path: str):
        self.data, self.size, self.path = data, len(data), path

    def pread(self, length: int, offset: int) -> bytes:
        return self.data[offset:offset + length]

    def read(self) -> bytes:
        return self.data

    def stream(self) -> io.BytesIO:
        return io.BytesIO(self.data)

    def close(self) -> None:
        pass

    def __enter__(self) -> MemoryFile:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class MemoryPath:
    """The whole backend: keys of a dict of bytes, joined with ``/``."""

    parents = ()

    def __init__(self, objects: dict[str, bytes], key: str):
        self.objects, self.key = objects, key

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]

    def __truediv__(self, name: str) -> MemoryPath:
        return MemoryPath(self.objects, f"{self.key}/{name}")

    def __str__(self) -> str:
        return f"mem://{self.key}"

    def exists(self) -> bool:
        return self.key in self.objects

    is_file = exists

    def resolve(self) -> MemoryPath:
        return self

    expanduser = resolve

    def names(self) -> list[str]:
        prefix = f"{self.key}/"
        return sorted(key[len(prefix):] for key in self.objects
                      if key.startswith(prefix) and "/" not in key[len(prefix):])

    def open_guarded(self, cap: int, expect_size: int | None = None) -> MemoryFile:
        if self.key not in self.objects:
            raise FileNotFoundError(errno.ENOENT, "no such object", str(self))
        data = self.objects[self.key]
        if len(data) > cap:
            raise Refused("too_large", f"{len(data):,} bytes is more than {cap:,}", str(self))
        return MemoryFile(data, str(self))


def files_of(folder: Path) -> dict[str, str]:
    """name -> sha256 of every file of a staged dataset but its manifest (which says where it
    was staged from) and its state folder."""
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.iterdir())
            if path.is_file() and path.name != "manifest.json"}


def in_memory(dataset: Path, monkeypatch) -> dict[str, bytes]:
    """The files of ``dataset`` as the objects of ``mem://ds``, the backend registered."""
    objects = {f"ds/{path.relative_to(dataset).as_posix()}": path.read_bytes()
               for path in dataset.rglob("*") if path.is_file()}
    monkeypatch.setitem(storage.BACKENDS, "mem://",
                        lambda url, options: MemoryPath(objects, url.removeprefix("mem://")))
    return objects


def packed(tmp_path: Path, count: int = 6) -> Path:
    source = tmp_path / "source"
    for number in range(count):
        images.write(source / "ab"[number % 2] / f"{number}.jpg", images.jpeg(120, 80, number))
    return images.pack_small(source, tmp_path / "packed", "webdataset", 64, "train=0.5,val=0.5")


def test_a_dataset_behind_a_registered_backend_stages_as_the_same_dataset_on_disk(
        tmp_path, monkeypatch):
    dataset = packed(tmp_path)
    in_memory(dataset, monkeypatch)

    assert storage.is_url("mem://ds")
    assert isinstance(storage.location("mem://ds"), MemoryPath)
    remote = stage("mem://ds", tmp_path / "from-memory", quiet=True)
    local = stage(dataset, tmp_path / "from-disk", quiet=True)

    assert remote.copied == local.copied > 0
    assert files_of(tmp_path / "from-memory") == files_of(tmp_path / "from-disk")


def test_verify_checks_a_dataset_behind_a_registered_backend_as_a_bucket(tmp_path, monkeypatch):
    objects = in_memory(packed(tmp_path), monkeypatch)
    assert verify("mem://ds").problems == []

    shard = next(key for key in objects if key.endswith(".tar"))
    objects[shard] = objects[shard][:-1] + bytes([objects[shard][-1] ^ 1])
    objects["ds/train-000099.tar"] = b"stray"
    problems = verify("mem://ds").problems
    assert any(problem.endswith("(corrupt)") for problem in problems)
    assert "train-000099.tar: shard file not listed in the manifest" in problems


def test_diff_compares_versions_of_a_dataset_behind_a_registered_backend(tmp_path, monkeypatch):
    dataset = packed(tmp_path)
    images.write(tmp_path / "source" / "a" / "new.jpg", images.jpeg(120, 80, 99))
    images.pack_small(tmp_path / "source", dataset, "webdataset", 64, "train=0.5,val=0.5")
    in_memory(dataset, monkeypatch)

    remote = diff_versions(storage.location("mem://ds"))
    local = diff_versions(dataset)
    assert remote == local
    assert remote.added == local.added != []


@pytest.mark.parametrize("command", [["verify"], ["log"], ["inspect"], ["sheet", "-o", "s.jpg"],
                                     ["report", "-o", "r.html"]])
def test_the_commands_reading_a_dataset_reach_a_registered_backend(tmp_path, monkeypatch,
                                                                   command):
    in_memory(packed(tmp_path), monkeypatch)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, [command[0], "mem://ds", *command[1:]])
    assert result.exit_code == 0, result.output


def test_originals_named_behind_a_registered_backend_are_read_through_its_door(monkeypatch):
    objects = {"src/a/0.jpg": b"jpeg bytes"}
    monkeypatch.setitem(storage.BACKENDS, "mem://",
                        lambda url, options: MemoryPath(objects, url.removeprefix("mem://")))
    originals = named_originals("mem://src")
    assert originals.read("a/0.jpg", 100) == b"jpeg bytes"
    with pytest.raises(FileNotFoundError):
        originals.read("a/1.jpg", 100)


def test_a_scheme_no_backend_registers_is_a_local_path():
    assert not storage.is_url("mem://ds")
    assert storage.location("mem://ds") == Path("mem://ds")


@pytest.mark.parametrize("value", ["s3://bucket/ds"])
def test_s3_is_the_backend_registered_for_its_scheme(value):
    assert storage.BACKENDS["s3://"] is storage.locate
    assert storage.is_url(value)
