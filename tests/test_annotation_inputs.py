"""Annotation inputs are untrusted: malformed ones are rejects with reasons, never crashes;
paths cannot leave the source tree; annotation files are never packed as images."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from shardsmith.cli import main

import defects
import images
from defects import members, pack_with

YOLO = {"source.annotations.files": "yolo", "source.annotations.classes": ["scratch", "dent"]}


def rejects(manifest: dict) -> dict[str, tuple[str, str]]:
    return {reject["path"]: (reject["reason"], reject["detail"]) for reject in manifest["rejects"]}


def two_images(source: Path) -> None:
    images.write(source / "parts" / "a.jpg", defects.original())
    images.write(source / "parts" / "b.jpg", defects.original())


@pytest.mark.parametrize("fmt, name, content, where", [
    ("yolo", "a.txt", "0 0.5 0.5 0.1 0.1\n0 0.5 0.5 0.1\n", "parts/a.txt line 2"),
    ("yolo", "a.txt", "7 0.5 0.5 0.1 0.1\n", "parts/a.txt line 1: class 7"),
    ("yolo", "a.txt", "0 1.5 0.5 0.1 0.1\n", "parts/a.txt line 1: coordinates"),
    ("voc", "a.xml", "<annotation>\n<object><name>x</name>\n<bndbox><xmin>a</xmin></bndbox>"
     "</object></annotation>", "parts/a.xml line 3: xmin is not a number"),
    ("voc", "a.xml", "<annotation><object>", "parts/a.xml: not well-formed XML"),
    ("labelme", "a.json", '{"shapes": [{"label": "x", "points": [[1, 2]]}]}',
     "parts/a.json shape 0: a polygon of 1 points"),
    ("labelme", "a.json", "{not json", "parts/a.json: not valid JSON"),
])
def test_a_malformed_annotation_is_a_reject_naming_its_file_and_line(tmp_path, fmt, name,
                                                                       content, where):
    source = tmp_path / "source"
    two_images(source)
    (source / "parts" / name).write_text(content)
    overrides = YOLO if fmt == "yolo" else {"source.annotations.files": fmt}
    manifest = pack_with(source, tmp_path / "out", overrides, **{"run.max_reject_fraction": 1})
    assert manifest["totals"]["packed"] == 1  # b.jpg has no file: a background image
    reason, detail = rejects(manifest)["parts/a.jpg"]
    assert reason == "bad_annotation" and detail.startswith(where), detail


def test_a_missing_annotation_is_a_background_image(tmp_path):
    source = tmp_path / "source"
    two_images(source)
    defects.write_annotations(source, ["parts/a.jpg"], "voc")
    pack_with(source, tmp_path / "out", {"source.annotations.files": "voc"})
    counts = sorted(len(json.loads(files["json"])["boxes"])
                    for files in members(tmp_path / "out").values())
    assert counts == [0, 2]


def test_coco_entries_are_checked_and_paths_cannot_leave_the_tree(tmp_path):
    source = tmp_path / "source"
    two_images(source)
    document = {
        "images": [{"id": 1, "file_name": "parts/a.jpg"}, {"id": 2, "file_name": "parts/b.jpg"},
                   {"id": 3, "file_name": "../../etc/passwd"}, {"id": 4, "file_name": "/etc/x"}],
        "annotations": [{"id": 10, "image_id": 1, "category_id": 1, "bbox": [10, 10, 20, 20]},
                        {"id": 11, "image_id": 2, "category_id": 1, "bbox": [10, 10, -5, 20]}],
        "categories": [{"id": 1, "name": "scratch"}]}
    (source / "coco.json").write_text(json.dumps(document))
    manifest = pack_with(source, tmp_path / "out", {"source.annotations.coco": "coco.json"},
                         **{"run.max_reject_fraction": 1})
    found = rejects(manifest)
    assert found["parts/b.jpg"] == ("bad_annotation", "coco.json: annotation 11 (image 2): "
                                    "bbox [10, 10, -5, 20] is empty")
    refused = [r["detail"] for r in manifest["rejects"] if r["path"] == "coco.json"]
    assert len(refused) == 2 and all("leads out of the source tree" in d for d in refused)
    assert manifest["excluded"] == {"annotation": 1}  # coco.json itself is not an image


def test_a_coco_file_that_is_not_coco_is_one_clear_error(tmp_path):
    source = tmp_path / "source"
    two_images(source)
    (source / "coco.json").write_text("[1, 2")
    result = CliRunner().invoke(main, ["pack", str(source), str(tmp_path / "out"), "--quiet",
                                       "--config", str(write_config(tmp_path, "coco: coco.json"))])
    assert result.exit_code == 2
    assert result.output.startswith("shardsmith: error: coco.json: not valid JSON")


def write_config(tmp_path: Path, annotations: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text("source:\n  annotations:\n" + "".join(
        f"    {line}\n" for line in annotations.splitlines()))
    return path


def test_labelme_image_data_is_ignored_and_its_image_path_must_stay_inside(tmp_path):
    source = tmp_path / "source"
    two_images(source)
    defects.write_annotations(source, ["parts/a.jpg", "parts/b.jpg"], "labelme")
    labelme = json.loads((source / "parts" / "b.json").read_text())
    labelme["imagePath"] = "../../../outside.jpg"
    (source / "parts" / "b.json").write_text(json.dumps(labelme))
    manifest = pack_with(source, tmp_path / "out", {"source.annotations.files": "labelme"},
                         **{"run.max_reject_fraction": 1})
    reason, detail = rejects(manifest)["parts/b.jpg"]
    assert reason == "bad_annotation" and "imagePath" in detail and "refused" in detail
    assert manifest["totals"]["packed"] == 1  # a.json's imageData is not an image: ignored


def test_xml_entities_are_not_expanded(tmp_path):
    source = tmp_path / "source"
    two_images(source)
    (source / "parts" / "a.xml").write_text(
        '<?xml version="1.0"?>\n<!DOCTYPE a [<!ENTITY lol "lol">'
        '<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;">]>\n<annotation>&lol2;</annotation>\n')
    manifest = pack_with(source, tmp_path / "out", {"source.annotations.files": "voc"},
                         **{"run.max_reject_fraction": 1})
    reason, detail = rejects(manifest)["parts/a.jpg"]
    assert reason == "bad_annotation" and "refused" in detail


def test_annotation_files_and_mask_trees_are_never_packed_as_images(tmp_path):
    source = tmp_path / "source"
    two_images(source)
    defects.write_annotations(source, ["parts/a.jpg", "parts/b.jpg"], "mask")  # *_mask.png
    images.write(source / "masks" / "parts" / "a.png", images.png(10, 10))
    manifest = pack_with(source, tmp_path / "out", {
        "source.annotations.masks": "beside", "source.annotations.mask_suffix": "_mask",
        "source.annotations.mask_values": "index", "source.annotations.classes": ["s", "d"],
        "source.labels": "none"})
    assert manifest["totals"]["packed"] == 3  # a.jpg, b.jpg and masks/parts/a.png
    assert manifest["excluded"] == {"annotation": 2}
    assert set(manifest["excluded_paths"]["annotation"]) == {"parts/a_mask.png",
                                                             "parts/b_mask.png"}
    mirrored = pack_with(source, tmp_path / "mirrored", {
        "source.annotations.masks": "masks", "source.labels": "none"},
        **{"run.max_reject_fraction": 1})
    assert mirrored["excluded"] == {"annotation": 1}  # the folder, not walked
    assert mirrored["excluded_paths"]["annotation"] == ["masks"]
    assert rejects(mirrored)["parts/a.jpg"] == (
        "bad_annotation", "masks/parts/a.png: the mask is 10x10, the image 480x360")


@pytest.mark.parametrize("name, content", [
    ("labels.csv", "path,label\nparts/a.jpg,scratch\nparts/b.jpg, ok\nparts/c.jpg,\n"
                   "../../x.jpg,ok\n"),
    ("labels.jsonl", '{"path": "parts/a.jpg", "label": "scratch"}\n'
                     '{"path": "parts/b.jpg", "label": "ok"}\n{"path": "parts/c.jpg"}\n'
                     '{"path": "../../x.jpg", "label": "ok"}\n'),
])
def test_labels_come_from_a_csv_or_json_lines_file(tmp_path, name, content):
    source = tmp_path / "source"
    two_images(source)
    images.write(source / "parts" / "c.jpg", defects.original())
    images.write(source / "parts" / "d.jpg", defects.original())  # not in the file
    (source / name).write_text(content)
    manifest = pack_with(source, tmp_path / "out", {"source.labels": "file",
                                                    "source.annotations.labels": name},
                         **{"run.max_reject_fraction": 1})
    assert manifest["classes"] == ["ok", "scratch"]
    labels = {meta["path"]: meta["class"] for meta in (
        json.loads(files["json"]) for files in members(tmp_path / "out").values())}
    assert labels == {"parts/a.jpg": "scratch", "parts/b.jpg": "ok"}
    assert manifest["excluded"] == {"annotation": 1, "not in the labels file": 1}
    found = rejects(manifest)
    assert found["parts/c.jpg"] == ("bad_annotation", f"{name} line 4: no label for parts/c.jpg"
                                    if name.endswith("csv") else
                                    f"{name} line 3: no label for parts/c.jpg")
    assert "leads out of the source tree" in found[name][1]


def test_the_mvtec_layout_is_a_preset(tmp_path):
    source = tmp_path / "bottle"
    images.write(source / "train" / "good" / "000.png", images.png(64, 48, 1))
    images.write(source / "test" / "good" / "000.png", images.png(64, 48, 2))
    crack = Image.new("L", (64, 48))
    crack.paste(255, (10, 20, 40, 22))  # a 30x2 px crack
    images.write(source / "test" / "crack" / "000.png", images.png(64, 48, 3))
    (source / "ground_truth" / "crack").mkdir(parents=True)
    crack.save(source / "ground_truth" / "crack" / "000_mask.png")
    (source / "license.txt").write_text("CC BY-NC-SA 4.0\n")
    manifest = pack_with(source, tmp_path / "out", {"source.annotations.preset": "mvtec"},
                         **{"image.size": 32})
    assert manifest["classes"] == ["crack", "good"] and manifest["object_classes"] == ["crack"]
    assert {name: totals["samples"] for name, totals in manifest["splits"].items()} == {
        "train": 1, "test": 2}
    assert manifest["excluded"] == {"annotation": 1, "extension": 1}
    for files in members(tmp_path / "out").values():
        meta = json.loads(files["json"])
        assert meta["split"] == meta["path"].split("/")[0]
        assert meta["class"] == meta["path"].split("/")[1]
        if meta["class"] == "crack":
            assert meta["label_names"] == ["crack"] and meta["labels"] == [1]
            assert meta["boxes"] == [[5.0, 10.0, 20.0, 11.0]]  # (10, 20, 40, 22) at 1/2
        else:
            assert meta["boxes"] == [] and "mask.png" in files  # an all-background mask


@pytest.mark.slow
def test_a_one_pixel_crack_marks_every_sample_pixel_it_crosses(tmp_path):
    source = tmp_path / "source"
    images.write(source / "parts" / "wide.png", images.png(2400, 1800))
    mask = Image.new("L", (2400, 1800))
    for x in range(100, 2300):  # a diagonal one-pixel crack, 2200 px long
        mask.putpixel((x, 300 + (x - 100) // 2), 255)
    mask.save(source / "parts" / "wide_mask.png")
    pack_with(source, tmp_path / "out", {"source.annotations.masks": "beside",
                                         "source.annotations.mask_suffix": "_mask"},
              **{"image.size": 240})  # 1/10: the crack is a tenth of a sample pixel wide
    (files,) = members(tmp_path / "out").values()
    sample = cv2.imdecode(np.frombuffer(files["mask.png"], np.uint8), cv2.IMREAD_UNCHANGED)
    columns = np.flatnonzero(sample.any(axis=0))
    assert columns.tolist() == list(range(10, 230))  # unbroken, end to end
    rows_per_column = (sample > 0).sum(axis=0)[10:230]
    assert rows_per_column.max() <= 2  # thin stays thin: no blur, no blending
    resized = cv2.resize((np.asarray(mask) > 0).astype(np.float32), (240, 180),
                         interpolation=cv2.INTER_AREA)
    assert (resized >= 0.5).sum() == 0  # what an ordinary resize and threshold would keep


def test_center_crop_clips_boxes_and_drops_what_mostly_leaves(tmp_path):
    source = tmp_path / "source"
    images.write(source / "parts" / "a.jpg", defects.original())
    (source / "parts" / "a.xml").write_text(defects.voc_xml([
        ("half", (10, 200, 110, 300)),  # the crop keeps x 60..420: half of it shows
        ("sliver", (0, 0, 70, 50)),  # a seventh of it shows: under min_visible 0.25
        ("whole", defects.SCRATCH)]))
    pack_with(source, tmp_path / "out", {"source.annotations.files": "voc"},
              **{"image.size": 360, "image.resize": "center_crop"})
    (files,) = members(tmp_path / "out").values()
    meta = json.loads(files["json"])
    assert meta["label_names"] == ["half", "whole"]
    assert meta["boxes"] == [[0.0, 200.0, 50.0, 300.0], [160.0, 40.0, 300.0, 160.0]]
