"""`pack s3://bucket/originals OUT`: the originals listed and read from a bucket through the real
s3fs client, against a local S3 server (``moto_server``) and a fault proxy in front of it
(tests/s3server.py).  Nothing of shardsmith is mocked.
"""

from __future__ import annotations

import json
import logging
import pickle
from pathlib import Path

import pytest
from click.testing import CliRunner

from shardsmith.cli import main

import images

pytest_plugins = ("s3server",)  # its fixtures: s3, fault_proxy, s3_server

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

COMMON = ["--size", "72", "--shard-samples", "4", "--split", "train=0.7,val=0.3",
          "--max-reject-fraction", "0.5", "--quiet", "--workers", "1"]
# What a sample index may say differently of an object than of a file: when it was written.
OBJECT_DEFINED = ("source_mtime_ns",)


def originals(root: Path) -> Path:
    """Twelve JPEGs and a PNG in two class folders, and a file of another extension."""
    for number in range(12):
        images.write(root / "ab"[number % 2] / f"{number}.jpg", images.jpeg(160, 120, number))
    images.write(root / "b" / "wide.png", images.png(200, 80, 3))
    images.write(root / "a" / "notes.txt", b"not an image")
    return root


def pack(source: str, output: Path, *extra: str):
    return CliRunner().invoke(main, ["pack", source, str(output), *COMMON, *extra])


def shards_and_indexes(output: Path) -> dict[str, bytes]:
    """Every shard, shard index and shard list of a dataset (not its manifest or sample
    index, which say where and when the originals were)."""
    return {path.name: path.read_bytes() for path in sorted(output.iterdir())
            if path.is_file() and path.name != "manifest.json"
            and not path.name.startswith("samples")}


def sample_lines(output: Path, drop: tuple[str, ...] = ()) -> list[dict]:
    return [{key: value for key, value in line.items() if key not in drop}
            for line in images.samples_of(output)]


def test_a_pack_from_a_bucket_has_the_local_packs_shards_and_indexes_byte_for_byte(
        tmp_path, s3):
    source = originals(tmp_path / "source")
    url = s3.upload(source, "originals")
    local = pack(str(source), tmp_path / "local")
    assert local.exit_code == 0, local.output
    remote = pack(url, tmp_path / "remote")
    assert remote.exit_code == 0, remote.output

    assert shards_and_indexes(tmp_path / "remote") == shards_and_indexes(tmp_path / "local")
    assert sample_lines(tmp_path / "remote", OBJECT_DEFINED) == \
        sample_lines(tmp_path / "local", OBJECT_DEFINED)
    manifest = images.manifest_of(tmp_path / "remote")
    assert manifest["source"] == url
    assert manifest["totals"]["packed"] == 13


def test_a_pack_from_a_bucket_through_several_workers_gives_the_same_bytes(tmp_path, s3):
    source = originals(tmp_path / "source")
    url = s3.upload(source, "originals")
    one = pack(url, tmp_path / "one")
    assert one.exit_code == 0, one.output
    two = pack(url, tmp_path / "two", "--workers", "2")
    assert two.exit_code == 0, two.output
    assert shards_and_indexes(tmp_path / "two") == shards_and_indexes(tmp_path / "one")


def test_workers_started_before_the_stores_settings_changed_are_not_reused_for_it(
        tmp_path, s3, monkeypatch):
    url = s3.upload(originals(tmp_path / "source"), "originals")
    with monkeypatch.context() as before:  # a first pack while the process knew no endpoint
        before.delenv("AWS_ENDPOINT_URL")
        first = pack(str(tmp_path / "source"), tmp_path / "local", "--workers", "2")
        assert first.exit_code == 0, first.output
    remote = pack(url, tmp_path / "remote", "--workers", "2")
    assert remote.exit_code == 0, remote.output
    assert shards_and_indexes(tmp_path / "remote") == shards_and_indexes(tmp_path / "local")


def test_a_nightly_rerun_on_an_unchanged_bucket_lists_it_and_reads_no_original(
        tmp_path, s3, fault_proxy, monkeypatch):
    url = s3.upload(originals(tmp_path / "source"), "originals")
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    first = pack(url, tmp_path / "out")
    assert first.exit_code == 0, first.output
    assert len(fault_proxy.gets(".jpg")) == 12  # each original read once
    fault_proxy.requests.clear()

    again = pack(url, tmp_path / "out")

    assert again.exit_code == 0, again.output
    lists = [path for method, path in fault_proxy.requests
             if method == "GET" and "list-type=2" in path]
    assert lists, fault_proxy.requests
    assert [path for path in fault_proxy.gets() if "list-type" not in path] == []
    assert [method for method, _ in fault_proxy.requests if method == "HEAD"] == []


def test_an_object_rewritten_in_the_bucket_is_packed_again_and_only_it_is_read(
        tmp_path, s3, fault_proxy, monkeypatch):
    url = s3.upload(originals(tmp_path / "source"), "originals")
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    assert pack(url, tmp_path / "out").exit_code == 0
    s3.put("originals/a/0.jpg", images.jpeg(160, 120, 99))
    fault_proxy.requests.clear()

    again = pack(url, tmp_path / "out")

    assert again.exit_code == 0, again.output
    assert [path.split("?")[0] for path in fault_proxy.gets(".jpg")] == \
        [f"/{s3.name}/originals/a/0.jpg"]
    assert images.manifest_of(tmp_path / "out")["version"] == 2


def test_503s_and_resets_on_lists_and_reads_are_retried_and_the_bytes_are_the_same(
        tmp_path, s3, fault_proxy, monkeypatch):
    url = s3.upload(originals(tmp_path / "source"), "originals")
    clean = pack(url, tmp_path / "clean")
    assert clean.exit_code == 0, clean.output
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    fault_proxy.every("503", 4)
    faulty = pack(url, tmp_path / "faulty")
    assert faulty.exit_code == 0, faulty.output
    fault_proxy.heal()
    fault_proxy.fail("reset", 1, 3, 6, 9, 12)
    reset = pack(url, tmp_path / "reset")
    assert reset.exit_code == 0, reset.output

    assert shards_and_indexes(tmp_path / "faulty") == shards_and_indexes(tmp_path / "clean")
    assert shards_and_indexes(tmp_path / "reset") == shards_and_indexes(tmp_path / "clean")


def test_an_object_gone_between_the_listing_and_its_read_is_a_reject_with_a_reason(
        tmp_path, s3):
    from shardsmith.config import load_config
    from shardsmith.packing import pipeline

    url = s3.upload(originals(tmp_path / "source"), "originals")
    scan = pipeline.scan

    def scan_then_delete(*args, **kwargs):
        scanned = scan(*args, **kwargs)
        s3.fs.rm_file(f"{s3.name}/originals/b/1.jpg")
        return scanned

    config = load_config(None, {"source.path": url, "output.path": str(tmp_path / "out"),
                                "image.size": 72, "run.quiet": True, "run.workers": 1,
                                "run.max_reject_fraction": 0.5})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "scan", scan_then_delete)  # the race, not our code, is staged
        result = pipeline.pack(config)

    rejects = {reject.path: reject for reject in result.manifest.rejects}
    assert rejects["b/1.jpg"].reason == "unreadable"
    assert "no such object" in rejects["b/1.jpg"].detail
    assert result.manifest.totals.packed == 12


def test_the_listing_leaves_out_what_a_local_scan_leaves_out(tmp_path, s3):
    from shardsmith.config import SourceConfig
    from shardsmith.packing.scan import scan
    from shardsmith.storage import locate

    source = originals(tmp_path / "source")
    images.write(source / "a" / ".hidden.jpg", images.jpeg(10, 10, 1))
    images.write(source / ".trash" / "x.jpg", images.jpeg(10, 10, 1))
    images.write(source / "loose.jpg", images.jpeg(10, 10, 1))
    url = s3.upload(source, "originals")
    config = SourceConfig(exclude=("*/1[01].jpg",))

    remote, local = scan(locate(url), config, threads=3), scan(source, config)

    assert remote.files.relpaths == local.files.relpaths
    assert list(remote.files.sizes) == list(local.files.sizes)
    assert remote.classes == local.classes == ("a", "b")
    assert remote.excluded["extension"] == local.excluded["extension"] == 1
    assert remote.excluded["include/exclude pattern"] == 2
    assert remote.excluded["not in a class folder"] == 1
    assert all(tag >= 0 for tag in remote.files.inodes)  # each object's ETag


def test_storage_in_the_job_file_reaches_s3fs_and_no_credential_is_written_or_logged(
        tmp_path, s3, s3_server, monkeypatch, caplog):
    url = s3.upload(originals(tmp_path / "source"), "originals")
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    job = tmp_path / "job.yaml"
    job.write_text(f"source:\n  path: {url}\noutput:\n  path: {tmp_path / 'out'}\n"
                   f"storage:\n  endpoint_url: {s3_server}\n  key: testing-access-key\n"
                   f"  secret: {s3.secret}\n")
    caplog.set_level(logging.DEBUG)
    report = tmp_path / "report.json"

    result = CliRunner().invoke(main, ["pack", "--config", str(job), "--report",
                                       str(report), *COMMON])

    assert result.exit_code == 0, result.output
    written = b"".join(path.read_bytes() for path in (tmp_path / "out").rglob("*")
                       if path.is_file()) + report.read_bytes()
    assert s3.secret.encode() not in written
    assert s3.secret not in result.output + caplog.text
    manifest = images.manifest_of(tmp_path / "out")
    assert "storage" not in json.dumps(manifest["config"])


def test_a_config_with_storage_keeps_its_fingerprint_and_hides_its_secret():
    from shardsmith.config import load_config

    plain = load_config(None, {"source.path": "s3://bucket/originals"})
    keyed = load_config(None, {"source.path": "s3://bucket/originals",
                               "storage.secret": "hush-hush-1234", "storage.region": "eu"})
    assert keyed.fingerprint() == plain.fingerprint()
    assert "hush-hush-1234" not in repr(keyed)
    assert "eu" in repr(keyed.storage)


def test_a_bad_source_url_is_one_line_and_exit_2(tmp_path, s3):
    for url, says in ((f"{s3.url}/ds/../x", "segment"), ("s3://Bad_Bucket/x", "bucket name"),
                      (f"{s3.url}/empty", "no object under this prefix")):
        result = pack(url, tmp_path / "out")
        assert result.exit_code == 2, result.output
        assert says in result.output
        assert len(result.output.strip().splitlines()) == 1


def test_workers_are_handed_the_url_not_the_bytes(tmp_path, s3):
    """What the driver submits for an image: its plan item and the source URL (a few hundred
    bytes), never the original's bytes or a client with credentials."""
    from shardsmith.config import load_config
    from shardsmith.packing.plan import make_plan
    from shardsmith.packing.scan import scan
    from shardsmith.storage import locate

    url = s3.upload(originals(tmp_path / "source"), "originals")
    config = load_config(None, {"source.path": url, "storage.secret": "hush-hush-1234"})
    table = scan(locate(url), config.source).files
    plan = make_plan(table, config.splits, config.seed, config.split_group,
                     config.split_folder, None)
    item = plan[0]
    submitted = pickle.dumps((item, url))
    assert len(submitted) < 600 < item.source.size
    assert b"hush-hush" not in submitted


def test_through_dask_workers_the_bytes_are_the_same_and_the_driver_reads_no_original(
        tmp_path, s3, fault_proxy, monkeypatch):
    """The cluster's workers reach the server straight, the driver through the proxy: the
    proxy sees the driver's listing and no GET of an original, so no image byte went through
    the driver; the shards are those of the local pack of the same files."""
    distributed = pytest.importorskip("distributed", reason="the dask extra is not installed")
    source = originals(tmp_path / "source")
    url = s3.upload(source, "originals")
    local = pack(str(source), tmp_path / "local")
    assert local.exit_code == 0, local.output
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None)  # workers get the AWS variables
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)  # the driver's alone
        remote = CliRunner().invoke(main, ["pack", url, str(tmp_path / "dask"),
                                           *COMMON[:-2], "--backend", "dask",
                                           "--scheduler", cluster.scheduler_address])
    finally:
        cluster.close()

    assert remote.exit_code == 0, remote.output
    assert shards_and_indexes(tmp_path / "dask") == shards_and_indexes(tmp_path / "local")
    assert any("list-type=2" in path for path in fault_proxy.gets())
    assert fault_proxy.gets(".jpg") == fault_proxy.gets(".png") == []


def test_credentials_in_the_job_file_are_not_sent_to_dask_workers(tmp_path, s3):
    url = s3.upload(originals(tmp_path / "source"), "originals")
    job = tmp_path / "job.yaml"
    job.write_text(f"storage:\n  secret: {s3.secret}\n")
    result = CliRunner().invoke(main, ["pack", url, str(tmp_path / "out"), "--config",
                                       str(job), "--backend", "dask", "--scheduler",
                                       "tcp://127.0.0.1:9"])
    assert result.exit_code == 2
    assert "storage.secret: credentials are not sent to Dask workers" in result.output
    assert s3.secret not in result.output


def test_an_object_over_the_decode_budget_is_rejected_unread(tmp_path, s3, fault_proxy,
                                                             monkeypatch):
    url = s3.upload(originals(tmp_path / "source"), "originals")
    s3.put("originals/a/huge.jpg", b"\xff\xd8" + bytes(3 << 20))
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    job = tmp_path / "job.yaml"
    job.write_text("image:\n  max_decoded_mb: 2\n")

    result = pack(url, tmp_path / "out", "--config", str(job))

    assert result.exit_code == 0, result.output
    rejects = {reject["path"]: reject for reject in
               images.manifest_of(tmp_path / "out")["rejects"]}
    assert rejects["a/huge.jpg"]["reason"] == "too_large"
    assert fault_proxy.gets("huge.jpg") == []


def test_a_key_with_an_empty_segment_under_the_prefix_is_listed_once_as_unreadable(
        tmp_path, s3):
    """``abs//x.jpg`` under ``s3://bucket/abs``: S3 gives ``abs//`` as a common prefix, which
    names the listed prefix itself; listed again it would give every key twice."""
    url = s3.upload(originals(tmp_path / "source"), "abs")
    s3.put("abs//abs.jpg", images.jpeg(64, 48, 1))
    result = pack(url, tmp_path / "out")
    assert result.exit_code == 0, result.output

    manifest = images.manifest_of(tmp_path / "out")
    keys = [line["key"] for line in images.samples_of(tmp_path / "out")]
    assert len(keys) == len(set(keys)) == manifest["totals"]["packed"] == 13
    rejects = {reject["path"]: reject for reject in manifest["rejects"]}
    assert rejects["/abs.jpg"]["reason"] == "unreadable"
    assert "not a plain object key" in rejects["/abs.jpg"]["detail"]
    assert len(manifest["rejects"]) == 1
    assert manifest["totals"]["seen"] == 15  # 13 packed, 1 unreadable, a/notes.txt excluded
    verified = CliRunner().invoke(main, ["verify", str(tmp_path / "out"), "--quiet"])
    assert verified.exit_code == 0, verified.output


def test_empty_folder_markers_are_folders_not_files_and_a_marker_with_bytes_is_unreadable(
        tmp_path, s3):
    """The keys ``PREFIX/``, ``a/`` and ``a/sub/`` of no bytes, which a console's "Create
    folder" writes, are folders as on disk: neither seen nor rejected.  ``b/`` holding bytes
    is no folder: an unreadable object, never read."""
    source = originals(tmp_path / "source")
    url = s3.upload(source, "marked")
    for key in ("marked/", "marked/a/", "marked/a/sub/"):
        s3.put(key, b"")
    s3.put("marked/b/", b"bytes")

    remote, local = pack(url, tmp_path / "remote"), pack(str(source), tmp_path / "local")

    assert remote.exit_code == local.exit_code == 0, remote.output
    def shards(output: Path) -> dict[str, bytes]:  # not the changes file: it lists rejects
        return {name: data for name, data in shards_and_indexes(output).items()
                if not name.startswith("changes")}

    assert shards(tmp_path / "remote") == shards(tmp_path / "local")
    manifest = images.manifest_of(tmp_path / "remote")
    assert [reject["path"] for reject in manifest["rejects"]] == ["b/"]
    assert manifest["totals"]["seen"] == images.manifest_of(tmp_path / "local")["totals"][
        "seen"] + 1
