"""Hostile whole-tree annotation files (the labels file, the COCO file) and per-image ones.

A malformed file of the whole tree is one line naming the file (and its line) and exit 2, never
a traceback; a malformed per-image file is a ``bad_annotation`` reject; a COCO entry that
belongs to no image is reported, never dropped in silence; a valid JSON Lines file is read as
JSON Lines (lines end at ``\\n``), whatever its strings hold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import defects
import images
from defects import members, pack_with

REPO = Path(__file__).resolve().parents[1]
ANY_REJECTS = {"run.max_reject_fraction": 1}
LABELS_CSV = "source:\n  labels: file\n  annotations: {labels: labels.csv}\n"
LABELS_JSONL = "source:\n  labels: file\n  annotations: {labels: labels.jsonl}\n"


def two_images(source: Path) -> None:
    images.write(source / "parts" / "a.jpg", defects.original())
    images.write(source / "parts" / "b.jpg", defects.original())


def pack_process(tmp_path: Path, source: Path, config: str) -> subprocess.CompletedProcess:
    """The real CLI in its own process: a crash is an exit status, a hang a timeout."""
    (tmp_path / "job.yaml").write_text(config)
    return subprocess.run(
        [sys.executable, "-m", "shardsmith", "pack", str(source), str(tmp_path / "out"),
         "--quiet", "--config", str(tmp_path / "job.yaml")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)})


def one_error_line(process: subprocess.CompletedProcess) -> str:
    """Exit 2 and exactly one line on stderr, ``shardsmith: error: ...``."""
    assert process.returncode == 2, (process.returncode, process.stderr)
    assert "Traceback" not in process.stderr, process.stderr
    lines = process.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardsmith: error: "), process.stderr
    return lines[0]


def rejects(manifest: dict) -> dict[str, tuple[str, str]]:
    return {reject["path"]: (reject["reason"], reject["detail"])
            for reject in manifest["rejects"]}


def labels_of(output: Path) -> dict[str, str]:
    return {meta["path"]: meta["class"] for meta in (
        json.loads(files["json"]) for files in members(output).values())}


def boxes_of(output: Path) -> dict[str, int]:
    return {meta["path"]: len(meta["boxes"]) for meta in (
        json.loads(files["json"]) for files in members(output).values())}


# The labels file (CSV)

@pytest.mark.slow
def test_a_labels_csv_field_over_the_csv_limit_is_one_line_naming_its_line(tmp_path):
    source = tmp_path / "source"
    two_images(source)
    (source / "labels.csv").write_text("parts/a.jpg,good\nparts/b.jpg," + "x" * 200_000 + "\n")
    line = one_error_line(pack_process(tmp_path, source, LABELS_CSV))
    assert line.startswith("shardsmith: error: labels.csv line 2: not a CSV row (field larger")


@pytest.mark.slow
def test_a_zero_filled_labels_file_is_one_clear_error(tmp_path):
    source = tmp_path / "source"
    two_images(source)
    (source / "labels.csv").write_bytes(bytes(200_000))
    line = one_error_line(pack_process(tmp_path, source, LABELS_CSV))
    assert line.startswith("shardsmith: error: labels.csv line 1: ")


def test_a_labels_csv_with_old_mac_line_endings_is_read(tmp_path):
    source = tmp_path / "source"
    two_images(source)
    (source / "labels.csv").write_bytes(b"path,label\rparts/a.jpg,good\rparts/b.jpg,bad\r")
    manifest = pack_with(source, tmp_path / "out", {"source.labels": "file",
                                                    "source.annotations.labels": "labels.csv"})
    assert manifest["classes"] == ["bad", "good"]
    assert labels_of(tmp_path / "out") == {"parts/a.jpg": "good", "parts/b.jpg": "bad"}


# The labels file (JSON Lines)

@pytest.mark.slow
def test_a_labels_jsonl_nested_100000_deep_is_one_line_naming_its_line(tmp_path):
    source = tmp_path / "source"
    two_images(source)
    (source / "labels.jsonl").write_text('{"path": "parts/a.jpg", "label": "good"}\n'
                                         '{"path":' + "[" * 100_000 + "]" * 100_000 + "}\n")
    line = one_error_line(pack_process(tmp_path, source, LABELS_JSONL))
    assert line == "shardsmith: error: labels.jsonl line 2: not valid JSON (nested too deeply)"


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\u0085"])
def test_a_labels_jsonl_line_ends_at_a_newline_only(tmp_path, separator):
    """JSON allows these raw inside a string; str.splitlines() would cut the line there."""
    source = tmp_path / "source"
    two_images(source)
    label = f"go{separator}od"
    (source / "labels.jsonl").write_bytes(
        (json.dumps({"path": "parts/a.jpg", "label": label}, ensure_ascii=False) + "\r\n"
         + json.dumps({"path": "parts/b.jpg", "label": "bad"}) + "\n").encode())
    manifest = pack_with(source, tmp_path / "out", {"source.labels": "file",
                                                    "source.annotations.labels": "labels.jsonl"})
    assert manifest["classes"] == ["bad", label]
    assert labels_of(tmp_path / "out") == {"parts/a.jpg": label, "parts/b.jpg": "bad"}


def test_a_labels_jsonl_path_that_is_not_text_is_reported_as_such(tmp_path):
    source = tmp_path / "source"
    two_images(source)
    (source / "labels.jsonl").write_text('{"path": "parts/a.jpg", "label": "good"}\n'
                                         '{"path": 5, "label": "bad"}\n')
    manifest = pack_with(source, tmp_path / "out", {
        "source.labels": "file", "source.annotations.labels": "labels.jsonl"}, **ANY_REJECTS)
    assert rejects(manifest)["labels.jsonl"] == (
        "bad_annotation", "labels.jsonl line 2: the path 5 is not text")


# The COCO file

def coco_document(annotations: list, images_: list | None = None) -> str:
    return json.dumps({
        "images": images_ if images_ is not None else [
            {"id": 1, "file_name": "parts/a.jpg"}, {"id": 2, "file_name": "parts/b.jpg"}],
        "annotations": annotations, "categories": [{"id": 1, "name": "scratch"}]})


@pytest.mark.slow
def test_a_coco_file_nested_100000_deep_is_one_clear_error(tmp_path):
    source = tmp_path / "source"
    two_images(source)
    (source / "coco.json").write_text('{"images": ' + "[" * 100_000 + "]" * 100_000 + "}")
    line = one_error_line(pack_process(tmp_path, source,
                                       "source:\n  annotations: {coco: coco.json}\n"))
    assert line == "shardsmith: error: coco.json: not valid JSON (nested too deeply)"


@pytest.mark.parametrize("entry, problem", [
    ({"id": 7, "image_id": "1"}, "annotation 7: image_id '1' is not an integer"),
    ({"id": 7, "image_id": 1.0}, "annotation 7: image_id 1.0 is not an integer"),
    ({"id": 7, "image_id": [1]}, "annotation 7: image_id list is not an integer"),
    ({"id": 7, "image_id": True}, "annotation 7: image_id True is not an integer"),
    ({"id": 7, "image_id": 99}, "annotation 7: image_id 99 is not an image of the file"),
    ({"id": 7}, "annotation 7: image_id None is not an integer"),
])
def test_a_coco_annotation_that_names_no_image_is_reported_not_dropped(tmp_path, entry,
                                                                      problem):
    source = tmp_path / "source"
    two_images(source)
    (source / "coco.json").write_text(coco_document([
        {"id": 5, "image_id": 1, "category_id": 1, "bbox": [10, 10, 20, 20]},
        dict(entry, category_id=1, bbox=[10, 10, 20, 20])]))
    manifest = pack_with(source, tmp_path / "out", {"source.annotations.coco": "coco.json"},
                         **ANY_REJECTS)
    reason, detail = rejects(manifest)["coco.json"]
    assert reason == "bad_annotation" and detail.startswith(f"coco.json: {problem}"), detail
    assert boxes_of(tmp_path / "out") == {"parts/a.jpg": 1, "parts/b.jpg": 0}


@pytest.mark.parametrize("entry", [None, 5, "x", [1]])
def test_a_coco_annotation_that_is_not_an_object_is_reported(tmp_path, entry):
    source = tmp_path / "source"
    two_images(source)
    (source / "coco.json").write_text(coco_document([entry]))
    manifest = pack_with(source, tmp_path / "out", {"source.annotations.coco": "coco.json"},
                         **ANY_REJECTS)
    assert rejects(manifest) == {"coco.json": (
        "bad_annotation", "coco.json: annotations[0] is not an object")}


def test_coco_annotations_that_name_no_image_are_listed_then_counted(tmp_path):
    source = tmp_path / "source"
    two_images(source)
    (source / "coco.json").write_text(coco_document([
        {"id": number, "image_id": 99, "category_id": 1, "bbox": [10, 10, 20, 20]}
        for number in range(50)]))
    manifest = pack_with(source, tmp_path / "out", {"source.annotations.coco": "coco.json"},
                         **ANY_REJECTS)
    details = [reject["detail"] for reject in manifest["rejects"]]
    assert len(details) == 21
    assert details[0] == "coco.json: annotation 0: image_id 99 is not an image of the file"
    assert details[-1] == ("coco.json: 30 more annotations belong to no image (the first 20 "
                           "are listed)")


def test_a_coco_image_whose_id_is_text_is_rejected_not_packed_bare(tmp_path):
    """7 and "7" are never one id in one place and two in another: "7" is malformed."""
    source = tmp_path / "source"
    two_images(source)
    (source / "coco.json").write_text(coco_document(
        [{"id": 5, "image_id": 7, "category_id": 1, "bbox": [10, 10, 20, 20]}],
        [{"id": 7, "file_name": "parts/a.jpg"}, {"id": "7", "file_name": "parts/b.jpg"}]))
    manifest = pack_with(source, tmp_path / "out", {"source.annotations.coco": "coco.json"},
                         **ANY_REJECTS)
    assert rejects(manifest) == {"parts/b.jpg": (
        "bad_annotation", "coco.json: images[1]: id '7' is not an integer (COCO ids are "
        "integers)")}
    assert boxes_of(tmp_path / "out") == {"parts/a.jpg": 1}


def test_a_coco_annotation_whose_own_id_is_malformed_rejects_its_image(tmp_path):
    source = tmp_path / "source"
    two_images(source)
    (source / "coco.json").write_text(coco_document(
        [{"id": [[[1]]], "image_id": 1, "category_id": 1, "bbox": [10, 10, 20, 20]}]))
    manifest = pack_with(source, tmp_path / "out", {"source.annotations.coco": "coco.json"},
                         **ANY_REJECTS)
    assert rejects(manifest) == {"parts/a.jpg": (
        "bad_annotation", "coco.json: annotation list (image 1): id list is not an integer "
        "(COCO ids are integers)")}


# Per-image files

def test_a_labelme_file_nested_100000_deep_is_a_reject(tmp_path):
    source = tmp_path / "source"
    two_images(source)
    (source / "parts" / "a.json").write_text('{"shapes": ' + "[" * 100_000 + "]" * 100_000
                                             + "}")
    manifest = pack_with(source, tmp_path / "out", {"source.annotations.files": "labelme"},
                         **ANY_REJECTS)
    assert rejects(manifest) == {"parts/a.jpg": (
        "bad_annotation", "parts/a.json: not valid JSON (nested too deeply)")}


def test_a_voc_file_in_an_unknown_encoding_is_a_reject(tmp_path):
    source = tmp_path / "source"
    two_images(source)
    (source / "parts" / "a.xml").write_text('<?xml version="1.0" encoding="bogus"?>'
                                            "<annotation/>")
    manifest = pack_with(source, tmp_path / "out", {"source.annotations.files": "voc"},
                         **ANY_REJECTS)
    reason, detail = rejects(manifest)["parts/a.jpg"]
    assert reason == "bad_annotation"
    assert detail.startswith("parts/a.xml: not well-formed XML (an unknown encoding"), detail
