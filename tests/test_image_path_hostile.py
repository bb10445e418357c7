"""A hostile user's originals on the image path (issue 16): bytes that make a decoder raise
what no one listed, an output larger than the memory budget, a huge sparse original under a
probe.  Each is a reject with its reason (or a file left unread), never the end of the job.
"""

from __future__ import annotations

import io
import json
import struct
import subprocess

import pytest
import tifffile
from hostile_helpers import MiB, command, crashed, pack_cli
from PIL import Image

from shardsmith.annotations.parse import read_mask
from shardsmith.config import ImageConfig
from shardsmith.errors import BadImage
from shardsmith.packing.imaging import convert

import images
from images import manifest_of, samples_of


def deflate_tiff() -> bytes:
    """A small RGB TIFF, deflate-compressed (Pillow's writer), one strip."""
    buffer = io.BytesIO()
    Image.new("RGB", (37, 23), (10, 10, 10)).save(buffer, "TIFF",
                                                  compression="tiff_adobe_deflate")
    return buffer.getvalue()


def damaged_deflate_stream() -> bytes:
    """Four bytes of the strip's deflate stream overwritten: tifffile raises ``zlib.error``."""
    data = bytearray(deflate_tiff())
    offset = tifffile.TiffFile(io.BytesIO(bytes(data))).pages[0].dataoffsets[0]
    data[offset + 2 : offset + 6] = b"\xff" * 4
    return bytes(data)


def _tag(data: bytes, code: int) -> tifffile.TiffTag:
    return tifffile.TiffFile(io.BytesIO(data)).pages[0].tags[code]


def zero_rows_per_strip() -> bytes:
    """RowsPerStrip 0: tifffile divides by it (``ZeroDivisionError``)."""
    data = bytearray(deflate_tiff())
    tag = _tag(bytes(data), 278)
    data[tag.valueoffset : tag.valueoffset + 2] = struct.pack("<H", 0)
    return bytes(data)


def image_length_of_six_values() -> bytes:
    """ImageLength with a count of 6: a tuple where a number belongs (``TypeError``)."""
    data = bytearray(deflate_tiff())
    tag = _tag(bytes(data), 257)
    data[tag.offset + 4 : tag.offset + 8] = struct.pack("<I", 6)  # the entry's count
    return bytes(data)


DECODER_CRASHES = {
    "zlib_error": damaged_deflate_stream,
    "zero_division": zero_rows_per_strip,
    "tuple_for_a_number": image_length_of_six_values,
}


@pytest.mark.parametrize("damage", sorted(DECODER_CRASHES))
def test_bytes_that_make_the_decoder_raise_an_unlisted_error_are_a_corrupt_reject(damage):
    with pytest.raises(BadImage) as caught:
        convert(DECODER_CRASHES[damage](), ImageConfig(size=32))
    assert caught.value.reason == "corrupt"
    assert "Error" in caught.value.detail  # names the decoder's exception type


@pytest.mark.parametrize("workers", ["1", "2"])
@pytest.mark.slow
def test_a_tiff_with_a_damaged_deflate_stream_is_rejected_and_the_pack_goes_on(
        tmp_path, workers):
    source = tmp_path / "source"
    images.write(source / "c" / "good.jpg", images.jpeg(40, 30))
    images.write(source / "c" / "bad.tif", damaged_deflate_stream())
    output = tmp_path / "out"
    result = pack_cli(source, output, "--split", "train=1", "--workers", workers,
                      "--max-reject-fraction", "1")
    assert result.exit_code == 0, result.output + crashed(result)
    rejects = {r["path"]: (r["reason"], r["detail"]) for r in manifest_of(output)["rejects"]}
    assert list(rejects) == ["c/bad.tif"]
    reason, detail = rejects["c/bad.tif"]
    assert reason == "corrupt" and "zlib.error" in detail
    assert [record["path"] for record in samples_of(output)] == ["c/good.jpg"]


def test_a_mask_whose_decoder_raises_an_unlisted_error_is_a_bad_annotation(monkeypatch):
    def raising(*args, **kwargs):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(Image, "open", raising)
    with pytest.raises(BadImage) as caught:
        read_mask(b"\x89PNG", "a_mask.png", (4, 4), "binary", (), "")
    assert caught.value.reason == "bad_annotation"
    assert "a_mask.png" in caught.value.detail and "ZeroDivisionError" in caught.value.detail


OVERSIZED_OUTPUTS = {
    "tile": "image:\n  max_decoded_mb: 16\n  tiles: {size: 16384}\n",
    "pad": "image:\n  max_decoded_mb: 16\n  size: 16384\n  resize: pad\n",
    "stretch": "image:\n  max_decoded_mb: 16\n  size: 16384\n  resize: stretch\n"
               "  upscale: true\n",
}


@pytest.mark.parametrize("output_kind", sorted(OVERSIZED_OUTPUTS))
@pytest.mark.slow
def test_an_output_larger_than_the_decode_budget_is_rejected_too_large_before_it_is_made(
        tmp_path, output_kind):
    """A 651-byte original asked to fill a 16384 x 16384 canvas, tile or stretch (768 MiB of
    pixels) under a 16 MiB budget: the output counts in the budget, checked from the header."""
    source = tmp_path / "source"
    images.write(source / "c" / "a.jpg", images.jpeg(40, 30))
    config = tmp_path / "config.yaml"
    config.write_text(OVERSIZED_OUTPUTS[output_kind])
    output = tmp_path / "out"
    finished = subprocess.run(
        command("pack", source, output, "--config", config, "--workers", "1", "--quiet",
                "--max-reject-fraction", "1"),
        capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0, finished.stderr
    assert "Traceback" not in finished.stderr
    rejects = manifest_of(output)["rejects"]
    assert [(r["path"], r["reason"]) for r in rejects] == [("c/a.jpg", "too_large")]
    assert "16384x16384 output" in rejects[0]["detail"]
    assert "16 MiB" in rejects[0]["detail"]


def test_an_output_within_the_budget_is_still_packed(tmp_path):
    """A 1024 x 1024 canvas (3 MiB, twice with the encoder's buffer) fits 16 MiB."""
    source = tmp_path / "source"
    images.write(source / "c" / "a.jpg", images.jpeg(40, 30))
    config = tmp_path / "config.yaml"
    config.write_text("image:\n  max_decoded_mb: 16\n  resize: pad\n")
    output = tmp_path / "out"
    result = pack_cli(source, output, "--config", config, "--split", "train=1",
                      "--size", "1024")
    assert result.exit_code == 0, result.output + crashed(result)
    assert manifest_of(output)["rejects"] == []
    assert [(r["width"], r["height"]) for r in samples_of(output)] == [(1024, 1024)]


@pytest.mark.slow
def test_probe_never_reads_an_original_larger_than_its_decode_budget(tmp_path):
    """A sparse terabyte ``.bmp`` beside a small JPEG: a pack rejects it unread (too_large), so
    the probe neither reads it nor walks its pages; a hang would fail the timeout."""
    source = tmp_path / "source"
    images.write(source / "c" / "a.jpg", images.jpeg(40, 30))
    with open(source / "c" / "huge.bmp", "wb") as huge:
        huge.truncate(2**40)
    finished = subprocess.run(
        command("probe", source, "--json", "--quiet", "--workers", "1"),
        capture_output=True, text=True, timeout=90)
    assert finished.returncode == 0, finished.stderr
    report = json.loads(finished.stdout)
    assert report["image_path"]["rejected"] == {"too_large": 1}
    for level in report["reads"]["levels"]:
        assert level["bytes"] < 1024 * MiB  # the JPEG only, never the terabyte
    assert report["reads"]["unreadable"] == []
