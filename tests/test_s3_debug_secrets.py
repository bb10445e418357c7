"""``-vv`` lets botocore, aiobotocore and s3fs log at debug level: requests with their headers
(the signature names the access key id, the session token is a header), the endpoint with any
password in it.  Every record goes through the handler's filter first: no secret we know of
reaches the log, whichever library wrote the record.  Against a real S3 server on 127.0.0.1
(tests/s3server.py), in a fresh process, as a user runs it.
"""

from __future__ import annotations

import base64
import os

import pytest
from hostile_helpers import packed, run

pytest_plugins = ("s3server",)  # its fixtures: s3, fault_proxy, s3_server

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

TOKEN = "session-token-never-printed-5d1e"
PASSWORD = "endpoint-password-never-printed-9b2c"
OPTION_TOKEN = "option-token-never-printed-c07a"
SHORT = ("--storage", "connect_timeout=1", "--storage", "read_timeout=1")


@pytest.fixture
def dataset(s3, tmp_path) -> str:
    return s3.upload(packed(tmp_path, "ds", count=4), "ds")


def secrets_of(text: str, *secrets: str) -> list[str]:
    """The secrets found in ``text``, as written or base64-encoded (a Basic header)."""
    found = [secret for secret in secrets if secret in text]
    encoded = base64.b64encode(f"user:{PASSWORD}".encode()).decode()
    return found + (["base64 of the endpoint's user:password"] if encoded in text else [])


def test_debug_logs_of_the_client_show_no_session_token_or_key_id(dataset, s3, monkeypatch):
    monkeypatch.setenv("AWS_SESSION_TOKEN", TOKEN)
    process = run("-vv", "inspect", dataset, timeout=120)
    assert process.returncode == 0, process.stderr[-2000:]
    assert "botocore" in process.stderr  # the debug records are there, scrubbed
    assert secrets_of(process.stdout + process.stderr, TOKEN, s3.secret,
                      os.environ["AWS_ACCESS_KEY_ID"]) == []


def test_debug_logs_show_no_password_of_the_endpoint_url(dataset, s3_server, monkeypatch):
    # aiohttp refuses such a URL beside botocore's signature: the command fails (exit 1,
    # after its attempts), and its records of each attempt name the endpoint
    monkeypatch.setenv("AWS_ENDPOINT_URL",
                       s3_server.replace("http://", f"http://user:{PASSWORD}@"))
    process = run("-vv", "log", dataset, *SHORT, timeout=120)
    assert "url=http://***@127.0.0.1" in process.stderr
    assert secrets_of(process.stdout + process.stderr, PASSWORD) == []


def test_debug_logs_show_no_token_given_as_a_storage_option(dataset, s3):
    process = run("-vv", "log", dataset, "--storage", f"token={OPTION_TOKEN}", timeout=120)
    assert process.returncode == 0, process.stderr[-2000:]
    assert "botocore" in process.stderr
    assert secrets_of(process.stdout + process.stderr, OPTION_TOKEN, s3.secret,
                      os.environ["AWS_ACCESS_KEY_ID"]) == []


@pytest.mark.parametrize("password", ["pa/ss-never-printed", "p@ss-never-printed"])
def test_a_password_of_any_url_is_scrubbed_up_to_its_last_at(password):
    """A password its writer did not escape (a ``/``, an ``@``) is scrubbed whole, in a URL of
    a message as in the endpoint URL itself, whose password is then known by value."""
    from shardsmith.storage import _userinfo, scrub

    url = f"http://user:{password}@127.0.0.1:9000"
    assert scrub(f"Custom endpoint `{url}` was not a valid URI") == \
        "Custom endpoint `http://***@127.0.0.1:9000` was not a valid URI"
    assert scrub(f"retrying with {password!r}", _userinfo(url)) == "retrying with '***'"
