"""`pack` from and to a bucket, the rest of it: annotation files read from the bucket, a dry run
of a pack to a bucket, `pack --storage`.  Against a local S3 server (``moto_server``) and a
fault proxy in front of it (tests/s3server.py), through the real s3fs client; nothing of
shardsmith is mocked.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from shardsmith import load_config, pack
from shardsmith.cli import main

import defects
import images

pytest_plugins = ("s3server",)  # its fixtures: s3, fault_proxy, s3_server

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

RELPATHS = ["parts/o1.jpg", "parts/o6.jpg", "scrap/o3.jpg", "scrap/o8.jpg"]
# What a sample index may say differently of an object than of a file: when it was written,
# and (through its own annotation files' ETag in place of their mtime) the annotation digest.
OBJECT_DEFINED = ("source_mtime_ns", "annotation_digest")


def annotated(source: Path, *formats: str) -> dict:
    """Four originals with drawn defects, annotated in ``formats``; the overrides that read
    them."""
    for relpath in RELPATHS:
        images.write(source / relpath, defects.original(int(relpath[-5])))
    overrides: dict = {}
    for fmt in formats:
        overrides |= defects.write_annotations(source, RELPATHS, fmt)
    return overrides


def pack_in_process(source: str, output: Path, overrides: dict, **more) -> dict:
    pack(load_config(None, {"source.path": source, "output.path": str(output),
                            "run.quiet": True, "run.workers": 1, "image.size": 128,
                            **overrides, **more}))
    return images.manifest_of(output)


def shards_and_indexes(output: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(output.iterdir())
            if path.is_file() and path.name != "manifest.json"
            and not path.name.startswith("samples")}


def sample_lines(output: Path, drop: tuple[str, ...] = ()) -> list[dict]:
    return [{key: value for key, value in line.items() if key not in drop}
            for line in images.samples_of(output)]


@pytest.mark.parametrize("formats", [("coco",), ("yolo", "mask")], ids=["coco", "yolo+masks"])
def test_an_annotated_pack_from_a_bucket_has_the_local_packs_shards_byte_for_byte(
        tmp_path, s3, formats):
    source = tmp_path / "source"
    overrides = annotated(source, *formats)
    url = s3.upload(source, "originals")
    local = pack_in_process(str(source), tmp_path / "local", overrides)
    remote = pack_in_process(url, tmp_path / "remote", overrides)

    assert local["totals"]["packed"] == remote["totals"]["packed"] == 4
    assert not remote["rejects"]
    assert remote["object_classes"] == local["object_classes"]
    assert shards_and_indexes(tmp_path / "remote") == shards_and_indexes(tmp_path / "local")
    assert sample_lines(tmp_path / "remote", OBJECT_DEFINED) == \
        sample_lines(tmp_path / "local", OBJECT_DEFINED)
    # the annotations were read: every sample has objects of both defect classes
    assert all(len(sample["objects"]) == 2 and min(sample["objects"]) >= 1
               for sample in images.samples_of(tmp_path / "remote"))


def test_a_rerun_reads_no_annotation_file_and_an_edited_one_repacks_its_image_alone(
        tmp_path, s3, fault_proxy, monkeypatch):
    source = tmp_path / "source"
    overrides = annotated(source, "yolo", "mask")
    url = s3.upload(source, "originals")
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    first = pack_in_process(url, tmp_path / "out", overrides)
    assert len(fault_proxy.gets(".txt")) == 4 and len(fault_proxy.gets("_mask.png")) == 4

    fault_proxy.requests.clear()
    again = pack_in_process(url, tmp_path / "out", overrides)
    assert again["version"] == first["version"]  # up to date: nothing new
    assert [path for path in fault_proxy.gets() if "list-type" not in path] == []

    # the same box moved: same size, another ETag
    text = (source / "scrap/o3.txt").read_text()
    s3.put("originals/scrap/o3.txt", text.replace("0 0.", "1 0.", 1).encode())
    fault_proxy.requests.clear()
    changed = pack_in_process(url, tmp_path / "out", overrides)
    assert changed["version"] == first["version"] + 1
    assert [path.split("?")[0].rsplit("/", 1)[-1] for path in fault_proxy.gets(".jpg")] == \
        ["o3.jpg"]


def test_a_labels_file_in_the_bucket_gives_the_labels_of_the_local_pack(tmp_path, s3):
    source = tmp_path / "source"
    for number, relpath in enumerate(RELPATHS):
        images.write(source / relpath, images.jpeg(160, 120, number))
    (source / "labels.csv").write_text("path,label\n" + "".join(
        f"{relpath},{'good' if number % 2 else 'bad'}\n"
        for number, relpath in enumerate(RELPATHS)))
    overrides = {"source.labels": "file", "source.annotations.labels": "labels.csv"}
    url = s3.upload(source, "originals")
    local = pack_in_process(str(source), tmp_path / "local", overrides)
    remote = pack_in_process(url, tmp_path / "remote", overrides)
    assert remote["classes"] == local["classes"] == ["bad", "good"]
    assert shards_and_indexes(tmp_path / "remote") == shards_and_indexes(tmp_path / "local")
    assert sample_lines(tmp_path / "remote", OBJECT_DEFINED) == \
        sample_lines(tmp_path / "local", OBJECT_DEFINED)


def test_a_coco_file_missing_from_the_bucket_is_one_line_and_exit_2(tmp_path, s3):
    source = tmp_path / "source"
    annotated(source)
    url = s3.upload(source, "originals")
    job = tmp_path / "job.yaml"
    job.write_text("source:\n  annotations:\n    coco: annotations/instances.json\n")
    result = CliRunner().invoke(main, ["pack", url, str(tmp_path / "out"), "--config",
                                       str(job), "--quiet"])
    assert result.exit_code == 2, result.output
    assert "source.annotations.coco: 'annotations/instances.json' does not exist" in \
        result.output
    assert "Traceback" not in result.output and len(result.output.splitlines()) == 1


def test_an_annotation_path_leading_out_of_the_bucket_prefix_is_refused(tmp_path, s3):
    source = tmp_path / "source"
    annotated(source)
    url = s3.upload(source, "originals")
    job = tmp_path / "job.yaml"
    job.write_text("source:\n  annotations:\n    coco: ../elsewhere/instances.json\n")
    result = CliRunner().invoke(main, ["pack", url, str(tmp_path / "out"), "--config",
                                       str(job), "--quiet"])
    assert result.exit_code == 2, result.output
    assert "leads out of the s3:// source prefix" in result.output
    assert "Traceback" not in result.output


def small_tree(root: Path) -> Path:
    for number, relpath in enumerate(RELPATHS):
        images.write(root / relpath, images.jpeg(160, 120, number))
    return root


def test_a_dry_run_to_a_bucket_names_its_url_and_writes_nothing(tmp_path, s3, monkeypatch):
    monkeypatch.setenv("SHARDSMITH_SPOOL", str(tmp_path / "spool"))
    monkeypatch.chdir(tmp_path)
    source = small_tree(tmp_path / "source")
    url = f"{s3.url}/datasets/parts"
    result = CliRunner().invoke(main, ["pack", str(source), url, "--dry-run", "--size", "72"])
    assert result.exit_code == 0, result.output
    assert url in result.output and "holds no dataset" in result.output
    assert "s3:/" + s3.name not in result.output.replace(url, "")  # not a local path
    assert s3.fs.find(s3.name) == [] and not (tmp_path / "spool").exists()
    assert not (tmp_path / "s3:").exists()

    packed = CliRunner().invoke(main, ["pack", str(source), url, "--size", "72", "--quiet"])
    assert packed.exit_code == 0, packed.output
    again = CliRunner().invoke(main, ["pack", str(source), url, "--dry-run", "--size", "72"])
    assert again.exit_code == 0, again.output
    assert "holds version 1" in again.output


def test_pack_storage_options_reach_s3fs_over_the_job_files_and_are_never_written(
        tmp_path, s3, s3_server, monkeypatch):
    url = s3.upload(small_tree(tmp_path / "source"), "originals")
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    job = tmp_path / "job.yaml"  # an endpoint that answers nothing, replaced by --storage
    job.write_text("storage:\n  endpoint_url: http://127.0.0.1:9\n")
    secret = "pack-storage-secret-8d1e"
    output = tmp_path / "out"
    result = CliRunner().invoke(main, [
        "pack", url, str(output), "--config", str(job), "--size", "72", "--quiet",
        "--report", str(tmp_path / "report.json"), "--storage", f"endpoint_url={s3_server}",
        "--storage", "key=pack-storage-key", "--storage", f"secret={secret}"])
    assert result.exit_code == 0, result.output
    assert images.manifest_of(output)["totals"]["packed"] == 4
    written = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert written and all(secret.encode() not in path.read_bytes() for path in written)
    assert secret not in result.output


def test_an_unknown_pack_storage_key_is_one_line_naming_the_key_not_the_value(tmp_path):
    result = CliRunner().invoke(main, ["pack", "s3://bucket/originals", str(tmp_path / "out"),
                                       "--storage", "passwrd=hunter2-hunter2"])
    assert result.exit_code == 2, result.output
    assert "'passwrd'" in result.output and "hunter2" not in result.output
    assert "Traceback" not in result.output


def test_probe_of_a_bucket_is_refused_in_one_line(tmp_path, s3):
    url = s3.upload(small_tree(tmp_path / "source"), "originals")
    for command in (["probe", url], ["pack", url, str(tmp_path / "out"), "--dry-run",
                                     "--probe"]):
        result = CliRunner().invoke(main, [*command, "--quiet"] if command[0] == "probe"
                                    else command)
        assert result.exit_code == 2, result.output
        assert result.output.splitlines() == [
            f"shardsmith: error: source.path: {url}: the probe measures a local or mounted "
            "tree, not an s3:// source (pack --dry-run counts a bucket without --probe)"]


def test_a_dry_run_of_an_annotated_bucket_checks_its_annotations(tmp_path, s3):
    source = tmp_path / "source"
    annotated(source, "yolo")
    (source / "parts/o6.txt").write_text("7 0.5 0.5 0.1 0.1\n")  # an id past the classes
    url = s3.upload(source, "originals")
    result = CliRunner().invoke(main, [
        "pack", url, str(tmp_path / "out"), "--dry-run", "--size", "72", "--config",
        str(write_job(tmp_path, "files: yolo\n    classes: [scratch, dent]\n"))])
    assert result.exit_code == 3, result.output  # a class the job does not list: as a pack
    assert "parts/o6.txt" in result.output
    assert not (tmp_path / "out").exists()


def write_job(tmp_path: Path, annotations: str) -> Path:
    job = tmp_path / "job.yaml"
    job.write_text(f"source:\n  annotations:\n    {annotations}")
    return job
