"""A corpus of drawn defects: every box and mask checked against the pixels it describes.

Originals with an L-shaped crack, a diagonal crack and a scratch drawn at known places
(``defects.corpus_original``), in four input formats (8-bit JPEG and PNG, 16-bit PNG and
TIFF), every EXIF orientation, each packed with every resize mode and with tiles whose
borders the cracks cross; one original of each pack has no defect and no annotation.  Every
object's box is the box of its defect's pixels in the sample (within 1 px of the reference
built by the documented pixel rule, and of the pixels the JPEG shows), every crack's mask has
IoU >= 0.9 with that reference, and the class mask agrees with the object list.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import cv2
import numpy as np
import pytest
import simplejpeg

from shardsmith import load_config
from shardsmith.decoders import jpeg_scale
from shardsmith.packing.imaging import layout, plan_frame

import defects
import images

KINDS = ("jpeg8", "png8", "png16", "tiff16")
SUFFIX = {"jpeg8": ".jpg", "png8": ".png", "png16": ".png", "tiff16": ".tif"}
LAYOUTS = {
    "fit": {"image.resize": "fit", "image.size": 160},
    "center_crop": {"image.resize": "center_crop", "image.size": 160},
    "pad": {"image.resize": "pad", "image.size": 200},
    "shorter": {"image.resize": "shorter", "image.size": 120},
    "stretch": {"image.resize": "stretch", "image.size": 160},
    "tiles": {"image.tiles.size": 96, "image.tiles.overlap": 16, "image.tiles.keep": "all"},
}
PIXEL_OBJECTS = ("crack", "fissure")  # mask regions; the scratch is a box only
IGNORE = 255


def pairs() -> list[tuple[str, str, tuple[int, int]]]:
    """Every input format with every layout, each with two orientations, so that every
    format meets every EXIF orientation (12 per format)."""
    return [(kind, name, ((2 * number + first) % 8 + 1, (2 * number + first + 1) % 8 + 1))
            for first, kind in enumerate(KINDS) for number, name in enumerate(LAYOUTS)]


def corpus(source: Path, kind: str, orientations: tuple[int, int]) -> None:
    for orientation in orientations:
        path = images.write(source / "parts" / f"o{orientation}{SUFFIX[kind]}",
                            defects.corpus_original(kind, orientation))
        defects.write_corpus_annotations(path.with_suffix(""))
    images.write(source / "parts" / f"clean{SUFFIX[kind]}",
                 defects.corpus_original(kind, 1, with_defects=False))


@pytest.mark.parametrize(("kind", "name", "orientations"), pairs())
@pytest.mark.slow
def test_every_object_lies_on_its_drawn_defect(tmp_path, kind, name, orientations):
    source, output = tmp_path / "source", tmp_path / "out"
    corpus(source, kind, orientations)
    overrides = {**defects.CORPUS_ANNOTATIONS, **LAYOUTS[name], "image.color": "gray",
                 "image.quality": 95, "image.pad_color": [128, 128, 128]}
    manifest = defects.pack_with(source, output, overrides)
    assert not manifest["rejects"], manifest["rejects"]
    config = load_config(None, {"source.path": str(source), "output.path": str(output),
                                **overrides})
    classes = manifest["object_classes"]
    checked = 0
    for files in defects.members(output).values():
        meta = json.loads(files["json"])
        orientation = 1 if "clean" in meta["path"] else int(meta["path"].split("/o")[1][0])
        expected = expected_objects(kind, orientation, meta, config)
        check_sample(files, meta, expected, classes)
        checked += 1
    assert checked >= 3


def expected_objects(kind: str, orientation: int, meta: dict, config) -> dict[str, dict]:
    """Per defect that shows in the sample: its reference pixels (the documented rule) and
    whether it is kept (``min_visible`` of its pixels, or of its box, in the window)."""
    if "clean" in meta["path"]:
        return {}
    stored = defects.CORPUS_SIZE
    turned = orientation in (5, 6, 7, 8)
    upright_size = stored[::-1] if turned else stored
    tiles = config.image.tiles if config.image.tiles.enabled else None
    decoded = upright_size
    if kind == "jpeg8":  # decoded at a reduced DCT scale that covers the target
        need = layout(*upright_size, config.image, tiles).need
        decoded = jpeg_scale(*stored, *(need[::-1] if turned else need))
        decoded = decoded[::-1] if turned else decoded
    plan = plan_frame(upright_size, decoded, config.image, tiles)
    tile = plan.windows[0]
    if "tile" in meta:
        tile = next(t for t in plan.windows
                    if (t.row, t.column) == (meta["tile"]["row"], meta["tile"]["column"]))
    placement = plan.placement.shifted(tile.x, tile.y, plan.window)
    x0, y0, x1, y1 = placement.window
    seen = ((x0 - placement.offset_x) / placement.scale_x,
            (y0 - placement.offset_y) / placement.scale_y,
            (x1 - placement.offset_x) / placement.scale_x,
            (y1 - placement.offset_y) / placement.scale_y)
    found = {}
    for defect, pixels in defects.corpus_defects().items():
        pixels = defects.upright(pixels, orientation)
        reference = defects.reduce_any(pixels, (placement.scale_x, placement.scale_y),
                                       (placement.offset_x, placement.offset_y), plan.window)
        if not reference.any():
            continue
        inside = _overlapping(pixels, seen)
        if defect in PIXEL_OBJECTS:
            share = inside.sum() / pixels.sum()
        else:
            left, top, right, bottom = defects.extent(pixels)
            shown = (max(left, seen[0]), max(top, seen[1]), min(right, seen[2]),
                     min(bottom, seen[3]))
            share = (max(0, shown[2] - shown[0]) * max(0, shown[3] - shown[1])
                     / ((right - left) * (bottom - top)))
        found[defect] = {"reference": reference, "kept": share >= 0.25}
    return found


def _overlapping(pixels: np.ndarray, window: tuple[float, float, float, float]) -> np.ndarray:
    """The marked pixels that overlap ``window`` (continuous original coordinates)."""
    x0, y0, x1, y1 = window
    out = np.zeros_like(pixels)
    left, top = max(0, math.floor(x0 + 1e-9)), max(0, math.floor(y0 + 1e-9))
    right, bottom = math.ceil(x1 - 1e-9), math.ceil(y1 - 1e-9)
    out[top:bottom, left:right] = pixels[top:bottom, left:right]
    return out


def check_sample(files: dict, meta: dict, expected: dict, classes: list[str]) -> None:
    """One sample's objects and class mask against ``expected``: one object a defect (the
    crack's mask and YOLO box merge), each on its pixels."""
    pixels = simplejpeg.decode_jpeg(files["jpg"], colorspace="GRAY")[:, :, 0].astype(int)
    mask = cv2.imdecode(np.frombuffer(files["mask.png"], np.uint8), cv2.IMREAD_UNCHANGED)
    names = meta.get("label_names", [])
    kept = sorted(defect for defect, facts in expected.items() if facts["kept"])
    where = f"{meta['path']} {meta.get('tile', {}).get('row', '')}"
    assert sorted(names) == kept, f"{where}: objects {names}, expected {kept}"
    for number, defect in enumerate(names):
        reference = expected[defect]["reference"]
        box = meta["boxes"][number]
        assert _distance(box, defects.extent(reference)) <= 1, (where, defect, box)
        near = cv2.dilate(reference.astype(np.uint8), np.ones((5, 5), np.uint8)) > 0
        shows = (pixels > (defects.BACKGROUND + defects.BRIGHT) / 2) if defect == "scratch" \
            else (pixels < (defects.BACKGROUND + defects.DARK) / 2)
        if (shows & near).any():
            assert _distance(box, defects.extent(shows & near)) <= 1, (where, defect, box)
        identity = classes.index(defect) + 1
        if defect in PIXEL_OBJECTS:
            counts = meta["rle"][number]["counts"]
            instance = defects.rle_decode_counts(counts, meta["height"], meta["width"])
            assert defects.iou(instance, reference) >= 0.9, (where, defect)
            assert defects.iou(mask == identity, reference) >= 0.9, (where, defect)
    for defect, facts in expected.items():
        if defect in PIXEL_OBJECTS and not facts["kept"]:  # dropped by min_visible
            assert (mask[facts["reference"]] == IGNORE).all(), (where, defect)
    present = {classes[value - 1] for value in np.unique(mask).tolist()
               if value not in (0, IGNORE)}
    assert present <= set(names), (where, present, names)


def _distance(box: list[float], reference: tuple[float, float, float, float]) -> float:
    return max(abs(a - b) for a, b in zip(box, reference, strict=True))
