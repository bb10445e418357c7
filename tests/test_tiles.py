"""Tiling at full resolution: small defects keep their pixels, and their annotations follow."""

from __future__ import annotations

import json

import numpy as np
import pytest
import simplejpeg
from PIL import Image

from shardsmith.tiling import grid, starts

import images
from defects import members, pack_with

WIDTH, HEIGHT = 1600, 1200
TILE, OVERLAP = 256, 64


def speckled(seed: int = 0, count: int = 12, orientation: int = 1
             ) -> tuple[bytes, list[tuple[int, int, int, int]]]:
    """A 1600x1200 grey PNG with ``count`` 14x8 px bright scratches; their boxes (stored)."""
    rng = np.random.default_rng(seed)
    grey = np.full((HEIGHT, WIDTH), 128, np.uint8)
    boxes = []
    while len(boxes) < count:
        x, y = int(rng.integers(0, WIDTH - 14)), int(rng.integers(0, HEIGHT - 8))
        if any(abs(x - bx) < 40 and abs(y - by) < 40 for bx, by, _, _ in boxes):
            continue
        grey[y : y + 8, x : x + 14] = 250
        boxes.append((x, y, x + 14, y + 8))
    exif = Image.Exif()
    if orientation != 1:
        exif[0x0112] = orientation
    return images.encode(np.repeat(grey[:, :, None], 3, axis=2), "JPEG", quality=95,
                         exif=exif, subsampling=0), boxes


def yolo(boxes: list[tuple[int, int, int, int]], width: int = WIDTH,
         height: int = HEIGHT) -> str:
    return "".join(f"0 {(x0 + x1) / 2 / width} {(y0 + y1) / 2 / height} {(x1 - x0) / width} "
                   f"{(y1 - y0) / height}\n" for x0, y0, x1, y1 in boxes)


ANNOTATED = {"source.annotations.files": "yolo", "source.annotations.classes": ["scratch"]}
TILED = {"image.tiles.size": TILE, "image.tiles.overlap": OVERLAP}


def test_the_grid_overlaps_and_its_last_row_and_column_end_at_the_border():
    assert starts(1600, 256, 64) == [0, 192, 384, 576, 768, 960, 1152, 1344]
    assert starts(200, 256, 64) == [0]
    tiles = grid(1600, 1200, load_tiles())
    assert {(tile.x + tile.width, tile.y + tile.height) for tile in tiles} >= {(1600, 1200)}
    assert all(tile.x + tile.width <= 1600 and tile.y + tile.height <= 1200 for tile in tiles)


def load_tiles():
    from shardsmith.config import TileConfig

    return TileConfig(size=TILE, overlap=OVERLAP)


def test_every_small_defect_shows_in_a_kept_tile_at_its_place(tmp_path):
    source = tmp_path / "source"
    data, boxes = speckled()
    images.write(source / "parts" / "big.jpg", data)
    (source / "parts" / "big.txt").write_text(yolo(boxes))
    manifest = pack_with(source, tmp_path / "out", ANNOTATED, **TILED)
    samples = members(tmp_path / "out")
    assert manifest["totals"]["sources"] == 1 and manifest["totals"]["seen"] == 2  # + .txt
    assert manifest["totals"]["packed"] == len(samples) < 48  # background tiles left out
    found = {box: 0 for box in boxes}
    for key, files in samples.items():
        meta = json.loads(files["json"])
        tile = meta["tile"]
        assert key == f"parts_big_{key.split('_')[2]}_r{tile['row']:03d}c{tile['column']:03d}"
        assert (meta["width"], meta["height"]) == (TILE, TILE) and tile["scale"] == 1.0
        assert meta["path"] == "parts/big.jpg" and meta["split"] == "train"
        pixels = simplejpeg.decode_jpeg(files["jpg"], colorspace="GRAY")[:, :, 0]
        for box in meta["boxes"]:
            x0, y0, x1, y1 = box
            original = (x0 + tile["x"], y0 + tile["y"], x1 + tile["x"], y1 + tile["y"])
            match = [b for b in boxes if max(abs(a - c) for a, c in zip(b, original,
                                                                        strict=True)) <= 1]
            if (x1 - x0) * (y1 - y0) == 14 * 8:  # whole in this tile
                assert len(match) == 1
                found[match[0]] += 1
                inside = pixels[round(y0) : round(y1), round(x0) : round(x1)]
                assert inside.mean() > 230  # the scratch's pixels are there, unresized
    assert all(found.values()), [box for box, count in found.items() if not count]


def test_background_tiles_are_a_seeded_fraction_and_every_image_keeps_one(tmp_path):
    source = tmp_path / "source"
    data, boxes = speckled(count=1)
    images.write(source / "parts" / "one.jpg", data)
    (source / "parts" / "one.txt").write_text(yolo(boxes))
    images.write(source / "parts" / "clean.jpg", speckled(count=0)[0])  # no defect, no file
    first = pack_with(source, tmp_path / "a", ANNOTATED, **TILED)
    again = pack_with(source, tmp_path / "b", ANNOTATED, **TILED)
    assert images.dataset_bytes(tmp_path / "a").keys() == images.dataset_bytes(
        tmp_path / "b").keys()
    keys = sorted(members(tmp_path / "a"))
    assert keys == sorted(members(tmp_path / "b"))  # the same tiles, by seed
    clean = [key for key in keys if key.startswith("parts_clean")]
    assert 1 <= len(clean) < 48  # ~10 % of 48 background tiles, and never none
    assert first["totals"]["sources"] == again["totals"]["sources"] == 2
    everything = pack_with(source, tmp_path / "all", ANNOTATED, **TILED,
                           **{"image.tiles.keep": "all"})
    assert everything["totals"]["packed"] == 2 * 48


def test_without_annotations_every_tile_is_kept_with_the_image_label(tmp_path):
    source = tmp_path / "source"
    images.write(source / "dent" / "a.jpg", speckled(count=0)[0])
    images.write(source / "ok" / "small.png", images.png(200, 150))
    manifest = pack_with(source, tmp_path / "out", {}, **TILED, **{"splits": "train=0.5,val=0.5"})
    samples = members(tmp_path / "out")
    assert manifest["totals"]["packed"] == 48 + 1 and manifest["totals"]["sources"] == 2
    by_path: dict[str, set] = {}
    for files in samples.values():
        meta = json.loads(files["json"])
        assert "boxes" not in meta and int(files["cls"]) == meta["label"]
        assert meta["class"] == meta["path"].split("/")[0]
        by_path.setdefault(meta["path"], set()).add(meta["split"])
        assert (meta["width"], meta["height"]) == (TILE, TILE)  # a small image is padded
    assert all(len(splits) == 1 for splits in by_path.values())  # an original's tiles: 1 split
    from shardsmith.dataset.manifest import read_manifest
    from shardsmith.insight.census import take_census

    census = take_census(tmp_path / "out", read_manifest(tmp_path / "out"))
    assert census.duplicates == ()  # an original's tiles share its digest: not copies


@pytest.mark.parametrize("orientation", [6, 3])
def test_scaled_tiles_of_a_turned_original_carry_their_defects(tmp_path, orientation):
    source = tmp_path / "source"
    data, boxes = speckled(count=6, orientation=orientation)
    images.write(source / "parts" / "turned.jpg", data)
    (source / "parts" / "turned.txt").write_text(yolo(boxes))
    pack_with(source, tmp_path / "out", ANNOTATED, **{**TILED, "image.tiles.scale": 0.5,
                                                      "image.tiles.overlap": 32})
    seen = 0
    for files in members(tmp_path / "out").values():
        meta = json.loads(files["json"])
        assert meta["tile"]["scale"] == 0.5
        pixels = simplejpeg.decode_jpeg(files["jpg"], colorspace="GRAY")[:, :, 0]
        for x0, y0, x1, y1 in meta["boxes"]:
            if (x1 - x0) * (y1 - y0) < 7 * 4 - 1e-6:
                continue  # clipped by the tile's edge
            seen += 1
            assert pixels[round(y0) : round(y1), round(x0) : round(x1)].mean() > 180
            ring = pixels[max(0, round(y0) - 3) : round(y1) + 3,
                          max(0, round(x0) - 3) : round(x1) + 3]
            assert (ring > 180).sum() <= (round(x1) - round(x0) + 2) * (round(y1) - round(y0) + 2)
    assert seen >= 6


def l_crack_tree(source, extra_box: bool = False) -> None:
    """A 512x256 grey PNG with an L-shaped crack, 6 px wide, whose foot crosses into the
    right tile of a 256 px grid; as an index mask, and (``extra_box``) a YOLO box on it."""
    grey = np.full((256, 512), 128, np.uint8)
    crack = np.zeros((256, 512), np.uint8)
    crack[20:230, 40:46] = 1  # the leg, in the left tile
    crack[224:230, 40:300] = 1  # the foot, 44 px of it in the right tile
    grey[crack > 0] = 6
    images.write(source / "parts" / "l.png", images.encode(grey, "PNG"))
    Image.fromarray(crack).save(source / "parts" / "l_mask.png")
    if extra_box:
        (source / "parts" / "l.txt").write_text(
            f"0 {170 / 512} {125 / 256} {260 / 512} {210 / 256}\n")


L_CONFIG = {"source.annotations.masks": "beside", "source.annotations.mask_suffix": "_mask",
            "source.annotations.mask_values": "index",
            "source.annotations.classes": ["crack"], "image.tiles.size": 256,
            "image.tiles.overlap": 0, "image.tiles.keep": "all",
            "source.annotations.min_visible": 0.0}


def tile_objects(output) -> dict[int, tuple[dict, np.ndarray]]:
    """column -> (KEY.json, class mask) of a one-row tiling."""
    import cv2

    found = {}
    for files in members(output).values():
        meta = json.loads(files["json"])
        found[meta["tile"]["column"]] = (meta, cv2.imdecode(
            np.frombuffer(files["mask.png"], np.uint8), cv2.IMREAD_UNCHANGED))
    return found


def test_a_crack_crossing_a_tile_border_is_boxed_by_its_own_pixels_in_each_tile(tmp_path):
    l_crack_tree(tmp_path / "source")
    pack_with(tmp_path / "source", tmp_path / "out", L_CONFIG)
    tiles = tile_objects(tmp_path / "out")
    assert tiles[0][0]["boxes"] == [[40.0, 20.0, 256.0, 230.0]]
    # Only the foot's 44 px show in the right tile: not the leg's 210 px of height.
    assert tiles[1][0]["boxes"] == [[0.0, 224.0, 44.0, 230.0]]


def test_an_object_dropped_by_min_visible_leaves_ignore_in_the_class_mask(tmp_path):
    l_crack_tree(tmp_path / "source")
    pack_with(tmp_path / "source", tmp_path / "out",
              {**L_CONFIG, "source.annotations.min_visible": 0.25})
    tiles = tile_objects(tmp_path / "out")
    right, mask = tiles[1]
    assert right["boxes"] == []  # 264 of its 2,784 pixels show: under a quarter
    assert set(np.unique(mask[224:230, :44]).tolist()) == {255}
    assert set(np.unique(mask).tolist()) == {0, 255}
    assert set(np.unique(tiles[0][1]).tolist()) == {0, 1}


def test_a_mask_and_a_yolo_box_of_one_crack_are_one_object_unless_merge_iou_is_0(tmp_path):
    source = tmp_path / "source"
    l_crack_tree(source, extra_box=True)
    config = {**L_CONFIG, "source.annotations.files": "yolo", "image.tiles.size": 512}
    pack_with(source, tmp_path / "merged", config)
    (meta, _), = tile_objects(tmp_path / "merged").values()
    assert meta["boxes"] == [[40.0, 20.0, 300.0, 230.0]] and meta["rle"][0] is not None
    pack_with(source, tmp_path / "apart", {**config, "source.annotations.merge_iou": 0})
    (meta, _), = tile_objects(tmp_path / "apart").values()
    assert len(meta["boxes"]) == 2 and meta["rle"][0] is None  # the box, then the mask


def test_inspect_counts_the_objects_dropped_and_the_masks_merged_with_their_box(tmp_path):
    from click.testing import CliRunner

    from shardsmith.cli import main

    def objects(output) -> dict:
        result = CliRunner().invoke(main, ["inspect", str(output), "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.output)["objects"]

    l_crack_tree(tmp_path / "source", extra_box=True)
    pack_with(tmp_path / "source", tmp_path / "dropped",
              {**L_CONFIG, "source.annotations.min_visible": 0.25})
    counted = objects(tmp_path / "dropped")
    assert (counted["dropped_by_min_visible"], counted["merged_mask_and_box"]) == (1, 0)
    pack_with(tmp_path / "source", tmp_path / "merged",
              {**L_CONFIG, "source.annotations.files": "yolo", "image.tiles.size": 512})
    counted = objects(tmp_path / "merged")
    assert (counted["dropped_by_min_visible"], counted["merged_mask_and_box"]) == (0, 1)


def test_an_empty_rle_is_no_object(tmp_path):
    source = tmp_path / "source"
    images.write(source / "parts" / "a.png", images.gray_png(64, 48))
    document = {"images": [{"id": 1, "file_name": "parts/a.png", "width": 64, "height": 48}],
                "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "iscrowd": 1,
                                 "bbox": [10, 10, 26, 15],
                                 "segmentation": {"size": [48, 64], "counts": [48 * 64]}}],
                "categories": [{"id": 1, "name": "crack"}]}
    (source / "instances.json").write_text(json.dumps(document))
    manifest = pack_with(source, tmp_path / "out", {"source.annotations.coco": "instances.json"})
    assert manifest["totals"]["packed"] == 1 and not manifest["rejects"]
    (files,) = members(tmp_path / "out").values()
    assert json.loads(files["json"])["boxes"] == []


@pytest.mark.parametrize("value", ["1.5", "-0.1", "nan", "many"])
def test_merge_iou_outside_0_to_1_is_one_line_and_exit_2(tmp_path, value):
    from click.testing import CliRunner

    from shardsmith.cli import main

    job = tmp_path / "job.yaml"
    job.write_text(f"source:\n  annotations:\n    files: yolo\n    merge_iou: {value}\n")
    (tmp_path / "source").mkdir()
    result = CliRunner().invoke(main, ["pack", str(tmp_path / "source"), str(tmp_path / "out"),
                                       "--config", str(job)])
    assert result.exit_code == 2, result.output
    assert "merge_iou" in result.output and "Traceback" not in result.output


def test_an_oriented_tiff_is_read_at_its_stored_size(tmp_path):
    import io

    import tifffile

    stored = np.full((60, 100), 128, np.uint8)
    stored[:10, :20] = 250  # the stored top-left corner
    buffer = io.BytesIO()
    tifffile.imwrite(buffer, stored, extratags=[(0x0112, 3, 1, 6, True)])
    images.write(tmp_path / "source" / "a" / "t.tif", buffer.getvalue())
    pack_with(tmp_path / "source", tmp_path / "out", {}, **{"image.size": 100,
                                                           "image.color": "gray"})
    (files,) = members(tmp_path / "out").values()
    pixels = simplejpeg.decode_jpeg(files["jpg"], colorspace="GRAY")[:, :, 0]
    assert pixels.shape == (100, 60)  # turned 90 clockwise: not squeezed into 100 x 60
    assert pixels[:20, -10:].mean() > 230  # the stored top-left is now the top-right


@pytest.mark.parametrize("min_visible", [0.0, 0.5])
def test_a_box_ending_a_hair_past_a_tile_border_is_no_object_of_the_next_tile(tmp_path,
                                                                              min_visible):
    # Another tool's pixels converted to YOLO: the box ends 0.0004 px past column 3's border,
    # less than the 1/1000 px a record keeps; column 3 shows nothing of it, kept or cut.
    images.write(tmp_path / "source" / "good" / "a.png", images.png(1280, 256, 1))
    (tmp_path / "source" / "good" / "a.txt").write_text(
        f"0 {(736 + 768.0004) / 2 / 1280:.9f} 0.5 {32.0004 / 1280:.9f} 0.2\n")
    pack_with(tmp_path / "source", tmp_path / "out",
              {**ANNOTATED, "image.tiles.size": TILE, "image.tiles.overlap": 0,
               "image.tiles.keep": "all", "source.annotations.min_visible": min_visible})
    tiles = {json.loads(files["json"])["tile"]["column"]: json.loads(files["json"])
             for files in members(tmp_path / "out").values()}
    assert tiles[2]["boxes"] == [[224.0, 102.4, 256.0, 153.6]]
    assert tiles[3]["boxes"] == []
    assert "objects_cut" not in tiles[3]
