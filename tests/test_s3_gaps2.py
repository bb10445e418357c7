"""`pack` from a bucket, three more gaps: annotation files in the bucket through Dask workers, a
real multipart upload (and a failed part retried), and one GET per original, no HEAD.

Against a local S3 server (``moto_server``) and a fault proxy in front of it
(tests/s3server.py), through the real s3fs client; nothing of shardsmith is mocked.
"""

from __future__ import annotations

import hashlib
import os
import resource
import subprocess
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from test_s3_gaps import (
    OBJECT_DEFINED,
    annotated,
    pack_in_process,
    sample_lines,
    shards_and_indexes,
)

from shardsmith.storage import locate

import defects
import images

pytest_plugins = ("s3server",)  # its fixtures: s3, fault_proxy, s3_server

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

# s3fs sends a file as a multipart upload from 2 parts of 50 MiB (``put_file``'s chunksize,
# which no documented option of the file system or of ``storage:`` sets): 110 MiB is 3 parts.
PART = 50 << 20
MULTIPART_BYTES = 110 << 20
# Below the size of a shard of six 160x120 JPEGs packed at 32 px (~2.4 KB a sample), above
# what a pack writes before its first download (nothing, in a fresh spool).
FILE_LIMIT = 1024


@pytest.fixture(scope="module")
def scheduler(s3_server: str) -> Iterator[str]:
    """A LocalCluster whose worker processes reach the server straight (the AWS variables
    they start with); the driver of each test may be sent through a proxy instead."""
    distributed = pytest.importorskip(
        "distributed", reason="the dask extra is not installed (pip install 'shardsmith[dask]')")
    from s3server import ACCESS_KEY, SECRET  # after the plugin is loaded: no second import
    with pytest.MonkeyPatch.context() as patch:
        for name in [name for name in os.environ if name.startswith("AWS_")]:
            patch.delenv(name)
        patch.setenv("AWS_ENDPOINT_URL", s3_server)
        patch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        patch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           dashboard_address=None)
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


@pytest.mark.parametrize(("formats", "own_files"), [
    (("coco",), ()),
    (("yolo", "mask"), (".txt", "_mask.png")),
], ids=["coco", "yolo+masks"])
def test_through_dask_an_annotated_pack_from_a_bucket_has_the_local_packs_bytes_and_the_driver_reads_no_image(  # noqa: E501
        tmp_path, s3, fault_proxy, monkeypatch, scheduler, formats, own_files):
    """The driver goes through the proxy, the workers straight to the server: the proxy sees
    the listing (and the COCO file, which the driver reads) but no GET or HEAD of an image or
    of an image's own annotation file."""
    source = tmp_path / "source"
    overrides = annotated(source, *formats)
    url = s3.upload(source, "originals")
    local = pack_in_process(str(source), tmp_path / "local", overrides)
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)  # the driver's alone

    remote = pack_in_process(url, tmp_path / "dask", overrides, **{
        "run.backend": "dask", "run.scheduler": scheduler})

    assert local["totals"]["packed"] == remote["totals"]["packed"] == 4
    assert not remote["rejects"]
    assert shards_and_indexes(tmp_path / "dask") == shards_and_indexes(tmp_path / "local")
    assert sample_lines(tmp_path / "dask", OBJECT_DEFINED) == \
        sample_lines(tmp_path / "local", OBJECT_DEFINED)
    assert any("list-type=2" in path for path in fault_proxy.gets())
    read_by_driver = [path.split("?")[0] for method, path in fault_proxy.requests
                      if method in ("GET", "HEAD") and "list-type" not in path]
    assert [path for path in read_by_driver if path.endswith((".jpg", *own_files))] == []


def uploaded(requests: list[tuple[str, str]]) -> list[str]:
    """Each request of an upload by its S3 operation: CreateMultipartUpload,
    UploadPart N, CompleteMultipartUpload, PutObject, HeadObject."""
    named = []
    for method, path in requests:
        query = path.partition("?")[2]
        if method == "POST" and query.startswith("uploads"):
            named.append("CreateMultipartUpload")
        elif method == "PUT" and "partNumber=" in query:
            number = query.split("partNumber=")[1].split("&")[0]
            named.append(f"UploadPart {number}")
        elif method == "POST" and "uploadId=" in query:
            named.append("CompleteMultipartUpload")
        else:
            named.append({"PUT": "PutObject", "HEAD": "HeadObject"}.get(method, method))
    return named


def test_a_file_over_two_parts_is_published_as_a_multipart_upload_and_a_failed_part_is_retried(
        tmp_path, s3, fault_proxy, monkeypatch):
    local = tmp_path / "shard-000000.tar"
    local.write_bytes(os.urandom(MULTIPART_BYTES))
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    target = locate(f"{s3.url}/ds/{local.name}")
    fault_proxy.fail("503", 3)  # an UploadPart: s3fs sends the parts at once, in any order

    etag = target.put(local)

    record = uploaded(fault_proxy.requests)
    assert record[0] == "CreateMultipartUpload"
    assert record[-2:] == ["CompleteMultipartUpload", "HeadObject"]
    failed = record[2]  # answered 503 SlowDown, then sent again
    assert sorted(record[1:-2]) == sorted(["UploadPart 1", "UploadPart 2", "UploadPart 3",
                                           failed])
    data = local.read_bytes()
    parts = b"".join(hashlib.md5(data[start:start + PART]).digest()
                     for start in range(0, len(data), PART))
    assert etag.strip('"') == f"{hashlib.md5(parts).hexdigest()}-3"  # S3's multipart ETag
    stored = s3.fs.cat_file(f"{s3.name}/ds/{local.name}")  # straight from the server
    assert hashlib.sha256(stored).digest() == hashlib.sha256(data).digest()


def small_originals(root: Path) -> Path:
    for number in range(6):
        images.write(root / "ab"[number % 2] / f"{number}.jpg", images.jpeg(160, 120, number))
    return root


def test_a_pack_from_a_bucket_reads_each_original_with_one_get_and_no_head(
        tmp_path, s3, fault_proxy, monkeypatch):
    url = s3.upload(small_originals(tmp_path / "source"), "originals")
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)

    manifest = pack_in_process(url, tmp_path / "out", {})

    assert manifest["totals"]["packed"] == 6
    reads = sorted(path.split("?")[0] for path in fault_proxy.gets(".jpg"))
    assert reads == sorted(f"/{s3.name}/originals/{'ab'[number % 2]}/{number}.jpg"
                           for number in range(6))
    assert [path for method, path in fault_proxy.requests if method == "HEAD"] == []


def rewrite_same_size(data: bytes) -> bytes:
    """Other bytes of the same length (another ETag, the same size in a listing)."""
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1:]


@pytest.mark.parametrize(("rewrite", "says"), [
    (rewrite_same_size, "another ETag"),
    (lambda data: data + b"\0" * 100, "bytes, not"),
    (lambda data: data[:2000], "bytes, not"),
], ids=["same size", "grown", "shrunk"])
def test_an_object_rewritten_between_the_listing_and_its_read_is_a_reject_with_a_reason(
        tmp_path, s3, rewrite, says):
    from shardsmith.config import load_config
    from shardsmith.packing import pipeline

    source = small_originals(tmp_path / "source")
    url = s3.upload(source, "originals")
    scan = pipeline.scan

    def scan_then_rewrite(*args, **kwargs):
        scanned = scan(*args, **kwargs)
        s3.put("originals/b/1.jpg", rewrite((source / "b" / "1.jpg").read_bytes()))
        return scanned

    config = load_config(None, {"source.path": url, "output.path": str(tmp_path / "out"),
                                "image.size": 72, "run.quiet": True, "run.workers": 1,
                                "run.max_reject_fraction": 0.5})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "scan", scan_then_rewrite)  # the race, not our code, is staged
        result = pipeline.pack(config)

    rejects = {reject.path: reject for reject in result.manifest.rejects}
    assert rejects["b/1.jpg"].reason == "unreadable"
    assert "rewritten since" in rejects["b/1.jpg"].detail
    assert says in rejects["b/1.jpg"].detail
    assert result.manifest.totals.packed == 5


def test_re_annotated_originals_in_a_bucket_keep_their_jpeg_bytes(tmp_path, s3, monkeypatch):
    """A version of older annotation rules packed from a bucket is re-annotated from each
    original's header (a ranged read), its JPEG bytes copied, as from a folder."""
    from test_rederive import corpus, older_version, records, settings

    source = tmp_path / "source"
    corpus(source, "jpeg8", (1, 6))
    url = s3.upload(source, "originals")
    overrides = settings("pad")
    older_version(url, tmp_path / "out", overrides, monkeypatch)
    manifest = defects.pack_with(url, tmp_path / "out", overrides)
    defects.pack_with(source, tmp_path / "fresh", overrides)

    assert manifest["run"]["jpeg_copied"] == 3 and manifest["run"]["decoded"] == 0
    assert records(tmp_path / "out") == records(tmp_path / "fresh")


def test_a_spool_download_past_the_file_size_limit_names_the_spool_file(tmp_path, s3):
    """A full disk says so without a file name (``write`` raises EFBIG or ENOSPC with none):
    a spool download names the file it was writing.  RLIMIT_FSIZE in the child stands for the
    full disk (Python ignores SIGXFSZ, so the write fails instead of the process dying)."""
    from hostile_helpers import PACK_ARGS, cli, command, one_stderr_line

    source = small_originals(tmp_path / "source")
    assert cli("pack", source, f"{s3.url}/ds", *PACK_ARGS).exit_code == 0  # in this spool...
    spool = tmp_path / "another-machine"  # ...and a fresh one downloads the version

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))

    died = subprocess.run(command("pack", source, f"{s3.url}/ds", *PACK_ARGS),
                          capture_output=True, text=True, timeout=120,
                          env=os.environ | {"SHARDSMITH_SPOOL": str(spool)},
                          preexec_fn=limited)

    named, _, why = one_stderr_line(died, 1).removeprefix("shardsmith: error: ").rpartition(
        ": ")
    assert why == "File too large"
    assert Path(named).parent == next(spool.iterdir()) / "dataset"  # a file of the version
    assert not list(spool.rglob("*.tmp"))


def test_a_store_whose_answers_carry_no_etag_gets_a_reject_saying_so(tmp_path, s3,
                                                                     s3_server, monkeypatch):
    """The listing gives an ETag, the GET of one original none: the reject says the store
    gave none (it is not "rewritten since")."""
    from s3server import FaultProxy, _handler

    from shardsmith.config import load_config
    from shardsmith.packing import pipeline

    url = s3.upload(small_originals(tmp_path / "source"), "originals")
    proxy = FaultProxy(s3_server)
    relay = _handler(proxy)

    class WithoutTag(relay):
        def send_header(self, name: str, value: str) -> None:
            if name.lower() == "etag" and self.path.split("?")[0].endswith("/b/1.jpg"):
                return
            super().send_header(name, value)

    proxy.server = ThreadingHTTPServer(("127.0.0.1", 0), WithoutTag)
    proxy.server.daemon_threads = True
    threading.Thread(target=proxy.server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        config = load_config(None, {"source.path": url, "output.path": str(tmp_path / "out"),
                                    "image.size": 72, "run.quiet": True, "run.workers": 1,
                                    "run.max_reject_fraction": 0.5})
        result = pipeline.pack(config)
    finally:
        proxy.server.shutdown()
        proxy.server.server_close()

    rejects = {reject.path: reject for reject in result.manifest.rejects}
    assert set(rejects) == {"b/1.jpg"}
    assert "no ETag" in rejects["b/1.jpg"].detail
    assert "rewritten since)" not in rejects["b/1.jpg"].detail
    assert result.manifest.totals.packed == 5
