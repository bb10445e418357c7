"""A defect cut below ``min_visible`` at a tile's border is not "no defect".

The corpus: one 1280x256 grey original cut into five 256 px tiles (``keep: annotated``,
``background_fraction: 1.0``, so every tile is packed).  A crack (a mask, class ``crack``) lies
in tile 0 and pokes a few pixels into tile 1; a scratch (a YOLO box only, class ``scratch``)
lies in tile 2 and pokes into tile 3; tile 4 is clean.  Both defects are painted red, so a
sample's pixels tell whether it shows a defect, whatever its records say.
"""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from shardsmith.cli import main

import images
from defects import members, pack_with

WIDTH, HEIGHT, TILE = 1280, 256, 256
RED = (220, 20, 20)
CRACK_ROWS, CRACK_COLUMNS = (100, 110), (40, 266)  # 10 px of its 226 in tile 1
SCRATCH = (560, 60, 790, 120)  # x0, y0, x1, y1: 22 px of its 230 in tile 3
CUT_CONFIG = {"source.annotations.masks": "beside", "source.annotations.mask_suffix": "_mask",
              "source.annotations.mask_values": "index",
              "source.annotations.files": "yolo",
              "source.annotations.classes": ["crack", "scratch"],
              "source.annotations.merge_iou": 0,
              "image.tiles.size": TILE, "image.tiles.overlap": 0,
              "image.tiles.keep": "annotated", "image.tiles.background_fraction": 1.0}


def cut_tree(source) -> None:
    """The original, its crack's index mask, and the scratch's YOLO box."""
    rng = np.random.default_rng(0)
    pixels = np.full((HEIGHT, WIDTH, 3), 128, np.int16) + rng.integers(-3, 4, (HEIGHT, WIDTH, 1))
    crack = np.zeros((HEIGHT, WIDTH), np.uint8)
    crack[slice(*CRACK_ROWS), slice(*CRACK_COLUMNS)] = 1
    pixels[crack > 0] = RED
    x0, y0, x1, y1 = SCRATCH
    pixels[y0:y1, x0:x1] = RED
    images.write(source / "good" / "a.png",
                 images.encode(np.clip(pixels, 0, 255).astype(np.uint8), "PNG"))
    Image.fromarray(crack).save(source / "good" / "a_mask.png")
    (source / "good" / "a.txt").write_text(
        f"1 {(x0 + x1) / 2 / WIDTH} {(y0 + y1) / 2 / HEIGHT} {(x1 - x0) / WIDTH} "
        f"{(y1 - y0) / HEIGHT}\n")


def red(pixels: np.ndarray) -> np.ndarray:
    """Where decoded RGB pixels show the painted defect."""
    return (pixels[:, :, 0] > 150) & (pixels[:, :, 1] < 90)


@pytest.fixture(params=["webdataset", "tfrecord"])
def packed(request, tmp_path):
    cut_tree(tmp_path / "source")
    pack_with(tmp_path / "source", tmp_path / "out", CUT_CONFIG,
              **{"output.format": request.param})
    return tmp_path / "out"


def index_lines(output) -> dict[int, dict]:
    """column -> the tile's sample index line."""
    return {int(line["key"][-3:]): line for line in images.samples_of(output)}


def test_every_tile_is_packed_and_the_cut_ones_say_what_was_cut(packed):
    lines = index_lines(packed)
    assert sorted(lines) == [0, 1, 2, 3, 4]
    crack, = lines[1]["objects_cut"]
    assert crack["label"] == 1 and crack["box"] == [0.0, 100.0, 10.0, 110.0]
    assert isinstance(crack["rle"], str)
    scratch, = lines[3]["objects_cut"]
    assert scratch == {"label": 2, "box": [0.0, 60.0, 22.0, 120.0]}
    assert all("objects_cut" not in lines[column] for column in (0, 2, 4))


def test_key_json_lists_the_cut_objects_with_the_pixels_of_a_mask(tmp_path):
    cut_tree(tmp_path / "source")
    pack_with(tmp_path / "source", tmp_path / "out", CUT_CONFIG)
    found = {json.loads(files["json"])["tile"]["column"]: json.loads(files["json"])
             for files in members(tmp_path / "out").values()}
    crack, = found[1]["objects_cut"]
    assert (crack["label"], crack["label_name"], crack["box"]) == (1, "crack",
                                                                  [0.0, 100.0, 10.0, 110.0])
    assert sum(crack["rle"]["counts"][1::2]) == 100  # 10 x 10 pixels of it in the tile
    scratch, = found[3]["objects_cut"]
    assert scratch == {"label": 2, "label_name": "scratch", "box": [0.0, 60.0, 22.0, 120.0]}
    assert "objects_cut" not in found[4]


def export_cli(*args) -> str:
    result = CliRunner().invoke(main, ["export", *map(str, args), "--quiet"])
    assert result.exit_code == 0, result.output
    return result.output


def decoded(path) -> np.ndarray:
    return cv2.cvtColor(cv2.imread(str(path), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)


def columns(folder, suffix: str = ".jpg") -> set[int]:
    return {int(path.stem[-3:]) for path in folder.glob(f"*{suffix}")}


def test_anomalib_never_exports_a_tile_whose_defect_was_cut_as_normal(packed, tmp_path):
    export_cli(packed, tmp_path / "an", "--layout", "anomalib")
    folder = tmp_path / "an" / "current"
    assert columns(folder / "normal") == {4}
    assert columns(folder / "abnormal") == {0, 1, 2, 3}
    for path in (folder / "normal").glob("*.jpg"):
        assert not red(decoded(path)).any(), path.name


def test_anomalib_masks_mark_the_cut_pixels_and_the_cut_box_as_defect(packed, tmp_path):
    export_cli(packed, tmp_path / "an", "--layout", "anomalib")
    masks = {int(path.stem[-3:]): cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
             for path in (tmp_path / "an" / "current" / "mask").glob("*.png")}
    assert (masks[1][100:110, :10] == 255).all()  # the crack's tip, a mask
    assert (masks[3][60:120, :22] == 255).all()  # the scratch's end, a box
    assert (masks[2][60:120, 48:256] == 255).all()  # a kept box-only object too
    for column in (1, 3):
        assert masks[column].sum() // 255 in (100, 60 * 22)


def test_yolo_leaves_out_the_tiles_with_a_cut_defect_and_says_how_many(packed, tmp_path):
    said = export_cli(packed, tmp_path / "yolo", "--layout", "yolo")
    assert "2 samples left out: a defect cut below min_visible" in said
    folder = tmp_path / "yolo" / "current"
    assert columns(folder / "images" / "train") == {0, 2, 4}
    for label in (folder / "labels" / "train").glob("*.txt"):
        if not label.read_text():  # a background image
            image = folder / "images" / "train" / f"{label.stem}.jpg"
            assert not red(decoded(image)).any(), label.stem


def test_yolo_keep_cut_exports_them_with_the_cut_part_labelled(packed, tmp_path):
    said = export_cli(packed, tmp_path / "yolo", "--layout", "yolo", "--task", "detect",
                      "--keep-cut")
    assert "left out" not in said
    labels = {int(path.stem[-3:]): path.read_text().split()
              for path in (tmp_path / "yolo" / "current" / "labels" / "train").glob("*.txt")}
    assert sorted(labels) == [0, 1, 2, 3, 4] and labels[4] == []
    assert labels[1][0] == "0" and float(labels[1][3]) == pytest.approx(10 / TILE, abs=1e-5)
    assert labels[3][0] == "1" and float(labels[3][3]) == pytest.approx(22 / TILE, abs=1e-5)


def coco_images(folder) -> tuple[dict[str, int], list[dict]]:
    document = json.loads((folder / "annotations" / "instances_train.json").read_text())
    annotated = {item["image_id"] for item in document["annotations"]}
    return ({image["file_name"]: image["id"] in annotated for image in document["images"]},
            document["annotations"])


def test_coco_leaves_out_the_tiles_with_a_cut_defect_unless_asked(packed, tmp_path):
    said = export_cli(packed, tmp_path / "coco", "--layout", "coco")
    assert "2 samples left out: a defect cut below min_visible" in said
    folder = tmp_path / "coco" / "current"
    images_of, _ = coco_images(folder)
    assert {int(name[-7:-4]) for name in images_of} == {0, 2, 4}
    for name, annotated in images_of.items():
        if not annotated:
            assert not red(decoded(folder / "images" / "train" / name)).any(), name
    export_cli(packed, tmp_path / "kept", "--layout", "coco", "--keep-cut")
    images_of, annotations = coco_images(tmp_path / "kept" / "current")
    assert len(images_of) == 5 and len(annotations) == 4
    assert sorted(item["area"] for item in annotations)[0] == 100  # the crack's tip


def test_keep_cut_is_refused_where_no_sample_is_left_out(packed, tmp_path):
    result = CliRunner().invoke(main, ["export", str(packed), str(tmp_path / "an"), "--layout",
                                       "anomalib", "--keep-cut"])
    assert result.exit_code == 2
    assert "--keep-cut: only for --layout coco and yolo" in result.output


def test_a_tile_with_a_cut_defect_is_never_drawn_as_background(tmp_path):
    cut_tree(tmp_path / "source")
    pack_with(tmp_path / "source", tmp_path / "out",
              {**CUT_CONFIG, "image.tiles.background_fraction": 0.0})
    assert sorted(index_lines(tmp_path / "out")) == [0, 1, 2, 3]


def test_inspect_counts_a_sample_with_only_a_cut_defect_apart_from_those_without(packed):
    result = CliRunner().invoke(main, ["inspect", str(packed), "--json"])
    assert result.exit_code == 0, result.output
    objects = json.loads(result.output)["objects"]
    assert objects["samples_with_objects"] == {"train": 2}
    assert objects["samples_without_objects"] == {"train": 1}
    assert objects["samples_with_only_a_cut_defect"] == {"train": 2}


def as_an_earlier_release(output, field: str = "objects_cut") -> None:
    """The dataset as the release before cut objects (or ``field``) were recorded packed it:
    its index lines without ``field`` (and the manifest's sha256 of the index to match),
    annotation rules 2."""
    import hashlib

    manifest = json.loads((output / "manifest.json").read_text())
    entry = manifest["samples_index"]
    lines = [json.loads(line) for line in (output / entry["name"]).read_text().splitlines()]
    text = "".join(json.dumps({k: v for k, v in line.items() if k != field},
                              sort_keys=True, separators=(",", ":")) + "\n" for line in lines)
    (output / entry["name"]).write_text(text)
    entry.update(bytes=len(text), sha256=hashlib.sha256(text.encode()).hexdigest())
    manifest["annotation_rules"] = 2
    (output / "manifest.json").write_text(json.dumps(manifest))


def test_an_earlier_releases_dataset_still_never_exports_a_cut_tile_as_normal(packed, tmp_path,
                                                                          caplog):
    as_an_earlier_release(packed)
    export_cli(packed, tmp_path / "an", "--layout", "anomalib")
    assert "2 samples with a defect cut below min_visible" in caplog.text
    assert "a box-only one cannot be told apart" in caplog.text
    folder = tmp_path / "an" / "current"
    assert columns(folder / "normal") == {4}
    masks = {int(path.stem[-3:]): cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
             for path in (folder / "mask").glob("*.png")}
    assert (masks[1][100:110, :10] == 255).all()  # the 255 pixels of the class mask
    said = export_cli(packed, tmp_path / "yolo", "--layout", "yolo", "--keep-cut")
    assert "2 samples left out" in said  # counted, but not located: not labelled


def test_the_next_pack_records_the_cut_objects_copying_the_jpeg_bytes(packed):
    before = {key: files["jpg"] for key, files in members(packed).items()} \
        if (packed / "train-000000.tar").exists() else None
    as_an_earlier_release(packed)
    manifest = pack_with(packed.parent / "source", packed, CUT_CONFIG,
                         **{"output.format": images.manifest_of(packed)["format"]})
    assert manifest["annotation_rules"] >= 3
    assert manifest["run"]["jpeg_copied"] == 1 and manifest["run"]["decoded"] == 0
    lines = index_lines(packed)
    assert lines[1]["objects_cut"][0]["label"] == 1 and lines[3]["objects_cut"][0]["label"] == 2
    if before is not None:
        assert {key: files["jpg"] for key, files in members(packed).items()} == before


def test_the_torch_reader_leaves_out_the_tiles_with_a_cut_defect_and_says_so(tmp_path, caplog):
    torch = pytest.importorskip("torch")
    from shardsmith.readers.torch import dataset

    cut_tree(tmp_path / "source")
    pack_with(tmp_path / "source", tmp_path / "out", CUT_CONFIG)
    data = dataset(tmp_path / "out", targets=True, shuffle=False, pad=False)
    assert "2 samples left out: a defect cut below min_visible" in caplog.text
    assert data.rank_samples() == 3
    samples = list(data)
    assert len(samples) == 3  # tiles 0, 2 and 4, each once
    assert not any("ignore_boxes" in target for _, target in samples)
    for image, target in samples:
        if not len(target["boxes"]):  # the background tile
            pixels = image.permute(1, 2, 0).numpy() if isinstance(image, torch.Tensor) else image
            assert not red(np.asarray(pixels)).any()


def test_keep_cut_reads_them_with_the_cut_objects_marked_ignore(tmp_path):
    pytest.importorskip("torch")
    from shardsmith.readers.torch import dataset

    cut_tree(tmp_path / "source")
    pack_with(tmp_path / "source", tmp_path / "out", CUT_CONFIG)
    samples = list(dataset(tmp_path / "out", targets=True, shuffle=False, pad=False,
                           keep_cut=True))
    assert len(samples) == 5
    ignored = sorted((target["ignore_labels"].tolist(), target["ignore_boxes"].tolist())
                     for _, target in samples if "ignore_boxes" in target)
    assert ignored == [([1], [[0.0, 100.0, 10.0, 110.0]]), ([2], [[0.0, 60.0, 22.0, 120.0]])]
    masks = [target["ignore_masks"] for _, target in samples if "ignore_masks" in target]
    assert sorted(int(mask.sum()) for mask in masks) == [100, 60 * 22]


def test_both_shard_formats_give_the_same_cut_objects(tmp_path):
    from shardsmith.dataset.formats import shard_format

    cut_tree(tmp_path / "source")
    found = {}
    for fmt in ("webdataset", "tfrecord"):
        manifest = pack_with(tmp_path / "source", tmp_path / fmt, CUT_CONFIG,
                             **{"output.format": fmt})
        reader = shard_format(fmt)
        found[fmt] = {record.key: reader.metadata(record).get("objects_cut")
                      for shard in manifest["shards"]
                      for _, record in reader.records(tmp_path / fmt / shard["name"],
                                                      shard["bytes"])}
    assert found["tfrecord"] == found["webdataset"]
    assert sum(value is not None for value in found["webdataset"].values()) == 2


def test_a_classify_export_follows_image_classes_and_keeps_the_tiles_with_a_cut_defect(
        packed, tmp_path):
    export_cli(packed, tmp_path / "cls", "--layout", "yolo", "--task", "classify")
    assert columns(tmp_path / "cls" / "current" / "train" / "good") == {0, 1, 2, 3, 4}
