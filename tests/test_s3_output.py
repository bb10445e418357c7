"""``pack`` to ``s3://``: the bytes of a local pack, the manifest PUT last, a lease for the
bucket, resume after kill -9 and failing requests, deletes one commit late.

Against a real S3 server on 127.0.0.1 (``moto_server``) and a fault proxy in front of it
(tests/s3server.py), through the real s3fs client; nothing of shardsmith is mocked.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from hostile_helpers import PACK_ARGS, cli, command, finish, one_error_line, start

from shardsmith.dataset.lock import BucketLease
from shardsmith.errors import LockedError
from shardsmith.ops.verify import verify
from shardsmith.storage import locate

import images

pytest_plugins = ("s3server",)  # its fixtures: s3, fault_proxy, s3_server

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def originals(root: Path, count: int = 12, first: int = 0) -> Path:
    for number in range(first, first + count):
        images.write(root / "ab"[number % 2] / f"{number}.jpg", images.jpeg(96, 64, number))
    return root


def bucket_bytes(s3, prefix: str) -> dict[str, bytes]:
    """Every object of the dataset under ``prefix`` (not its state objects), the manifest as
    ``images.dataset_bytes`` gives it (without its timing fields)."""
    objects = {Path(key).name: s3.fs.cat_file(key)
               for key in s3.fs.ls(f"{s3.name}/{prefix}", detail=False)
               if s3.fs.info(key)["type"] == "file"}
    return images.without_timings(objects)


def local_pack(tmp_path: Path, source: Path, name: str = "local") -> dict[str, bytes]:
    output = tmp_path / name
    result = cli("pack", source, output, *PACK_ARGS)
    assert result.exit_code == 0, result.output
    return images.dataset_bytes(output)


def names_of(s3, prefix: str) -> set[str]:
    return {Path(key).name for key in s3.fs.ls(f"{s3.name}/{prefix}", detail=False)
            if s3.fs.info(key)["type"] == "file"}


def complete(s3, prefix: str) -> bool:
    """The bucket holds a whole version: every file its manifest names, at its sha256."""
    manifest = json.loads(s3.fs.cat_file(f"{s3.name}/{prefix}/manifest.json"))
    files = [manifest["samples_index"]] + [
        entry for shard in manifest["shards"]
        for entry in [shard] + ([shard["index"]] if shard.get("index") else [])]
    for entry in files:
        data = s3.fs.cat_file(f"{s3.name}/{prefix}/{entry['name']}")
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            return False
    return True


@pytest.fixture
def spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "spool"
    monkeypatch.setenv("SHARDSMITH_SPOOL", str(folder))
    return folder


def test_a_pack_to_a_bucket_holds_the_bytes_of_a_local_pack(tmp_path, s3, spool):
    source = originals(tmp_path / "source")
    result = cli("pack", source, f"{s3.url}/ds", *PACK_ARGS)
    assert result.exit_code == 0, result.output
    assert bucket_bytes(s3, "ds") == local_pack(tmp_path, source)
    assert complete(s3, "ds")
    assert not s3.fs.exists(f"{s3.name}/ds/.shardsmith/lease")  # released


def test_a_rerun_with_nothing_new_uploads_nothing(tmp_path, s3, spool, fault_proxy,
                                                  monkeypatch):
    source = originals(tmp_path / "source")
    assert cli("pack", source, f"{s3.url}/ds", *PACK_ARGS).exit_code == 0
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    assert cli("pack", source, f"{s3.url}/ds", *PACK_ARGS).exit_code == 0
    puts = [path for method, path in fault_proxy.requests
            if method in ("PUT", "POST") and "/.shardsmith/" not in path]
    assert puts == []


def test_a_live_lease_refuses_a_second_pack_in_one_line(tmp_path, s3, spool):
    source = originals(tmp_path / "source")
    lease = BucketLease(locate(f"{s3.url}/ds/.shardsmith/lease"), "packed")
    with lease:
        line = one_error_line(cli("pack", source, f"{s3.url}/ds", *PACK_ARGS), 1)
    assert "is being packed by pid" in line
    assert not s3.fs.exists(f"{s3.name}/ds/manifest.json")


def test_an_expired_lease_is_taken_over_with_one_warning(tmp_path, s3, spool, caplog):
    source = originals(tmp_path / "source")
    s3.put("ds/.shardsmith/lease", json.dumps(
        {"holder": "pid 1 on elsewhere since 2026-01-01T00:00:00", "token": "x",
         "expires": time.time() - 1}).encode())
    with caplog.at_level(logging.WARNING):
        result = cli("pack", source, f"{s3.url}/ds", *PACK_ARGS)
    assert result.exit_code == 0, result.output
    taken = [r for r in caplog.records if "taking over the lease" in r.getMessage()]
    assert len(taken) == 1 and "pid 1 on elsewhere" in taken[0].getMessage()


def test_a_server_failing_requests_still_ends_with_the_local_bytes(tmp_path, s3, spool,
                                                                     fault_proxy, monkeypatch):
    source = originals(tmp_path / "source")
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    fault_proxy.delay = 0.05
    fault_proxy.every("503", 5)
    fault_proxy.fail("reset", 3, 11, 19)
    result = cli("pack", source, f"{s3.url}/ds", *PACK_ARGS)
    assert result.exit_code == 0, result.output
    fault_proxy.heal()
    assert bucket_bytes(s3, "ds") == local_pack(tmp_path, source)


@pytest.mark.parametrize("record", ["ours", "naming nothing"])
def test_objects_a_new_version_drops_are_deleted_at_the_next_commit(tmp_path, s3, spool,
                                                                     record):
    """Kept one commit whatever the object record says: a record planted for the current
    manifest that names none of its objects would have had them deleted at once."""
    source = originals(tmp_path / "source")
    extra = ("--shard-samples", "2")
    assert cli("pack", source, f"{s3.url}/ds", *PACK_ARGS, *extra).exit_code == 0
    first = names_of(s3, "ds")
    if record == "naming nothing":
        manifest = s3.fs.cat_file(f"{s3.name}/ds/manifest.json")
        s3.put("ds/.shardsmith/objects.json", json.dumps({
            "manifest": hashlib.sha256(manifest).hexdigest(), "names": [], "kept": []}).encode())
    for path in sorted((source / "a").iterdir())[:4]:  # the first shards lose their samples
        path.unlink()
    assert cli("pack", source, f"{s3.url}/ds", *PACK_ARGS, *extra).exit_code == 0
    second = json.loads(s3.fs.cat_file(f"{s3.name}/ds/manifest.json"))
    named = {entry["name"] for shard in second["shards"]
             for entry in [shard] + ([shard["index"]] if shard.get("index") else [])}
    dropped = {name for name in first if name.endswith(".tar")} - named
    assert dropped  # the test means something
    assert dropped <= names_of(s3, "ds")  # still there for a stage of version 1
    checked = verify(f"{s3.url}/ds")
    assert checked.problems == [] and any("kept from the previous version" in note
                                          for note in checked.notes)
    originals(source, 2, first=100)
    assert cli("pack", source, f"{s3.url}/ds", *PACK_ARGS, *extra).exit_code == 0
    assert not dropped & names_of(s3, "ds")  # gone at the next commit
    assert complete(s3, "ds")


@pytest.mark.parametrize("where,count", [("spool", 2), ("bucket", 1), ("bucket", 6)])
def test_a_pack_killed_anywhere_leaves_a_whole_version_and_a_rerun_the_same_bytes(
        tmp_path, s3, spool, where, count):
    """kill -9 while shards are packed into the spool, and while they are uploaded: the bucket
    holds no version or a whole one, and a rerun ends byte for byte as an unkilled run."""
    source = originals(tmp_path / "source", 30)
    target = f"{s3.url}/ds"
    # one upload at a time, slowly enough that a kill lands in the middle
    hook = ("import time, pathlib, shardsmith.storage as s\n_p = s.ObjectPath.put\n"
            "def slow(self, body, *args, **kwargs):\n"
            "    if isinstance(body, pathlib.Path):\n        time.sleep(0.2)\n"
            "    return _p(self, body, *args, **kwargs)\n"
            "s.ObjectPath.put = slow\nimport shardsmith.packing.s3output as o\n"
            "o.UPLOADS = 1\n")
    process = start(command("pack", source, target, *PACK_ARGS, hook=hook), tmp_path / "logs")
    deadline = time.monotonic() + 60
    while process.poll() is None and time.monotonic() < deadline:
        if where == "spool":
            found = len(list(spool.glob("*/dataset/*.tar")))
        else:
            found = len([key for key in s3.fs.ls(f"{s3.name}/ds", detail=False,
                                                 refresh=True) if key.endswith(".tar")]) \
                if s3.fs.exists(f"{s3.name}/ds") else 0
        if found >= count:
            break
        time.sleep(0.02)
    assert process.poll() is None, "the pack ended before the kill: " + \
        (tmp_path / "logs" / "stderr").read_text()
    os.killpg(process.pid, signal.SIGKILL)
    finish(process, tmp_path / "logs")
    if s3.fs.exists(f"{s3.name}/ds/manifest.json"):
        assert complete(s3, "ds")
    rerun = subprocess.run(command("pack", source, target, *PACK_ARGS), capture_output=True,
                           text=True, timeout=120, env=os.environ)
    assert rerun.returncode == 0, rerun.stderr
    assert bucket_bytes(s3, "ds") == local_pack(tmp_path, source)


def test_a_lost_spool_is_downloaded_and_the_next_version_matches_a_local_one(tmp_path, s3,
                                                                              spool):
    """Another machine (or a wiped cache) packs the next version from the bucket's."""
    source = originals(tmp_path / "source")
    assert cli("pack", source, f"{s3.url}/ds", *PACK_ARGS).exit_code == 0
    local_pack(tmp_path, source)
    first = names_of(s3, "ds")
    shutil.rmtree(spool)
    originals(source, 4, first=50)
    assert cli("pack", source, f"{s3.url}/ds", *PACK_ARGS).exit_code == 0
    got, want = bucket_bytes(s3, "ds"), local_pack(tmp_path, source)
    assert {name: got[name] for name in want} == want
    assert set(got) - set(want) <= first  # version 1's, kept until the next commit


def test_unfinished_multipart_uploads_under_the_prefix_are_aborted(tmp_path, s3, spool):
    started = s3.fs.call_s3("create_multipart_upload", Bucket=s3.name, Key="ds/a-000001.tar")
    elsewhere = s3.fs.call_s3("create_multipart_upload", Bucket=s3.name, Key="other/x.tar")
    assert cli("pack", originals(tmp_path / "source"), f"{s3.url}/ds", *PACK_ARGS
               ).exit_code == 0
    left = {upload["UploadId"] for upload in s3.fs.call_s3(
        "list_multipart_uploads", Bucket=s3.name).get("Uploads", [])}
    assert started["UploadId"] not in left
    assert elsewhere["UploadId"] in left  # not this dataset's


@pytest.mark.parametrize("request_number", [1, 6, 12, 20])
def test_a_refused_request_stops_the_pack_in_one_line_and_a_rerun_finishes_it(
        tmp_path, s3, spool, fault_proxy, monkeypatch, request_number):
    """A 403 (which no client retries) on one request, wherever it falls: one line, no
    version half there; the rerun ends with the local bytes."""
    source = originals(tmp_path / "source")
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    fault_proxy.fail("403", request_number)
    result = cli("pack", source, f"{s3.url}/ds", *PACK_ARGS)
    if result.exit_code != 0:
        assert "denied" in one_error_line(result, result.exit_code).lower()
    if s3.fs.exists(f"{s3.name}/ds/manifest.json"):
        assert complete(s3, "ds")
    fault_proxy.heal()
    assert cli("pack", source, f"{s3.url}/ds", *PACK_ARGS).exit_code == 0
    assert bucket_bytes(s3, "ds") == local_pack(tmp_path, source)


def test_a_run_killed_after_its_commit_deletes_late_on_the_rerun(tmp_path, s3, spool):
    """Killed between the manifest PUT and the deletes: the rerun deletes what neither the
    new version nor the one before names, and keeps what the one before names."""
    source = originals(tmp_path / "source")
    extra = ("--shard-samples", "2")
    target = f"{s3.url}/ds"
    assert cli("pack", source, target, *PACK_ARGS, *extra).exit_code == 0
    first = names_of(s3, "ds")
    for path in sorted((source / "a").iterdir())[:4]:
        path.unlink()
    assert cli("pack", source, target, *PACK_ARGS, *extra).exit_code == 0
    record = json.loads(s3.fs.cat_file(f"{s3.name}/ds/.shardsmith/objects.json"))
    second = set(record["names"])
    only_first = first - second
    assert only_first and only_first <= names_of(s3, "ds")  # kept for a stage of version 1
    originals(source, 2, first=100)
    die_on_delete = ("import os, s3fs\n"
                     "s3fs.S3FileSystem.rm = lambda *a, **k: os._exit(9)\n")
    died = subprocess.run(command("pack", source, target, *PACK_ARGS, *extra,
                                  hook=die_on_delete), capture_output=True, text=True,
                          timeout=120, env=os.environ)
    assert died.returncode == 9, died.stderr
    assert json.loads(s3.fs.cat_file(f"{s3.name}/ds/manifest.json"))["version"] == 3
    assert only_first <= names_of(s3, "ds")  # not deleted yet
    assert cli("pack", source, target, *PACK_ARGS, *extra).exit_code == 0
    left = names_of(s3, "ds")
    assert not only_first & left
    assert second - {"manifest.json"} <= left  # version 2's, kept for a stage of it
    assert complete(s3, "ds")


def test_a_lease_holding_something_else_is_taken_over_without_quoting_it(tmp_path, s3,
                                                                         spool, caplog):
    s3.put("ds/.shardsmith/lease", b"\x1b[2Jrm -rf / please")
    with caplog.at_level(logging.WARNING):
        result = cli("pack", originals(tmp_path / "source"), f"{s3.url}/ds", *PACK_ARGS)
    assert result.exit_code == 0, result.output
    [warning] = [r.getMessage() for r in caplog.records if "lease" in r.getMessage()]
    assert "unknown holder" in warning and "rm -rf" not in warning


def test_a_holder_whose_lease_was_taken_over_may_not_commit(s3):
    lease = BucketLease(locate(f"{s3.url}/ds/.shardsmith/lease"), "packed", seconds=1)
    with lease:
        s3.put("ds/.shardsmith/lease", json.dumps(
            {"holder": "pid 1 on elsewhere since 2026-01-01T00:00:00", "token": "other",
             "expires": time.time() + 600}).encode())
        for _ in range(200):  # renewed every 0.2 s: the next renewal finds it taken
            if lease.lost:
                break
            time.sleep(0.05)
        with pytest.raises(LockedError, match="taken over"):
            lease.check()
    assert s3.fs.exists(f"{s3.name}/ds/.shardsmith/lease")  # the new holder's: not deleted


@pytest.mark.parametrize("planted", ["too large", "a prefix"])
def test_an_object_record_the_door_refuses_is_not_ours_and_the_commit_writes_ours(
        tmp_path, s3, spool, monkeypatch, planted):
    """A record too large to read, or a prefix where it goes, blocked every pack to the
    prefix; it is read as a damaged record: every object kept a commit, the record rewritten."""
    from shardsmith.packing import s3output

    source = originals(tmp_path / "source")
    assert cli("pack", source, f"{s3.url}/ds", *PACK_ARGS).exit_code == 0
    first = names_of(s3, "ds")
    if planted == "too large":
        monkeypatch.setattr(s3output, "OBJECTS_RECORD_CAP", 64)
        s3.put("ds/.shardsmith/objects.json", b" " * 65)
    else:
        s3.fs.rm_file(f"{s3.name}/ds/.shardsmith/objects.json")
        s3.put("ds/.shardsmith/objects.json/x", b"planted")
    originals(source, 2, first=50)

    result = cli("pack", source, f"{s3.url}/ds", *PACK_ARGS)
    assert result.exit_code == 0, result.output
    assert complete(s3, "ds")
    assert first <= names_of(s3, "ds")  # a record not of ours: nothing deleted this commit
    record = json.loads(s3.fs.cat_file(f"{s3.name}/ds/.shardsmith/objects.json"))
    assert record["manifest"] == hashlib.sha256(
        s3.fs.cat_file(f"{s3.name}/ds/manifest.json")).hexdigest()


def test_a_missing_bucket_is_one_line_without_a_secret(tmp_path, s3, spool):
    result = cli("pack", originals(tmp_path / "source"), "s3://no-such-bucket-here/ds",
                 *PACK_ARGS)
    line = one_error_line(result, result.exit_code)
    assert "no such bucket" in line and s3.secret not in line


def test_an_overwrite_replaces_the_version_and_keeps_the_old_objects_one_commit(tmp_path, s3,
                                                                               spool):
    source = originals(tmp_path / "source")
    assert cli("pack", source, f"{s3.url}/ds", *PACK_ARGS).exit_code == 0
    before = names_of(s3, "ds")
    result = cli("pack", source, f"{s3.url}/ds", *PACK_ARGS, "--shard-samples", "5",
                 "--overwrite")
    assert result.exit_code == 0, result.output
    got = bucket_bytes(s3, "ds")
    want = images.dataset_bytes(_repacked(tmp_path, source))
    assert {name: got[name] for name in want} == want
    assert set(got) - set(want) <= before


def _repacked(tmp_path: Path, source: Path) -> Path:
    output = tmp_path / "overwritten"
    assert cli("pack", source, output, *PACK_ARGS).exit_code == 0
    assert cli("pack", source, output, *PACK_ARGS, "--shard-samples", "5",
               "--overwrite").exit_code == 0
    return output
