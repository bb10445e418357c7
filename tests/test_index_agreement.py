"""A sample index line that its shard does not bear out, and totals its index does not.

The corpus is tests/test_cut_defects.py's: five tiles of one original, tile 1 showing a crack's
cut tip, tile 2 a box-only scratch, tile 3 its cut end.  The forged datasets are re-signed
(sizes and sha256 fixed up in the manifest): only the field named is wrong.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hostile_helpers import index_bytes, replace_sample_index
from test_cut_defects import CUT_CONFIG, cut_tree

import images
from defects import pack_with

REPO = Path(__file__).resolve().parents[1]


def shardsmith(*args: object) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "shardsmith", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=180)


@pytest.fixture(scope="module", params=["webdataset", "tfrecord"])
def packed(request, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp(request.param)
    cut_tree(root / "source")
    pack_with(root / "source", root / "out", CUT_CONFIG, **{"output.format": request.param})
    return root / "out"


def forged_copy(packed: Path, where: Path, change) -> Path:
    """A copy of ``packed`` whose sample index lines are rewritten by ``change(line)``."""
    shutil.copytree(packed, where)
    lines = images.samples_of(where)
    for line in lines:
        change(line)
    replace_sample_index(where, index_bytes(lines))
    return where


def test_verify_decode_finds_a_sound_dataset_of_either_format_agreeing_with_its_index(packed):
    result = shardsmith("verify", packed, "--decode", "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr


def test_verify_decode_names_an_index_line_that_calls_a_box_only_object_a_mask(packed,
                                                                                tmp_path):
    def no_box_only(line: dict) -> None:
        if line.get("objects_box_only"):
            line["objects_box_only"] = []

    forged = forged_copy(packed, tmp_path / "forged", no_box_only)
    result = shardsmith("verify", forged, "--decode", "--quiet")
    assert result.returncode == 1
    assert "r000c002" in result.stdout and "box-only" in result.stdout, result.stdout


def test_export_refuses_an_index_line_that_counts_another_object_than_its_shard(packed,
                                                                                tmp_path):
    def one_more_crack(line: dict) -> None:
        if line["key"].endswith("c000"):
            line["objects"] = [line["objects"][0] + 1, *line["objects"][1:]]

    forged = forged_copy(packed, tmp_path / "forged", one_more_crack)
    result = shardsmith("export", forged, tmp_path / "coco", "--layout", "coco", "--quiet")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "r000c000" in lines[0] and "disagree" in lines[0], lines
    assert not (tmp_path / "coco" / "current").exists()


def with_bytes_in_off_by_one(packed: Path, where: Path) -> dict:
    """A copy of ``packed`` whose manifest says ``totals.bytes_in`` one more; its manifest."""
    forged_copy(packed, where, lambda line: None)
    manifest = images.manifest_of(where)
    manifest["totals"]["bytes_in"] += 1
    (where / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


def test_verify_names_a_bytes_in_that_the_sample_index_does_not_bear_out(packed, tmp_path):
    forged = tmp_path / "forged"
    with_bytes_in_off_by_one(packed, forged)
    result = shardsmith("verify", forged, "--quiet")
    assert result.returncode == 1
    assert "totals.bytes_in" in result.stdout, result.stdout


def test_a_pack_that_corrected_damaged_totals_is_up_to_date_the_next_time(packed, tmp_path):
    forged = tmp_path / "forged"
    manifest = with_bytes_in_off_by_one(packed, forged)
    options = {"output.format": manifest["format"]}
    corrected = pack_with(packed.parent / "source", forged, CUT_CONFIG, **options)
    assert corrected["version"] == manifest["version"] + 1
    assert "corrected" in corrected["history"][-1]["note"]
    assert corrected["shards"] == manifest["shards"]  # nothing else changed
    again = pack_with(packed.parent / "source", forged, CUT_CONFIG, **options)
    assert again["version"] == corrected["version"]
