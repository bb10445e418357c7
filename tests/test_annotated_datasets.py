"""Annotated datasets end to end: the CLI, TFRecord's Object Detection API keys and label map,
stage and verify, the readers' targets, new versions and resumed runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from shardsmith.cli import main
from shardsmith.dataset.formats import ShardWriter
from shardsmith.ops.stage import stage
from shardsmith.ops.verify import verify
from shardsmith.readers.torch import dataset, detection_collate

import defects
import images
from defects import members

COCO_CONFIG = "source:\n  annotations:\n    coco: annotations/instances.json\n"


def cli_pack(source: Path, output: Path, config: str, *extra: str, expect: int = 0) -> str:
    job = output.parent / f"{output.name}.yaml"
    job.write_text(config)
    result = CliRunner().invoke(main, ["pack", str(source), str(output), "--config", str(job),
                                       "--size", "128", "--shard-samples", "3", "--workers",
                                       "1", "--quiet", *extra])
    assert result.exit_code == expect, result.output
    return result.output


def coco_tree(source: Path, count: int = 6) -> list[str]:
    relpaths = [f"parts/p{number}.jpg" for number in range(count)]
    for number, relpath in enumerate(relpaths):
        images.write(source / relpath, defects.original(1 + number % 8, seed=number))
    defects.write_annotations(source, relpaths, "coco")
    return relpaths


def check_torchvision_target(image: torch.Tensor, target: dict) -> None:
    """What torchvision's detection models check of a training target (GeneralizedRCNN,
    RoIHeads: boxes float N×4 with x0 < x1 and y0 < y1; labels int64 N; masks uint8 N×H×W),
    plus: inside the image, class ids from 1 (0 is the background)."""
    height, width = image.shape[-2:]
    boxes, labels = target["boxes"], target["labels"]
    assert isinstance(boxes, torch.Tensor) and boxes.dtype == torch.float32
    assert boxes.ndim == 2 and boxes.shape[-1] == 4
    assert labels.dtype == torch.int64 and labels.shape == (len(boxes),)
    assert not (boxes[:, 2:] <= boxes[:, :2]).any(), "degenerate box"
    assert (boxes[:, 0] >= 0).all() and (boxes[:, 2] <= width).all()
    assert (boxes[:, 1] >= 0).all() and (boxes[:, 3] <= height).all()
    assert (labels >= 1).all()
    if "masks" in target:
        masks = target["masks"]
        assert masks.dtype == torch.uint8 and masks.shape == (len(boxes), height, width)
        assert set(masks.unique().tolist()) <= {0, 1}


def test_reader_targets_meet_torchvision_detection_contract(tmp_path):
    source = tmp_path / "source"
    coco_tree(source)
    images.write(source / "parts" / "clean.jpg", images.jpeg(300, 200))  # no objects
    cli_pack(source, tmp_path / "out", COCO_CONFIG)
    data = dataset(tmp_path / "out", targets=True, seed=3)
    loader = torch.utils.data.DataLoader(data, batch_size=4, collate_fn=detection_collate,
                                         num_workers=2)
    seen = 0
    for batch_images, targets in loader:
        assert isinstance(batch_images, list) and isinstance(targets, list)
        for image, target in zip(batch_images, targets, strict=True):
            assert image.dtype == torch.uint8 and image.shape[0] == 3
            check_torchvision_target(image, target)
            seen += 1
            if not len(target["boxes"]):
                assert target["boxes"].shape == (0, 4) and target["masks"].shape[0] == 0
    assert seen == 7
    crops = tmp_path / "crops"
    cli_pack(source, crops, COCO_CONFIG, "--resize", "center_crop")
    batches = list(dataset(crops, targets=True, batch_size=3, shuffle=False))
    assert [len(targets) for _, targets in batches] == [3, 3, 1]
    for batch, targets in batches:
        assert batch.shape[1:] == (3, 128, 128)
        for image, target in zip(batch, targets, strict=True):
            check_torchvision_target(image, target)


@pytest.mark.slow
def test_torch_targets_on_tfrecord_shards_equal_those_on_webdataset_shards(tmp_path):
    source = tmp_path / "source"
    coco_tree(source)
    read = {}
    for fmt in ("webdataset", "tfrecord"):
        cli_pack(source, tmp_path / fmt, COCO_CONFIG, "--format", fmt, "--resize", "center_crop")
        read[fmt] = list(dataset(tmp_path / fmt, targets=True, batch_size=3, seed=2))
    assert len(read["tfrecord"]) == 2
    for (batch, targets), (their_batch, theirs) in zip(read["tfrecord"], read["webdataset"],
                                                       strict=True):
        assert torch.equal(batch, their_batch)
        for target, their in zip(targets, theirs, strict=True):
            assert target.keys() == their.keys() and "masks" in target
            assert torch.equal(target["labels"], their["labels"])
            assert torch.equal(target["masks"], their["masks"])
            # a TFRecord holds boxes as normalised float32: equal to a thousandth of a pixel
            assert torch.allclose(target["boxes"], their["boxes"], atol=1e-3)


def test_tfrecord_carries_the_object_detection_api_keys_and_a_label_map(tmp_path):
    tf = pytest.importorskip("tensorflow", reason="needs TensorFlow (the tf extra)")

    from shardsmith.readers.tf import dataset as tf_dataset
    from shardsmith.readers.tf import object_classes

    source = tmp_path / "source"
    coco_tree(source, 4)
    output = tmp_path / "records"
    cli_pack(source, output, COCO_CONFIG, "--format", "tfrecord")
    assert (output / "label_map.pbtxt").read_text() == (
        'item {\n  id: 1\n  name: "scratch"\n}\nitem {\n  id: 2\n  name: "dent"\n}\n')
    assert object_classes(output) == ["scratch", "dent"]
    spec = {key: tf.io.VarLenFeature(tf.float32) for key in (
        "image/object/bbox/xmin", "image/object/bbox/ymin", "image/object/bbox/xmax",
        "image/object/bbox/ymax")}
    spec.update({"image/object/class/label": tf.io.VarLenFeature(tf.int64),
                 "image/object/class/text": tf.io.VarLenFeature(tf.string),
                 "image/segmentation/class/encoded": tf.io.FixedLenFeature([], tf.string),
                 "image/segmentation/class/format": tf.io.FixedLenFeature([], tf.string),
                 "image/width": tf.io.FixedLenFeature([], tf.int64),
                 "image/height": tf.io.FixedLenFeature([], tf.int64)})
    records = 0
    for shard in images.manifest_of(output)["shards"]:
        for record in tf.data.TFRecordDataset(str(output / shard["name"])):
            example = tf.io.parse_single_example(record, spec)
            xmin = tf.sparse.to_dense(example["image/object/bbox/xmin"]).numpy()
            xmax = tf.sparse.to_dense(example["image/object/bbox/xmax"]).numpy()
            assert ((0 <= xmin) & (xmin < xmax) & (xmax <= 1)).all()
            assert tf.sparse.to_dense(example["image/object/class/label"]).numpy().tolist() \
                == [1, 2]
            assert tf.sparse.to_dense(example["image/object/class/text"]).numpy().tolist() \
                == [b"scratch", b"dent"]
            assert example["image/segmentation/class/format"].numpy() == b"png"
            mask = tf.io.decode_png(example["image/segmentation/class/encoded"]).numpy()
            assert mask.shape[:2] == (example["image/height"], example["image/width"])
            assert set(np.unique(mask).tolist()) == {0, 1, 2}
            records += 1
    assert records == 4
    for element in tf_dataset(output, targets=True, shuffle=False).take(2):
        assert element["boxes"].shape == (2, 4) and element["classes"].numpy().tolist() == [1, 2]
        assert element["mask"].shape == element["image"].shape[:2]

    assert verify(output, decode=True).ok
    staged = tmp_path / "nvme"
    stage(output, staged, quiet=True)
    assert (staged / "label_map.pbtxt").read_bytes() == (output / "label_map.pbtxt").read_bytes()
    assert verify(staged).ok
    (staged / "label_map.pbtxt").write_text("item { id: 1 name: 'other' }\n")
    assert verify(staged).problems == ["label_map.pbtxt: does not list the manifest's object "
                                       "classes"]


def test_one_edit_to_a_coco_file_re_encodes_that_image_only(tmp_path):
    source, output = tmp_path / "source", tmp_path / "out"
    coco_tree(source, 9)
    cli_pack(source, output, COCO_CONFIG)
    before = {path: sample["shard"] for path, sample in by_path(output).items()}
    coco = json.loads((source / "annotations" / "instances.json").read_text())
    coco["annotations"][5]["bbox"][0] += 4  # the dent of image 3 moves 4 px
    (source / "annotations" / "instances.json").write_text(json.dumps(coco))
    summary = cli_pack(source, output, COCO_CONFIG)
    assert "1 re-annotated" in summary and "1 image decoded" in summary
    after = by_path(output)
    changed = {path for path in before if after[path]["shard"] != before[path]}
    assert "parts/p2.jpg" in changed  # annotation 5 is image 3's, parts/p2.jpg
    assert len({before[path] for path in changed}) == 1  # only its shard was rewritten
    assert "up to date" in cli_pack(source, output, COCO_CONFIG)


def by_path(output: Path) -> dict[str, dict]:
    return {sample["path"]: sample for sample in images.samples_of(output)}


def test_an_edited_annotation_file_counts_as_a_change_and_new_classes_are_appended(tmp_path):
    source, output = tmp_path / "source", tmp_path / "out"
    relpaths = [f"parts/p{number}.jpg" for number in range(4)]
    for number, relpath in enumerate(relpaths):
        images.write(source / relpath, defects.original(seed=number))
    defects.write_annotations(source, relpaths, "voc")
    config = "source:\n  annotations:\n    files: voc\n"
    cli_pack(source, output, config, "--format", "tfrecord")
    assert images.manifest_of(output)["object_classes"] == ["scratch", "dent"]
    (source / "parts" / "p1.xml").write_text(defects.voc_xml([("crack", (10, 10, 40, 20)),
                                                            ("dent", (80, 205, 220, 325))]))
    summary = cli_pack(source, output, config, "--format", "tfrecord")
    assert "1 re-annotated" in summary
    manifest = images.manifest_of(output)
    assert manifest["object_classes"] == ["scratch", "dent", "crack"]  # ids 1, 2 kept
    assert 'id: 3\n  name: "crack"' in (output / "label_map.pbtxt").read_text()
    assert verify(output).ok


@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord"])
def test_an_interrupted_tiled_pack_resumes_to_the_same_bytes(tmp_path, monkeypatch, fmt):
    source = tmp_path / "source"
    coco_tree(source, 3)
    config = COCO_CONFIG + "image:\n  tiles:\n    size: 128\n    overlap: 16\n" \
        "    background_fraction: 0.5\n"
    clean, resumed = tmp_path / "clean", tmp_path / "resumed"
    cli_pack(source, clean, config, "--format", fmt)
    assert images.manifest_of(clean)["totals"]["sources"] == 3
    original_close, closed = ShardWriter.close, []

    def close_then_die(self):
        info = original_close(self)
        closed.append(info.samples)
        if len(closed) == 2:  # shards of 3 tiles: the second ends inside an original
            raise KeyboardInterrupt
        return info

    monkeypatch.setattr(ShardWriter, "close", close_then_die)
    cli_pack(source, resumed, config, "--format", fmt, expect=130)
    journal = (resumed / ".shardsmith" / "journal.jsonl").read_text().splitlines()
    assert json.loads(journal[-1]).get("part", 0) > 0  # it stopped inside an original's tiles
    monkeypatch.setattr(ShardWriter, "close", original_close)
    cli_pack(source, resumed, config, "--format", fmt)
    assert images.dataset_bytes(resumed) == images.dataset_bytes(clean)
    samples = members(clean) if fmt == "webdataset" else {}
    assert all("tile" in json.loads(files["json"]) for files in samples.values())
