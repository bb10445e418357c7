"""``pack`` to ``s3://`` keeps its journal in the bucket, one object per checkpoint, and
uploads shards while it packs: a run killed on one machine resumes on another at its last
shard, and ends with the bytes of an uninterrupted pack.

Against a real S3 server on 127.0.0.1 (``moto_server``) and the fault proxy that records
every request (tests/s3server.py), through the real s3fs client; nothing of shardsmith is
mocked (a hook only kills the process at a chosen point).
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from hostile_helpers import PACK_ARGS, cli, command, finish, one_error_line, run, start

from shardsmith.packing import s3journal

import images

pytest_plugins = ("s3server",)  # its fixtures: s3, fault_proxy, s3_server

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

JOURNAL = "ds/.shardsmith/journal"
# Uploads slowed, so that a kill lands while the pack runs (it waits for the uploads).
SLOW_UPLOADS = ("import time, pathlib, shardsmith.storage as s\n_p = s.ObjectPath.put\n"
                "def slow(self, body, *args, **kwargs):\n"
                "    if isinstance(body, pathlib.Path):\n        time.sleep(0.3)\n"
                "    return _p(self, body, *args, **kwargs)\n"
                "s.ObjectPath.put = slow\n")
# The process dies (as by kill -9: nothing is cleaned up) once checkpoint object 3 is up.
DIE_AFTER_OBJECT_3 = ("import os, shardsmith.packing.s3journal as j\n_c = j.BucketJournal._copy\n"
                      "def copy(self, number, *rest):\n    _c(self, number, *rest)\n"
                      "    if number == 3:\n        os._exit(9)\n"
                      "j.BucketJournal._copy = copy\n")


def originals(root: Path, count: int = 12, first: int = 0) -> Path:
    for number in range(first, first + count):
        images.write(root / "ab"[number % 2] / f"{number}.jpg", images.jpeg(96, 64, number))
    return root


def bucket_bytes(s3, prefix: str) -> dict[str, bytes]:
    """Every object of the dataset under ``prefix`` (not its state objects), the manifest
    without its timing fields."""
    objects = {Path(key).name: s3.fs.cat_file(key)
               for key in s3.fs.ls(f"{s3.name}/{prefix}", detail=False)
               if s3.fs.info(key)["type"] == "file"}
    return images.without_timings(objects)


def journal_objects(s3) -> list[str]:
    """The journal's object keys under its folder. A find that lists nothing falls back to
    describing the folder itself, which a pack still writing makes exist in between: that
    entry is not an object of the journal."""
    folder = f"{s3.name}/{JOURNAL}/"
    return sorted(key.removeprefix(folder) for key in s3.fs.find(folder.rstrip("/"))
                  if key.startswith(folder))


def shards_in_bucket(s3) -> set[str]:
    return {Path(key).name for key in s3.fs.ls(f"{s3.name}/ds", detail=False, refresh=True)
            if key.endswith(".tar")}


def local_pack(source: object, output: Path) -> dict[str, bytes]:
    result = cli("pack", source, output, *PACK_ARGS)
    assert result.exit_code == 0, result.output
    return images.dataset_bytes(output)


@pytest.fixture
def spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "spool"
    monkeypatch.setenv("SHARDSMITH_SPOOL", str(folder))
    return folder


def resumed_at(caplog: pytest.LogCaptureFixture) -> int:
    found = [re.search(r"resuming at image (\d+)", record.getMessage())
             for record in caplog.records]
    numbers = [int(match.group(1)) for match in found if match]
    assert len(numbers) == 1, [record.getMessage() for record in caplog.records]
    return numbers[0]


def test_a_pack_killed_on_one_machine_resumes_on_another_at_its_last_shard(
        tmp_path, s3, spool, fault_proxy, monkeypatch, caplog):
    """kill -9 after a few shards; a new, empty spool ("another machine") rebuilds the
    journal from the bucket, reads fewer originals than a full pack, and ends with the
    bytes of an uninterrupted pack of the same files."""
    source = s3.upload(originals(tmp_path / "first"), "src")
    target = f"{s3.url}/ds"
    local = tmp_path / "local"
    for output in (target, local):  # in other processes: this one's client of the source
        first = run("pack", source, output, *PACK_ARGS, timeout=120, env=os.environ)
        assert first.returncode == 0, first.stderr  # is made for the proxy, below
    version_1 = {Path(key).name for key in s3.fs.ls(f"{s3.name}/ds", detail=False)}
    added = 30
    s3.upload(originals(tmp_path / "more", added, first=100), "src")

    process = start(command("pack", source, target, *PACK_ARGS, hook=SLOW_UPLOADS),
                    tmp_path / "logs")
    deadline = time.monotonic() + 60
    while process.poll() is None and time.monotonic() < deadline \
            and len(journal_objects(s3)) < 4:
        time.sleep(0.05)
    assert process.poll() is None, "the pack ended before the kill: " + \
        (tmp_path / "logs" / "stderr").read_text()
    os.killpg(process.pid, signal.SIGKILL)
    finish(process, tmp_path / "logs")
    manifest = json.loads(s3.fs.cat_file(f"{s3.name}/ds/manifest.json"))
    assert manifest["version"] == 1  # the old version, and beside it the new shards so far
    assert len(journal_objects(s3)) >= 4 and shards_in_bucket(s3) - version_1

    monkeypatch.setenv("SHARDSMITH_SPOOL", str(tmp_path / "another-machine"))
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    with caplog.at_level(logging.INFO):
        result = cli("pack", source, target, *PACK_ARGS)
    assert result.exit_code == 0, result.output
    assert resumed_at(caplog) > 0
    read = {path.split("?")[0] for path in fault_proxy.gets() if "/src/" in path}
    assert 0 < len(read) < added  # a full pack of version 2 reads every added original
    got, want = bucket_bytes(s3, "ds"), local_pack(source, local)
    assert {name: got[name] for name in want} == want
    assert set(got) - set(want) <= version_1  # version 1's, kept until the next commit
    assert journal_objects(s3) == []


def _killed_after_object_3(tmp_path: Path, s3, count: int = 16) -> Path:
    """A pack of ``count`` originals killed once checkpoint object 3 is in the bucket."""
    source = originals(tmp_path / "source", count)
    died = subprocess.run(command("pack", source, f"{s3.url}/ds", *PACK_ARGS,
                                  hook=DIE_AFTER_OBJECT_3), capture_output=True, text=True,
                          timeout=120, env=os.environ)
    assert died.returncode == 9, died.stderr
    assert not s3.fs.exists(f"{s3.name}/ds/manifest.json")
    return source


def test_checkpoint_objects_are_the_journal_lines_with_their_sample_records(tmp_path, s3,
                                                                            spool):
    _killed_after_object_3(tmp_path, s3)
    [run] = {key.split("/")[0] for key in journal_objects(s3)}
    assert [key.split("/")[1] for key in journal_objects(s3)][:4] == \
        ["00000000.json", "00000001.json", "00000002.json", "00000003.json"]
    header = json.loads(s3.fs.cat_file(f"{s3.name}/{JOURNAL}/{run}/00000000.json"))
    assert header["journal"] == 3 and header["run"]["delta"].startswith(run)
    ends = [0]
    for number in (1, 2, 3):
        data = s3.fs.cat_file(f"{s3.name}/{JOURNAL}/{run}/{number:08d}.json")
        line, _, records = data.partition(b"\n")
        checkpoint = json.loads(line)
        assert len(records) == checkpoint["samples_end"] - ends[-1]
        ends.append(checkpoint["samples_end"])
        shard = checkpoint["shard"]["name"]
        assert {json.loads(record)["shard"] for record in records.splitlines()} == {shard}
        assert s3.fs.exists(f"{s3.name}/ds/{shard}")  # uploaded before its checkpoint


@pytest.mark.parametrize("harm", ["damaged", "truncated", "longer than its line says",
                                  "over the cap", "missing", "a shard size not the listing's",
                                  "of another run"])
def test_a_checkpoint_object_that_is_not_one_is_not_resumed_from(tmp_path, s3, spool, harm,
                                                                 monkeypatch, caplog):
    """On another machine: a damaged object 2 (or one cut short, with records its line does
    not count, missing, or naming its shard with a size far over the listing's) ends the
    journal before it, with one warning counting the objects resumed from as the info line
    does; the journal of another run (the sources changed since) is not resumed from.
    Either way the same bytes."""
    source = _killed_after_object_3(tmp_path, s3)
    [run] = {key.split("/")[0] for key in journal_objects(s3)}
    key = f"{s3.name}/{JOURNAL}/{run}/00000002.json"
    data = s3.fs.cat_file(key)
    if harm == "damaged":
        s3.fs.pipe_file(key, b"{not a checkpoint\n" + data)
    elif harm == "truncated":
        s3.fs.pipe_file(key, data[:-7])
    elif harm == "longer than its line says":
        s3.fs.pipe_file(key, data + data.splitlines(keepends=True)[-1])
    elif harm == "over the cap":  # the cap made small, not the object huge
        monkeypatch.setattr(s3journal, "CHECKPOINT_CAP", 8192)
        s3.fs.pipe_file(key, data + b" " * 10_000)
    elif harm == "missing":
        s3.fs.rm(key)
    elif harm == "a shard size not the listing's":  # a cap of the download, and nothing else
        line, _, records = data.partition(b"\n")
        checkpoint = json.loads(line)
        checkpoint["shard"]["bytes"] = 10**15
        s3.fs.pipe_file(key, json.dumps(checkpoint).encode() + b"\n" + records)
    else:
        originals(source, 2, first=200)
    monkeypatch.setenv("SHARDSMITH_SPOOL", str(tmp_path / "another-machine"))
    with caplog.at_level(logging.INFO):
        result = cli("pack", source, f"{s3.url}/ds", *PACK_ARGS)
    assert result.exit_code == 0, result.output
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if harm == "of another run":
        assert any("journal of another run" in warning for warning in warnings), warnings
        assert not any("resuming" in r.getMessage() for r in caplog.records)
    else:
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
                    and r.name == s3journal.__name__]
        assert len(warnings) == 1, warnings
        assert "00000002.json" in warnings[0], warnings
        assert "resumed from the 2 checkpoint objects before it" in warnings[0]
        assert any("rebuilt the journal from 2 checkpoint objects" in r.getMessage()
                   for r in caplog.records)
        assert resumed_at(caplog) > 0  # at checkpoint 1
    assert bucket_bytes(s3, "ds") == local_pack(source, tmp_path / "local")
    assert journal_objects(s3) == []


def test_a_pack_killed_on_this_machine_resumes_from_its_spool_and_mirrors_in_order(
        tmp_path, s3, spool, fault_proxy, monkeypatch, caplog):
    """The spool's journal is ahead of the bucket's: the rerun resumes from it, copies the
    checkpoints the bucket lacks before new ones, and ends with the same bytes."""
    source = _killed_after_object_3(tmp_path, s3, 40)
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    with caplog.at_level(logging.INFO):
        result = cli("pack", source, f"{s3.url}/ds", *PACK_ARGS)
    assert result.exit_code == 0, result.output
    assert resumed_at(caplog) > 0
    numbers = [int(path.split("?")[0][-13:-5]) for method, path in fault_proxy.requests
               if method == "PUT" and "/.shardsmith/journal/" in path]
    assert numbers == sorted(set(numbers)) and numbers[-1] > 3
    assert bucket_bytes(s3, "ds") == local_pack(source, tmp_path / "local")
    assert journal_objects(s3) == []


def test_a_refused_checkpoint_upload_stops_the_pack_in_one_line_and_a_rerun_finishes_it(
        tmp_path, s3, spool, fault_proxy, monkeypatch):
    source = originals(tmp_path / "source", 16)
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    assert cli("pack", source, f"{s3.url}/first", *PACK_ARGS).exit_code == 0
    number = 1 + next(at for at, (method, path) in enumerate(fault_proxy.requests)
                      if method == "PUT" and "/.shardsmith/journal/" in path)
    fault_proxy.fail("403", number)  # the same request of a pack of the same files
    line = one_error_line(cli("pack", source, f"{s3.url}/ds", *PACK_ARGS), 1)
    assert "denied" in line.lower()
    assert not s3.fs.exists(f"{s3.name}/ds/manifest.json")
    fault_proxy.heal()
    assert cli("pack", source, f"{s3.url}/ds", *PACK_ARGS).exit_code == 0
    assert bucket_bytes(s3, "ds") == local_pack(source, tmp_path / "local")


def test_shards_go_up_while_the_pack_runs_and_publish_sends_none_again(tmp_path, s3, spool,
                                                                       fault_proxy,
                                                                       monkeypatch):
    source = originals(tmp_path / "source", 16)
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    assert cli("pack", source, f"{s3.url}/ds", *PACK_ARGS).exit_code == 0
    puts = [path.split("?")[0] for method, path in fault_proxy.requests if method == "PUT"]
    shards = [path for path in puts if path.endswith((".tar", ".idx"))]
    assert shards and len(shards) == len(set(shards))  # each sent once
    journal = [at for at, path in enumerate(puts) if "/.shardsmith/journal/" in path]
    samples_index = [at for at, path in enumerate(puts) if "samples" in Path(path).name]
    manifest = puts.index(f"/{s3.name}/ds/manifest.json")
    assert journal and max(journal) < min(samples_index) < manifest
    assert puts.index(shards[0]) < min(samples_index)  # up before the version was made
    assert journal_objects(s3) == []
    assert bucket_bytes(s3, "ds") == local_pack(source, tmp_path / "local")


# The process dies (as by kill -9) after the manifest's PUT, before the journal objects are
# deleted.
DIE_BEFORE_CLEAR = ("import os, shardsmith.packing.s3output as o\n"
                    "def die(*args):\n    os._exit(9)\n"
                    "o.clear = die\n")


def journal_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The warnings of the bucket's journal (a killed run's lease is taken over with one of
    its own)."""
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING and r.name == s3journal.__name__]


def shard_gets(proxy) -> list[str]:
    return [path.split("?")[0] for path in proxy.gets() if path.split("?")[0].endswith(
        (".tar", ".idx"))]


@pytest.mark.parametrize("where", ["the same machine", "another machine"])
def test_journal_objects_left_by_a_run_killed_after_its_commit_are_deleted_not_downloaded(
        tmp_path, s3, spool, fault_proxy, monkeypatch, caplog, where):
    """The object record names the run it commits: the next run knows the journal objects
    beside the committed version are that run's leftovers and deletes them.  A no-op rerun
    makes no shard GET; on another machine each shard is downloaded once (the version's),
    not a second time for the journal."""
    source = originals(tmp_path / "source", 16)
    died = subprocess.run(command("pack", source, f"{s3.url}/ds", *PACK_ARGS,
                                  hook=DIE_BEFORE_CLEAR), capture_output=True, text=True,
                          timeout=120, env=os.environ)
    assert died.returncode == 9, died.stderr
    assert json.loads(s3.fs.cat_file(f"{s3.name}/ds/manifest.json"))["version"] == 1
    runs = {key.split("/")[0] for key in journal_objects(s3)}
    record = json.loads(s3.fs.cat_file(f"{s3.name}/ds/.shardsmith/objects.json"))
    assert runs == {record["run"]}
    if where == "another machine":
        monkeypatch.setenv("SHARDSMITH_SPOOL", str(tmp_path / "another-machine"))
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)

    with caplog.at_level(logging.INFO):
        result = cli("pack", source, f"{s3.url}/ds", *PACK_ARGS)

    assert result.exit_code == 0, result.output
    got = shard_gets(fault_proxy)
    if where == "the same machine":
        assert got == []
    else:
        shards = {name for name in bucket_bytes(s3, "ds") if name.endswith((".tar", ".idx"))}
        assert sorted(got) == sorted(f"/{s3.name}/ds/{name}" for name in shards)
    assert journal_objects(s3) == []
    assert journal_warnings(caplog) == []
    assert not any("rebuilt the journal" in r.getMessage() for r in caplog.records)
    assert json.loads(s3.fs.cat_file(f"{s3.name}/ds/manifest.json"))["version"] == 1
    assert bucket_bytes(s3, "ds") == local_pack(source, tmp_path / "local")


@pytest.mark.parametrize("planted", [
    b"junk",
    b'{"journal":3,"run":{"delta":"ffffffffffffffff0000"}}\n',
], ids=["junk", "a header alone"])
def test_a_newer_planted_run_does_not_cancel_the_resume_of_a_good_one(tmp_path, s3, spool,
                                                                       monkeypatch, caplog,
                                                                       planted):
    """Runs are tried newest first (a planted run also sorts first by name): one whose
    object 0 is not a journal's first line, or that restores no checkpoint, is passed over."""
    source = _killed_after_object_3(tmp_path, s3)
    s3.put(f"{JOURNAL}/ffffffffffffffff/00000000.json", planted)
    monkeypatch.setenv("SHARDSMITH_SPOOL", str(tmp_path / "another-machine"))
    with caplog.at_level(logging.INFO):
        result = cli("pack", source, f"{s3.url}/ds", *PACK_ARGS)
    assert result.exit_code == 0, result.output
    assert resumed_at(caplog) > 0
    assert bucket_bytes(s3, "ds") == local_pack(source, tmp_path / "local")
    assert journal_objects(s3) == []


def test_the_warning_of_other_runs_names_three_of_them(tmp_path, s3, spool, monkeypatch,
                                                       caplog):
    source = _killed_after_object_3(tmp_path, s3)
    planted = [f"{number:016x}" for number in range(1, 7)]
    for name in planted:
        s3.put(f"{JOURNAL}/{name}/00000000.json", b"x")
    monkeypatch.setenv("SHARDSMITH_SPOOL", str(tmp_path / "another-machine"))
    with caplog.at_level(logging.INFO):
        result = cli("pack", source, f"{s3.url}/ds", *PACK_ARGS)
    assert result.exit_code == 0, result.output
    [warning] = [r.getMessage() for r in caplog.records if "another run" in r.getMessage()]
    named = re.findall(r"[0-9a-f]{16}", warning)
    assert named == planted[:3] and warning.count(" ...") == 1
    assert journal_objects(s3) == []


def test_journal_objects_without_object_0_are_leftovers_deleted_without_a_warning(
        tmp_path, s3, spool, monkeypatch, caplog):
    """A run killed while it deleted its journal objects (object 0 goes first) leaves a
    run without object 0: no journal to resume from, nothing to warn of."""
    source = _killed_after_object_3(tmp_path, s3)
    [run] = {key.split("/")[0] for key in journal_objects(s3)}
    s3.fs.rm(f"{s3.name}/{JOURNAL}/{run}/00000000.json")
    originals(source, 2, first=200)  # another run now: its objects are not this one's
    monkeypatch.setenv("SHARDSMITH_SPOOL", str(tmp_path / "another-machine"))
    with caplog.at_level(logging.INFO):
        result = cli("pack", source, f"{s3.url}/ds", *PACK_ARGS)
    assert result.exit_code == 0, result.output
    assert journal_warnings(caplog) == []
    assert any(run in r.getMessage() and "no object 0" in r.getMessage()
               for r in caplog.records if r.levelno == logging.INFO)
    assert journal_objects(s3) == []
    assert bucket_bytes(s3, "ds") == local_pack(source, tmp_path / "local")
