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
