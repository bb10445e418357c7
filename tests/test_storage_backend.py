"""A storage backend is one module and one entry in ``storage.BACKENDS``: a location class that
answers ``storage.Location`` and opens through the guarded door (``open_guarded``), made from
its URL.  Here an in-memory backend, registered for ``mem://``, serves a packed dataset, is
packed from (its originals) and packed to (a version published, staged back, built on)."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from shardsmith import load_config, pack, storage
from shardsmith.cli import main
from shardsmith.door import Refused
from shardsmith.errors import ConfigError
from shardsmith.insight.diff import diff_versions
from shardsmith.insight.named_source import named_originals
from shardsmith.ops.stage import stage
from shardsmith.ops.verify import verify
from shardsmith.packing import originals as packing_originals

import images

# Every object's LastModified, a whole second: the mtime of the local trees compared with it.
MODIFIED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def head(data: bytes) -> dict:
    """What the store says of an object: as S3's listing and HEAD say it."""
    return {"type": "file", "size": len(data), "LastModified": MODIFIED,
            "ETag": f'"{hashlib.md5(data).hexdigest()}"'}


class MemoryFile:
    """An object opened through the door: bounded reads at an offset, no descriptor."""

    fd = -1

    def __init__(self, data: bytes, path: str):
        self.data, self.size, self.path = data, len(data), path
        self.head = head(data)

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

    def info(self) -> dict:
        if self.key not in self.objects:
            raise FileNotFoundError(errno.ENOENT, "no such object", str(self))
        return head(self.objects[self.key])

    def find(self, prefix: str = "") -> dict[str, dict]:
        under = f"{self.key}/{prefix}"
        return {key[len(self.key) + 1:]: head(data) for key, data in sorted(self.objects.items())
                if key.startswith(under)}

    def listing(self) -> dict[str, dict]:
        found: dict[str, dict] = {}
        for key, entry in self.find().items():
            name, deeper, _ = key.partition("/")
            found[name] = {"type": "directory", "size": 0} if deeper else entry
        return found

    def names(self) -> list[str]:
        return sorted(name for name, entry in self.listing().items() if entry["type"] == "file")

    def put(self, body: bytes | Path, if_match: str | None = None,
            if_absent: bool = False) -> str:
        data = body.read_bytes() if isinstance(body, Path) else body
        there = self.info()["ETag"] if self.key in self.objects else None
        if (if_absent and there) or (if_match and there != if_match):
            raise OSError(errno.EEXIST, "PreconditionFailed", str(self))
        self.objects[self.key] = data
        return head(data)["ETag"]

    def delete(self, *names: str) -> None:
        for key in [f"{self.key}/{name}" for name in names] or [self.key]:
            self.objects.pop(key, None)

    def open_guarded(self, cap: int, expect_size: int | None = None) -> MemoryFile:
        data = self.objects.get(self.key)
        if data is None:
            raise FileNotFoundError(errno.ENOENT, "no such object", str(self))
        if len(data) > cap:
            raise Refused("too_large", f"{len(data):,} bytes is more than {cap:,}", str(self))
        return MemoryFile(data, str(self))


def files_of(folder: Path) -> dict[str, str]:
    """name -> sha256 of every file of a staged dataset but its manifest (which says where it
    was staged from) and its state folder."""
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.iterdir())
            if path.is_file() and path.name != "manifest.json"}


def in_memory(dataset: Path, monkeypatch, under: str = "ds") -> dict[str, bytes]:
    """The files of ``dataset`` as the objects of ``mem://UNDER``, the backend registered."""
    objects = {f"{under}/{path.relative_to(dataset).as_posix()}": path.read_bytes()
               for path in (dataset.rglob("*") if dataset.exists() else ()) if path.is_file()}
    monkeypatch.setitem(storage.BACKENDS, "mem://",
                        lambda url, options: MemoryPath(objects, url.removeprefix("mem://")))
    # A worker keeps its location of a source URL for the process: this test's, not the last's.
    monkeypatch.setattr(packing_originals, "_OBJECT_ROOTS", {})
    return objects


def originals(source: Path, count: int = 6, first: int = 0) -> Path:
    """JPEGs in two class folders, each modified at ``MODIFIED`` (as the backend says)."""
    for number in range(first, first + count):
        path = source / "ab"[number % 2] / f"{number}.jpg"
        images.write(path, images.jpeg(120, 80, number))
        os.utime(path, (MODIFIED.timestamp(),) * 2)
    return source


def packed(tmp_path: Path, count: int = 6) -> Path:
    source = originals(tmp_path / "source", count)
    return images.pack_small(source, tmp_path / "packed", "webdataset", 64, "train=0.5,val=0.5")


def pack_to(source: str | Path, output: str | Path, settings: dict | None = None) -> None:
    """``pack`` with small shards (3 samples), one worker in this process (where the backend
    is registered), quietly."""
    pack(load_config(None, {"source.path": str(source), "output.path": str(output),
                            "output.shard_samples": 3, "image.size": 64,
                            "splits": "train=0.5,val=0.5", "run.quiet": True,
                            "run.workers": 1, **(settings or {})}))


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


def test_a_scheme_no_backend_registers_is_no_store_and_no_local_path():
    assert not storage.is_url("mem://ds")
    with pytest.raises(ConfigError, match="no storage backend for mem://"):
        storage.location("mem://ds")
    assert storage.location("./mem://ds") == Path("mem:/ds")  # a local folder, said so


@pytest.mark.parametrize("value", ["s3://bucket/ds"])
def test_s3_is_the_backend_registered_for_its_scheme(value):
    assert storage.BACKENDS["s3://"] is storage.locate
    assert storage.is_url(value)


@pytest.mark.parametrize("workers", [1, 2])
def test_pack_reads_its_originals_from_a_registered_backend_as_from_disk(tmp_path, monkeypatch,
                                                                        workers):
    """With 2 workers the backend, registered in this process only, reaches the worker
    processes with their tasks."""
    source = originals(tmp_path / "source")
    in_memory(source, monkeypatch, "src")
    pack_to("mem://src", tmp_path / "from-memory", {"run.workers": workers})
    pack_to(source, tmp_path / "from-disk")

    assert files_of(tmp_path / "from-memory") == files_of(tmp_path / "from-disk")
    assert verify(tmp_path / "from-memory").problems == []


def test_pack_reads_annotated_originals_from_a_registered_backend_as_from_disk(tmp_path,
                                                                              monkeypatch):
    source = originals(tmp_path / "source")
    for number in (0, 1, 2):
        label = source / "labels" / "ab"[number % 2] / f"{number}.txt"
        images.write(label, f"{number % 2} 0.5 0.5 0.4 0.4\n".encode())
        os.utime(label, (MODIFIED.timestamp(),) * 2)
    in_memory(source, monkeypatch, "src")
    notes = {"source.annotations.files": "yolo", "source.annotations.files_dir": "labels",
             "source.annotations.classes": ["scratch", "crack"]}
    pack_to("mem://src", tmp_path / "from-memory", notes)
    pack_to(source, tmp_path / "from-disk", notes)

    remote, local = files_of(tmp_path / "from-memory"), files_of(tmp_path / "from-disk")
    index = images.manifest_of(tmp_path / "from-disk")["samples_index"]["name"]
    assert {**remote, index: ""} == {**local, index: ""}  # every shard and list the same

    def samples(dataset: Path) -> list[dict]:  # an annotation file's identity aside: an
        return [{**sample, "annotation_digest": ""}  # ETag in a store, an mtime on disk
                for sample in images.samples_of(dataset)]

    assert samples(tmp_path / "from-memory") == samples(tmp_path / "from-disk")
    assert sum(len(sample.get("objects", ())) for sample in samples(tmp_path / "from-disk")) == 4


def test_a_pack_from_a_registered_backend_sees_an_object_rewritten_since(tmp_path, monkeypatch):
    objects = in_memory(originals(tmp_path / "source"), monkeypatch, "src")
    pack_to("mem://src", tmp_path / "packed")
    objects["src/a/0.jpg"] = images.jpeg(120, 80, 50)
    objects["src/b/new.jpg"] = images.jpeg(120, 80, 51)
    pack_to("mem://src", tmp_path / "packed")

    manifest = images.manifest_of(tmp_path / "packed")
    assert manifest["version"] == 2
    assert manifest["totals"]["packed"] == 7


def test_pack_publishes_to_a_registered_backend_what_a_local_pack_writes(tmp_path, monkeypatch):
    source = originals(tmp_path / "source")
    objects = in_memory(tmp_path / "nothing", monkeypatch)
    pack_to(source, "mem://bucket/ds")
    pack_to(source, tmp_path / "local")

    assert verify("mem://bucket/ds").problems == []
    stage("mem://bucket/ds", tmp_path / "staged", quiet=True)
    assert files_of(tmp_path / "staged") == files_of(tmp_path / "local")
    assert not [key for key in objects if "/.shardsmith/" in key and
                not key.endswith("/objects.json")]  # no lease, no journal objects left


def test_a_second_pack_to_a_registered_backend_adds_a_version_and_deletes_one_commit_late(
        tmp_path, monkeypatch):
    source = originals(tmp_path / "source")
    objects = in_memory(tmp_path / "nothing", monkeypatch)
    pack_to(source, "mem://bucket/ds")
    pack_to(source, tmp_path / "local")
    first = set(objects)
    for path in sorted((source / "a").iterdir())[:2]:
        path.unlink()
    originals(source, 2, first=100)
    pack_to(source, "mem://bucket/ds")
    pack_to(source, tmp_path / "local")

    stage("mem://bucket/ds", tmp_path / "staged", quiet=True)
    assert images.manifest_of(tmp_path / "staged")["version"] == 2
    assert files_of(tmp_path / "staged") == files_of(tmp_path / "local")
    assert first - set(objects) == set()  # what version 1 names stays until the next commit
    before = dict(objects)
    pack_to(source, "mem://bucket/ds")  # nothing new: nothing committed, nothing uploaded
    assert objects == before


def test_a_pack_to_a_registered_backend_killed_before_its_commit_resumes_on_another_machine(
        tmp_path, monkeypatch, caplog):
    from shardsmith.packing import s3output

    source = originals(tmp_path / "source", 9)
    objects = in_memory(tmp_path / "nothing", monkeypatch)
    monkeypatch.setenv("SHARDSMITH_SPOOL", str(tmp_path / "first-machine"))

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(s3output, "publish", killed)
        with pytest.raises(KeyboardInterrupt):
            pack_to(source, "mem://bucket/ds")
    assert "bucket/ds/manifest.json" not in objects
    assert any("/.shardsmith/journal/" in key for key in objects)

    monkeypatch.setenv("SHARDSMITH_SPOOL", str(tmp_path / "second-machine"))
    with caplog.at_level("INFO"):
        pack_to(source, "mem://bucket/ds")
    assert any("rebuilt the journal" in record.getMessage() for record in caplog.records)
    pack_to(source, tmp_path / "local")
    stage("mem://bucket/ds", tmp_path / "staged", quiet=True)
    assert files_of(tmp_path / "staged") == files_of(tmp_path / "local")


def test_a_rerun_committing_the_version_a_killed_run_packed_says_so_not_up_to_date(
        tmp_path, monkeypatch):
    from shardsmith.packing import s3output

    source = originals(tmp_path / "source")
    objects = in_memory(tmp_path / "nothing", monkeypatch)
    monkeypatch.setenv("SHARDSMITH_SPOOL", str(tmp_path / "spool"))
    command = ["pack", str(source), "mem://bucket/ds", "--size", "64", "--workers", "1",
               "--quiet"]

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(s3output, "publish", killed)
        assert CliRunner().invoke(main, command).exit_code == 130
    assert "bucket/ds/manifest.json" not in objects

    rerun = CliRunner().invoke(main, command)
    assert rerun.exit_code == 0, rerun.output
    assert rerun.output.startswith("mem://bucket/ds: packed\n")
    assert "bucket/ds/manifest.json" in objects
    again = CliRunner().invoke(main, command)
    assert again.output.startswith("mem://bucket/ds: up to date, nothing to do")


def test_a_live_lease_in_a_registered_backend_refuses_a_second_pack(tmp_path, monkeypatch):
    from shardsmith.dataset.lock import BucketLease
    from shardsmith.errors import LockedError

    source = originals(tmp_path / "source")
    objects = in_memory(tmp_path / "nothing", monkeypatch)
    with BucketLease(storage.location("mem://bucket/ds/.shardsmith/lease"), "packed"):
        with pytest.raises(LockedError, match="is being packed by pid"):
            pack_to(source, "mem://bucket/ds")
    assert "bucket/ds/.shardsmith/lease" not in objects  # released
    pack_to(source, "mem://bucket/ds")
    assert "bucket/ds/manifest.json" in objects


@pytest.mark.parametrize("nested", [b"[" * 5000, b'{"a":' * 5000])
def test_an_object_record_nested_past_the_json_readers_depth_is_not_ours_and_a_pack_commits(
        tmp_path, monkeypatch, nested):
    source = originals(tmp_path / "source")
    objects = in_memory(tmp_path / "nothing", monkeypatch)
    pack_to(source, "mem://bucket/ds")
    first = set(objects) - {"bucket/ds/.shardsmith/objects.json"}
    objects["bucket/ds/.shardsmith/objects.json"] = nested
    originals(source, 2, first=100)
    pack_to(source, "mem://bucket/ds")

    assert json.loads(objects["bucket/ds/manifest.json"])["version"] == 2
    assert first - set(objects) == set()  # a record not of ours: every object kept a commit
    assert verify("mem://bucket/ds").problems == []


def test_a_lease_nested_past_the_json_readers_depth_is_garbage_and_taken_over(tmp_path,
                                                                              monkeypatch):
    source = originals(tmp_path / "source")
    objects = in_memory(tmp_path / "nothing", monkeypatch)
    objects["bucket/ds/.shardsmith/lease"] = b"[" * 1024  # all a lease's read holds
    packed = CliRunner().invoke(main, ["pack", str(source), "mem://bucket/ds", "--size", "64",
                                       "--workers", "1", "--quiet"])
    assert packed.exit_code == 0, packed.output
    assert "bucket/ds/manifest.json" in objects
    assert "bucket/ds/.shardsmith/lease" not in objects


@pytest.mark.parametrize("source, output, says", [
    ("mem://bucket/src", "mem://bucket/src", "is inside the source"),
    ("mem://bucket/src", "mem://bucket/src/out", "is inside the source"),
    ("mem://bucket/src", "mem://bucket/src/a/out", "is inside the source"),
    ("mem://bucket/ds/src", "mem://bucket/ds", "contains the source")])
def test_an_output_inside_or_around_its_source_in_a_store_is_one_line_and_nothing_written(
        tmp_path, monkeypatch, source, output, says):
    objects = in_memory(originals(tmp_path / "source"), monkeypatch,
                        source.removeprefix("mem://"))
    before = dict(objects)
    packed = CliRunner().invoke(main, ["pack", source, output, "--size", "64",
                                       "--workers", "1", "--quiet"])
    assert packed.exit_code == 2, packed.output
    assert packed.output == f"shardsmith: error: output.path: {output} {says} {source}\n"
    assert objects == before


@pytest.mark.parametrize("pid", ["9999999999", "0"])
def test_a_live_lease_of_this_host_naming_no_possible_pid_is_taken_over(tmp_path, monkeypatch,
                                                                       pid):
    """``pid 9999999999`` is past any pid (os.kill raised OverflowError), and ``pid 0`` asked
    about the packing process's own group (alive): neither is a running holder."""
    import socket
    import time

    source = originals(tmp_path / "source")
    objects = in_memory(tmp_path / "nothing", monkeypatch)
    objects["bucket/ds/.shardsmith/lease"] = json.dumps(
        {"holder": f"pid {pid} on {socket.gethostname()} since 2026-01-01T00:00:00",
         "token": "x", "expires": time.time() + 600}).encode()
    packed = CliRunner().invoke(main, ["pack", str(source), "mem://bucket/ds", "--size", "64",
                                       "--workers", "1", "--quiet"])
    assert packed.exit_code == 0, packed.output
    assert "bucket/ds/manifest.json" in objects


def test_the_pack_command_packs_from_a_registered_backend_to_one(tmp_path, monkeypatch):
    objects = in_memory(originals(tmp_path / "source"), monkeypatch, "src")
    packed = CliRunner().invoke(main, ["pack", "mem://src", "mem://bucket/ds", "--size", "64",
                                       "--workers", "1", "--quiet"])
    assert packed.exit_code == 0, packed.output
    assert "bucket/ds/manifest.json" in objects
    verified = CliRunner().invoke(main, ["verify", "mem://bucket/ds"])
    assert verified.exit_code == 0, verified.output


@pytest.mark.parametrize("argv", [
    ("pack", "{source}", "gs://bucket/ds"), ("pack", "gs://bucket/src", "{tmp}/out"),
    ("verify", "gs://bucket/ds"), ("stage", "gs://bucket/ds", "--to", "{tmp}/staged")])
def test_a_url_of_no_registered_backend_is_one_line_not_a_local_folder(tmp_path, monkeypatch,
                                                                        argv):
    source = originals(tmp_path / "source")
    monkeypatch.chdir(tmp_path)  # where "gs://bucket/ds" would have been the folder "gs:"
    args = [arg.format(source=source, tmp=tmp_path) for arg in argv]
    url = next(arg for arg in args if arg.startswith("gs://"))
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"shardsmith: error: {url}: no storage backend for gs:// (known: s3://); a local "
        f"folder of that name: ./{url}"]
    assert not (tmp_path / "gs:").exists()
