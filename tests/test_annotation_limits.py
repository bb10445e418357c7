"""Annotation input is bounded like pixels: a declared size, a count of objects, lines, tiles
or classes past its documented limit rejects that image with a reason naming the file (or, for
a file of the whole tree, is one line and exit 2); never a crash, a hang or a silent
reassignment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from shardsmith.annotations.limits import COCO_CAP, MAX_OBJECT_CLASSES, MAX_OBJECTS
from shardsmith.cli import main
from shardsmith.tiling import MAX_TILES

import defects
import images
from defects import members, pack_with

REPO = Path(__file__).resolve().parents[1]
ANY_REJECTS = {"run.max_reject_fraction": 1}


def rejects(manifest: dict) -> dict[str, tuple[str, str]]:
    return {reject["path"]: (reject["reason"], reject["detail"]) for reject in manifest["rejects"]}


def two_images(source: Path) -> None:
    images.write(source / "parts" / "a.jpg", defects.original())
    images.write(source / "parts" / "b.jpg", defects.original())


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return path


def pack_process(tmp_path: Path, source: Path, config: str,
                 timeout: float = 120) -> subprocess.CompletedProcess:
    """The real CLI in its own process (a crash there is an exit status, not a dead test run;
    a hang is a timeout)."""
    return subprocess.run(
        [sys.executable, "-m", "shardsmith", "pack", str(source), str(tmp_path / "out"),
         "--quiet", "--config", str(write_config(tmp_path, config))],
        capture_output=True, text=True, timeout=timeout, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)})


def pack_cli(tmp_path: Path, source: Path, config: str):
    return CliRunner().invoke(main, ["pack", str(source), str(tmp_path / "out"), "--quiet",
                                     "--config", str(write_config(tmp_path, config))])


def one_error_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardsmith: error: "), text
    return lines[0]


def coco(images_: list[dict], annotations: list[dict],
         categories: list[dict] | None = None) -> str:
    return json.dumps({"images": images_, "annotations": annotations,
                       "categories": categories or [{"id": 1, "name": "scratch"}]})


# 1. An RLE's declared size

@pytest.mark.slow
def test_an_rle_of_a_million_by_a_million_pixels_is_a_reject_not_a_crash(tmp_path):
    source = tmp_path / "source"
    two_images(source)
    (source / "coco.json").write_text(coco(
        [{"id": 1, "file_name": "parts/a.jpg"}, {"id": 2, "file_name": "parts/b.jpg"}],
        [{"id": 5, "image_id": 1, "category_id": 1, "bbox": [1, 1, 5, 5],
          # counts that fit 32 bits and add up to height x width: 10**12 pixels
          "segmentation": {"size": [1_000_000, 1_000_000],
                           "counts": [0] + [4_000_000_000, 0] * 249 + [4_000_000_000]}}]))
    done = pack_process(tmp_path, source, "source:\n  annotations:\n    coco: coco.json\n"
                        "run:\n  workers: 1\n  max_reject_fraction: 1\n")
    assert done.returncode == 0, done.stderr
    reason, detail = rejects(images.manifest_of(tmp_path / "out"))["parts/a.jpg"]
    assert reason == "bad_annotation"
    assert detail.startswith("coco.json: annotation 5 (image 1): an RLE of 1,000,000 x "
                             "1,000,000 pixels: more than"), detail


@pytest.mark.parametrize("segmentation, problem", [
    # counts that add up to more pixels than the RLE declares (the compressed form)
    ({"size": [360, 481], "counts": "compressed"}, "RLE counts add up to 172,800, not 360 x 481"),
    ({"size": [360, 480], "counts": [0, 10, -5, 172795]}, "RLE counts must not be negative"),
    # a well-formed RLE of another image's size (the COCO file gives no width and height)
    ({"size": [36, 48], "counts": [40, 10, 36 * 48 - 50]},
     "coco.json annotation 5: an RLE of size [36, 48] on a 480x360 image"),
])
def test_an_rle_whose_counts_or_size_do_not_fit_is_a_reject(tmp_path, segmentation, problem):
    from pycocotools import mask as coco_mask

    if segmentation["counts"] == "compressed":
        marked = np.zeros((360, 480), np.uint8, order="F")
        marked[40:160, 220:360] = 1
        segmentation = dict(segmentation, counts=coco_mask.encode(marked)["counts"].decode())
    source = tmp_path / "source"
    two_images(source)
    (source / "coco.json").write_text(coco(
        [{"id": 1, "file_name": "parts/a.jpg"}, {"id": 2, "file_name": "parts/b.jpg"}],
        [{"id": 5, "image_id": 1, "category_id": 1, "segmentation": segmentation}]))
    manifest = pack_with(source, tmp_path / "out", {"source.annotations.coco": "coco.json"},
                         **ANY_REJECTS)
    reason, detail = rejects(manifest)["parts/a.jpg"]
    assert reason == "bad_annotation" and problem in detail, detail
    assert manifest["totals"]["packed"] == 1


# 2. Mask objects per image

def test_a_mask_of_more_separate_regions_than_objects_allowed_is_a_reject(tmp_path):
    source = tmp_path / "source"
    images.write(source / "parts" / "a.jpg", images.jpeg(202, 202))
    images.write(source / "parts" / "b.jpg", images.jpeg(202, 202))
    speckles = np.zeros((202, 202), np.uint8)
    speckles[::2, ::2] = 255  # 101 x 101 isolated pixels: as many regions
    Image.fromarray(speckles).save(source / "parts" / "a_mask.png")
    manifest = pack_with(source, tmp_path / "out", {
        "source.annotations.masks": "beside", "source.annotations.mask_suffix": "_mask",
        "source.annotations.mask_values": "binary"}, **ANY_REJECTS)
    reason, detail = rejects(manifest)["parts/a.jpg"]
    assert reason == "bad_annotation"
    assert detail.startswith(f"parts/a_mask.png: 10,201 objects: more than the "
                             f"{MAX_OBJECTS:,}"), detail


# 3. Lines of a YOLO file

def test_a_yolo_file_with_more_objects_than_allowed_is_a_reject_naming_the_line(tmp_path):
    source = tmp_path / "source"
    two_images(source)
    (source / "parts" / "a.txt").write_text("\n\n" + "0 0.5 0.5 0.1 0.1\n" * (MAX_OBJECTS + 1))
    manifest = pack_with(source, tmp_path / "out", {
        "source.annotations.files": "yolo", "source.annotations.classes": ["scratch"]},
        **ANY_REJECTS)
    reason, detail = rejects(manifest)["parts/a.jpg"]
    assert reason == "bad_annotation"
    assert detail.startswith(f"parts/a.txt line {MAX_OBJECTS + 3}: {MAX_OBJECTS + 1:,} "
                             "objects"), detail


# 4. The COCO and labels files of the whole tree

def test_a_coco_file_over_its_cap_is_one_line_and_exit_2_without_reading_it(tmp_path):
    source = tmp_path / "source"
    two_images(source)
    with open(source / "coco.json", "wb") as handle:  # sparse: no disk, no bytes read
        handle.truncate(COCO_CAP + 1)
    result = pack_cli(tmp_path, source, "source:\n  annotations:\n    coco: coco.json\n")
    assert result.exit_code == 2
    line = one_error_line(result.output)
    assert line.startswith(f"shardsmith: error: coco.json: {COCO_CAP + 1:,} bytes is more "
                           f"than the {COCO_CAP:,} allowed"), line


@pytest.mark.parametrize("which", ["coco", "labels"])
@pytest.mark.parametrize("kind", ["a FIFO", "a symlink to /dev/zero"])
@pytest.mark.slow
def test_a_coco_or_labels_file_that_is_a_fifo_or_dev_zero_is_one_line_at_once(tmp_path, which,
                                                                             kind):
    source = tmp_path / "source"
    two_images(source)
    if kind == "a FIFO":
        os.mkfifo(source / "shared.json")
    else:
        os.symlink("/dev/zero", source / "shared.json")
    config = ("source:\n  annotations:\n    coco: shared.json\n" if which == "coco" else
              "source:\n  labels: file\n  annotations:\n    labels: shared.json\n")
    done = pack_process(tmp_path, source, config, timeout=60)
    assert done.returncode == 2
    line = one_error_line(done.stderr)
    expected = ("shardsmith: error: source.annotations.coco: 'shared.json' is not a file"
                if which == "coco" else "shardsmith: error: shared.json: is ")
    assert line.startswith(expected), line


# 5. Tiles per original

def test_a_tile_grid_too_dense_for_any_real_image_is_a_config_error(tmp_path):
    source = tmp_path / "source"
    images.write(source / "parts" / "a.jpg", images.jpeg(64, 64))
    result = pack_cli(tmp_path, source, "image:\n  tiles:\n    size: 16\n    overlap: 15\n")
    assert result.exit_code == 2
    line = one_error_line(result.output)
    assert line.startswith("shardsmith: error: image.tiles: size 16 with overlap 15"), line
    assert f"more than the {MAX_TILES:,}" in line


def test_an_original_that_gives_more_tiles_than_allowed_is_rejected_before_decoding(tmp_path):
    source = tmp_path / "source"
    images.write(source / "parts" / "big.jpg", images.jpeg(1040, 1040))  # 65 x 65 tiles of 16
    images.write(source / "parts" / "small.jpg", images.jpeg(64, 64))
    manifest = pack_with(source, tmp_path / "out", {"image.tiles.size": 16}, **ANY_REJECTS)
    assert rejects(manifest)["parts/big.jpg"] == (
        "too_large", f"1040x1040 at image.tiles gives 4,225 tiles, more than the {MAX_TILES:,} "
        "an original may have")
    assert manifest["totals"]["packed"] == 16  # small.jpg: 4 x 4 tiles


# 6. Object classes and the one-byte class mask

def labelme_triangles(path: Path, names: list[str]) -> None:
    """A LabelMe file of one small triangle per name, each where the last one is not."""
    shapes = [{"label": name, "shape_type": "polygon",
               "points": [[x, y], [x + 8, y], [x, y + 8]]}
              for name, (x, y) in zip(names, ((10 * (at % 40), 10 * (at // 40))
                                              for at in range(len(names))), strict=True)]
    path.write_text(json.dumps({"imageWidth": defects.WIDTH, "imageHeight": defects.HEIGHT,
                                "shapes": shapes}))


@pytest.mark.slow
def test_a_class_past_254_in_a_dataset_with_masks_is_one_clear_error(tmp_path):
    source = tmp_path / "source"
    two_images(source)
    labelme_triangles(source / "parts" / "a.json", [f"a{at}" for at in range(200)])
    labelme_triangles(source / "parts" / "b.json", [f"b{at}" for at in range(60)])
    result = pack_cli(tmp_path, source, "source:\n  annotations:\n    files: labelme\n")
    assert result.exit_code == 2
    line = one_error_line(result.output)
    assert line == ("shardsmith: error: object class 'b54' is class 255: a dataset with class "
                    f"masks has at most {MAX_OBJECT_CLASSES} object classes (one byte a pixel, "
                    "255 left for \"ignore\")")


def test_configured_classes_past_254_with_masks_are_refused_before_any_image(tmp_path):
    source = tmp_path / "source"
    two_images(source)
    names = "".join(f"\n      - c{at}" for at in range(MAX_OBJECT_CLASSES + 1))
    result = pack_cli(tmp_path, source, "source:\n  annotations:\n    masks: beside\n"
                      f"    mask_suffix: _mask\n    mask_values: index\n    classes:{names}\n")
    assert result.exit_code == 2
    assert "'c254' is class 255" in one_error_line(result.output)


def test_one_image_with_255_classes_of_masks_is_a_reject_naming_the_limit(tmp_path):
    source = tmp_path / "source"
    two_images(source)
    labelme_triangles(source / "parts" / "a.json", [f"a{at}" for at in range(255)])
    manifest = pack_with(source, tmp_path / "out", {"source.annotations.files": "labelme"},
                         **ANY_REJECTS)
    reason, detail = rejects(manifest)["parts/a.jpg"]
    assert reason == "bad_annotation"
    assert detail == ("object class 'a254' would be class 255: a class mask holds at most 254 "
                      "(one byte a pixel, 255 left for \"ignore\")")


# 7. Numbers, class ids and ids that are not what they seem

HUGE = 10**400


@pytest.mark.parametrize("fmt, name, content, where", [
    ("yolo", "a.txt", "\u00b2 0.5 0.5 0.1 0.1\n", "parts/a.txt line 1: class '\u00b2' is not a "
     "class id"),
    ("yolo", "a.txt", f"{'9' * 400} 0.5 0.5 0.1 0.1\n", "parts/a.txt line 1: class '999"),
    ("labelme", "a.json", json.dumps({"shapes": [{"label": "x", "shape_type": "rectangle",
                                                  "points": [[1, 2], [HUGE, 9]]}]}),
     "parts/a.json shape 0: a coordinate is out of range: 1000"),
    ("labelme", "a.json", json.dumps({"imageWidth": HUGE, "imageHeight": 360, "shapes": []}),
     "parts/a.json: the image width is out of range"),
])
def test_numbers_and_class_ids_that_are_not_numbers_are_rejects(tmp_path, fmt, name, content,
                                                                 where):
    source = tmp_path / "source"
    two_images(source)
    (source / "parts" / name).write_text(content, encoding="utf-8")
    overrides = ({"source.annotations.files": "yolo", "source.annotations.classes": ["x"]}
                 if fmt == "yolo" else {"source.annotations.files": fmt})
    manifest = pack_with(source, tmp_path / "out", overrides, **ANY_REJECTS)
    reason, detail = rejects(manifest)["parts/a.jpg"]
    assert reason == "bad_annotation" and detail.startswith(where), detail


def test_a_coco_bbox_of_400_digits_is_a_reject(tmp_path):
    source = tmp_path / "source"
    two_images(source)
    (source / "coco.json").write_text(coco(
        [{"id": 1, "file_name": "parts/a.jpg"}, {"id": 2, "file_name": "parts/b.jpg"}],
        [{"id": 5, "image_id": 1, "category_id": 1, "bbox": [HUGE, 1, 5, 5]}]))
    manifest = pack_with(source, tmp_path / "out", {"source.annotations.coco": "coco.json"},
                         **ANY_REJECTS)
    reason, detail = rejects(manifest)["parts/a.jpg"]
    assert reason == "bad_annotation"
    assert detail.startswith("coco.json: annotation 5 (image 1): a bbox value is out of range")


def test_a_coco_category_id_that_is_text_is_one_clear_error(tmp_path):
    source = tmp_path / "source"
    two_images(source)
    (source / "coco.json").write_text(coco(
        [{"id": 1, "file_name": "parts/a.jpg"}],
        [{"id": 5, "image_id": 1, "category_id": "1", "bbox": [1, 1, 5, 5]}],
        [{"id": 1, "name": "scratch"}, {"id": "1", "name": "dent"}]))
    result = pack_cli(tmp_path, source, "source:\n  annotations:\n    coco: coco.json\n")
    assert result.exit_code == 2
    assert one_error_line(result.output) == (
        "shardsmith: error: coco.json: categories[1]: id '1' is not an integer (COCO ids are "
        "integers)")


def test_two_coco_images_with_one_id_are_both_rejected_not_mixed_up(tmp_path):
    source = tmp_path / "source"
    two_images(source)
    (source / "coco.json").write_text(coco(
        [{"id": 1, "file_name": "parts/a.jpg"}, {"id": 1, "file_name": "parts/b.jpg"}],
        [{"id": 5, "image_id": 1, "category_id": 1, "bbox": [1, 1, 5, 5]}]))
    manifest = pack_with(source, tmp_path / "out", {"source.annotations.coco": "coco.json"},
                         **ANY_REJECTS)
    found = rejects(manifest)
    problem = ("coco.json: images[0] and images[1] have the same id 1 (which image its "
               "annotations are for is unknown)")
    assert found["parts/a.jpg"] == ("bad_annotation", problem)
    assert found["parts/b.jpg"] == ("bad_annotation", problem)


def test_a_file_listed_twice_in_coco_is_rejected_not_half_annotated(tmp_path):
    source = tmp_path / "source"
    two_images(source)
    (source / "coco.json").write_text(coco(
        [{"id": 1, "file_name": "parts/a.jpg"}, {"id": 2, "file_name": "parts/a.jpg"},
         {"id": 3, "file_name": "parts/b.jpg"}],
        [{"id": 5, "image_id": 1, "category_id": 1, "bbox": [1, 1, 5, 5]},
         {"id": 6, "image_id": 2, "category_id": 1, "bbox": [20, 20, 5, 5]}]))
    manifest = pack_with(source, tmp_path / "out", {"source.annotations.coco": "coco.json"},
                         **ANY_REJECTS)
    assert rejects(manifest) == {"parts/a.jpg": (
        "bad_annotation", "coco.json: parts/a.jpg is listed twice (images 1 and 2)")}


# 8. LabelMe's imagePath

@pytest.mark.parametrize("image_path, packed", [
    ("../parts/a.jpg", True),  # up one folder and back in: inside the tree
    ("a.jpg", True),
    ("../../a.jpg", False),  # parts/ is one folder deep: two up leaves the tree
    ("../elsewhere/../../a.jpg", False),
])
def test_a_labelme_image_path_is_refused_only_when_it_leaves_the_tree(tmp_path, image_path,
                                                                      packed):
    source = tmp_path / "source"
    two_images(source)
    defects.write_annotations(source, ["parts/a.jpg"], "labelme")
    labelme = json.loads((source / "parts" / "a.json").read_text())
    (source / "parts" / "a.json").write_text(json.dumps(dict(labelme, imagePath=image_path)))
    manifest = pack_with(source, tmp_path / "out", {"source.annotations.files": "labelme"},
                         **ANY_REJECTS)
    if packed:
        assert not manifest["rejects"]
        boxes = sorted(len(json.loads(files["json"])["boxes"])
                       for files in members(tmp_path / "out").values())
        assert boxes == [0, 2]
    else:
        assert rejects(manifest)["parts/a.jpg"] == (
            "bad_annotation", f"parts/a.json: imagePath '{image_path}' leads out of the source "
            "tree (refused)")


def test_rle_counts_that_wrap_int64_when_summed_are_refused_before_any_pixel():
    from shardsmith.annotations import rle

    wrapping = [0, 2**62, 2**62, 2**62, 2**62 + 4]  # 4 in int64: once a segfault in decode
    with pytest.raises(rle.RleError, match="more than the 4 pixels"):
        rle.checked(wrapping, 2, 2)
    with pytest.raises(rle.RleError, match="more than the 4 pixels"):
        rle.checked([0, 2**64, 1], 2, 2)  # past int64: no OverflowError either
