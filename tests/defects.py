"""Synthetic originals with defects drawn at known coordinates, annotated in every input format.

The original is 480x360 as stored (a JPEG, with an EXIF orientation when asked), mid grey
with a little texture; a bright rectangle (``scratch``) and a dark octagon (``dent``) are
drawn into its stored pixels, and every annotation file describes those stored pixels.  The
defects differ from the background in luma, which JPEG keeps at full resolution, so the
decoded sample shows where they went: a pixel is defect where its grey level is past half the
contrast.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image

from shardsmith import load_config, pack

import images

WIDTH, HEIGHT = 480, 360
SCRATCH = (220, 40, 360, 160)  # x0, y0, x1, y1: whole pixels 220..359 x 40..159
DENT = ((110, 205), (190, 205), (220, 235), (220, 295), (190, 325), (110, 325), (80, 295),
        (80, 235))
CLASSES = ("scratch", "dent")
BACKGROUND, BRIGHT, DARK = 128, 250, 6
FORMATS = ("yolo", "voc", "coco", "labelme", "mask")
WITH_MASKS = ("coco", "labelme", "mask")  # formats whose dent is a mask, not only a box


def defect_masks(width: int = WIDTH, height: int = HEIGHT) -> dict[str, np.ndarray]:
    """The drawn pixels of each defect (stored orientation)."""
    scratch = np.zeros((height, width), bool)
    x0, y0, x1, y1 = SCRATCH
    scratch[y0:y1, x0:x1] = True
    # The pixels whose centre is inside the (convex, clockwise on screen) octagon.
    ys, xs = np.mgrid[0:height, 0:width] + 0.5
    dent = np.ones((height, width), bool)
    for (ax, ay), (bx, by) in zip(DENT, DENT[1:] + DENT[:1], strict=True):
        dent &= (bx - ax) * (ys - ay) - (by - ay) * (xs - ax) > 0
    return {"scratch": scratch, "dent": dent}


def original(orientation: int = 1, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    grey = np.full((HEIGHT, WIDTH), BACKGROUND, np.int16) + rng.integers(-3, 4, (HEIGHT, WIDTH))
    masks = defect_masks()
    grey[masks["scratch"]] = BRIGHT
    grey[masks["dent"]] = DARK
    rgb = np.repeat(np.clip(grey, 0, 255).astype(np.uint8)[:, :, None], 3, axis=2)
    exif = Image.Exif()
    if orientation != 1:
        exif[0x0112] = orientation
    return images.encode(rgb, "JPEG", quality=95, exif=exif, subsampling=0)


def seen(pixels: np.ndarray) -> dict[str, np.ndarray]:
    """Where each defect shows in decoded sample pixels (grey past half the contrast)."""
    grey = pixels.astype(np.int16) if pixels.ndim == 2 else pixels.astype(np.int16).mean(axis=2)
    return {"scratch": grey > (BACKGROUND + BRIGHT) / 2, "dent": grey < (BACKGROUND + DARK) / 2}


def extent(mask: np.ndarray) -> tuple[float, float, float, float]:
    """The continuous box of a mask's pixels: (left, top, right + 1, bottom + 1)."""
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    return float(cols[0]), float(rows[0]), float(cols[-1] + 1), float(rows[-1] + 1)


def iou(first: np.ndarray, second: np.ndarray) -> float:
    return float((first & second).sum()) / max(1, float((first | second).sum()))


def _dent_flat() -> list[float]:
    return [float(value) for point in DENT for value in point]


def write_annotations(source: Path, relpaths: list[str], fmt: str) -> dict[str, object]:
    """Annotation files of ``fmt`` for the originals ``relpaths``; returns the config
    overrides (``source.annotations.*``) that read them."""
    x0, y0, x1, y1 = SCRATCH
    dent = _dent_flat()
    if fmt == "coco":
        return _write_coco(source, relpaths)
    for relpath in relpaths:
        stem = source / Path(relpath).with_suffix("")
        if fmt == "yolo":
            xs, ys = dent[0::2], dent[1::2]
            polygon = " ".join(f"{x / WIDTH:.6f} {y / HEIGHT:.6f}" for x, y in zip(xs, ys,
                                                                                  strict=True))
            stem.with_suffix(".txt").write_text(
                f"0 {(x0 + x1) / 2 / WIDTH:.6f} {(y0 + y1) / 2 / HEIGHT:.6f} "
                f"{(x1 - x0) / WIDTH:.6f} {(y1 - y0) / HEIGHT:.6f}\n1 {polygon}\n")
        elif fmt == "voc":
            stem.with_suffix(".xml").write_text(voc_xml([("scratch", SCRATCH), (
                "dent", (min(dent[0::2]), min(dent[1::2]), max(dent[0::2]), max(dent[1::2])))]))
        elif fmt == "labelme":
            stem.with_suffix(".json").write_text(json.dumps({
                "version": "5.4.1", "imagePath": Path(relpath).name, "imageData": "bm90IGFu",
                "imageWidth": WIDTH, "imageHeight": HEIGHT,
                "shapes": [
                    {"label": "scratch", "shape_type": "rectangle",
                     "points": [[x0, y0], [x1, y1]]},
                    {"label": "dent", "shape_type": "polygon",
                     "points": [list(point) for point in DENT]},
                ]}))
        elif fmt == "mask":
            masks = defect_masks()
            index = np.zeros((HEIGHT, WIDTH), np.uint8)
            index[masks["scratch"]] = 1
            index[masks["dent"]] = 2
            Image.fromarray(index).save(Path(f"{stem}_mask.png"))
    return {
        "yolo": {"source.annotations.files": "yolo",
                 "source.annotations.classes": list(CLASSES)},
        "voc": {"source.annotations.files": "voc"},
        "labelme": {"source.annotations.files": "labelme"},
        "mask": {"source.annotations.masks": "beside", "source.annotations.mask_suffix": "_mask",
                 "source.annotations.mask_values": "index",
                 "source.annotations.classes": list(CLASSES)},
    }[fmt]


def voc_xml(objects: list[tuple[str, tuple[float, float, float, float]]],
            size: tuple[int, int] = (WIDTH, HEIGHT)) -> str:
    """Pascal VOC XML (1-based inclusive pixel indices) for continuous boxes."""
    parts = [f"<annotation><size><width>{size[0]}</width><height>{size[1]}</height>"
             "<depth>3</depth></size>"]
    for name, (x0, y0, x1, y1) in objects:
        parts.append(f"<object><name>{name}</name><bndbox><xmin>{x0 + 1:g}</xmin>"
                     f"<ymin>{y0 + 1:g}</ymin><xmax>{x1:g}</xmax><ymax>{y1:g}</ymax>"
                     "</bndbox></object>")
    return "\n".join(parts) + "\n</annotation>\n"


def _write_coco(source: Path, relpaths: list[str]) -> dict[str, object]:
    from pycocotools import mask as coco_mask

    masks = defect_masks()
    rle = coco_mask.encode(np.asfortranarray(masks["scratch"].astype(np.uint8)))
    rle = {"size": rle["size"], "counts": rle["counts"].decode()}
    x0, y0, x1, y1 = SCRATCH
    dent = _dent_flat()
    document = {"images": [], "annotations": [],
                "categories": [{"id": 7, "name": "scratch"}, {"id": 9, "name": "dent"}]}
    for number, relpath in enumerate(relpaths, 1):
        document["images"].append({"id": number, "file_name": relpath, "width": WIDTH,
                                   "height": HEIGHT})
        document["annotations"] += [
            {"id": 2 * number, "image_id": number, "category_id": 7, "iscrowd": 1,
             "bbox": [x0, y0, x1 - x0, y1 - y0], "segmentation": rle},
            {"id": 2 * number + 1, "image_id": number, "category_id": 9, "iscrowd": 0,
             "bbox": [min(dent[0::2]), min(dent[1::2]), max(dent[0::2]) - min(dent[0::2]),
                      max(dent[1::2]) - min(dent[1::2])], "segmentation": [dent]},
        ]
    (source / "annotations").mkdir(parents=True, exist_ok=True)
    (source / "annotations" / "instances.json").write_text(json.dumps(document))
    return {"source.annotations.coco": "annotations/instances.json"}


def pack_with(source: Path, output: Path, overrides: dict, **more) -> dict:
    """Pack in-process, one worker, quietly; returns the manifest."""
    pack(load_config(None, {"source.path": str(source), "output.path": str(output),
                            "run.quiet": True, "run.workers": 1, **overrides, **more}))
    return images.manifest_of(output)


def members(output: Path) -> dict[str, dict[str, bytes]]:
    """Every sample of a WebDataset dataset: key -> {extension: bytes}."""
    found: dict[str, dict[str, bytes]] = {}
    for shard in images.manifest_of(output)["shards"]:
        with tarfile.open(output / shard["name"]) as tar:
            for member in tar:
                key, extension = member.name.split(".", 1)
                found.setdefault(key, {})[extension] = tar.extractfile(member).read()
    return found


# --- A corpus of drawn cracks (tests/test_defect_corpus.py) --------------------------------
# A 320x240 stored original: an L-shaped crack (class crack, a region of an index mask, and a
# YOLO box around it: one defect, two annotations), a diagonal crack (fissure, mask only) and
# a bright scratch (a YOLO box only).  Cracks are 6 and 7 px wide, 3 px or more in a sample.
CORPUS_SIZE = (320, 240)
CORPUS_CLASSES = ("crack", "fissure", "scratch")
L_CRACK = ((20, 20), (26, 20), (26, 194), (100, 194), (100, 200), (20, 200))
DIAGONAL = ((150, 118), (155, 113), (302, 215), (297, 220))
CORPUS_SCRATCH = (160, 20, 280, 60)
# EXIF orientation → Pillow's transpose that turns stored pixels upright (independent of
# shardsmith's own table).
UPRIGHT = {2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180,
           4: Image.Transpose.FLIP_TOP_BOTTOM, 5: Image.Transpose.TRANSPOSE,
           6: Image.Transpose.ROTATE_270, 7: Image.Transpose.TRANSVERSE,
           8: Image.Transpose.ROTATE_90}


def corpus_defects() -> dict[str, np.ndarray]:
    """Each defect's stored pixels (bool), drawn by Pillow (a pixel whose centre is in)."""
    from PIL import ImageDraw

    found = {}
    for name, polygon in (("crack", L_CRACK), ("fissure", DIAGONAL)):
        canvas = Image.new("L", CORPUS_SIZE, 0)
        ImageDraw.Draw(canvas).polygon(polygon, fill=1)
        found[name] = np.asarray(canvas) > 0
    scratch = np.zeros(CORPUS_SIZE[::-1], bool)
    x0, y0, x1, y1 = CORPUS_SCRATCH
    scratch[y0:y1, x0:x1] = True
    found["scratch"] = scratch
    return found


def upright(pixels: np.ndarray, orientation: int) -> np.ndarray:
    """Stored pixels turned upright by Pillow's transposes."""
    if orientation == 1:
        return pixels
    image = Image.fromarray(pixels.astype(np.uint8))
    return np.asarray(image.transpose(UPRIGHT[orientation])).astype(pixels.dtype)


def corpus_original(kind: str, orientation: int, with_defects: bool = True) -> bytes:
    """The corpus original as ``kind`` (jpeg8, png8, png16, tiff16), gray, EXIF
    ``orientation`` (a TIFF's own orientation tag)."""
    import io

    import tifffile

    grey = np.full(CORPUS_SIZE[::-1], BACKGROUND, np.uint8)
    if with_defects:
        drawn = corpus_defects()
        grey[drawn["crack"] | drawn["fissure"]] = DARK
        grey[drawn["scratch"]] = BRIGHT
    exif = Image.Exif()
    if orientation != 1:
        exif[0x0112] = orientation
    if kind == "jpeg8":
        return images.encode(grey, "JPEG", quality=98, exif=exif)
    if kind == "png8":
        return images.encode(grey, "PNG", exif=exif)
    if kind == "png16":
        return images.encode(Image.fromarray(grey.astype(np.uint16) * 257), "PNG",
                             exif=exif)
    buffer = io.BytesIO()
    tifffile.imwrite(buffer, grey.astype(np.uint16) * 257,
                     extratags=[(0x0112, 3, 1, orientation, True)] if orientation != 1 else [])
    return buffer.getvalue()


def write_corpus_annotations(stem: Path) -> None:
    """The index mask (1 crack, 2 fissure) and the YOLO file (crack's and scratch's boxes),
    in stored pixels, beside the image ``stem``."""
    width, height = CORPUS_SIZE
    drawn = corpus_defects()
    index = np.zeros((height, width), np.uint8)
    index[drawn["crack"]], index[drawn["fissure"]] = 1, 2
    Image.fromarray(index).save(Path(f"{stem}_mask.png"))
    lines = []
    for number, name in ((0, "crack"), (2, "scratch")):
        x0, y0, x1, y1 = extent(drawn[name])
        lines.append(f"{number} {(x0 + x1) / 2 / width:.6f} {(y0 + y1) / 2 / height:.6f} "
                     f"{(x1 - x0) / width:.6f} {(y1 - y0) / height:.6f}")
    Path(f"{stem}.txt").write_text("\n".join(lines) + "\n")


CORPUS_ANNOTATIONS = {"source.annotations.files": "yolo",
                      "source.annotations.masks": "beside",
                      "source.annotations.mask_suffix": "_mask",
                      "source.annotations.mask_values": "index",
                      "source.annotations.classes": list(CORPUS_CLASSES)}


def reduce_any(pixels: np.ndarray, scale: tuple[float, float], offset: tuple[float, float],
               size: tuple[int, int]) -> np.ndarray:
    """The documented mask rule, written again: a ``size`` (width, height) sample pixel is
    marked when any marked pixel of the upright original overlaps its area, the original
    placed at ``x * scale + offset``."""
    height, width = pixels.shape
    summed = np.zeros((height + 1, width + 1), np.int64)
    summed[1:, 1:] = pixels.astype(np.int64).cumsum(0).cumsum(1)

    def ranges(count: int, along: int, axis_scale: float, axis_offset: float):
        edges = (np.arange(count + 1) - axis_offset) / axis_scale
        low = np.clip(np.floor(edges[:-1] + 1e-9).astype(int), 0, along)
        high = np.clip(np.ceil(edges[1:] - 1e-9).astype(int), 0, along)
        return low, np.maximum(high, low)

    columns = ranges(size[0], width, scale[0], offset[0])
    rows = ranges(size[1], height, scale[1], offset[1])
    (x0, x1), (y0, y1) = columns, rows
    total = (summed[y1][:, x1] - summed[y0][:, x1] - summed[y1][:, x0] + summed[y0][:, x0])
    return total > 0


def rle_decode_counts(counts: list[int], height: int, width: int) -> np.ndarray:
    """Uncompressed COCO RLE counts (column-major, first run of zeros) as a bool mask."""
    values = np.arange(len(counts)) % 2
    return np.repeat(values.astype(bool), counts).reshape(width, height).T
