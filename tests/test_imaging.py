"""The per-image path: decode, orient, normalise, resize, encode, and rejects with reasons."""

from __future__ import annotations

import dataclasses
import io

import cv2
import numpy as np
import pytest
from PIL import Image, ImageOps

from shardsmith.config import ImageConfig
from shardsmith.dataset.records import Reject
from shardsmith.errors import BadImage
from shardsmith.packing.imaging import convert, plan_geometry, process
from shardsmith.packing.plan import PlanItem
from shardsmith.packing.scan import SourceFile

import images


def decoded(jpeg_bytes: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(jpeg_bytes)))


def config(**changes) -> ImageConfig:
    return dataclasses.replace(ImageConfig(size=128), **changes)


@pytest.mark.parametrize(
    "mode, source_size, expected",
    [
        ("fit", (640, 480), (128, 96)),
        ("fit", (300, 500), (77, 128)),
        ("shorter", (640, 480), (171, 128)),
        ("center_crop", (640, 480), (128, 128)),
        ("pad", (640, 480), (128, 128)),
        ("stretch", (640, 480), (128, 128)),
    ],
)
def test_every_resize_mode_yields_the_promised_size(mode, source_size, expected):
    result = convert(images.jpeg(*source_size), config(resize=mode))
    assert (result.width, result.height) == expected
    assert decoded(result.jpeg).shape[1::-1] == expected


@pytest.mark.parametrize(
    "mode, kept_size, upscaled_size",
    [
        ("fit", (100, 80), (128, 102)),
        ("shorter", (100, 80), (160, 128)),
        ("center_crop", (80, 80), (128, 128)),
        ("stretch", (100, 80), (128, 128)),
        ("pad", (128, 128), (128, 128)),
    ],
)
def test_small_images_are_not_upscaled_unless_asked(mode, kept_size, upscaled_size):
    small = images.png(100, 80)
    kept = convert(small, config(resize=mode))
    assert (kept.width, kept.height) == kept_size
    grown = convert(small, config(resize=mode, upscale=True))
    assert (grown.width, grown.height) == upscaled_size


def test_pad_letterboxes_with_the_fill_colour():
    result = convert(images.png(400, 100), config(resize="pad", pad_color=(0, 0, 255)))
    pixels = decoded(result.jpeg).astype(int)
    assert pixels.shape == (128, 128, 3)
    corner = pixels[:10, :10].mean(axis=(0, 1))
    assert corner[2] > 230 and corner[0] < 25 and corner[1] < 25


def test_exif_rotation_is_applied_so_the_sample_is_upright():
    # Stored 400x200 with orientation 6 (rotate 90 degrees clockwise to view): upright 200x400.
    result = convert(images.exif_rotated_jpeg(400, 200, 6), config())
    assert (result.original_width, result.original_height) == (200, 400)
    assert (result.width, result.height) == (64, 128)
    pixels = decoded(result.jpeg).astype(int)
    # The stored top-left red block ends up at the upright top-right.
    top_right = pixels[:20, -10:].mean(axis=(0, 1))
    top_left = pixels[:20, :10].mean(axis=(0, 1))
    assert top_right[0] > 200 and top_right[1] < 60
    assert abs(top_left[0] - 128) < 20


@pytest.mark.parametrize("channels", [1, 3])
def test_16bit_mid_grey_stays_mid_grey(channels):
    result = convert(images.tiff16(32768, channels=channels), config())
    assert abs(decoded(result.jpeg).astype(float).mean() - 128) < 1.5


def test_16bit_is_scaled_over_the_full_range_not_saturated():
    dark = convert(images.tiff16(16384), config())  # a quarter of full scale
    assert abs(decoded(dark.jpeg).astype(float).mean() - 64) < 1.5


def test_16bit_rgb_tiff_keeps_its_colours():
    import tifffile

    rgb16 = np.zeros((120, 160, 3), np.uint16)
    rgb16[..., 0], rgb16[..., 1] = 60000, 30000
    buffer = io.BytesIO()
    tifffile.imwrite(buffer, rgb16, photometric="rgb")
    pixels = decoded(convert(buffer.getvalue(), config()).jpeg).astype(float)
    assert np.allclose(pixels.mean(axis=(0, 1)), (233.5, 116.7, 0), atol=3)


def quadrants(width: int, height: int) -> np.ndarray:
    """Four colours split off-centre, so that any wrong turn or mirror moves most pixels."""
    pixels = np.zeros((height, width, 3), np.uint8)
    across, down = width // 3, height // 4
    pixels[:down, :across] = (255, 0, 0)
    pixels[:down, across:] = (0, 255, 0)
    pixels[down:, :across] = (0, 0, 255)
    pixels[down:, across:] = (255, 255, 0)
    return pixels


@pytest.mark.parametrize("orientation", range(2, 9))
def test_a_turned_tiff_is_upright_whichever_decoder_reads_it(orientation):
    # RGB goes through tifffile, which returns the stored pixels; a palette TIFF through
    # Pillow, whose load turns them itself: either way the sample is turned once.
    exif = Image.Exif()
    exif[0x0112] = orientation
    stored = Image.fromarray(quadrants(120, 80))
    by_tifffile = images.encode(stored, "TIFF", exif=exif)
    by_pillow = images.encode(stored.quantize(4), "TIFF", exif=exif)
    upright = ImageOps.exif_transpose(Image.open(io.BytesIO(by_tifffile)))
    expected = decoded(convert(images.encode(upright, "PNG"), config()).jpeg).astype(int)
    for data in (by_tifffile, by_pillow):
        result = convert(data, config())
        assert (result.original_width, result.original_height) == upright.size
        assert np.abs(decoded(result.jpeg).astype(int) - expected).mean() < 4


def test_16bit_png_mid_grey_stays_mid_grey():
    data = cv2.imencode(".png", np.full((100, 120), 32768, np.uint16))[1].tobytes()
    assert abs(decoded(convert(data, config()).jpeg).astype(float).mean() - 128) < 1.5


def test_cmyk_jpeg_becomes_rgb_with_the_right_colours():
    result = convert(images.cmyk_jpeg(320, 240), config(resize="stretch"))
    reference = cv2.resize(images.gradient_rgb(320, 240), (128, 128), interpolation=cv2.INTER_AREA)
    pixels = decoded(result.jpeg)
    assert pixels.shape == (128, 128, 3)
    assert np.abs(pixels.astype(int) - reference.astype(int)).mean() < 6


def test_alpha_is_composited_on_the_configured_background():
    data = images.rgba_png(320, 240, transparent_left=160)
    result = convert(data, config(resize="stretch", background=(0, 255, 0)))
    pixels = decoded(result.jpeg).astype(int)
    left = pixels[:, :50].mean(axis=(0, 1))
    assert left[1] > 235 and left[0] < 20 and left[2] < 20
    right = pixels[:, -40:].mean(axis=(0, 1))
    assert abs(right[1] - 255) > 30  # the opaque half keeps its own colour


def test_palette_png_decodes_to_rgb():
    result = convert(images.palette_png(200, 150), config())
    assert result.channels == 3 and result.original_mode == "P"


@pytest.mark.parametrize(
    "color, gray_channels, rgb_channels", [("rgb", 3, 3), ("keep", 1, 3), ("gray", 1, 1)]
)
def test_color_mode_decides_the_channel_count(color, gray_channels, rgb_channels):
    assert convert(images.gray_png(), config(color=color)).channels == gray_channels
    assert convert(images.jpeg(), config(color=color)).channels == rgb_channels
    assert decoded(convert(images.gray_png(), config(color=color)).jpeg).ndim == (
        2 if gray_channels == 1 else 3
    )


@pytest.mark.parametrize(
    "factory", [images.jpeg, images.png, images.bmp, images.webp, images.cmyk_jpeg]
)
def test_every_format_is_encoded_as_baseline_jpeg(factory):
    jpeg_bytes = convert(factory(), config()).jpeg
    assert jpeg_bytes[:2] == b"\xff\xd8"
    assert b"\xff\xc0" in jpeg_bytes  # SOF0: baseline
    assert b"\xff\xc2" not in jpeg_bytes  # SOF2 would mean progressive
    image = Image.open(io.BytesIO(jpeg_bytes))
    assert image.format == "JPEG" and not image.info.get("progressive")


def test_default_chroma_subsampling_is_420():
    from PIL import JpegImagePlugin

    image = Image.open(io.BytesIO(convert(images.jpeg(), config()).jpeg))
    assert JpegImagePlugin.get_sampling(image) == 2  # 4:2:0


@pytest.mark.slow
def test_reduced_decode_matches_a_full_decode_reference():
    """Decoding at a DCT scale must not cost visible quality (>= 40 dB before encoding)."""
    from shardsmith.packing.imaging import decode

    data = images.jpeg(2048, 1536, quality=95)
    fast, _ = decode(data, ImageConfig(size=256))
    full = np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).astype(np.float32)
    reference = cv2.resize(full, fast.shape[1::-1], interpolation=cv2.INTER_AREA)
    mse = np.mean((fast.astype(np.float32) - reference) ** 2)
    assert 10 * np.log10(255**2 / mse) >= 40


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"", "empty"),
        (b"plain text, not pixels\n" * 10, "not_an_image"),
        (images.truncated_jpeg(), "corrupt"),
        (images.png(400, 300)[:3000], "corrupt"),
        (images.bmp(400, 300)[:3000], "corrupt"),
        (images.tiff16(30000, 400, 300)[:-10], "corrupt"),
        (images.encode(images.gradient_rgb(400, 300), "TIFF")[:-10], "corrupt"),
        (images.encode(images.gradient_rgb(400, 300), "WEBP")[:-100], "corrupt"),
    ],
)
def test_bad_input_is_rejected_with_a_reason(data, reason):
    with pytest.raises(BadImage) as caught:
        convert(data, config())
    assert caught.value.reason == reason
    assert caught.value.detail


def test_images_over_the_pixel_limit_are_rejected_before_decoding():
    with pytest.raises(BadImage) as caught:
        convert(images.jpeg(640, 480), config(max_pixels=100_000))
    assert caught.value.reason == "too_large"
    assert "640x480" in caught.value.detail


def test_default_pixel_limit_accepts_more_than_pillows_own_warning_level():
    assert ImageConfig().max_pixels >= 300_000_000
    assert Image.MAX_IMAGE_PIXELS is None  # ours decides, not Pillow's 89 MP guard


def test_an_unreadable_file_becomes_a_reject_not_an_exception(tmp_path):
    item = PlanItem(SourceFile("gone/missing.jpg", 10, 0, 0), "train")
    result = process(item, str(tmp_path), config())
    assert isinstance(result, Reject)
    assert result.reason == "unreadable" and result.relpath == "gone/missing.jpg"


def test_geometry_never_undershoots_the_target_when_cropping():
    geometry = plan_geometry(8000, 6000, config(size=512, resize="center_crop"))
    assert geometry.crop == (1000, 0, 6000, 6000)
    assert geometry.size == (512, 512)
