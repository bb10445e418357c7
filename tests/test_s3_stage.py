"""An ``s3://`` dataset: `stage`, `verify`, `log` and `inspect` through the real s3fs client,
against a local S3 server (``moto_server``) and a fault proxy in front of it (tests/s3server.py).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

from shardsmith.cli import main
from shardsmith.door import MANIFEST_CAP, Refused, open_file, read_file
from shardsmith.errors import ConfigError, ManifestError, StageError
from shardsmith.ops.stage import stage
from shardsmith.ops.verify import verify
from shardsmith.storage import locate

import images

pytest_plugins = ("s3server",)  # its fixtures: s3, fault_proxy, s3_server

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def packed(tmp_path: Path, fmt: str = "webdataset") -> Path:
    source = tmp_path / "source"
    for number in range(12):
        images.write(source / ("ab"[number % 2]) / f"{number}.jpg",
                     images.jpeg(300, 200, number))
    return images.pack_small(source, tmp_path / "packed", fmt, 64, "train=0.5,val=0.5")


def tree(folder: Path) -> dict[str, str]:
    """Every file of the dataset but its manifest (which says where and when it was staged
    from) and its state folder: name -> sha256."""
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.iterdir())
            if path.is_file() and path.name != "manifest.json"}


def shard_files(dataset: Path) -> list[str]:
    manifest = images.manifest_of(dataset)
    return [entry[kind]["name"] if kind else entry["name"] for entry in manifest["shards"]
            for kind in (None, "index") if kind is None or entry.get(kind)]


def manifest_without_staging(folder: Path) -> dict:
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest.pop("staged", None)
    return manifest


@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord"])
def test_a_stage_from_s3_is_byte_identical_to_a_local_stage(tmp_path, s3, fmt):
    dataset = packed(tmp_path, fmt)
    url = s3.upload(dataset, "ds")
    local = stage(dataset, tmp_path / "local", quiet=True)
    remote = stage(url, tmp_path / "remote", quiet=True)
    assert remote.copied == local.copied == len(shard_files(dataset))
    assert tree(tmp_path / "remote") == tree(tmp_path / "local")
    assert manifest_without_staging(tmp_path / "remote") == \
        manifest_without_staging(tmp_path / "local")
    assert images.manifest_of(tmp_path / "remote")["staged"]["from"] == url
    assert verify(tmp_path / "remote", decode=True).ok


def test_a_restage_from_s3_copies_nothing_and_reads_no_shard(tmp_path, s3, fault_proxy,
                                                              monkeypatch):
    url = s3.upload(packed(tmp_path), "ds")
    stage(url, tmp_path / "nvme", quiet=True)
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    again = stage(url, tmp_path / "nvme", quiet=True)
    assert again.copied == 0 and again.bytes_copied == 0
    assert fault_proxy.gets(".tar") == [] and fault_proxy.gets(".idx") == []


@pytest.mark.parametrize("kind", ["503", "reset"])
def test_failed_requests_are_retried_and_the_stage_finishes_right(tmp_path, s3, fault_proxy,
                                                                  monkeypatch, kind):
    dataset = packed(tmp_path)
    url = s3.upload(dataset, "ds")
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    fault_proxy.fail(kind, 2, 5, 9)  # the manifest's HEAD, then shard reads
    result = stage(url, tmp_path / "nvme", quiet=True)
    assert len(fault_proxy.requests) > 9  # every fault was met
    assert result.copied == len(shard_files(dataset))
    assert tree(tmp_path / "nvme") == tree(stage(dataset, tmp_path / "local",
                                                 quiet=True).destination)
    assert verify(tmp_path / "nvme").ok


def test_a_slow_server_only_slows_the_stage(tmp_path, s3, fault_proxy, monkeypatch):
    dataset = packed(tmp_path)
    url = s3.upload(dataset, "ds")
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    fault_proxy.delay = 0.2
    fault_proxy.every("delay", 3)
    assert stage(url, tmp_path / "nvme", quiet=True, workers=8).copied == \
        len(shard_files(dataset))
    assert verify(tmp_path / "nvme").ok


def test_a_stage_cut_by_an_error_resumes_where_it_stopped(tmp_path, s3, fault_proxy,
                                                          monkeypatch):
    dataset = packed(tmp_path)
    url = s3.upload(dataset, "ds")
    files = shard_files(dataset)
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    fault_proxy.fail("403", 12)  # refused, not retried: the stage stops with an error
    with pytest.raises(PermissionError):
        stage(url, tmp_path / "nvme", quiet=True, workers=1)
    assert not (tmp_path / "nvme" / "manifest.json").exists()  # nothing committed
    copied_before = {name for name in files if (tmp_path / "nvme" / name).exists()}
    assert 0 < len(copied_before) < len(files)
    fault_proxy.heal()
    resumed = stage(url, tmp_path / "nvme", quiet=True)
    assert resumed.copied == len(files) - len(copied_before)
    assert verify(tmp_path / "nvme").ok


def test_an_object_that_differs_from_the_manifest_is_refused_by_name(tmp_path, s3):
    dataset = packed(tmp_path)
    url = s3.upload(dataset, "ds")
    name = shard_files(dataset)[0]
    data = bytearray((dataset / name).read_bytes())
    data[600] ^= 0xFF
    s3.put(f"ds/{name}", bytes(data))  # same size, other bytes
    with pytest.raises(StageError, match=name):
        stage(url, tmp_path / "nvme", quiet=True)
    assert not (tmp_path / "nvme" / name).exists()
    assert not (tmp_path / "nvme" / "manifest.json").exists()
    report = verify(url)
    assert report.problems == [f"{name}: sha256 differs from the manifest (corrupt)"]


def test_an_object_of_another_size_is_refused_before_it_is_copied(tmp_path, s3):
    dataset = packed(tmp_path)
    url = s3.upload(dataset, "ds")
    name = shard_files(dataset)[0]
    s3.put(f"ds/{name}", (dataset / name).read_bytes() + b"\0" * 4096)
    with pytest.raises(StageError, match=f"{name}: .* bytes in the source, the manifest says"):
        stage(url, tmp_path / "nvme", quiet=True)


def test_a_prefix_where_a_shard_should_be_is_refused_as_not_an_object(tmp_path, s3):
    dataset = packed(tmp_path)
    url = s3.upload(dataset, "ds")
    name = shard_files(dataset)[0]
    s3.fs.rm(f"{s3.name}/ds/{name}")
    s3.put(f"ds/{name}/inside", b"x")
    with pytest.raises(StageError, match=f"{name}: refused: it is not an object"):
        stage(url, tmp_path / "nvme", quiet=True)
    assert any(problem.startswith(f"{name}: not a regular file")
               for problem in verify(url).problems)


def test_a_missing_object_names_itself(tmp_path, s3):
    dataset = packed(tmp_path)
    url = s3.upload(dataset, "ds")
    name = shard_files(dataset)[1]
    s3.fs.rm(f"{s3.name}/ds/{name}")
    with pytest.raises(StageError, match=f"{name} is missing"):
        stage(url, tmp_path / "nvme", quiet=True)
    assert f"{name}: missing" in verify(url).problems


def test_a_hostile_name_in_an_s3_manifest_is_refused_before_any_copy(tmp_path, s3):
    dataset = packed(tmp_path)
    manifest = images.manifest_of(dataset)
    manifest["shards"][0]["name"] = "../x"
    url = s3.upload(dataset, "ds")
    s3.put("ds/manifest.json", json.dumps(manifest).encode())
    with pytest.raises(ManifestError, match="shards"):
        stage(url, tmp_path / "nvme", quiet=True)
    assert not list((tmp_path / "nvme").glob("*.tar"))
    result = CliRunner().invoke(main, ["verify", url])
    assert result.exit_code == 2 and result.output.count("\n") == 1


@pytest.mark.parametrize("url", ["s3://bucket/ds/../other", "s3://bucket//ds", "s3://bucket/ds/",
                                 "s3://Bad_Bucket/ds", "s3://key:secret@bucket/ds"])
def test_a_url_that_breaks_the_rules_of_names_is_one_line_exit_2(tmp_path, url):
    pytest.importorskip("s3fs")
    with pytest.raises(ConfigError):
        locate(url)
    result = CliRunner().invoke(main, ["stage", url, "--to", str(tmp_path / "nvme")])
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output
    assert "secret" not in result.output


def test_verify_and_log_and_inspect_of_an_s3_dataset(tmp_path, s3):
    dataset = packed(tmp_path)
    url = s3.upload(dataset, "ds")
    runner = CliRunner()
    verified = runner.invoke(main, ["verify", url])
    assert verified.exit_code == 0, verified.output
    assert "note: --decode" not in verified.output
    logged = runner.invoke(main, ["log", url])
    assert logged.exit_code == 0 and logged.output == runner.invoke(
        main, ["log", str(dataset)]).output
    inspected = runner.invoke(main, ["inspect", url, "--json"])
    assert inspected.exit_code == 0, inspected.output
    local = runner.invoke(main, ["inspect", str(dataset), "--json"])
    remote_document, local_document = json.loads(inspected.output), json.loads(local.output)
    assert remote_document.pop("dataset") == url
    local_document.pop("dataset")
    assert remote_document == local_document


def test_verify_of_s3_finds_an_unlisted_shard_object(tmp_path, s3):
    url = s3.upload(packed(tmp_path), "ds")
    s3.put("ds/train-999999.tar", b"stray")
    assert verify(url).problems == ["train-999999.tar: shard file not listed in the manifest"]


def test_the_secret_never_appears_in_the_output_of_a_failing_run(tmp_path, s3, fault_proxy,
                                                                 monkeypatch, caplog):
    secret = s3.secret  # the AWS_SECRET_ACCESS_KEY of the test, and an option below
    dataset = packed(tmp_path)
    url = s3.upload(dataset, "ds")
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    caplog.set_level(logging.DEBUG, logger="shardsmith")
    runner = CliRunner()
    outputs = []
    fault_proxy.fail("403", 4)
    outputs.append(runner.invoke(main, ["-v", "stage", url, "--to", str(tmp_path / "nvme"),
                                        "--storage", f"secret={secret}"]))
    fault_proxy.every("403", 1)
    for command in (["verify", url], ["log", url], ["inspect", url],
                    ["stage", url, "--to", str(tmp_path / "other")],
                    ["stage", url, "--to", str(tmp_path / "other"),
                     "--storage", f"nonsense={secret}"]):
        outputs.append(runner.invoke(main, command))
    for result in outputs:
        assert result.exit_code != 0, result.output
        assert result.output.count("\n") == 1, result.output
        assert secret not in result.output
        assert result.exception is None or secret not in str(result.exception)
    assert secret not in caplog.text
    assert all(secret not in path.read_text(errors="replace")
               for path in tmp_path.rglob("*") if path.is_file())


def test_the_door_opens_an_object_as_it_opens_a_file(tmp_path, s3):
    dataset = packed(tmp_path)
    root = locate(s3.upload(dataset, "ds"))
    manifest = (dataset / "manifest.json").read_bytes()
    assert read_file(root / "manifest.json", MANIFEST_CAP) == manifest
    with open_file(root / "manifest.json", MANIFEST_CAP) as handle:
        assert handle.size == len(manifest)
        assert handle.pread(10, 5) == manifest[5:15]
        assert handle.pread(100, len(manifest) - 4) == manifest[-4:]
    with pytest.raises(Refused) as too_large:
        open_file(root / "manifest.json", len(manifest) - 1)
    assert too_large.value.reason == "too_large"
    with pytest.raises(Refused) as prefix:
        open_file(locate(f"{s3.url}/ds/.shardsmith"), MANIFEST_CAP)
    assert prefix.value.reason == "not_a_file"
    with pytest.raises(FileNotFoundError):
        open_file(root / "no-such-object", MANIFEST_CAP)
    with pytest.raises(Refused) as beyond:
        open_file(root / "manifest.json", len(manifest)).pread(2, len(manifest) - 1)
    assert beyond.value.reason == "too_large"


def test_the_command_line_stages_an_s3_dataset_and_verifies_the_copy(tmp_path, s3):
    url = s3.upload(packed(tmp_path), "ds")
    runner = CliRunner()
    staged = runner.invoke(main, ["stage", url, "--to", str(tmp_path / "nvme"), "--quiet"])
    assert staged.exit_code == 0, staged.output
    verified = runner.invoke(main, ["verify", str(tmp_path / "nvme"), "--decode"])
    assert verified.exit_code == 0, verified.output


def test_inspect_of_an_s3_dataset_refuses_what_needs_the_shards_on_disk(tmp_path, s3):
    url = s3.upload(packed(tmp_path), "ds")
    result = CliRunner().invoke(main, ["inspect", url, "--quality", "2"])
    assert result.exit_code == 2 and "stage" in result.output
    assert result.output.count("\n") == 1
