"""An export never passes a box off as a mask: the pack counts each sample's objects that have
a box only (the sample index), ``--task auto`` chooses segment only where every object exported
has pixels and says why, ``--task segment`` refuses box-only objects unless asked to write their
boxes as polygons, and COCO gives a box-only object no ``segmentation``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hostile_helpers import index_bytes, replace_sample_index
from test_export import metadata_of

import defects
import images

SETTINGS = {**defects.CORPUS_ANNOTATIONS, "image.size": 96, "splits.folder": True,
            "splits": "train=0.8,val=0.2"}
SCRATCH = defects.CORPUS_CLASSES.index("scratch") + 1  # its category id: a box only, always


def packed(root: Path, with_scratch: bool) -> Path:
    """Three originals of the drawn corpus: a crack (mask and box), a fissure (mask) and, with
    ``with_scratch``, a scratch that has a box only."""
    for split, name in (("train", "a"), ("train", "b"), ("val", "c")):
        path = images.write(root / "source" / split / "defect" / f"{name}.jpg",
                            defects.corpus_original("jpeg8", 1))
        defects.write_corpus_annotations(path.with_suffix(""))
        if not with_scratch:  # the crack's box only (class 0), the scratch's line gone
            labels = path.with_suffix(".txt")
            labels.write_text(labels.read_text().splitlines()[0] + "\n")
    defects.pack_with(root / "source", root / "dataset", SETTINGS)
    return root / "dataset"


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    return packed(tmp_path_factory.mktemp("box-only"), with_scratch=True)


@pytest.fixture(scope="module")
def masks_only(tmp_path_factory) -> Path:
    return packed(tmp_path_factory.mktemp("masks-only"), with_scratch=False)


def shardsmith(*args: object) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    return subprocess.run([sys.executable, "-m", "shardsmith", "export", *map(str, args),
                           "--quiet"], capture_output=True, text=True, env=env, timeout=120)


def label_values(folder: Path) -> list[int]:
    """The number of values on each line of the YOLO label files of ``folder``."""
    return [len(line.split()) for path in (folder / "current" / "labels").rglob("*.txt")
            for line in path.read_text().splitlines()]


def box_only_in_shards(dataset: Path) -> Counter:
    """(key, class id) -> the objects of the sample with no polygon and no instance mask, as
    its shard's metadata says."""
    found: Counter = Counter()
    for key, meta in metadata_of(dataset).items():
        rings = meta.get("polygons") or [[] for _ in meta.get("boxes", [])]
        for label, polygons, rle in zip(meta.get("labels", []), rings, meta.get("rle", []),
                                        strict=True):
            if rle is None and not any(len(ring) >= 6 for ring in polygons):
                found[key, label] += 1
    return found


def test_the_sample_index_counts_each_samples_box_only_objects_per_class(mixed):
    recorded: Counter = Counter()
    for sample in images.samples_of(mixed):
        assert sample["objects_box_only"] is not None
        for number, count in enumerate(sample["objects_box_only"], 1):
            recorded[sample["key"], number] += count
    expected = box_only_in_shards(mixed)
    assert +recorded == expected
    assert {number for _, number in expected} == {SCRATCH}, "the scratches, and only they"


def test_auto_exports_detect_and_says_why_when_an_object_has_a_box_only(mixed, tmp_path):
    result = shardsmith(mixed, tmp_path / "yolo", "--layout", "yolo")
    assert result.returncode == 0, result.stderr
    boxes = sum(box_only_in_shards(mixed).values())
    assert f"auto chose detect: {boxes} of " in result.stdout and "scratch" in result.stdout
    assert set(label_values(tmp_path / "yolo")) == {5}


@pytest.mark.slow
def test_auto_exports_segment_and_says_why_when_every_object_has_pixels(masks_only, tmp_path):
    result = shardsmith(masks_only, tmp_path / "yolo", "--layout", "yolo")
    assert result.returncode == 0, result.stderr
    assert "auto chose segment" in result.stdout
    values = label_values(tmp_path / "yolo")
    assert values and min(values) >= 7


def test_auto_on_an_index_that_does_not_count_pixels_exports_detect_with_a_note(masks_only,
                                                                               tmp_path):
    older = tmp_path / "older"
    shutil.copytree(masks_only, older)
    lines = images.samples_of(older)
    for line in lines:
        del line["objects_box_only"]
    replace_sample_index(older, index_bytes(lines))
    result = shardsmith(older, tmp_path / "yolo", "--layout", "yolo")
    assert result.returncode == 0, result.stderr
    assert "auto chose detect" in result.stdout and "earlier release" in result.stdout
    assert set(label_values(tmp_path / "yolo")) == {5}


@pytest.mark.slow
def test_segment_over_box_only_objects_is_refused_naming_how_many(mixed, tmp_path):
    result = shardsmith(mixed, tmp_path / "yolo", "--layout", "yolo", "--task", "segment")
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardsmith: error: ")
    boxes = sum(box_only_in_shards(mixed).values())
    assert f"{boxes} of " in lines[0] and "scratch" in lines[0]
    assert "--boxes-as-polygons" in lines[0]
    assert not (tmp_path / "yolo" / "current").exists()


@pytest.mark.slow
def test_boxes_as_polygons_writes_box_only_objects_as_their_rectangles(mixed, tmp_path):
    result = shardsmith(mixed, tmp_path / "yolo", "--layout", "yolo", "--task", "segment",
                        "--boxes-as-polygons")
    assert result.returncode == 0, result.stderr
    assert "written as rectangles" in result.stdout
    values = label_values(tmp_path / "yolo")
    assert 9 in values and min(values) >= 7  # a box's four corners: 1 + 8 values


def coco_file(folder: Path, split: str) -> dict:
    return json.loads((folder / "current" / "annotations" / f"instances_{split}.json")
                      .read_text())


def test_a_box_only_object_has_no_segmentation_in_coco(mixed, tmp_path):
    result = shardsmith(mixed, tmp_path / "coco", "--layout", "coco")
    assert result.returncode == 0, result.stderr
    annotations = [a for split in ("train", "val") for a in coco_file(tmp_path / "coco",
                                                                       split)["annotations"]]
    without = Counter(a["category_id"] for a in annotations if "segmentation" not in a)
    assert sum(without.values()) == sum(box_only_in_shards(mixed).values())
    assert set(without) == {SCRATCH}
    assert all("segmentation" in a for a in annotations if a["category_id"] != SCRATCH)


@pytest.mark.slow
def test_coco_with_boxes_as_polygons_gives_a_box_only_object_its_box(mixed, tmp_path):
    result = shardsmith(mixed, tmp_path / "coco", "--layout", "coco", "--boxes-as-polygons")
    assert result.returncode == 0, result.stderr
    for split in ("train", "val"):
        for annotation in coco_file(tmp_path / "coco", split)["annotations"]:
            if annotation["category_id"] == SCRATCH:
                x, y, w, h = annotation["bbox"]
                assert annotation["segmentation"] == [[x, y, x + w, y, x + w, y + h, x, y + h]]


def evaluated(ground, results: list[dict], kind: str) -> float:
    from pycocotools.cocoeval import COCOeval

    evaluation = COCOeval(ground, ground.loadRes(results), kind)
    evaluation.evaluate()
    evaluation.accumulate()
    evaluation.summarize()
    return float(evaluation.stats[0])


@pytest.mark.slow
def test_cocoeval_scores_true_masks_at_one_and_box_only_objects_in_bbox_only(mixed, tmp_path):
    """A model that finds every defect exactly: its boxes score AP 1 over every object, its
    masks AP 1 over the objects that have pixels (a scratch's thin mask is not held against a
    rectangle no one drew)."""
    from pycocotools import mask as coco_mask
    from pycocotools.coco import COCO

    assert shardsmith(mixed, tmp_path / "coco", "--layout", "coco").returncode == 0
    path = tmp_path / "coco" / "current" / "annotations" / "instances_train.json"
    ground = COCO(str(path))
    boxes, masks = [], []
    for annotation in ground.dataset["annotations"]:
        image = ground.imgs[annotation["image_id"]]
        height, width = image["height"], image["width"]
        boxes.append({"image_id": image["id"], "category_id": annotation["category_id"],
                      "bbox": annotation["bbox"], "score": 1.0})
        if annotation["category_id"] != SCRATCH:
            rle = ground.annToRLE(annotation)
        else:  # what a model finds of a scratch: a line one pixel high across its box
            x, y, w, h = (round(value) for value in annotation["bbox"])
            line = np.zeros((height, width), np.uint8, order="F")
            line[min(y + h // 2, height - 1), x:x + w] = 1
            rle = coco_mask.encode(line)
        masks.append({"image_id": image["id"], "category_id": annotation["category_id"],
                      "segmentation": rle, "score": 1.0})
    assert evaluated(ground, boxes, "bbox") == pytest.approx(1.0)
    # docs/export.md: segm scores the objects that have pixels
    ground.dataset["annotations"] = [a for a in ground.dataset["annotations"]
                                     if "segmentation" in a]
    ground.createIndex()
    assert evaluated(ground, masks, "segm") == pytest.approx(1.0)
