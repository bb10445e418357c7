"""``shardsmith export``: every layout checked against the manifest it came from, the versions
switched atomically, unchanged files hard-linked, an interrupted export resumed.

The corpus (``defects``): drawn cracks crossing tile borders (non-convex and diagonal, so one
object shows as several regions in a tile), a scratch that is a box only, originals without
objects, 16-bit and EXIF-rotated originals; a train and a val split.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from shardsmith.cli import main
from shardsmith.dataset.formats import shard_format
from shardsmith.ops.export import export
from shardsmith.ops.export.objects import box_mask

import defects
import images

FORMATS = ("webdataset", "tfrecord")
SUFFIX = {"jpeg8": ".jpg", "png16": ".png", "tiff16": ".tif"}
TILES = {"image.tiles.size": 96, "image.tiles.overlap": 16, "image.tiles.keep": "all"}


def write_corpus(source: Path, annotated: bool = True) -> None:
    for split, name, kind, orientation in (("train", "a", "jpeg8", 6), ("train", "b", "png16", 1),
                                           ("val", "c", "tiff16", 3)):
        path = images.write(source / split / "defect" / f"{name}{SUFFIX[kind]}",
                            defects.corpus_original(kind, orientation))
        if annotated:
            defects.write_corpus_annotations(path.with_suffix(""))
    for split in ("train", "val"):
        images.write(source / split / "good" / f"clean_{split}.jpg",
                     defects.corpus_original("jpeg8", 1, with_defects=False))


def pack_corpus(source: Path, output: Path, fmt: str, annotated: bool = True) -> dict:
    overrides = {**(defects.CORPUS_ANNOTATIONS if annotated else {}), **TILES,
                 "image.color": "gray", "splits.folder": True, "splits": "train=0.8,val=0.2",
                 "output.format": fmt}
    return defects.pack_with(source, output, overrides)


@pytest.fixture(scope="module", params=FORMATS)
def dataset(request, tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp(f"corpus-{request.param}")
    write_corpus(root / "source")
    manifest = pack_corpus(root / "source", root / "dataset", request.param)
    assert not manifest["rejects"] and set(manifest["splits"]) == {"train", "val"}
    return root / "dataset"


def metadata_of(dataset: Path) -> dict[str, dict]:
    """key -> the sample's metadata, read with the format's own reader."""
    manifest = images.manifest_of(dataset)
    fmt = shard_format(manifest["format"])
    splits = {sample["key"]: sample["split"] for sample in images.samples_of(dataset)}
    found = {}
    for shard in manifest["shards"]:
        for _, record in fmt.records(dataset / shard["name"], shard["bytes"]):
            found[record.key] = {**fmt.metadata(record), "split": splits[record.key]}
    return found


def object_counts(dataset: Path) -> Counter:
    """(split, class id from 1) -> objects, as the sample index counts them."""
    counts: Counter = Counter()
    for sample in images.samples_of(dataset):
        for number, count in enumerate(sample.get("objects") or [], 1):
            counts[sample["split"], number] += count
    return counts


def cut_keys(dataset: Path) -> set[str]:
    """The samples showing a defect cut below min_visible: yolo and coco leave them out."""
    return {sample["key"] for sample in images.samples_of(dataset) if sample.get("objects_cut")}


def run_cli(*args: str) -> object:
    return CliRunner().invoke(main, ["export", *map(str, args), "--quiet"])


def test_yolo_has_one_image_and_one_label_file_per_sample(dataset, tmp_path):
    result = run_cli(dataset, tmp_path / "yolo", "--layout", "yolo")
    assert result.exit_code == 0, result.output
    folder = tmp_path / "yolo" / "current"
    splits = Counter(sample["split"] for sample in images.samples_of(dataset)
                     if not sample.get("objects_cut"))
    for split, count in splits.items():
        assert len(list((folder / "images" / split).iterdir())) == count
        assert len(list((folder / "labels" / split).iterdir())) == count
    empty = [path for path in (folder / "labels").rglob("*.txt") if not path.read_text()]
    assert empty, "background images (no objects) get an empty label file"


@pytest.mark.parametrize("task", ["detect", "segment"])
def test_yolo_label_lines_per_class_equal_the_manifests_objects(dataset, tmp_path, task):
    export(dataset, tmp_path / "yolo", "yolo", task=task, quiet=True, boxes_as_polygons=True)
    counts: Counter = Counter()
    for path in (tmp_path / "yolo" / "current" / "labels").rglob("*.txt"):
        for line in path.read_text().splitlines():
            counts[path.parent.name, int(line.split()[0]) + 1] += 1
    assert counts == object_counts(dataset)


def test_yolo_detect_boxes_are_the_samples_boxes(dataset, tmp_path):
    export(dataset, tmp_path / "yolo", "yolo", task="detect", quiet=True)
    folder = tmp_path / "yolo" / "current"
    left_out = cut_keys(dataset)
    for key, meta in metadata_of(dataset).items():
        if key in left_out:
            continue
        lines = (folder / "labels" / meta["split"] / f"{key}.txt").read_text().splitlines()
        assert len(lines) == len(meta.get("boxes", []))
        for line, box, label in zip(lines, meta.get("boxes", []), meta.get("labels", []),
                                    strict=True):
            number, cx, cy, w, h = line.split()
            width, height = meta["width"], meta["height"]
            assert int(number) == label - 1
            expected = ((box[0] + box[2]) / 2 / width, (box[1] + box[3]) / 2 / height,
                        (box[2] - box[0]) / width, (box[3] - box[1]) / height)
            assert np.allclose([float(cx), float(cy), float(w), float(h)], expected,
                               atol=2e-6)


def test_yolo_segment_polygons_cover_each_objects_mask_in_one_line(dataset, tmp_path):
    export(dataset, tmp_path / "yolo", "yolo", task="segment", quiet=True,
           boxes_as_polygons=True)
    folder = tmp_path / "yolo" / "current"
    left_out = cut_keys(dataset)
    for key, meta in metadata_of(dataset).items():
        if key in left_out:
            continue
        lines = (folder / "labels" / meta["split"] / f"{key}.txt").read_text().splitlines()
        assert len(lines) == len(meta.get("boxes", []))  # one line per object, however split
        width, height = meta["width"], meta["height"]
        for line, rle in zip(lines, meta.get("rle", []), strict=True):
            values = np.array([float(v) for v in line.split()[1:]])
            assert len(values) >= 6 and len(values) % 2 == 0
            assert values.min() >= 0.0 and values.max() <= 1.0
            if rle is None:
                continue
            mask = defects.rle_decode_counts(rle["counts"], height, width)
            drawn = np.zeros((height, width), np.uint8)
            points = (values.reshape(-1, 2) * (width, height) * 8).round().astype(np.int32)
            cv2.fillPoly(drawn, [points], 1, shift=3)
            assert defects.iou(drawn > 0, mask) >= 0.8


def test_an_object_in_two_regions_is_one_polygon_line():

    from shardsmith.ops.export import layouts

    mask = np.zeros((40, 60), bool)
    mask[5:15, 5:20] = True
    mask[25:35, 30:55] = True  # the same object, a second region (a crack cut by a tile edge)
    counts, previous, run = [], False, 0
    for value in mask.T.reshape(-1):
        if value != previous:
            counts.append(run)
            previous, run = value, 0
        run += 1
    counts.append(run)
    item = layouts.SampleObject([5.0, 5.0, 55.0, 35.0], 1, "crack", [],
                                {"size": [40, 60], "counts": counts}, None, 40, 60)
    sample = layouts.Sample("k", "train", "defect", 60, 40, b"", [item])
    lines = layouts.yolo_lines(sample, segment=True)
    assert len(lines) == 1
    values = np.array([float(v) for v in lines[0].split()[1:]]).reshape(-1, 2) * (60, 40)
    xs, ys = values[:, 0], values[:, 1]
    area = abs(float(np.dot(xs, np.roll(ys, -1)) - np.dot(ys, np.roll(xs, -1)))) / 2
    assert area == pytest.approx(mask.sum())  # along pixel borders, the bridge adds nothing


def test_data_yaml_has_an_absolute_path_and_names_in_id_order(dataset, tmp_path):
    export(dataset, tmp_path / "yolo", "yolo", quiet=True)
    document = yaml.safe_load((tmp_path / "yolo" / "current" / "data.yaml").read_text())
    assert Path(document["path"]).is_absolute()
    assert Path(document["path"]) == (tmp_path / "yolo" / "v1").resolve()
    assert (document["train"], document["val"]) == ("images/train", "images/val")
    assert document["names"] == dict(enumerate(images.manifest_of(dataset)["object_classes"]))


def test_image_labels_only_export_the_classify_layout(tmp_path):
    write_corpus(tmp_path / "source", annotated=False)
    pack_corpus(tmp_path / "source", tmp_path / "dataset", "webdataset", annotated=False)
    result = run_cli(tmp_path / "dataset", tmp_path / "cls", "--layout", "yolo")
    assert result.exit_code == 0, result.output
    expected = Counter((s["split"], images.manifest_of(tmp_path / "dataset")["classes"][s["label"]])
                       for s in images.samples_of(tmp_path / "dataset"))
    found = Counter((path.parent.parent.name, path.parent.name)
                    for path in (tmp_path / "cls" / "current").rglob("*.jpg"))
    assert found == expected
    assert not (tmp_path / "cls" / "current" / "data.yaml").exists()


def test_coco_loads_and_scores_itself_at_ap_one(dataset, tmp_path):
    from pycocotools import mask as coco_mask
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    export(dataset, tmp_path / "coco", "coco", quiet=True)
    counts: Counter = Counter()
    rles = {(key, index): rle for key, meta in metadata_of(dataset).items()
            for index, rle in enumerate(meta.get("rle", []))}
    for split in ("train", "val"):
        path = tmp_path / "coco" / "current" / "annotations" / f"instances_{split}.json"
        ground = COCO(str(path))
        for annotation in ground.dataset["annotations"]:
            counts[split, annotation["category_id"]] += 1
            segmentation = annotation.get("segmentation")  # none for a box-only object
            if isinstance(segmentation, dict):  # an RLE: its area is its pixel count
                assert annotation["area"] == coco_mask.area(
                    ground.annToRLE(annotation)).item()
        assert {image["file_name"] for image in ground.dataset["images"]} == {
            path.name for path in (tmp_path / "coco" / "current" / "images" / split).iterdir()}
        for kind in ("bbox", "segm"):
            if kind == "segm":  # docs/export.md: segm scores the objects that have pixels
                ground.dataset["annotations"] = [a for a in ground.dataset["annotations"]
                                                 if "segmentation" in a]
                ground.createIndex()
            results = [{"image_id": a["image_id"], "category_id": a["category_id"],
                        "bbox": a["bbox"], "segmentation": a["segmentation"] if kind == "segm"
                        else None, "score": 1.0} for a in ground.dataset["annotations"]]
            if kind == "bbox":
                for result in results:
                    result.pop("segmentation")
            else:
                for result in results:
                    if isinstance(result["segmentation"], list):
                        h, w = (ground.imgs[result["image_id"]][k] for k in ("height", "width"))
                        result["segmentation"] = coco_mask.merge(
                            coco_mask.frPyObjects(result["segmentation"], h, w))
            evaluation = COCOeval(ground, ground.loadRes(results), kind)
            evaluation.evaluate()
            evaluation.accumulate()
            evaluation.summarize()
            assert evaluation.stats[0] == pytest.approx(1.0)
    assert counts == object_counts(dataset)
    assert rles, "the corpus has masks"


def test_coco_image_ids_are_stable_across_versions(tmp_path):
    write_corpus(tmp_path / "source")
    pack_corpus(tmp_path / "source", tmp_path / "dataset", "webdataset")
    export(tmp_path / "dataset", tmp_path / "coco", "coco", quiet=True)
    first = json.loads((tmp_path / "coco/current/annotations/instances_train.json").read_text())
    (tmp_path / "source" / "train" / "defect" / "b.png").unlink()
    pack_corpus(tmp_path / "source", tmp_path / "dataset", "webdataset")
    export(tmp_path / "dataset", tmp_path / "coco", "coco", quiet=True)
    second = json.loads((tmp_path / "coco/current/annotations/instances_train.json").read_text())
    ids = {image["file_name"]: image["id"] for image in first["images"]}
    assert second["images"] and all(ids[image["file_name"]] == image["id"]
                                    for image in second["images"])


@pytest.mark.parametrize("layout", ["folder", "mvtec"])
def test_anomalib_splits_normal_from_abnormal_with_a_mask_each(dataset, tmp_path, layout):
    export(dataset, tmp_path / "an", "anomalib", anomalib_layout=layout, quiet=True)
    folder = tmp_path / "an" / "current"
    classes = images.manifest_of(dataset)["classes"]
    fmt = shard_format(images.manifest_of(dataset)["format"])
    masks, jpegs = {}, {}
    metadata = metadata_of(dataset)
    for shard in images.manifest_of(dataset)["shards"]:
        for _, record in fmt.records(dataset / shard["name"], shard["bytes"]):
            masks[record.key] = fmt.mask_png(record)
            jpegs[record.key] = fmt.jpeg(record)
    abnormal = normal = 0
    for sample in images.samples_of(dataset):
        key, split = sample["key"], sample["split"]
        is_abnormal = bool(sum(sample.get("objects") or [])) or bool(sample.get("objects_cut")) \
            or classes[sample["label"]] != "good"
        if layout == "folder":
            image = folder / ("abnormal" if is_abnormal else
                              "normal" if split == "train" else "normal_test") / f"{key}.jpg"
            mask_path = folder / "mask" / f"{key}.png"
        else:
            # anomalib's MVTecAD reads PNG images only: the JPEG decoded, written lossless
            found = list(folder.rglob(f"{key}.png"))
            assert len(found) == 1 and not list(folder.rglob(f"{key}.jpg"))
            image = found[0]
            assert (image.parent.name == "good") != is_abnormal
            decoded = cv2.imdecode(np.frombuffer(jpegs[key], np.uint8), cv2.IMREAD_UNCHANGED)
            assert np.array_equal(cv2.imread(str(image), cv2.IMREAD_UNCHANGED), decoded)
            mask_path = folder / "ground_truth" / image.parent.name / f"{key}_mask.png"
        assert image.is_file()
        assert mask_path.is_file() == is_abnormal
        if is_abnormal:
            abnormal += 1
            exported = cv2.imread(str(mask_path), cv2.IMREAD_UNCHANGED)
            class_mask = cv2.imdecode(np.frombuffer(masks[key], np.uint8), cv2.IMREAD_UNCHANGED)
            assert set(np.unique(exported)) <= {0, 255}
            # every marked pixel (255: an object cut below min_visible), and the box of each
            # object without pixels, kept or cut
            meta = metadata[key]
            expected = class_mask > 0
            for box, rle in zip(meta.get("boxes", []), meta.get("rle", []), strict=True):
                if rle is None:
                    expected |= box_mask(box, meta["height"], meta["width"])
            for item in meta.get("objects_cut", []):
                if "rle" not in item:
                    expected |= box_mask(item["box"], meta["height"], meta["width"])
            assert np.array_equal(exported > 0, expected)
        else:
            normal += 1
    assert abnormal and normal


def tree_of(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes()
            for path in sorted(folder.rglob("*")) if path.is_file()
            and ".export" not in path.parts}


@pytest.mark.slow
def test_a_new_version_links_unchanged_files_and_keeps_the_one_before(tmp_path):
    write_corpus(tmp_path / "source")
    pack_corpus(tmp_path / "source", tmp_path / "dataset", "webdataset")
    export(tmp_path / "dataset", tmp_path / "yolo", "yolo", quiet=True)
    before = {path.name: path.stat().st_ino
              for path in (tmp_path / "yolo" / "v1" / "images" / "val").iterdir()}
    (tmp_path / "source" / "train" / "defect" / "b.png").unlink()
    images.write(tmp_path / "source" / "train" / "good" / "new.jpg",
                 defects.corpus_original("jpeg8", 1, with_defects=False))
    pack_corpus(tmp_path / "source", tmp_path / "dataset", "webdataset")
    result = export(tmp_path / "dataset", tmp_path / "yolo", "yolo", quiet=True)
    assert os.readlink(tmp_path / "yolo" / "current") == "v2"
    # --keep 2 (the default): a training run started on v1 keeps its files
    assert (tmp_path / "yolo" / "v1" / ".export" / "record.json").is_file()
    assert result.removed == ()
    after = {path.name: path.stat().st_ino
             for path in (tmp_path / "yolo" / "v2" / "images" / "val").iterdir()}
    assert after == before  # the val split did not change: the same inodes
    assert result.linked >= len(before) and result.written > 0
    keys = {sample["key"] for sample in images.samples_of(tmp_path / "dataset")} \
        - cut_keys(tmp_path / "dataset")
    assert {path.stem for path in (tmp_path / "yolo/v2/images").rglob("*.jpg")} == keys
    again = run_cli(tmp_path / "dataset", tmp_path / "yolo", "--layout", "yolo")
    assert again.exit_code == 0 and "up to date" in again.output
    assert (tmp_path / "yolo" / "v1").is_dir()
    # a deletion cut short leaves a renamed folder no export reads; the next run removes
    # it, and versions beyond --keep go on an "up to date" run too
    (tmp_path / "yolo" / ".v1.removing" / "images").mkdir(parents=True)
    once = run_cli(tmp_path / "dataset", tmp_path / "yolo", "--layout", "yolo", "--keep", "1")
    assert once.exit_code == 0 and "up to date" in once.output and "removed v1" in once.output
    assert sorted(os.listdir(tmp_path / "yolo")) == [".export", "current", "v2"]


def exported_then_one_more(tmp_path: Path) -> None:
    """``tmp_path/dataset`` exported as yolo into ``tmp_path/yolo`` (v1), then packed again
    with one new original (v2, not exported)."""
    write_corpus(tmp_path / "source")
    pack_corpus(tmp_path / "source", tmp_path / "dataset", "webdataset")
    export(tmp_path / "dataset", tmp_path / "yolo", "yolo", quiet=True)
    images.write(tmp_path / "source" / "train" / "good" / "new.jpg",
                 defects.corpus_original("jpeg8", 1, with_defects=False))
    pack_corpus(tmp_path / "source", tmp_path / "dataset", "webdataset")


def folders_of(folder: Path) -> set[str]:
    return {str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_dir()
            and ".export" not in path.parts}


def test_a_folder_whose_samples_all_left_is_not_in_the_new_version(tmp_path):
    """A folder that no sample of the new version fills (the val split's normal samples
    left: no ``normal_test/``) is not in it, as in a fresh export of the same dataset, while
    the unchanged train shard is linked."""
    write_corpus(tmp_path / "source")
    pack_corpus(tmp_path / "source", tmp_path / "dataset", "webdataset")
    export(tmp_path / "dataset", tmp_path / "an", "anomalib", quiet=True)
    assert {"normal_test", "abnormal", "mask"} <= folders_of(tmp_path / "an" / "v1")
    (tmp_path / "source" / "val" / "good" / "clean_val.jpg").unlink()
    pack_corpus(tmp_path / "source", tmp_path / "dataset", "webdataset")
    result = export(tmp_path / "dataset", tmp_path / "an", "anomalib", quiet=True)
    assert result.linked > 0
    export(tmp_path / "dataset", tmp_path / "fresh", "anomalib", quiet=True)
    assert folders_of(tmp_path / "an" / "v2") == folders_of(tmp_path / "fresh" / "v2")
    assert "normal_test" not in folders_of(tmp_path / "an" / "v2")
    fresh = tree_of(tmp_path / "fresh" / "v2")
    assert tree_of(tmp_path / "an" / "v2") == fresh


def test_a_re_export_stopped_after_its_links_are_made_resumes_to_a_fresh_exports_bytes(
        tmp_path, monkeypatch):
    """Ctrl-C while the changed shards are read: the links under way are finished, nothing is
    switched, and the rerun (its folder not fresh: linked over the links made) ends with a
    fresh export's bytes."""
    from shardsmith.ops import export as package

    exported_then_one_more(tmp_path)
    original = package._Run._read_shard

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(package._Run, "_read_shard", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export(tmp_path / "dataset", tmp_path / "yolo", "yolo", quiet=True)
    partial = tmp_path / "yolo" / "v2.partial"
    assert any(path.stat().st_nlink > 1 for path in (partial / "images").rglob("*.jpg")), \
        "nothing was linked before the export stopped"
    assert os.readlink(tmp_path / "yolo" / "current") == "v1"
    monkeypatch.setattr(package._Run, "_read_shard", original)
    result = export(tmp_path / "dataset", tmp_path / "yolo", "yolo", quiet=True)
    assert result.linked > 0 and os.readlink(tmp_path / "yolo" / "current") == "v2"
    export(tmp_path / "dataset", tmp_path / "fresh", "yolo", quiet=True)
    fresh = tree_of(tmp_path / "fresh" / "v2")
    fresh["data.yaml"] = fresh["data.yaml"].replace(b"/fresh/", b"/yolo/")
    assert tree_of(tmp_path / "yolo" / "v2") == fresh


def test_an_old_version_is_renamed_before_it_is_deleted(tmp_path, monkeypatch):
    """A deletion cut short (a crash, a full NFS server) leaves ``.vN.removing``, never a half
    ``vN`` that a later export would refuse or a trainer would read."""
    exported_then_one_more(tmp_path)
    from shardsmith.ops.export import versions

    def crash(path, *args, **kwargs):
        raise OSError(5, "Input/output error", str(path))

    monkeypatch.setattr(versions.shutil, "rmtree", crash)
    with pytest.raises(OSError):
        export(tmp_path / "dataset", tmp_path / "yolo", "yolo", quiet=True, keep=1)
    assert os.readlink(tmp_path / "yolo" / "current") == "v2"
    assert sorted(os.listdir(tmp_path / "yolo")) == [".export", ".v1.removing", "current", "v2"]
    monkeypatch.undo()
    result = export(tmp_path / "dataset", tmp_path / "yolo", "yolo", quiet=True, keep=1)
    assert result.up_to_date
    assert sorted(os.listdir(tmp_path / "yolo")) == [".export", "current", "v2"]


def test_an_interrupted_export_resumes_to_the_same_bytes(tmp_path, monkeypatch):
    write_corpus(tmp_path / "source")
    pack_corpus(tmp_path / "source", tmp_path / "dataset", "webdataset")
    export(tmp_path / "dataset", tmp_path / "whole", "yolo", quiet=True)
    from shardsmith.ops import export as package

    calls = {"count": 0}
    original = package._Run._read_shard

    def interrupted(self, *args, **kwargs):
        calls["count"] += 1
        if calls["count"] == 2:
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(package._Run, "_read_shard", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export(tmp_path / "dataset", tmp_path / "resumed", "yolo", quiet=True)
    assert not (tmp_path / "resumed" / "current").exists()
    monkeypatch.setattr(package._Run, "_read_shard", original)
    result = export(tmp_path / "dataset", tmp_path / "resumed", "yolo", quiet=True)
    assert result.kept > 0 and result.shards_read == 1
    whole, resumed = tree_of(tmp_path / "whole" / "v1"), tree_of(tmp_path / "resumed" / "v1")
    whole["data.yaml"] = whole["data.yaml"].replace(b"/whole/", b"/resumed/")
    assert resumed == whole


def test_an_interrupted_export_of_the_previous_record_format_is_finished_from_its_shards(
        tmp_path, monkeypatch):
    """A journal an earlier release left (its first line without this record format, its
    lines a sample each) is not read: every file is made again, to a whole export's bytes."""
    write_corpus(tmp_path / "source")
    pack_corpus(tmp_path / "source", tmp_path / "dataset", "webdataset")
    export(tmp_path / "dataset", tmp_path / "whole", "yolo", quiet=True)
    from shardsmith.ops import export as package

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(package._Run, "_read_shard", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export(tmp_path / "dataset", tmp_path / "resumed", "yolo", quiet=True)
    monkeypatch.undo()
    journal = tmp_path / "resumed" / "v1.partial" / ".export" / "journal.jsonl"
    header = json.loads(journal.read_bytes().splitlines()[0])
    del header["format"]
    old = {"shard": "train-000000.tar", "sha256": "0" * 64, "samples": [
        {"key": "k", "split": "train", "digest": "0" * 64, "width": 1, "height": 1,
         "files": [], "coco": None}]}
    journal.write_text(json.dumps(header, sort_keys=True) + "\n" + json.dumps(old) + "\n")
    result = export(tmp_path / "dataset", tmp_path / "resumed", "yolo", quiet=True)
    assert result.kept == 0 and result.written == result.samples
    whole, resumed = tree_of(tmp_path / "whole" / "v1"), tree_of(tmp_path / "resumed" / "v1")
    whole["data.yaml"] = whole["data.yaml"].replace(b"/whole/", b"/resumed/")
    assert resumed == whole


def test_a_shard_that_differs_from_the_manifest_stops_the_export(tmp_path):
    write_corpus(tmp_path / "source")
    pack_corpus(tmp_path / "source", tmp_path / "dataset", "webdataset")
    export(tmp_path / "dataset", tmp_path / "yolo", "yolo", quiet=True)
    images.write(tmp_path / "source" / "val" / "good" / "new.jpg",
                 defects.corpus_original("jpeg8", 1, with_defects=False))
    pack_corpus(tmp_path / "source", tmp_path / "dataset", "webdataset")
    new = next(s for s in images.samples_of(tmp_path / "dataset") if "new" in s["path"])
    shard = tmp_path / "dataset" / new["shard"]
    data = bytearray(shard.read_bytes())
    data[600] ^= 0xFF  # inside the first JPEG: the tar still parses
    shard.write_bytes(bytes(data))
    result = run_cli(tmp_path / "dataset", tmp_path / "yolo", "--layout", "yolo")
    assert result.exit_code == 2, result.output
    assert shard.name in result.output and "Traceback" not in result.output
    assert os.readlink(tmp_path / "yolo" / "current") == "v1"
    assert (tmp_path / "yolo" / "v1" / "data.yaml").is_file()  # v1 stays whole


def test_an_older_tfrecord_without_instance_masks_falls_back_to_the_class_mask(
        tmp_path, monkeypatch, caplog):
    from shardsmith.dataset.formats.tfrecord import TFRecordFormat

    write_corpus(tmp_path / "source")
    pack_corpus(tmp_path / "source", tmp_path / "dataset", "tfrecord")
    full = TFRecordFormat.metadata

    def older(self, record):  # what a TFRecord of an older release gives: no "rle"
        meta = dict(full(self, record))
        meta.pop("rle", None)
        return meta

    monkeypatch.setattr(TFRecordFormat, "metadata", older)
    export(tmp_path / "dataset", tmp_path / "coco", "coco", quiet=True)
    assert sum("older release" in message for message in caplog.messages) == 1
    counts: Counter = Counter()
    for split in ("train", "val"):
        document = json.loads((tmp_path / "coco" / "current" / "annotations" /
                               f"instances_{split}.json").read_text())
        for annotation in document["annotations"]:
            counts[split, annotation["category_id"]] += 1
            assert annotation["area"] > 0
    assert counts == object_counts(tmp_path / "dataset")
