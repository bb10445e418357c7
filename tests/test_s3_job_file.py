"""Every command that takes a DATASET finds it the same way: the argument, else the job file's
``output.path``, and an ``s3://`` one is reached through the job file's ``storage:`` section
with ``--storage`` over it.  Against a real S3 server on 127.0.0.1 (tests/s3server.py) whose
endpoint and credentials are in the job file alone: no AWS variable is set.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hostile_helpers import REPO, cli, one_error_line, originals, packed
from s3server import ACCESS_KEY, SECRET

import images

pytest_plugins = ("s3server",)  # its fixtures: s3, fault_proxy, s3_server

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

PACK = {"image": {"size": 32}, "output": {"shard_samples": 3},
        "splits": {"train": 0.5, "val": 0.5}, "run": {"workers": 1, "quiet": True}}



@pytest.fixture
def job_only(s3, s3_server, tmp_path, monkeypatch):
    """A job file packing to the bucket, the endpoint and credentials in its ``storage:``
    section alone: every AWS variable is unset."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("SHARDSMITH_SPOOL", str(tmp_path / "spool"))
    job = {"source": {"path": str(originals(tmp_path / "source"))},
           "output": {**PACK["output"], "path": f"{s3.url}/ds"},
           **{key: value for key, value in PACK.items() if key != "output"},
           "stage": {"to": str(tmp_path / "staged")},
           "storage": {"endpoint_url": s3_server, "key": ACCESS_KEY, "secret": SECRET,
                       "region": "us-east-1"}}
    path = tmp_path / "job.yaml"
    path.write_text(json.dumps(job))  # JSON is YAML
    return path


def packed_twice(job: Path) -> Path:
    """Two versions in the bucket (six originals, then two more)."""
    assert cli("pack", "--config", job).exit_code == 0
    source = json.loads(job.read_text())["source"]["path"]
    for number in (6, 7):
        images.write(Path(source) / "a" / f"{number}.jpg", images.jpeg(96, 64, number))
    result = cli("pack", "--config", job)
    assert result.exit_code == 0, result.output
    return job


def test_make_nightly_packs_verifies_and_reports_a_bucket_named_only_in_the_job_file(
        job_only, tmp_path):
    venv = Path(sys.prefix)
    if shutil.which("make") is None or not (venv / "bin" / "shardsmith").exists():
        pytest.skip("needs make and the shardsmith script of the venv")
    report = tmp_path / "reports" / "nightly.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # -o: the venv counts as installed (make would otherwise reinstall the package into it)
    process = subprocess.run(
        ["make", "-s", "nightly", f"VENV={venv}", f"CONFIG={job_only}", f"REPORT={report}",
         "-o", f"{venv}/.installed-core"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stderr
    assert json.loads(report.read_text())["exit_code"] == 0
    assert "<html" in report.with_suffix(".html").read_text()
    assert SECRET not in process.stdout + process.stderr


def test_stage_with_a_job_file_reaches_the_bucket_its_storage_section_names(job_only,
                                                                              tmp_path):
    assert cli("pack", "--config", job_only).exit_code == 0
    result = cli("stage", "--config", job_only, "--quiet")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "staged" / "manifest.json").is_file()


@pytest.mark.parametrize("command", [
    ("verify",), ("log",), ("inspect",), ("diff",), ("sheet", "-o", "{tmp}/sheet.png"),
    ("report", "-o", "{tmp}/report.html"), ("export", "{tmp}/out", "--layout", "yolo"),
    ("inspect", "--weights", "a=2,*=1")])
def test_every_command_taking_a_dataset_reads_the_one_the_job_file_names(job_only, tmp_path,
                                                                        command):
    packed_twice(job_only)
    argv = [part.replace("{tmp}", str(tmp_path)) for part in command]
    result = cli(*argv, "--config", job_only)
    assert result.exit_code == 0, result.output


def test_storage_options_go_over_the_job_files_section(job_only, s3):
    assert cli("pack", "--config", job_only).exit_code == 0
    line = one_error_line(cli("log", "--config", job_only, "--storage",
                              "endpoint_url=http://127.0.0.1:9", "--storage",
                              "connect_timeout=1", "--storage", "read_timeout=1"), 1)
    assert "object storage" in line and SECRET not in line


def test_a_dataset_argument_goes_over_the_job_files_output_path(job_only, s3):
    assert cli("pack", "--config", job_only).exit_code == 0
    line = one_error_line(cli("log", f"{s3.url}/other", "--config", job_only), 2)
    assert f"{s3.url}/other" in line


def test_diff_of_a_bucket_says_what_changed(job_only, s3):
    packed_twice(job_only)
    result = cli("diff", f"{s3.url}/ds", "--config", job_only, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["samples"]["added"] == 2


def test_diff_versions_after_the_job_file_are_versions_not_a_dataset(job_only):
    packed_twice(job_only)
    result = cli("diff", "--config", job_only, "v1", "v2")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("v1 -> v2:")


def test_diff_names_a_buckets_url_unmangled(s3, tmp_path):
    dataset = packed(tmp_path, "ds")
    url = s3.upload(dataset, "ds")
    line = one_error_line(cli("diff", url), 2)
    assert f"{url}: the dataset has one version only" in line


def test_inspect_weights_of_a_bucket_draws_as_of_a_local_copy(s3, tmp_path):
    dataset = packed(tmp_path, "ds")
    url = s3.upload(dataset, "ds")
    local = cli("inspect", dataset, "--weights", "a=5,*=1", "--json")
    remote = cli("inspect", url, "--weights", "a=5,*=1", "--json")
    assert remote.exit_code == 0, remote.output
    assert json.loads(remote.output) == json.loads(local.output)


def test_an_unquoted_timeout_in_the_job_file_is_seconds(job_only):
    assert cli("pack", "--config", job_only).exit_code == 0
    job = json.loads(job_only.read_text())
    job["storage"] |= {"connect_timeout": 1, "read_timeout": 2.5}
    job_only.write_text(json.dumps(job))
    result = cli("log", "--config", job_only)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("value", ["garbage", "ture", ""])
def test_an_anon_that_is_not_true_or_false_is_refused(s3, value):
    line = one_error_line(cli("log", f"{s3.url}/ds", "--storage", f"anon={value}"), 2)
    assert "anon" in line and "true or false" in line
