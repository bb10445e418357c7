"""`inspect --quality`: packed samples against an exact reference of their originals."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest
from click.testing import CliRunner

from shardsmith.cli import main
from shardsmith.config import ImageConfig
from shardsmith.errors import ManifestError
from shardsmith.insight.quality import compare, ssim
from shardsmith.packing.imaging import convert
from shardsmith.packing.originals import original_path

import images
from images import samples_of


def lined(width: int = 640, height: int = 480) -> np.ndarray:
    """A gradient crossed by thin dark lines: detail that a smaller size loses."""
    rgb = images.gradient_rgb(width, height, 3).copy()
    for number in range(12):
        cv2.line(rgb, (20 + 50 * number, 0), (40 + 50 * number, height - 1), (20, 20, 20), 2)
    return rgb


def figures(original: bytes, **settings) -> tuple[float, float, float]:
    config = ImageConfig(**settings)
    return compare(original, convert(original, config).jpeg, config)[:3]


def test_an_integer_downscale_of_a_lossless_original_matches_the_reference():
    psnr, similarity, _ = figures(images.encode(lined(), "PNG"), size=128, quality=100,
                                  subsampling="444")
    assert psnr > 45 and similarity > 0.99


@pytest.mark.parametrize("resize", ["fit", "center_crop", "pad", "stretch", "shorter"])
@pytest.mark.slow
def test_the_reference_follows_the_geometry_of_every_resize_mode(resize):
    psnr, _, _ = figures(images.png(640, 480, 1), size=128, resize=resize, quality=100,
                         subsampling="444")
    assert psnr > 40


def test_the_reference_is_upright_like_the_sample():
    upright, _, _ = figures(images.exif_rotated_jpeg(400, 200, 6), size=96)
    config = ImageConfig(size=96)
    wrong = compare(images.exif_rotated_jpeg(400, 200, 6),
                    convert(images.exif_rotated_jpeg(400, 200, 8), config).jpeg, config)[0]
    assert upright > 30 and wrong < 20


def test_a_lower_jpeg_quality_costs_psnr_and_a_smaller_size_costs_detail():
    original = images.encode(lined(), "JPEG", quality=95)
    high, high_ssim, _ = figures(original, size=256, quality=95)
    low, low_ssim, _ = figures(original, size=256, quality=30)
    assert high > low + 2 and high_ssim > low_ssim
    _, _, large_detail = figures(original, size=256)
    _, _, small_detail = figures(original, size=64)
    assert large_detail > small_detail + 3


def test_ssim_follows_the_published_definition():
    plane = images.gradient_rgb(120, 90, 0)[:, :, 1].astype(np.float32)
    y, x = np.mgrid[0:90, 0:120]
    wavy = plane + (8 * np.sin(x / 3.0) * np.cos(y / 5.0)).astype(np.float32)
    assert ssim(plane, plane) == pytest.approx(1.0)
    # scikit-image 0.26 structural_similarity(gaussian_weights=True, sigma=1.5,
    # use_sample_covariance=False, data_range=255) of the same pair:
    assert ssim(plane, wavy) == pytest.approx(0.9530099705606699, abs=1e-5)


@pytest.mark.parametrize("relpath", ["/etc/hostname", "../x.jpg", "ok/../../x.jpg", "ok//a.jpg",
                                     "./ok/a.jpg", "", "ok/\0.jpg"])
def test_paths_from_a_manifest_must_stay_plainly_under_the_source(tmp_path, relpath):
    with pytest.raises(ManifestError):
        original_path(str(tmp_path), relpath)


@pytest.fixture()
def packed(tmp_path) -> Path:
    source, output = tmp_path / "source", tmp_path / "out"
    for number in range(3):
        images.write(source / "ok" / f"a{number}.jpg",
                     images.encode(lined(320, 240), "JPEG", quality=95))
        images.write(source / "scratch" / f"b{number}.png", images.png(240, 320, number))
    result = CliRunner().invoke(main, ["pack", str(source), str(output), "--size", "96",
                                       "--workers", "1", "--quiet"])
    assert result.exit_code == 0, result.output
    return output


def inspect_quality(dataset: Path, *args: str, expect: int = 0) -> str:
    result = CliRunner().invoke(main, ["inspect", str(dataset), "--quality", "4", "--source",
                                       str(dataset.parent / "source"), *args])
    assert result.exit_code == expect, result.output
    return result.output


def test_psnr_and_ssim_are_reported_per_class(packed):
    report = json.loads(inspect_quality(packed, "--json"))["quality"]
    assert report["size"] == 96 and report["jpeg_quality"] == 90
    rows = {row["name"]: row for row in report["per_class"]}
    assert set(rows) == {"ok", "scratch"} and all(row["samples"] == 2 for row in rows.values())
    for row in rows.values():
        assert 30 < row["psnr_min"] <= row["psnr_mean"] < 70
        assert 0.9 < row["ssim_min"] <= row["ssim_mean"] <= 1
        assert row["detail_psnr_mean"] < row["psnr_mean"]
    assert not report["skipped"]
    text = inspect_quality(packed)
    assert "quality  4 samples at 96 px fit, JPEG quality 90" in text
    assert any(line.split()[:2] == ["scratch", "2"] for line in text.splitlines())


def test_the_same_seed_measures_the_same_samples(packed):
    first = json.loads(inspect_quality(packed, "--json", "--seed", "3"))["quality"]["samples"]
    again = json.loads(inspect_quality(packed, "--json", "--seed", "3"))["quality"]["samples"]
    assert [s["key"] for s in first] == [s["key"] for s in again]


def test_the_samples_measured_are_picked_in_the_census_pass_over_the_index(packed,
                                                                           monkeypatch):
    from shardsmith.insight import census, picks

    passes, walk = [], census.iter_sample_index

    def counted(*args, **kwargs):
        passes.append(args)
        return walk(*args, **kwargs)

    for module in (census, picks):  # wherever the index is walked from
        monkeypatch.setattr(module, "iter_sample_index", counted, raising=False)
    CliRunner().invoke(main, ["inspect", str(packed), "--json"])
    without_quality = len(passes)  # the census's own (identical originals take a second)
    assert len(json.loads(inspect_quality(packed, "--json"))["quality"]["samples"]) == 4
    assert len(passes) == 2 * without_quality


def test_without_the_source_quality_is_one_clear_line(packed):
    source = packed.parent / "source"
    source.rename(packed.parent / "elsewhere")
    output = inspect_quality(packed, expect=1)
    assert output.count("\n") == 1 and "the originals are not reachable" in output


def test_an_original_changed_since_the_pack_is_skipped_and_named(packed):
    source = packed.parent / "source"
    images.write(source / "ok" / "a0.jpg", images.jpeg(320, 240, 42))
    images.write(source / "ok" / "a1.jpg", images.jpeg(320, 240, 43))
    images.write(source / "ok" / "a2.jpg", images.jpeg(320, 240, 44))
    report = json.loads(inspect_quality(packed, "--json"))["quality"]
    assert {row["name"] for row in report["per_class"]} == {"scratch"}
    assert {item["why"] for item in report["skipped"]} == {"the original changed since the pack"}


def test_an_original_that_became_a_link_out_of_the_source_is_refused(packed, tmp_path):
    source = packed.parent / "source"
    outside = tmp_path / "outside"
    outside.mkdir()
    for record in samples_of(packed):
        original = source / record["path"]
        shutil.move(original, outside / original.name)
        os.symlink(outside / original.name, original)
    output = inspect_quality(packed, expect=2)
    assert "leads out of the source" in output
