"""`export`, `sheet` and `report` of an ``s3://`` dataset: read from the bucket through the real
s3fs client against a local S3 server (tests/s3server.py), written locally, and the same as
from a local copy of the dataset.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from PIL import Image

from shardsmith.cli import main
from shardsmith.dataset.manifest import read_manifest
from shardsmith.errors import ManifestError
from shardsmith.insight.htmlreport import ReportOptions, render_report
from shardsmith.insight.sheet import render_sheet
from shardsmith.ops.export import export
from shardsmith.storage import locate

import defects
import images

pytest_plugins = ("s3server",)  # its fixtures: s3, fault_proxy, s3_server

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

TILES = {"image.tiles.size": 96, "image.tiles.overlap": 16, "image.tiles.keep": "all"}


def annotated(tmp_path: Path, fmt: str) -> Path:
    """An annotated dataset (boxes, masks) of two splits, as tests/test_export.py packs it."""
    source = tmp_path / "source"
    for split, name in (("train", "a"), ("train", "b"), ("val", "c")):
        path = images.write(source / split / "defect" / f"{name}.jpg",
                            defects.corpus_original("jpeg8", 1))
        defects.write_corpus_annotations(path.with_suffix(""))
    for split in ("train", "val"):
        images.write(source / split / "good" / f"clean_{split}.jpg",
                     defects.corpus_original("jpeg8", 1, with_defects=False))
    defects.pack_with(source, tmp_path / "ds", {
        **defects.CORPUS_ANNOTATIONS, **TILES, "splits.folder": True,
        "splits": "train=0.8,val=0.2", "output.format": fmt, "output.shard_samples": 4})
    return tmp_path / "ds"


def files_of(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by its path there (the export record less the inode
    numbers of the files, which are each folder's own)."""
    files = {path.relative_to(folder).as_posix(): path.read_bytes()
             for path in sorted(folder.rglob("*")) if path.is_file()}
    files[".export/record.json"] = re.sub(rb'"inode":\d+', b"", files[".export/record.json"])
    return files


def exported_both_ways(dataset: Path, url: str, destination: Path,
                       layout: str) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """The files of ``layout`` exported from the local dataset and from its URL, each into
    the same ``destination`` (which ``data.yaml`` names), the first moved away after."""
    export(dataset, destination, layout, quiet=True)
    destination.rename(destination.with_name("local"))
    export(url, destination, layout, quiet=True)
    return (files_of(destination.with_name("local") / "v1"),
            files_of(destination / "v1"))


@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord"])
@pytest.mark.parametrize("layout", ["yolo", "coco", "anomalib"])
def test_an_export_from_s3_has_every_file_of_the_export_of_a_local_copy(tmp_path, s3, fmt,
                                                                         layout):
    dataset = annotated(tmp_path, fmt)
    url = s3.upload(dataset, "ds")
    local, remote = exported_both_ways(dataset, url, tmp_path / "out", layout)
    assert len(images.manifest_of(dataset)["shards"]) > 1
    assert len(local) > 10 and remote == local


def test_a_second_export_from_s3_reads_no_shard(tmp_path, s3, fault_proxy, monkeypatch):
    url = s3.upload(annotated(tmp_path, "webdataset"), "ds")
    assert export(url, tmp_path / "out", "coco", quiet=True).shards_read > 0
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    again = export(url, tmp_path / "out", "coco", quiet=True)
    assert again.up_to_date and fault_proxy.gets(".tar") == []


def test_an_export_from_s3_is_slowed_not_broken_by_failing_requests(tmp_path, s3, fault_proxy,
                                                                    monkeypatch):
    dataset = annotated(tmp_path, "webdataset")
    url = s3.upload(dataset, "ds")
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    fault_proxy.every("503", 4)
    local, remote = exported_both_ways(dataset, url, tmp_path / "out", "yolo")
    assert remote == local
    assert len(fault_proxy.requests) >= 8  # so at least two answered 503 and were retried


def test_a_shard_object_whose_bytes_differ_stops_the_export_before_the_switch(tmp_path, s3):
    dataset = annotated(tmp_path, "webdataset")
    url = s3.upload(dataset, "ds")
    shard = images.manifest_of(dataset)["shards"][0]["name"]
    data = bytearray((dataset / shard).read_bytes())
    data[-1] ^= 0xFF  # in the tar's trailer: every record still parses
    s3.put(f"ds/{shard}", bytes(data))
    with pytest.raises(ManifestError, match="sha256 is not the manifest's") as caught:
        export(url, tmp_path / "out", "coco", quiet=True)
    assert f"{url}/{shard}" in str(caught.value)
    assert not (tmp_path / "out" / "current").exists()


def test_a_shard_object_larger_than_the_manifest_says_is_refused_unread(tmp_path, s3,
                                                                        fault_proxy,
                                                                        monkeypatch):
    dataset = annotated(tmp_path, "webdataset")
    url = s3.upload(dataset, "ds")
    shard = images.manifest_of(dataset)["shards"][0]["name"]
    s3.put(f"ds/{shard}", (dataset / shard).read_bytes() + bytes(512))
    monkeypatch.setenv("AWS_ENDPOINT_URL", fault_proxy.url)
    result = CliRunner().invoke(main, ["export", url, str(tmp_path / "out"), "--layout",
                                       "coco", "--quiet"])
    assert result.exit_code == 2 and result.output.count("\n") == 1
    assert f"{url}/{shard}" in result.output and "more than" in result.output
    assert fault_proxy.gets(shard) == []


def test_a_sheet_of_s3_draws_the_samples_of_a_sheet_of_the_local_copy(tmp_path, s3):
    dataset = annotated(tmp_path, "tfrecord")
    url = s3.upload(dataset, "ds")
    local = render_sheet(dataset, read_manifest(dataset), 3, 7, objects=True)
    remote_location = locate(url)
    remote = render_sheet(remote_location, read_manifest(remote_location), 3, 7, objects=True)
    assert remote.image.size == local.image.size
    assert remote.rows == local.rows and remote.objects == local.objects
    boxes = [box for row in local.rows for box in row.thumbnails]
    assert boxes
    for box in boxes:  # what the title and footer say differs: the dataset's location
        assert remote.image.crop(box).tobytes() == local.image.crop(box).tobytes()


def test_the_sheet_command_draws_an_s3_dataset_into_a_local_png(tmp_path, s3):
    url = s3.upload(annotated(tmp_path, "webdataset"), "ds")
    result = CliRunner().invoke(main, ["sheet", url, "-o", str(tmp_path / "sheet.png"),
                                       "--per-class", "2"])
    assert result.exit_code == 0, result.output
    with Image.open(tmp_path / "sheet.png") as picture:
        assert picture.format == "PNG"


def two_versions(tmp_path: Path) -> Path:
    source, output = tmp_path / "source", tmp_path / "ds"
    for number in range(6):
        images.write(source / "ok" / f"a{number}.jpg", images.jpeg(96, 64, number))
        images.write(source / "dent" / f"b{number}.png", images.png(64, 96, 10 + number))
    images.pack_small(source, output, "webdataset", 64, "train=0.5,val=0.5")
    images.write(source / "dent" / "new.jpg", images.jpeg(80, 80, 21))
    images.write(source / "dent" / "cut.jpg", images.truncated_jpeg())
    images.pack_small(source, output, "webdataset", 64, "train=0.5,val=0.5")
    return output


def test_a_report_of_s3_is_the_report_of_the_local_copy_but_for_its_location(tmp_path, s3):
    dataset = two_versions(tmp_path)
    url = s3.upload(dataset, "ds")
    options = ReportOptions(samples_shown=6)
    local = render_report(dataset, read_manifest(dataset), options)
    remote_location = locate(url)
    remote = render_report(remote_location, read_manifest(remote_location), options)
    assert not local.diff_note and local.samples_shown > 0
    # but for the near-duplicates: checking them reads shards, and a report does not copy a
    # bucket's dataset for that (it says to stage it)
    section = re.compile(r'<section id="near-duplicates">.*?</section>', re.S)
    assert "stage the dataset" in section.search(remote.html).group()
    assert section.sub("", remote.html.replace(url, str(dataset))) == section.sub("", local.html)


def test_a_report_of_s3_says_why_there_is_no_diff_when_its_changes_file_is_gone(tmp_path,
                                                                                 s3):
    dataset = two_versions(tmp_path)
    url = s3.upload(dataset, "ds")
    changes = images.manifest_of(dataset)["changes"][-1]["name"]
    s3.fs.rm_file(f"{s3.name}/ds/{changes}")
    result = CliRunner().invoke(main, ["report", url, "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    assert f"no diff: {url}/{changes}: missing" in result.output


def test_sheet_report_and_export_of_a_missing_s3_dataset_are_one_line_exit_2(tmp_path, s3):
    url = f"{s3.url}/nothing-here"
    for args in (["sheet", url, "-o", str(tmp_path / "s.png")],
                 ["report", url, "-o", str(tmp_path / "r.html")],
                 ["export", url, str(tmp_path / "out"), "--layout", "coco"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, (args, result.output)
        assert result.output.count("\n") == 1 and "not a packed dataset" in result.output
    assert not (tmp_path / "out").exists()


def test_storage_options_for_a_local_dataset_are_refused(tmp_path):
    dataset = two_versions(tmp_path)
    result = CliRunner().invoke(main, ["sheet", str(dataset), "-o", str(tmp_path / "s.png"),
                                       "--storage", "region=eu-west-1"])
    assert result.exit_code == 2 and "only for an s3:// dataset" in result.output
