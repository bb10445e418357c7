"""One image path: one orientation table for pixels and points, and a whole image as the
one-tile case of the tiled path.

The pixels of an original and the annotations on it are turned upright by one table
(``geometry.ORIENTATIONS``): a marked stored pixel and the point at its centre land on the
same upright pixel for all eight EXIF orientations, through the real decode at 8 and 16 bit.
An image without tiles is a frame cut into a grid of one tile by the same code that cuts
tiles, so a 1x1 grid of an image gives the very sample the untiled image does.
"""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image, ImageOps

import shardsmith.packing.imaging
from shardsmith import load_config
from shardsmith.annotations.geometry import (
    ORIENTATIONS,
    orient_box,
    orient_pixels,
    orient_ring,
    to_upright,
    upright_size,
)
from shardsmith.annotations.model import Shape, Vocabulary
from shardsmith.config import ImageConfig, TileConfig
from shardsmith.dataset.records import Sample
from shardsmith.packing.imaging import convert, decode_frame
from shardsmith.packing.pipeline import process_item
from shardsmith.packing.plan import PlanItem
from shardsmith.packing.scan import SourceFile
from shardsmith.tiling import Tile

import images

# Not square, so that a transposing orientation shows; both sides over 8 pixels, so that a
# full-size decode is not taken for a reduced DCT one (7/8 of 7 pixels rounds up to 7).
STORED_W, STORED_H = 13, 9
MARK = (10, 2)  # the marked stored pixel (x, y): off every axis of symmetry


def with_orientation(png: bytes, orientation: int) -> bytes:
    """``png`` with an eXIf chunk (raw TIFF, as PNG 1.5 stores it) right after IHDR."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    tiff = exif.tobytes()[len(b"Exif\x00\x00"):]
    chunk = struct.pack(">I", len(tiff)) + b"eXIf" + tiff
    chunk += struct.pack(">I", zlib.crc32(b"eXIf" + tiff))
    ihdr_end = 8 + 8 + 13 + 4
    return png[:ihdr_end] + chunk + png[ihdr_end:]


def marked_png(depth: int, orientation: int) -> bytes:
    """A black RGB PNG of ``STORED_W`` x ``STORED_H`` with ``MARK`` at full white."""
    dtype, white = (np.uint8, 255) if depth == 8 else (np.uint16, 65535)
    pixels = np.zeros((STORED_H, STORED_W, 3), dtype)
    pixels[MARK[1], MARK[0]] = white
    ok, encoded = cv2.imencode(".png", pixels)
    assert ok
    return with_orientation(encoded.tobytes(), orientation)


def only_marked(pixels: np.ndarray) -> tuple[int, int]:
    """(x, y) of the one bright pixel."""
    grey = pixels if pixels.ndim == 2 else pixels.max(axis=2)
    ys, xs = np.nonzero(grey > grey.max() / 2)
    assert len(xs) == 1, f"{len(xs)} marked pixels"
    return int(xs[0]), int(ys[0])


@pytest.mark.parametrize("depth", [8, 16])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_a_marked_pixel_and_the_point_at_its_centre_land_on_the_same_upright_pixel(
        orientation: int, depth: int):
    config = ImageConfig(size=64)  # larger than the image: no resize, pixels stay exact
    frame = decode_frame(marked_png(depth, orientation), config)
    shown = only_marked(frame.pixels)
    pixel = Shape("mark", (MARK[0], MARK[1], MARK[0] + 1, MARK[1] + 1),
                  ((MARK[0] + 0.5, MARK[1] + 0.5, MARK[0] + 0.5, MARK[1] + 0.5,
                    MARK[0] + 0.5, MARK[1] + 0.5),))
    upright = to_upright(pixel, orientation, (STORED_W, STORED_H))
    assert frame.placement.box(upright.box) == (shown[0], shown[1], shown[0] + 1, shown[1] + 1)
    centre = frame.placement.points(np.array(upright.polygons[0], np.float64))[:2]
    assert centre.tolist() == [shown[0] + 0.5, shown[1] + 0.5]
    assert frame.header[:2] == upright_size(STORED_W, STORED_H, orientation)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_the_orientation_table_turns_pixels_as_pillow_reads_the_exif_standard(orientation):
    stored = np.arange(STORED_W * STORED_H, dtype=np.uint8).reshape(STORED_H, STORED_W)
    exif = Image.Exif()
    exif[0x0112] = orientation
    buffer = io.BytesIO()
    Image.fromarray(stored).save(buffer, "PNG", exif=exif)
    expected = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(buffer.getvalue()))))
    assert np.array_equal(orient_pixels(stored, orientation), expected)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_masks_images_and_points_share_the_table(orientation):
    mask = np.zeros((STORED_H, STORED_W), np.uint8)
    mask[MARK[1], MARK[0]] = 1
    rgb = np.repeat(mask[:, :, None], 3, axis=2)
    x, y = only_marked(orient_pixels(mask, orientation))
    assert only_marked(orient_pixels(rgb, orientation)) == (x, y)
    centre = orient_ring(np.array([MARK[0] + 0.5, MARK[1] + 0.5]), orientation, STORED_W,
                         STORED_H)
    assert centre.tolist() == [x + 0.5, y + 0.5]
    assert orient_box((MARK[0], MARK[1], MARK[0] + 1, MARK[1] + 1), orientation, STORED_W,
                      STORED_H) == (x, y, x + 1, y + 1)


def test_the_table_holds_each_of_the_eight_orientations_once():
    turns = {(turn.transpose, turn.mirror_x, turn.mirror_y) for turn in ORIENTATIONS.values()}
    assert sorted(ORIENTATIONS) == list(range(1, 9)) and len(turns) == 8


def test_an_orientation_outside_the_table_leaves_pixels_and_points_as_stored():
    stored = np.arange(12, dtype=np.uint8).reshape(3, 4)
    assert orient_pixels(stored, 9) is stored
    assert orient_ring(np.array([1.0, 2.0]), 0, 4, 3).tolist() == [1.0, 2.0]


SIDE = 64


def annotated_source(root: Path) -> Path:
    """A 64x64 original with a YOLO box, in a one-class tree."""
    images.write(root / "part" / "a.jpg", images.jpeg(SIDE, SIDE, 3))
    (root / "part" / "a.txt").write_text("0 0.5 0.25 0.25 0.125\n")
    return root / "part" / "a.jpg"


def process(root: Path, original: Path, **overrides) -> list[Sample]:
    config = load_config(None, {"source.path": str(root), "source.annotations.files": "yolo",
                                "source.annotations.classes": ["scratch"],
                                "image.size": SIDE, **overrides})
    stat = original.stat()
    item = PlanItem(SourceFile(original.relative_to(root).as_posix(), stat.st_size,
                               stat.st_mtime_ns), "train")
    result = process_item(item, str(root), config, Vocabulary((), ("scratch",)))
    assert isinstance(result, tuple), result
    return list(result)


def test_an_untiled_image_is_a_frame_with_one_window_the_whole_frame():
    frame = decode_frame(images.png(80, 30), ImageConfig(size=40, resize="pad"))
    assert frame.windows == (Tile(0, 0, 0, 0, 40, 40),) and frame.window == (40, 40)
    assert frame.pixels.shape[:2] == (40, 40)


def test_an_untiled_image_and_a_one_tile_grid_are_cut_by_the_same_code(tmp_path, monkeypatch):
    original = annotated_source(tmp_path)
    cuts: list[tuple[Tile, tuple[int, int]]] = []
    real_cut = shardsmith.packing.imaging.cut_window

    def recording(pixels, tile, size, fill):
        if pixels.ndim == 3:  # the image, not the class mask
            cuts.append((tile, size))
        return real_cut(pixels, tile, size, fill)

    monkeypatch.setattr(shardsmith.packing.imaging, "cut_window", recording)
    untiled = process(tmp_path, original)
    plain = convert(original.read_bytes(), ImageConfig(size=SIDE))
    tiled = process(tmp_path, original, **{"image.tiles.size": SIDE})
    assert cuts == [(Tile(0, 0, 0, 0, SIDE, SIDE), (SIDE, SIDE))] * 3
    assert len(untiled) == len(tiled) == 1
    assert untiled[0].jpeg == tiled[0].jpeg == plain.jpeg
    assert untiled[0].objects == tiled[0].objects and len(untiled[0].objects) == 1
    assert tiled[0].key == f"{untiled[0].key}_r000c000" and untiled[0].tile is None


def test_a_one_tile_grid_of_a_small_image_pads_like_the_letterbox_fill(tmp_path):
    config = ImageConfig(size=40, pad_color=(10, 20, 30), tiles=TileConfig(size=40))
    frame = decode_frame(images.png(40, 25), config, tiles=config.tiles)
    assert frame.windows == (Tile(0, 0, 0, 0, 40, 25),) and frame.window == (40, 40)
    pixels = shardsmith.packing.imaging.window_pixels(frame, frame.windows[0], config)
    assert pixels.shape == (40, 40, 3) and (pixels[25:] == (10, 20, 30)).all()
