"""The per-image path when annotations or tiles are configured.  Runs in the worker processes.

One original is read once and decoded once into a ``Frame`` (``imaging.decode_frame``: the
same path as an image without annotations), its annotations are read once, and each window
of the frame (the whole image, or each tile of the grid) becomes a sample.  Annotations are
turned upright by the table the pixels are (``geometry.ORIENTATIONS``), carried by the
frame's ``Placement`` (built from the very numbers the pixels were cropped and resized
with), then clipped to each window: an object of which less than
``source.annotations.min_visible`` shows is dropped.  Masks are reduced once for the whole
frame and cut per window like the pixels (``imaging.cut_window``).

Like ``imaging.process``, ``process_annotated`` never raises for a bad file: it returns a
``Reject`` with a reason (``bad_annotation`` for a malformed annotation, naming its file and
line), else a tuple of ``Sample``s in grid order.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from typing import Any

import cv2
import numpy as np

from ..annotations import rle
from ..annotations.geometry import (
    Placement,
    orient_pixels,
    place,
    rounded_box,
    rounded_ring,
    to_upright,
    upright_size,
)
from ..annotations.limits import MAX_OBJECT_CLASSES, MAX_OBJECTS, too_many_objects
from ..annotations.maskpng import mask_png
from ..annotations.masks import (
    binary_patch,
    class_mask,
    polygon_patch,
    reduce_patch,
    rle_encode,
)
from ..annotations.model import ImageAnnotations, Objects, Shape, Vocabulary
from ..annotations.read import read_annotations
from ..config import Config
from ..dataset.records import Reject, Sample, Unchanged
from ..decoders import open_header, orientation
from ..errors import BadImage
from ..tiling import MAX_TILES, Tile, kept, scaled_size, tile_count
from .imaging import Frame, cut_window, decode_frame, encode_jpeg, read_source, window_pixels
from .originals import original_cap
from .plan import PlanItem

MASK_BYTES_PER_PIXEL = 6  # the class mask, a label image of a region, a comparison


@dataclass
class _Instance:
    """An object in the upright original, with its pixels when it has a mask."""

    shape: Shape
    patch: np.ndarray | None = None
    origin: tuple[int, int] = (0, 0)


def process_annotated(item: PlanItem, root: str, config: Config,
                      vocabulary: Vocabulary) -> tuple[Sample, ...] | Reject | Unchanged:
    """One original → its sample (or its tiles), annotations carried through; or a Reject."""
    relpath = item.source.relpath
    try:
        read = read_source(item, root, config.source.follow_symlinks, config.run.change_detection,
                           original_cap(config.image))
        if isinstance(read, Unchanged):
            return read
        data, info, digest = read
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Pillow's warnings on damaged files: we reject
            samples = _samples(item, root, data, config, vocabulary)
    except BadImage as exc:
        return Reject(relpath, exc.reason, exc.detail)
    except OSError as exc:
        return Reject(relpath, "unreadable", f"cannot read file: {exc.strerror or exc}")
    return tuple(replace(sample, source_size=info.st_size, source_mtime_ns=info.st_mtime_ns,
                         source_digest=digest) for sample in samples)


def _samples(item: PlanItem, root: str, data: bytes, config: Config,
             vocabulary: Vocabulary) -> list[Sample]:
    notes, image = config.source.annotations, config.image
    with open_header(data) as header:
        stored, rotation = header.size, orientation(header)
    upright = upright_size(*stored, rotation)
    extra = upright[0] * upright[1] * MASK_BYTES_PER_PIXEL if notes.has_masks else 0
    tiles = image.tiles if image.tiles.enabled else None
    if tiles is not None:
        count = tile_count(*scaled_size(*upright, tiles.scale), tiles)
        if count > MAX_TILES:  # known from the header: refused before a pixel is decoded
            raise BadImage("too_large", f"{upright[0]}x{upright[1]} at image.tiles gives "
                           f"{count:,} tiles, more than the {MAX_TILES:,} an original may have")
    frame = decode_frame(data, image, extra, tiles)
    label = item.source.label
    image_class = vocabulary.image_classes[label] \
        if 0 <= label < len(vocabulary.image_classes) else ""
    annotations = None
    if notes.has_objects:
        frame_of_notes = stored if notes.coordinates == "stored" else upright
        annotations = read_annotations(item.source.relpath, item.annotation, root, notes,
                                       config.source.follow_symlinks, frame_of_notes,
                                       image_class, notes.coco)
    cut = _Cutter(annotations, notes.coordinates == "stored", rotation, stored, upright,
                  frame.placement, vocabulary, notes.has_masks)
    original = frame.header
    base = Sample(key=item.key, relpath=item.source.relpath, split=item.split, label=label,
                  jpeg=b"", width=0, height=0, channels=1 if frame.pixels.ndim == 2 else 3,
                  original_width=original[0], original_height=original[1],
                  original_mode=original[2], original_format=original[3], source_size=0,
                  source_mtime_ns=0, source_digest="",
                  annotation_digest=annotations.digest if annotations is not None else None)
    return _windows(base, frame, cut, config)


class _Cutter:
    """The annotations of one original in the frame of its decoded (scaled) pixels, cut into
    the objects of each sample taken from them."""

    def __init__(self, annotations: ImageAnnotations | None, stored_frame: bool, rotation: int,
                 stored: tuple[int, int], upright: tuple[int, int], placement: Placement,
                 vocabulary: Vocabulary, with_mask: bool):
        self.placement, self.upright = placement, upright
        self.names = list(vocabulary.object_classes)
        self.instances: list[_Instance] = []
        full_mask = None  # the class mask at the original's resolution, when there are pixels
        if annotations is not None:
            if annotations.mask is not None and with_mask:
                full_mask = self._upright_mask(annotations, stored_frame, rotation)
                self.instances += self._components(annotations, full_mask)
            shapes = [self._instance(to_upright(shape, rotation, stored) if stored_frame
                                     else shape, rotation, stored_frame)
                      for shape in annotations.shapes]
            if with_mask and any(instance.patch is not None for instance in shapes):
                if full_mask is None:
                    full_mask = np.zeros(upright[::-1], np.uint8)
                self._paint(full_mask, shapes)
            self.instances = shapes + self.instances
        if len(self.instances) > MAX_OBJECTS:
            raise BadImage("bad_annotation", too_many_objects(len(self.instances)))
        self.mask = None  # in the frame of the decoded pixels
        if full_mask is not None:
            self.mask = class_mask(full_mask, placement)
        elif with_mask:  # nothing to reduce: an image without mask pixels
            self.mask = np.zeros(placement.size[::-1], np.uint8)
        # Instance pixels in the frame of the decoded pixels, once; cut per sample below.
        self.reduced = [reduce_patch(instance.patch, instance.origin, placement, upright)
                        if instance.patch is not None else None for instance in self.instances]

    def id_of(self, name: str) -> int:
        if name not in self.names:
            if len(self.names) >= MAX_OBJECT_CLASSES:
                raise BadImage("bad_annotation", f"object class {name!r} would be class "
                               f"{len(self.names) + 1}: a class mask holds at most "
                               f"{MAX_OBJECT_CLASSES} (one byte a pixel, 255 left for "
                               "\"ignore\")")
            self.names.append(name)
        return self.names.index(name) + 1

    def _upright_mask(self, annotations: ImageAnnotations, stored_frame: bool,
                      rotation: int) -> np.ndarray:
        """The PNG mask, upright, with this run's class ids."""
        table = np.zeros(256, np.uint8)
        for value, name in enumerate(annotations.mask_names, 1):
            table[value] = self.id_of(name)
        mask = table[annotations.mask]
        return orient_pixels(mask, rotation) if stored_frame else mask

    def _instance(self, shape: Shape, rotation: int, stored_frame: bool) -> _Instance:
        if shape.polygons:
            patch, origin = polygon_patch(shape.polygons, self.upright)
            return _Instance(shape, patch, origin)
        if shape.rle is not None:
            found = binary_patch(self._rle_pixels(shape.rle, rotation, stored_frame))
            if found is not None:
                return _Instance(shape, *found)
        return _Instance(shape)

    def _rle_pixels(self, encoded: dict[str, Any], rotation: int,
                    stored_frame: bool) -> np.ndarray:
        """An RLE's pixels; its size is the image's (checked by ``shapes_from_record``) and its
        counts are checked again before a pixel is written."""
        height, width = encoded["size"]
        try:
            runs = rle.checked(rle.counts_of(encoded["counts"], height * width), height, width)
        except rle.RleError as exc:
            raise BadImage("bad_annotation", f"an unreadable RLE ({exc})") from None
        pixels = rle.decode(runs, height, width)
        return orient_pixels(pixels, rotation) if stored_frame else pixels

    def _paint(self, full_mask: np.ndarray, instances: list[_Instance]) -> None:
        """Polygons and RLEs into the class mask, in order (a later object covers an earlier)."""
        for instance in instances:
            if instance.patch is None:
                continue
            left, top = instance.origin
            height, width = instance.patch.shape
            region = full_mask[top : top + height, left : left + width]
            region[instance.patch[: region.shape[0], : region.shape[1]] > 0] = \
                self.id_of(instance.shape.name)

    def _components(self, annotations: ImageAnnotations,
                    full_mask: np.ndarray) -> list[_Instance]:
        """The connected regions of each class of the PNG mask, as objects with boxes; a
        class's regions are counted before any of them is built (a few KB of isolated pixels
        are 250,000 regions)."""
        found: list[_Instance] = []
        for name in dict.fromkeys(annotations.mask_names):
            region = binary_patch(full_mask == self.id_of(name))
            if region is None:
                continue
            patch, (left, top) = region
            count, labels, stats, _ = cv2.connectedComponentsWithStats(patch, connectivity=8)
            if len(found) + count - 1 > MAX_OBJECTS:
                raise BadImage("bad_annotation", f"{annotations.mask_file}: "
                               f"{too_many_objects(len(found) + count - 1)} (a separate "
                               "region of the mask is an object)")
            for number in range(1, count):
                x, y, width, height, _ = stats[number].tolist()
                piece = (labels[y : y + height, x : x + width] == number).astype(np.uint8)
                box = (left + x, top + y, left + x + width, top + y + height)
                found.append(_Instance(Shape(name, box), piece, (left + x, top + y)))
        return found

    def objects(self, tile: Tile, size: tuple[int, int], placement: Placement,
                min_visible: float) -> Objects:
        """The objects of the sample showing ``tile`` of the decoded pixels as a ``size``
        window, through ``placement`` (the frame's, shifted to the window)."""
        rect = (tile.x, tile.y, *size)
        boxes, names, polygons, rles = [], [], [], []
        for instance, reduced in zip(self.instances, self.reduced, strict=True):
            # Issue 18 plugs in here: a mask object's box from its reduced pixels in the window.
            placed = place(instance.shape, placement)
            if placed is None or placed.visible < min_visible:
                continue
            boxes.append(rounded_box(placed.box))
            names.append(instance.shape.name)
            polygons.append(tuple(rounded_ring(ring) for ring in placed.polygons))
            rles.append(None if reduced is None else _instance_rle(reduced, rect))
        mask = cut_window(self.mask, tile, size, 0) if self.mask is not None else None
        return Objects(tuple(boxes), tuple(names), tuple(polygons), tuple(rles),
                       mask_png(mask) if mask is not None else None,
                       tuple(self.names) if mask is not None else (),
                       bool(mask is not None and mask.any()))


def _instance_rle(reduced: tuple[np.ndarray, tuple[int, int]],
                  rect: tuple[int, int, int, int]) -> tuple[int, ...]:
    """An instance's reduced pixels inside ``rect``, as RLE over a rect-sized sample."""
    counts, (left, top) = reduced
    x, y, width, height = rect
    canvas = np.zeros((height, width), np.uint8)
    x0, y0 = max(x, left), max(y, top)
    x1, y1 = min(x + width, left + counts.shape[1]), min(y + height, top + counts.shape[0])
    if x1 > x0 and y1 > y0:
        canvas[y0 - y : y1 - y, x0 - x : x1 - x] = \
            counts[y0 - top : y1 - top, x0 - left : x1 - left] > 0
    return rle_encode(canvas)


def _windows(base: Sample, frame: Frame, cut: _Cutter, config: Config) -> list[Sample]:
    """Every kept window of the frame as a sample, in grid order: each tile, or the whole
    image (a grid of one tile, which ``kept`` always keeps)."""
    tiles, notes = config.image.tiles, config.source.annotations
    found = [cut.objects(tile, frame.window,
                         frame.placement.shifted(tile.x, tile.y, frame.window),
                         notes.min_visible) if notes.has_objects else None
             for tile in frame.windows]
    marked = [bool(objects is not None and (len(objects) or objects.marked))
              for objects in found]
    keep = kept(list(frame.windows), marked, tiles, config.seed, base.relpath,
                notes.has_objects)
    samples = []
    for tile, objects, chosen in zip(frame.windows, found, keep, strict=True):
        if not chosen:
            continue
        sample = replace(base, jpeg=encode_jpeg(window_pixels(frame, tile, config.image),
                                                config.image),
                         width=frame.window[0], height=frame.window[1], objects=objects)
        if tiles.enabled:
            sample = replace(sample, key=f"{base.key}_r{tile.row:03d}c{tile.column:03d}",
                             tile=_tile_record(tile, frame.placement, tiles.scale))
        samples.append(sample)
    return samples


def _tile_record(tile: Tile, placement: Placement, scale: float) -> dict[str, Any]:
    """Where a tile is: grid position, rectangle in the scaled original, the scale, and the
    rectangle in the upright original's pixels."""
    x0 = (tile.x - placement.offset_x) / placement.scale_x
    y0 = (tile.y - placement.offset_y) / placement.scale_y
    x1 = (tile.x + tile.width - placement.offset_x) / placement.scale_x
    y1 = (tile.y + tile.height - placement.offset_y) / placement.scale_y
    return {"row": tile.row, "column": tile.column, "x": tile.x, "y": tile.y,
            "width": tile.width, "height": tile.height, "scale": scale,
            "original": list(rounded_box((x0, y0, x1, y1)))}
