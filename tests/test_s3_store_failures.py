"""A store that fails (a 500 after every attempt, a reset, no answer) is exit 1 for every
command, "the store failed, rerun", never exit 2, which says the input is bad: the listing of
an ``s3://`` source by ``pack``, and the reads of a dataset's sample index and shard indexes.
Against a real S3 server on 127.0.0.1 behind the fault proxy (tests/s3server.py).
"""

from __future__ import annotations

import pytest
from hostile_helpers import PACK_ARGS, cli, one_error_line, originals, packed

from shardsmith import storage

pytest_plugins = ("s3server",)  # its fixtures: s3, fault_proxy, s3_server

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

# The faults here (a 500, a reset) answer at once, so the timeouts bound only the requests
# that succeed: a second each failed a manifest GET on a machine at load 8.
SHORT = ("--storage", "connect_timeout=5", "--storage", "read_timeout=10")



@pytest.fixture(autouse=True)
def two_attempts(monkeypatch):
    """Every fault here is for good: two attempts reach the give-up path as six do, without
    the retries' backoff (this file took 177 s with six)."""
    monkeypatch.setattr(storage, "ATTEMPTS", 2)


@pytest.fixture
def through_proxy(fault_proxy, monkeypatch):
    """The commands reach the server through the proxy (setting up goes straight to it)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    return fault_proxy


@pytest.fixture
def dataset(s3, tmp_path) -> str:
    return s3.upload(packed(tmp_path, "ds"), "ds")


@pytest.mark.parametrize("fault", ["500", "reset"])
def test_a_store_failing_the_listing_of_a_source_stops_pack_with_exit_1(tmp_path, s3,
                                                                        through_proxy, fault):
    url = s3.upload(originals(tmp_path / "source"), "source")
    through_proxy.on(fault, s3.name)  # every LIST of the bucket (GET /bucket?list-type=2...)
    line = one_error_line(cli("pack", url, tmp_path / "out", *PACK_ARGS, *SHORT), 1)
    assert "source.path" not in line and not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.parametrize("command", [
    ("export", "{url}", "{tmp}/out", "--layout", "yolo"), ("stage", "{url}", "--to",
    "{tmp}/staged"), ("inspect", "{url}"), ("report", "{url}", "-o", "{tmp}/report.html")])
def test_a_500_on_the_sample_index_is_exit_1_whatever_the_command(tmp_path, dataset,
                                                                  through_proxy, command):
    through_proxy.on("500", "samples-v1.jsonl")
    argv = [part.replace("{url}", dataset).replace("{tmp}", str(tmp_path)) for part in command]
    result = cli(*argv, *SHORT, "--quiet") if command[0] == "stage" else cli(*argv, *SHORT)
    line = one_error_line(result, 1)
    assert "samples-v1.jsonl" in line


def test_a_500_on_a_shard_index_is_exit_1_for_inspect_weights(dataset, through_proxy):
    through_proxy.on("500", ".idx")
    line = one_error_line(cli("inspect", dataset, "--weights", "a=2,*=1", *SHORT), 1)
    assert ".idx" in line


def test_a_profile_that_does_not_exist_is_a_configuration_error_exit_2(dataset, monkeypatch):
    """No rerun finds a missing profile: exit 2 (the settings), not exit 1 (the store)."""
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    line = one_error_line(cli("inspect", dataset, "--storage", "profile=no-such-profile",
                              *SHORT), 2)
    assert "no-such-profile" in line and "settings" in line
