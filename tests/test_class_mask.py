"""One reader of a packed class mask (``annotations.maskpng.class_mask``): the TFRecord reader,
the sheet, the export and ``verify --decode`` take a mask the same way, its header read before
a pixel is decoded."""

from __future__ import annotations

import struct
import zlib

import cv2
import numpy as np
import pytest

from shardsmith.annotations.maskpng import MaskError, class_mask, mask_png
from shardsmith.dataset.formats.example_check import MASK, example_problems


def png_header(width: int, height: int, depth: int = 8, colour: int = 0) -> bytes:
    """A PNG signature and IHDR chunk claiming ``width x height`` (no pixels follow)."""
    ihdr = struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    return (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", len(ihdr)) + chunk
            + struct.pack(">I", zlib.crc32(chunk)))


def chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def gray_png(rows: bytes) -> bytes:
    """A 4x3 one-channel 8-bit PNG of the filtered ``rows`` (a filter byte, then 4 pixels)."""
    return png_header(4, 3) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def rgb_png(width: int, height: int) -> bytes:
    return cv2.imencode(".png", np.zeros((height, width, 3), np.uint8))[1].tobytes()


def test_a_packed_class_mask_reads_back_as_written():
    mask = np.zeros((3, 4), np.uint8)
    mask[1, 1], mask[2, 3] = 2, 255
    assert (class_mask(mask_png(mask), 4, 3) == mask).all()


@pytest.mark.parametrize("png, reason", [
    (b"not a png at all", "the class mask is not a PNG that decodes"),
    (png_header(60000, 60000), "the class mask is 60000x60000, the image 4x3"),
    (png_header(4, 3), "the class mask is not a PNG that decodes"),
    (png_header(4, 3, depth=16), "the class mask is not a one-channel 8-bit PNG"),
    (rgb_png(4, 3), "the class mask is not a one-channel 8-bit PNG"),
    (mask_png(np.zeros((3, 4), np.uint8))[:-30], "the class mask is not a PNG that decodes"),
    (mask_png(np.zeros((3, 4), np.uint8))[:-12], "the class mask is not a PNG that decodes"),
    (gray_png(bytes(5) * 2), "the class mask is not a PNG that decodes"),  # a row short
    (gray_png(b"\x09" + bytes(4) + bytes(10)), "the class mask is not a PNG that decodes"),
    (gray_png(bytes(15))[:-13] + b"IDAT" + bytes(4) + chunk(b"IEND", b""),  # a wrong CRC
     "the class mask is not a PNG that decodes"),
], ids=["not png", "too large", "no pixels", "16 bit", "rgb", "cut in IDAT", "cut in IEND",
        "row short", "bad filter", "crc"])
def test_a_class_mask_that_is_not_the_samples_is_one_reason(png, reason, capfd):
    with pytest.raises(MaskError) as caught:
        class_mask(png, 4, 3)
    assert str(caught.value) == reason
    assert capfd.readouterr().err == ""  # the reason only, no decoder's chatter


def test_verify_names_a_class_mask_of_three_channels():
    features = {MASK: [rgb_png(4, 3)], "image/width": [4], "image/height": [3]}
    assert example_problems(features, (4, 3), 1) == [
        "the class mask is not a one-channel 8-bit PNG"]
    assert example_problems(features, None, 1) == [
        "the class mask is not a one-channel 8-bit PNG"]


def test_verify_checks_a_class_mask_against_the_records_own_size_without_an_index():
    features = {MASK: [mask_png(np.zeros((3, 4), np.uint8))], "image/width": [5],
                "image/height": [3]}
    assert example_problems(features, None, 1) == ["the class mask is 4x3, the image 5x3"]


@pytest.mark.slow
def test_the_tf_reader_takes_a_class_mask_of_three_channels_for_a_corrupt_sample():
    tf = pytest.importorskip("tensorflow")
    from shardsmith.errors import ShardFormatError
    from shardsmith.readers.tf import _Records

    example = tf.train.Example()
    example.features.feature[MASK].bytes_list.value.append(rgb_png(4, 3))
    with pytest.raises(ShardFormatError, match="not a one-channel 8-bit PNG"):
        _Records._mask(None, example.features.feature, (3, 4))  # type: ignore[arg-type]
    example.features.feature[MASK].bytes_list.value[0] = mask_png(np.ones((3, 4), np.uint8))
    assert (_Records._mask(None, example.features.feature, (3, 4)) == 1).all()  # type: ignore[arg-type]
