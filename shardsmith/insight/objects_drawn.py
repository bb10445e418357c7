"""The annotated objects of packed samples, read back from their shards and drawn over
thumbnails, so a person can check the labels at a glance (``shardsmith sheet --objects``).

What is drawn is what a model is given: the boxes and class ids of the sample's metadata
(WebDataset ``KEY.json``, TFRecord ``image/object/*``) and the outline of each class's region
in the class mask (``KEY.mask.png``, ``image/segmentation/class/encoded``), one colour per
object class.  An object ``min_visible`` dropped (a crack cut at a tile's border) is drawn
dashed and named "(cut)": the sample shows it, and a model is told to ignore it or never sees
the sample.  The shards are untrusted: metadata that does not parse, boxes that are not
finite or not lists of one length, class ids outside the dataset's object classes, or a class
mask that is not a PNG of the sample's size make that sample's objects unreadable (a reason,
shown on its tile), never a failure of the sheet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from ..annotations.maskpng import class_mask
from ..dataset.formats import Record, ShardFormat, shard_format
from ..dataset.manifest import Manifest, SampleRecord
from ..errors import ShardFormatError
from ..readers.targets import detection_target
from .picks import read_each

Colour = tuple[int, int, int]
# Saturated colours, far from the grey of most inspection images and from each other.
OBJECT_COLOURS: tuple[Colour, ...] = (
    (230, 25, 75), (60, 180, 75), (0, 130, 200), (245, 130, 48), (145, 30, 180),
    (70, 240, 240), (240, 50, 230), (210, 245, 60), (255, 225, 25), (0, 128, 128),
    (170, 110, 40), (128, 0, 0))
LABEL_TEXT = (255, 255, 255)


@dataclass(frozen=True)
class PackedObjects:
    """The objects of one packed sample: boxes (x0, y0, x1, y1 in its pixels), their class
    names, and its class mask (0 background, k the class id, 255 ignore) when it has one; the
    boxes and names of the objects min_visible dropped (``cut``)."""

    boxes: tuple[tuple[float, float, float, float], ...]
    names: tuple[str, ...]
    mask: np.ndarray | None
    cut: tuple[tuple[tuple[float, float, float, float], str], ...] = ()


@dataclass(frozen=True)
class DrawnObject:
    """An object as drawn on a picture: its sample, class, colour and box (inclusive pixel
    edges on the picture)."""

    key: str
    name: str
    colour: Colour
    box: tuple[int, int, int, int]
    cut: bool = False  # dropped by min_visible: drawn dashed


def class_colour(object_classes: tuple[str, ...], name: str) -> Colour:
    """The colour of object class ``name``: by its id, so one class has one colour on every
    sheet of the dataset."""
    number = object_classes.index(name) if name in object_classes else len(object_classes)
    return OBJECT_COLOURS[number % len(OBJECT_COLOURS)]


def read_objects(directory: Path, manifest: Manifest,
                 records: list[SampleRecord]) -> dict[str, PackedObjects | str]:
    """key -> the objects of each of ``records`` read from its shard, or why they do not
    read (``picks.read_each``)."""
    classes = tuple(manifest.object_classes or ())
    fmt = shard_format(manifest.format)
    return read_each(directory, manifest, records,
                     lambda packed, sample: _objects(fmt, packed, sample, classes))


def _objects(fmt: ShardFormat, packed: Record, sample: SampleRecord,
             classes: tuple[str, ...]) -> PackedObjects | str:
    """The objects of ``packed`` as its format reads its metadata and class mask, checked as
    the readers check a target; or why they do not read."""
    try:
        target = detection_target(fmt.metadata(packed), sample.height, sample.width, False,
                                  len(classes))
        png = fmt.mask_png(packed)
        mask = None if png is None else class_mask(png, sample.width, sample.height)
    except (ValueError, ShardFormatError, RecursionError) as exc:
        return str(exc)
    boxes = tuple(tuple(float(edge) for edge in box) for box in target["boxes"].tolist())
    names = tuple(classes[int(label) - 1] for label in target["labels"])
    cut = tuple((tuple(float(edge) for edge in box), classes[int(label) - 1])
                for box, label in zip(target.get("ignore_boxes", np.zeros((0, 4))).tolist(),
                                      target.get("ignore_labels", ()), strict=True))
    return PackedObjects(boxes, names, mask, cut)  # type: ignore[arg-type]


def draw_objects(picture: Image.Image, objects: PackedObjects, key: str,
                 size: tuple[int, int], classes: tuple[str, ...],
                 font: ImageFont.ImageFont | ImageFont.FreeTypeFont) -> list[DrawnObject]:
    """Draw the class mask's outlines, then each box with its class name, over ``picture``
    (the sample of ``size`` = (width, height) scaled), each cut object's dashed and named
    "NAME (cut)"; the boxes as drawn come back."""
    width, height = size
    scale_x, scale_y = picture.width / width, picture.height / height
    if objects.mask is not None:
        _outline(picture, objects.mask, classes)
    draw = ImageDraw.Draw(picture)
    line = 2 if min(picture.size) >= 96 else 1
    drawn = []
    everything = [(box, name, False) for box, name in zip(objects.boxes, objects.names,
                                                           strict=True)]
    for box, name, cut in everything + [(box, name, True) for box, name in objects.cut]:
        colour = class_colour(classes, name)
        left = min(picture.width - 1, max(0, math.floor(box[0] * scale_x)))
        top = min(picture.height - 1, max(0, math.floor(box[1] * scale_y)))
        right = min(picture.width - 1, max(left, math.ceil(box[2] * scale_x) - 1))
        bottom = min(picture.height - 1, max(top, math.ceil(box[3] * scale_y) - 1))
        if cut:
            _dashed(draw, (left, top, right, bottom), colour, line)
        else:
            draw.rectangle((left, top, right, bottom), outline=colour, width=line)
        text = f"{name} (cut)" if cut else name
        text_box = draw.textbbox((left, top), text, font=font)
        draw.rectangle((left, top, min(picture.width - 1, text_box[2] + 2),
                        min(picture.height - 1, text_box[3] + 1)), fill=colour)
        draw.text((left + 1, top), text, font=font, fill=LABEL_TEXT)
        drawn.append(DrawnObject(key, name, colour, (left, top, right, bottom), cut))
    return drawn


def cut_drawn(drawn: list[DrawnObject]) -> str:
    """``, 2 of them cut below min_visible (dashed)``: the summary's note, or nothing."""
    cut = sum(item.cut for item in drawn)
    return f", {cut} of them cut below min_visible (dashed)" if cut else ""


DASH = 4  # pixels on, then off, along a cut object's box


def _dashed(draw: ImageDraw.ImageDraw, box: tuple[int, int, int, int], colour: Colour,
            line: int) -> None:
    """A rectangle's outline (inclusive edges, ``line`` px inward) in dashes of ``DASH``."""
    left, top, right, bottom = box
    for start in range(left, right + 1, 2 * DASH):
        end = min(right, start + DASH - 1)
        draw.rectangle((start, top, end, min(bottom, top + line - 1)), fill=colour)
        draw.rectangle((start, max(top, bottom - line + 1), end, bottom), fill=colour)
    for start in range(top, bottom + 1, 2 * DASH):
        end = min(bottom, start + DASH - 1)
        draw.rectangle((left, start, min(right, left + line - 1), end), fill=colour)
        draw.rectangle((max(left, right - line + 1), start, right, end), fill=colour)


def _outline(picture: Image.Image, mask: np.ndarray, classes: tuple[str, ...]) -> None:
    """Colour the boundary pixels of each class's region of ``mask`` (scaled to the
    picture by nearest neighbour) in the class's colour."""
    scaled = np.asarray(Image.fromarray(mask).resize(picture.size, Image.Resampling.NEAREST))
    pixels = np.array(picture)
    for value in np.unique(scaled):
        if value == 0 or value > len(classes):  # background, or 255: ignore
            continue
        region = scaled == value
        inner = region.copy()
        inner[1:, :] &= region[:-1, :]
        inner[:-1, :] &= region[1:, :]
        inner[:, 1:] &= region[:, :-1]
        inner[:, :-1] &= region[:, 1:]
        pixels[region & ~inner] = class_colour(classes, classes[int(value) - 1])
    picture.paste(Image.fromarray(pixels))
