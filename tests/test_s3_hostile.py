"""The ``s3://`` surfaces against a hostile bucket, spool and server: objects shardsmith did
not write are never deleted, a server that never answers (or trickles) ends a command in one
line, a garbage lease or spool record is discarded, and every message is one line.

Against a real S3 server on 127.0.0.1 (``moto_server``, tests/s3server.py) and, for what it
will not do, a fake one here (``EvilServer``: hangs, trickles, 500s, garbage), through the
real s3fs client; nothing of shardsmith is mocked.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hostile_helpers import PACK_ARGS, cli, one_error_line, one_stderr_line, run

import images

pytest_plugins = ("s3server",)  # its fixtures: s3, fault_proxy, s3_server

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

SHORT = ("--storage", "connect_timeout=1", "--storage", "read_timeout=1")


def originals(root: Path, count: int = 6) -> Path:
    for number in range(count):
        images.write(root / "ab"[number % 2] / f"{number}.jpg", images.jpeg(96, 64, number))
    return root


@pytest.fixture
def spool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "spool"
    monkeypatch.setenv("SHARDSMITH_SPOOL", str(folder))
    return folder


def keys(s3, prefix: str) -> set[str]:
    return {key.removeprefix(f"{s3.name}/{prefix}/") for key in s3.fs.find(f"{s3.name}/{prefix}")}


class EvilServer:
    """An HTTP server on 127.0.0.1 answering every request one way: ``hang`` (never),
    ``trickle`` (a byte a second), ``500`` (InternalError), ``garbage`` (a 200 of junk)."""

    def __init__(self, mode: str):
        self.mode = mode
        self.stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                if server.mode == "hang":
                    server.stop.wait(120)
                    return
                if server.mode == "trickle":
                    self.send_response(200)
                    self.send_header("Content-Length", "100000")
                    self.end_headers()
                    while not server.stop.wait(1):
                        self.wfile.write(b"<")
                        self.wfile.flush()
                    return
                if server.mode == "500":
                    body = b"<Error><Code>InternalError</Code><Message>x</Message></Error>"
                    self.send_response(500)
                else:
                    body = b"\x00\xffnot xml at all <<<" * 50
                    self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = answer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        # A client past its deadline hangs up while an answer is written: socketserver would
        # print that BrokenPipeError's traceback to the stderr of the command under test.
        self.httpd.handle_error = lambda request, address: None
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def evil(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The AWS variables pointed at an ``EvilServer`` of the mode ``request.param``."""
    server = EvilServer(request.param)
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "evil-test-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "evil-test-secret-value")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    try:
        yield request.param
    finally:
        server.close()


# -- objects shardsmith did not write ------------------------------------------------------

def test_a_prefix_holding_foreign_objects_is_refused_naming_them_and_nothing_is_deleted(
        tmp_path, s3, spool):
    for key in ("ds/README.txt", "ds/data.csv", "ds/notes/a.txt", "ds/train-000000.tar"):
        s3.put(key, b"theirs")
    result = cli("pack", originals(tmp_path / "source"), f"{s3.url}/ds", *PACK_ARGS)
    line = one_error_line(result, 2)
    assert "did not write" in line
    assert "README.txt" in line and "data.csv" in line and "notes/" in line
    assert keys(s3, "ds") == {"README.txt", "data.csv", "notes/a.txt", "train-000000.tar"}


def test_foreign_objects_beside_a_dataset_are_never_downloaded_recorded_or_deleted(
        tmp_path, s3, spool):
    source = originals(tmp_path / "source")
    assert cli("pack", source, f"{s3.url}/ds", *PACK_ARGS).exit_code == 0
    s3.put("ds/README.txt", b"theirs")
    s3.put("ds/data.csv", b"theirs too")
    shutil.rmtree(spool)  # another machine: the bucket's version is downloaded, then repacked
    for _ in range(2):
        result = cli("pack", source, f"{s3.url}/ds", *PACK_ARGS, "--overwrite")
        assert result.exit_code == 0, result.output
    assert s3.fs.cat_file(f"{s3.name}/ds/README.txt") == b"theirs"
    assert s3.fs.cat_file(f"{s3.name}/ds/data.csv") == b"theirs too"
    record = json.loads(s3.fs.cat_file(f"{s3.name}/ds/.shardsmith/objects.json"))
    assert "README.txt" not in record["names"] + record["kept"]
    assert not list(spool.rglob("README.txt")) and not list(spool.rglob("data.csv"))


def test_a_bucket_object_whose_sha256_is_not_the_manifests_is_not_taken_into_the_spool(
        tmp_path, s3, spool):
    source = originals(tmp_path / "source")
    assert cli("pack", source, f"{s3.url}/ds", *PACK_ARGS).exit_code == 0
    shard = f"{s3.name}/ds/train-000000.tar"
    data = bytearray(s3.fs.cat_file(shard))
    data[600] ^= 0xFF  # the same size, another byte
    s3.fs.pipe_file(shard, bytes(data))
    shutil.rmtree(spool)  # another machine: the spool is downloaded
    line = one_error_line(cli("pack", source, f"{s3.url}/ds", *PACK_ARGS), 2)
    assert "train-000000.tar" in line and "sha256" in line
    assert not list(spool.rglob("train-000000.tar"))


def test_an_object_with_a_dot_key_under_the_prefix_is_one_line_saying_what_to_do(
        tmp_path, s3, spool):
    s3.fs.call_s3("put_object", Bucket=s3.name, Key="ds/.", Body=b"odd")
    line = one_error_line(cli("pack", originals(tmp_path / "source"), f"{s3.url}/ds",
                              *PACK_ARGS), 2)
    assert "ds/." in line and "delete that object" in line


# -- leases and the spool record ---------------------------------------------------------

@pytest.mark.parametrize("expires", ["Infinity", "NaN", "1e300", "9" * 400])
def test_a_lease_expiring_at_an_absurd_time_is_garbage_and_taken_over_unquoted(
        tmp_path, s3, spool, caplog, expires):
    s3.put("ds/.shardsmith/lease", (
        '{"holder": "pid 1 on elsewhere since 2026-01-01T00:00:00", "token": "x", '
        f'"expires": {expires}}}').encode())
    with caplog.at_level(logging.WARNING):
        result = cli("pack", originals(tmp_path / "source"), f"{s3.url}/ds", *PACK_ARGS)
    assert result.exit_code == 0, result.output
    taken = [r.getMessage() for r in caplog.records if "taking over the lease" in r.getMessage()]
    assert len(taken) == 1 and expires[:5] not in taken[0]


@pytest.mark.parametrize("record", [
    '{"base": null, "uploaded": "x"}', '{"base": 7, "uploaded": {}}',
    '{"base": null, "uploaded": {"a.tar": [1, "x", null]}}', "[1, 2]", "{not json",
    "[" * 5000])
def test_a_damaged_spool_record_is_discarded_with_one_warning(tmp_path, s3, spool, caplog,
                                                              record):
    source = originals(tmp_path / "source")
    assert cli("pack", source, f"{s3.url}/ds", *PACK_ARGS).exit_code == 0
    (state,) = spool.glob("*/state.json")
    state.write_text(record)
    with caplog.at_level(logging.WARNING):
        result = cli("pack", source, f"{s3.url}/ds", *PACK_ARGS, "--overwrite")
    assert result.exit_code == 0, result.output
    warned = [r for r in caplog.records if "damaged, discarded" in r.getMessage()]
    assert len(warned) >= 1


def test_a_spool_folder_that_is_a_link_is_refused_naming_it_and_nothing_is_followed(
        tmp_path, s3, spool):
    source = originals(tmp_path / "source")
    assert cli("pack", source, f"{s3.url}/ds", *PACK_ARGS).exit_code == 0
    (home,) = spool.iterdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("keep me")
    shutil.rmtree(home / "dataset")
    (home / "dataset").symlink_to(victim)
    s3.put("ds/manifest.json", s3.fs.cat_file(f"{s3.name}/ds/manifest.json") + b" ")
    line = one_error_line(cli("pack", source, f"{s3.url}/ds", *PACK_ARGS), 2)
    assert str(home / "dataset") in line and "link" in line
    assert (victim / "precious").read_text() == "keep me"


# -- a server that misbehaves --------------------------------------------------------------

@pytest.mark.parametrize("evil", ["hang", "trickle"], indirect=True)
def test_a_server_that_never_answers_or_trickles_ends_log_in_one_line_exit_1(evil):
    # exit 1: the store failed, not the input (the dataset may well be sound)
    process = run("log", "s3://some-bucket/ds", *SHORT, timeout=90)  # past 90 s: a hang
    line = one_stderr_line(process, 1)
    assert "no whole answer within" in line and "evil-test-secret-value" not in line


@pytest.mark.parametrize("evil", ["500"], indirect=True)
@pytest.mark.parametrize("command", [
    ("log", "s3://some-bucket/ds"), ("verify", "s3://some-bucket/ds"),
    ("stage", "s3://some-bucket/ds", "--to", "{tmp}/staged"),
    ("pack", "{tmp}/source", "s3://some-bucket/ds", *PACK_ARGS)])
def test_a_store_failing_every_request_is_exit_1_whatever_the_command(tmp_path, evil, spool,
                                                                     command):
    originals(tmp_path / "source")
    argv = [part.replace("{tmp}", str(tmp_path)) for part in command]
    process = run(*argv, *SHORT, timeout=120)
    one_stderr_line(process, 1)


@pytest.mark.parametrize("evil", ["garbage"], indirect=True)
def test_a_garbage_answer_to_the_lease_put_says_the_store_answered_something_unexpected(
        tmp_path, evil, spool):
    result = cli("pack", originals(tmp_path / "source"), "s3://some-bucket/ds", *PACK_ARGS,
                 *SHORT)
    line = one_error_line(result, 1)
    assert "answered something unexpected" in line and "another run" not in line


# -- names ---------------------------------------------------------------------------------

def test_a_missing_bucket_is_said_to_be_missing(s3):
    line = one_error_line(cli("log", "s3://nobucket-here-21/ds"), 2)
    assert "bucket does not exist" in line


def test_a_bucket_named_like_an_ip_address_is_refused(tmp_path):
    line = one_error_line(cli("log", "s3://127.0.0.1/ds"), 2)
    assert "IP address" in line and "AWS_ENDPOINT_URL" in line


def test_a_long_key_is_cut_in_the_message(s3):
    key = "a/" * 300 + ".."
    line = one_error_line(cli("log", f"{s3.url}/{key}"), 2)
    assert len(line) < 400 and "..." in line


def test_a_timeout_that_is_not_seconds_is_refused_in_one_line(s3):
    line = one_error_line(cli("log", f"{s3.url}/ds", "--storage", "read_timeout=soon"), 2)
    assert "read_timeout" in line
