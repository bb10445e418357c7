"""`sheet`, `report` and `inspect --quality` read originals only under a source the user names
(--source, or the job file given with --config), never under the `source` a dataset's
manifest records: a dataset is untrusted and must not choose what is read outside it."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from shardsmith.cli import main

import images
from images import manifest_of

pytest_plugins = ("s3server",)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

MAGENTA = (255, 0, 255)
SECRET_TEXT = b"aws_secret_access_key = SECRET-1234567890"


def pack(source: str, output: Path) -> None:
    result = CliRunner().invoke(main, ["pack", source, str(output), "--size", "64",
                                       "--workers", "1", "--quiet",
                                       "--max-reject-fraction", "1"])
    assert result.exit_code == 0, result.output


def magenta_png(size: int = 120) -> bytes:
    pixels = np.zeros((size, size, 3), np.uint8)
    pixels[:] = MAGENTA
    return images.encode(pixels, "PNG")


@pytest.fixture
def forged(tmp_path) -> tuple[Path, Path]:
    """A dataset whose manifest records ``source: "/"`` and rejects naming a private image
    and a credentials file elsewhere on the machine; returns (dataset, private folder)."""
    source, output = tmp_path / "source", tmp_path / "out"
    for number in range(3):
        images.write(source / "ok" / f"a{number}.jpg", images.jpeg(96, 64, number))
    images.write(source / "ok" / "cut.jpg", images.truncated_jpeg())
    pack(str(source), output)
    private = tmp_path / "private"
    images.write(private / "secret.png", magenta_png())
    images.write(private / "credentials.jpg", SECRET_TEXT)
    manifest = manifest_of(output)
    relative = str(private).lstrip("/")
    manifest["source"] = "/"
    manifest["rejects"] = [
        {**manifest["rejects"][0], "path": f"{relative}/secret.png", "reason": "corrupt"},
        {**manifest["rejects"][0], "path": f"{relative}/credentials.jpg",
         "reason": "not_an_image"}]
    manifest["totals"]["rejected"] = 2
    (output / "manifest.json").write_text(json.dumps(manifest))
    return output, private


def run(*args: str, expect: int = 0) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == expect, result.output
    return result.output


def has_magenta(png: Path) -> bool:
    with Image.open(png) as image:
        pixels = np.asarray(image.convert("RGB")).reshape(-1, 3)
    return bool(((pixels[:, 0] > 200) & (pixels[:, 1] < 60) & (pixels[:, 2] > 200)).any())


def test_a_forged_manifest_source_makes_the_sheet_read_nothing_outside_the_dataset(
        forged, tmp_path):
    dataset, private = forged
    output = run("sheet", str(dataset), "-o", str(tmp_path / "with.png"))
    assert "no source was named" in output and "--source" in output
    assert not has_magenta(tmp_path / "with.png")
    shutil.rmtree(private)  # what is drawn does not depend on what the forged paths name
    run("sheet", str(dataset), "-o", str(tmp_path / "without.png"))
    assert (tmp_path / "with.png").read_bytes() == (tmp_path / "without.png").read_bytes()


def test_a_forged_manifest_source_makes_the_report_read_nothing_outside_the_dataset(
        forged, tmp_path):
    dataset, private = forged
    output = run("report", str(dataset), "-o", str(tmp_path / "with.html"))
    assert "0 pictured" in output and "no source was named" in output
    page = (tmp_path / "with.html").read_text()
    rejects = page[page.index('id="rejects"'):page.index('id="samples"')]
    assert "data:image" not in rejects and "SECRET-1234567890" not in page
    shutil.rmtree(private)
    run("report", str(dataset), "-o", str(tmp_path / "without.html"))
    assert (tmp_path / "without.html").read_text() == page


def test_quality_without_a_named_source_is_refused_in_one_line(forged):
    dataset, _ = forged
    output = run("inspect", str(dataset), "--quality", "2", expect=2)
    assert output.count("\n") == 1 and "--source" in output


def test_a_named_source_shows_the_rejects_under_it(tmp_path):
    source, output = tmp_path / "source", tmp_path / "out"
    images.write(source / "ok" / "a.jpg", images.jpeg(96, 64, 1))
    images.write(source / "ok" / "cut.jpg", images.truncated_jpeg())
    pack(str(source), output)
    shown = run("sheet", str(output), "-o", str(tmp_path / "s.png"), "--source", str(source))
    assert "note:" not in shown
    images.write(source / "ok" / "cut.jpg", images.jpeg(300, 200, 5))  # fixed since
    said = run("report", str(output), "-o", str(tmp_path / "r.html"), "--source", str(source))
    assert "(1 pictured)" in said


def test_the_job_files_source_is_a_named_source_for_the_report(tmp_path):
    source, output = tmp_path / "source", tmp_path / "out"
    images.write(source / "ok" / "a.jpg", images.jpeg(96, 64, 1))
    images.write(source / "ok" / "cut.jpg", images.truncated_jpeg())
    pack(str(source), output)
    images.write(source / "ok" / "cut.jpg", images.jpeg(300, 200, 5))
    job = tmp_path / "job.yaml"
    job.write_text(f"source:\n  path: {source}\noutput:\n  path: {output}\n")
    said = run("report", "-o", str(tmp_path / "r.html"), "--config", str(job))
    assert "(1 pictured)" in said


@pytest.mark.slow
def test_a_dataset_packed_from_a_bucket_names_its_source_and_reads_it_with_source(
        tmp_path, s3):
    source = tmp_path / "source"
    images.write(source / "ok" / "a.jpg", images.jpeg(96, 64, 1))
    images.write(source / "ok" / "b.jpg", images.jpeg(96, 64, 2))
    images.write(source / "ok" / "cut.jpg", images.truncated_jpeg())
    url = s3.upload(source, "originals")
    output = tmp_path / "out"
    pack(url, output)
    said = run("sheet", str(output), "-o", str(tmp_path / "s.png"))
    assert re.search(r"no source was named; .*--source \(the dataset records '?s3://", said)
    assert "packed by an earlier version" not in said
    said = run("sheet", str(output), "-o", str(tmp_path / "s.png"), "--source", url)
    assert "note:" not in said
    s3.put("originals/ok/cut.jpg", images.jpeg(300, 200, 5))  # fixed in the bucket since
    said = run("report", str(output), "-o", str(tmp_path / "r.html"), "--source", url)
    assert "(1 pictured)" in said


@pytest.mark.slow
def test_storage_options_reach_a_bucket_source_of_a_dataset_on_disk(tmp_path, s3, s3_server,
                                                                    monkeypatch):
    source = tmp_path / "source"
    images.write(source / "ok" / "a.jpg", images.jpeg(96, 64, 1))
    images.write(source / "ok" / "cut.jpg", images.truncated_jpeg())
    url = s3.upload(source, "originals")
    output = tmp_path / "out"
    pack(url, output)
    s3.put("originals/ok/cut.jpg", images.jpeg(300, 200, 5))
    monkeypatch.delenv("AWS_ENDPOINT_URL")  # the server is named by --storage alone
    said = run("report", str(output), "-o", str(tmp_path / "r.html"), "--source", url,
               "--storage", f"endpoint_url={s3_server}")
    assert "(1 pictured)" in said
    said = run("sheet", str(output), "-o", str(tmp_path / "s.png"), "--source", url,
               "--storage", f"endpoint_url={s3_server}")
    assert "note:" not in said
