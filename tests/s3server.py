"""A real S3-protocol server on 127.0.0.1 for the object-storage tests, and a fault proxy.

``moto_server`` (moto's server mode, ``pip install 'moto[server]'``) speaks S3 over HTTP, and
s3fs reaches it through ``AWS_ENDPOINT_URL`` alone, so the tests run the real client over a
real socket; it starts in ~1 s and needs neither Docker nor a download (MinIO would need
both).  Since it injects no faults, ``FaultProxy`` sits in front of it: an HTTP/1.1 proxy that
answers chosen requests with a 503, a 403, a connection reset or a delay, and records what
was asked (method and path), so a test can say which objects were read.

Use: ``from s3server import s3, s3_server  # noqa: F401`` in a test module, then the
``s3`` fixture: a fresh bucket, the AWS variables set for the test alone, and ``upload``.
"""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ACCESS_KEY = "testing-access-key"
SECRET = "s3cr3t-never-printed-7f3a9c"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _moto_command(port: int) -> list[str]:
    script = Path(sys.executable).parent / "moto_server"
    found = str(script) if script.exists() else shutil.which("moto_server")
    if found is None:
        pytest.skip("moto_server is not installed (pip install 'moto[server]')")
    return [found, "-H", "127.0.0.1", "-p", str(port)]


def _wait_until_answering(port: int, process: subprocess.Popen, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.skip(f"moto_server exited with {process.returncode} before answering")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            connection.request("GET", "/")
            connection.getresponse().read()
            connection.close()
            return
        except OSError:
            time.sleep(0.1)
    process.kill()
    pytest.skip(f"moto_server did not answer on port {port} within {seconds:.0f} s")


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """The endpoint URL of a ``moto_server`` for the whole session; stopped at its end."""
    pytest.importorskip("s3fs", reason="the s3:// tests need s3fs (pip install s3fs)")
    port = free_port()
    process = subprocess.Popen(_moto_command(port), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        _wait_until_answering(port, process)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class FaultProxy:
    """An HTTP proxy on 127.0.0.1 in front of ``upstream``.

    ``fail(kind, requests)``: the requests with these numbers (1 = the next one) get the
    fault: ``"503"`` (S3's SlowDown), ``"403"`` (AccessDenied, which no client retries),
    ``"reset"`` (the connection closed with a TCP RST, no answer), ``"500"`` (InternalError,
    which clients retry) or ``"delay"`` (answered after ``delay`` seconds).  ``every(kind, n)``:
    every n-th request.  ``on(kind, suffix, method)``: every request of ``method`` whose path
    ends with ``suffix`` (every attempt of a retried request: the store fails it for good).
    ``requests``: the method and path of each request seen.
    """

    upstream: str
    delay: float = 0.5
    requests: list[tuple[str, str]] = field(default_factory=list)
    _faults: dict[int, str] = field(default_factory=dict)
    _every: tuple[str, int] | None = None
    _on: tuple[str, str, str] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _count: int = 0
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def fail(self, kind: str, *numbers: int) -> None:
        with self._lock:
            self._faults = {self._count + number: kind for number in numbers}

    def every(self, kind: str, n: int) -> None:
        with self._lock:
            self._every = (kind, n)

    def on(self, kind: str, suffix: str, method: str = "GET") -> None:
        with self._lock:
            self._on = (kind, suffix, method)

    def heal(self) -> None:
        with self._lock:
            self._faults, self._every, self._on = {}, None, None

    def gets(self, suffix: str = "") -> list[str]:
        """The paths of the GET requests seen whose path ends with ``suffix``."""
        return [path for method, path in self.requests
                if method == "GET" and path.split("?")[0].endswith(suffix)]

    def _fault_for(self, method: str, path: str) -> str | None:
        with self._lock:
            self._count += 1
            self.requests.append((method, path))
            if self._every is not None and self._count % self._every[1] == 0:
                return self._every[0]
            if self._on is not None and method == self._on[2] \
                    and path.split("?")[0].endswith(self._on[1]):
                return self._on[0]
            return self._faults.pop(self._count, None)


def _handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    host, _, port = proxy.upstream.removeprefix("http://").partition(":")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _relay(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            fault = proxy._fault_for(self.command, self.path)
            if fault == "reset":
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
                self.close_connection = True
                self.connection.close()
                return
            if fault in ("503", "403", "500"):
                code, name = {"503": (503, "SlowDown"), "403": (403, "AccessDenied"),
                              "500": (500, "InternalError")}[fault]
                payload = (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{name}</Code>"
                           f"<Message>injected by the test proxy</Message></Error>").encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)
                return
            if fault == "delay":
                time.sleep(proxy.delay)
            headers = {name: value for name, value in self.headers.items()
                       if name.lower() not in ("connection", "keep-alive")}
            upstream = http.client.HTTPConnection(host, int(port), timeout=30)
            try:
                upstream.request(self.command, self.path, body=body, headers=headers)
                answer = upstream.getresponse()
                data = answer.read()
            finally:
                upstream.close()
            self.send_response(answer.status, answer.reason)
            for name, value in answer.getheaders():
                if name.lower() not in ("connection", "keep-alive", "transfer-encoding",
                                        "content-length", "server", "date"):
                    self.send_header(name, value)
            if self.command == "HEAD":
                self.send_header("Content-Length", answer.getheader("Content-Length", "0"))
            else:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _relay

    return Handler


@pytest.fixture
def fault_proxy(s3_server: str) -> Iterator[FaultProxy]:
    """A ``FaultProxy`` in front of the session's server, for one test."""
    proxy = FaultProxy(s3_server)
    proxy.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(proxy))
    proxy.server.daemon_threads = True
    thread = threading.Thread(target=proxy.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.server.shutdown()
        proxy.server.server_close()


@dataclass
class Bucket:
    """A fresh bucket on the server: ``url`` (``s3://name``), ``fs`` (an s3fs client straight
    to the server, for setting up), ``upload`` a local folder under a prefix."""

    name: str
    fs: object
    secret: str = SECRET  # the AWS_SECRET_ACCESS_KEY set for the test

    @property
    def url(self) -> str:
        return f"s3://{self.name}"

    def upload(self, folder: Path, prefix: str) -> str:
        """Every file under ``folder`` as an object under ``prefix``; returns its URL."""
        for path in sorted(folder.rglob("*")):
            if path.is_file() and not path.is_symlink():
                key = path.relative_to(folder).as_posix()
                self.fs.put_file(str(path), f"{self.name}/{prefix}/{key}")
        return f"{self.url}/{prefix}"

    def put(self, key: str, data: bytes) -> None:
        self.fs.pipe_file(f"{self.name}/{key}", data)


@pytest.fixture
def s3(s3_server: str, monkeypatch: pytest.MonkeyPatch) -> Bucket:
    """A fresh bucket; the AWS variables point at the server (dummy credentials, one of them
    ``SECRET``) for this test alone."""
    import s3fs

    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    fs = s3fs.S3FileSystem(endpoint_url=s3_server, skip_instance_cache=True,
                           use_listings_cache=False)
    name = f"t-{uuid.uuid4().hex[:12]}"
    fs.mkdir(name)
    return Bucket(name, fs)
