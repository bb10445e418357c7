"""A hostile user's originals (issue 9): a file swapped for a link or a FIFO after the scan, names
that are not UTF-8, very deep folders, an image too large to decode: a reject, not the end.
"""

from __future__ import annotations

import os

import cv2
import numpy as np
import pytest
from hostile_helpers import (
    MiB,
    cli,
    crashed,
    originals,
    pack_cli,
    run,
)

import images
from images import manifest_of, samples_of


def test_an_original_swapped_for_a_symlink_after_the_scan_is_rejected_not_followed(
    tmp_path, monkeypatch
):
    import shardsmith.packing.pipeline

    source = originals(tmp_path / "source")
    secret = images.write(tmp_path / "outside" / "secret.jpg", images.jpeg(120, 80, 42))
    victim = source / "a" / "0.jpg"
    real_scan = shardsmith.packing.pipeline.scan

    def scan_then_swap(*args, **kwargs):
        scanned = real_scan(*args, **kwargs)
        victim.unlink()
        victim.symlink_to(secret)
        return scanned

    monkeypatch.setattr(shardsmith.packing.pipeline, "scan", scan_then_swap)
    output = tmp_path / "out"
    result = pack_cli(source, output, "--max-reject-fraction", "1")
    assert result.exit_code == 0, result.output + crashed(result)
    rejects = {r["path"]: r["reason"] for r in manifest_of(output)["rejects"]}
    assert rejects == {"a/0.jpg": "not_a_file"}
    assert "a/0.jpg" not in {record["path"] for record in samples_of(output)}


SWAP_FOR_A_FIFO = """
import os
import shardsmith.packing.pipeline as pipeline
real_scan = pipeline.scan
def scan_then_swap(*args, **kwargs):
    scanned = real_scan(*args, **kwargs)
    os.unlink({victim!r})
    os.mkfifo({victim!r})
    return scanned
pipeline.scan = scan_then_swap
"""


@pytest.mark.slow
def test_a_file_replaced_by_a_fifo_after_the_scan_is_a_reject_and_the_pack_finishes(tmp_path):
    source = originals(tmp_path / "source")
    victim = source / "b" / "3.jpg"
    output = tmp_path / "out"
    result = run("pack", source, output, "--size", "32", "--workers", "2", "--quiet",
                 "--max-reject-fraction", "1", hook=SWAP_FOR_A_FIFO.format(victim=str(victim)),
                 timeout=60)
    assert result.returncode == 0, result.stderr
    rejects = {r["path"]: r["reason"] for r in manifest_of(output)["rejects"]}
    assert rejects == {"b/3.jpg": "not_a_file"}
    assert len(samples_of(output)) == 5


@pytest.mark.slow
def test_names_that_are_not_utf8_are_packed_and_the_summary_prints(tmp_path):
    source = tmp_path / "source"
    odd_class = source / os.fsdecode(b"caf\xe9")
    images.write(odd_class / "ok.jpg", images.jpeg(96, 64, 1))
    images.write(source / "plain" / os.fsdecode(b"caf\xe9.jpg"), images.jpeg(96, 64, 2))
    images.write(source / "plain" / "fine.jpg", images.jpeg(96, 64, 3))
    images.write(source / "plain" / os.fsdecode(b"bad\xff.jpg"), b"not an image at all")
    output = tmp_path / "out"
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONIOENCODING"}
    environment["LC_ALL"] = "C.UTF-8"  # a UTF-8 terminal: printing a bad byte is an error
    result = run("pack", source, output, "--size", "32", "--workers", "1",
                 "--max-reject-fraction", "1", env=environment)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout.startswith(f"{output}: packed")
    manifest = manifest_of(output)
    outcome = {record["path"]: "packed" for record in samples_of(output)}
    outcome.update({reject["path"]: reject["reason"] for reject in manifest["rejects"]})
    assert outcome[os.fsdecode(b"caf\xe9/ok.jpg")] in ("packed", "bad_name")
    assert outcome[os.fsdecode(b"plain/caf\xe9.jpg")] in ("packed", "bad_name")
    assert outcome["plain/fine.jpg"] == "packed"
    assert outcome[os.fsdecode(b"plain/bad\xff.jpg")] in ("not_an_image", "bad_name")
    assert manifest["totals"]["packed"] + manifest["totals"]["rejected"] == 4
    assert cli("verify", output).exit_code == 0


@pytest.mark.slow
def test_more_than_a_thousand_nested_directories_do_not_overflow_the_stack(tmp_path):
    source = tmp_path / "source"
    chain = [source / "a"]
    for _ in range(1100):
        chain.append(chain[-1] / "d")
    for directory in chain:  # os.makedirs itself recurses
        directory.mkdir(parents=directory is chain[0])
    deepest = images.write(chain[-1] / "deep.jpg", images.jpeg(96, 64, 1))
    shallow = images.write(source / "a" / "shallow.jpg", images.jpeg(96, 64, 2))
    try:
        result = cli("pack", source, tmp_path / "out", "--size", "32", "--workers", "1",
                     "--quiet")
        assert result.exit_code == 0, result.output + crashed(result)
        assert manifest_of(tmp_path / "out")["totals"]["packed"] == 2
    finally:
        deepest.unlink()
        shallow.unlink()
        for directory in reversed(chain):  # shutil.rmtree recurses too
            directory.rmdir()


def test_a_16bit_rgba_png_over_max_decoded_mb_is_rejected_before_decoding(tmp_path, monkeypatch):
    import tracemalloc

    import shardsmith.packing.imaging

    pixels = np.full((2000, 2000, 4), 40000, np.uint16)
    ok, png = cv2.imencode(".png", pixels)
    assert ok
    del pixels
    source = tmp_path / "source"
    images.write(source / "a" / "huge.png", png.tobytes())
    images.write(source / "a" / "small.jpg", images.jpeg(96, 64, 1))
    config = tmp_path / "limits.yaml"
    config.write_text("image:\n  max_decoded_mb: 16\n")
    real_decode = shardsmith.packing.imaging.decode_pixels
    decoded_formats = []

    def recording_decode(data, image, *args):
        decoded_formats.append(image.format)
        return real_decode(data, image, *args)

    monkeypatch.setattr(shardsmith.packing.imaging, "decode_pixels", recording_decode)
    tracemalloc.start()
    try:
        result = cli("pack", source, tmp_path / "out", "--config", config, "--size", "32",
                     "--workers", "1", "--quiet", "--max-reject-fraction", "1")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.exit_code == 0, result.output + crashed(result)
    (reject,) = manifest_of(tmp_path / "out")["rejects"]
    assert reject["path"] == "a/huge.png" and reject["reason"] == "too_large"
    assert "2000x2000" in reject["detail"] and "16" in reject["detail"], reject
    assert "PNG" not in decoded_formats
    assert peak < 16 * MiB, peak
