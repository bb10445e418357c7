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

import math
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
    EPSILON,
    binary_patch,
    class_mask,
    polygon_patch,
    reduce_patch,
    rle_encode,
)
from ..annotations.model import CutObject, ImageAnnotations, Objects, Shape, Vocabulary
from ..annotations.read import read_annotations
from ..config import Config
from ..dataset.formats.metadata import too_small
from ..dataset.normal import IGNORE, objects_are_normal
from ..dataset.records import Reject, Sample, Unchanged
from ..decoders import open_header, orientation
from ..errors import BadImage
from ..storage import is_url
from ..tiling import MAX_TILES, Tile, kept, scaled_size, tile_count
from .imaging import (
    Frame,
    FramePlan,
    cut_window,
    decode_frame,
    encode_jpeg,
    read_source,
    stored_size,
    window_pixels,
)
from .originals import object_root, original_cap
from .plan import PlanItem

MASK_BYTES_PER_PIXEL = 6  # the class mask, a label image of a region, a comparison


@dataclass
class _Instance:
    """An object in the upright original, with its pixels when it has a mask (a PNG mask's
    region, an RLE, a polygon): ``pixels`` counts them, ``bounds`` is their box."""

    shape: Shape
    patch: np.ndarray | None = None
    origin: tuple[int, int] = (0, 0)
    merged: bool = False  # a box of the same defect was merged into it
    pixels: int = 0
    bounds: tuple[int, int, int, int] = (0, 0, 0, 0)

    def __post_init__(self) -> None:
        if self.patch is not None:
            self.pixels = int(np.count_nonzero(self.patch))
            if self.pixels:
                rows = np.flatnonzero(self.patch.any(axis=1))
                cols = np.flatnonzero(self.patch.any(axis=0))
                left, top = self.origin
                self.bounds = (left + int(cols[0]), top + int(rows[0]),
                               left + int(cols[-1]) + 1, top + int(rows[-1]) + 1)


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
        stored, rotation = stored_size(header), orientation(header)
    upright = upright_size(*stored, rotation)
    extra = upright[0] * upright[1] * MASK_BYTES_PER_PIXEL if notes.has_masks else 0
    tiles = image.tiles if image.tiles.enabled else None
    if tiles is not None:
        count = tile_count(*scaled_size(*upright, tiles.scale), tiles)
        if count > MAX_TILES:  # known from the header: refused before a pixel is decoded
            raise BadImage("too_large", f"{upright[0]}x{upright[1]} at image.tiles gives "
                           f"{count:,} tiles, more than the {MAX_TILES:,} an original may have")
    frame = decode_frame(data, image, extra, tiles)
    annotations = image_annotations(item, root, config, vocabulary, stored, upright)
    found = window_objects(annotations, stored, rotation, frame, config, vocabulary)
    original = frame.header
    base = Sample(key=item.key, relpath=item.source.relpath, split=item.split,
                  label=item.source.label,
                  jpeg=b"", width=0, height=0, channels=1 if frame.pixels.ndim == 2 else 3,
                  original_width=original[0], original_height=original[1],
                  original_mode=original[2], original_format=original[3], source_size=0,
                  source_mtime_ns=0, source_digest="",
                  annotation_digest=annotations.digest if annotations is not None else None)
    return _windows(base, frame, found, config)


def image_annotations(item: PlanItem, root: str, config: Config, vocabulary: Vocabulary,
                      stored: tuple[int, int], upright: tuple[int, int]
                      ) -> ImageAnnotations | None:
    """The annotations of ``item``'s original, in the frame its files describe (as stored,
    or upright: ``coordinates``); None when no boxes, polygons or masks are configured."""
    notes = config.source.annotations
    if not notes.has_objects:
        return None
    label = item.source.label
    image_class = vocabulary.image_classes[label] \
        if 0 <= label < len(vocabulary.image_classes) else ""
    frame_of_notes = stored if notes.coordinates == "stored" else upright
    # A bucket source: its annotation objects are read with this process's client.
    where = object_root(root) if is_url(root) else root
    return read_annotations(item.source.relpath, item.annotation, where, notes,
                            config.source.follow_symlinks, frame_of_notes, image_class,
                            notes.coco)


def window_objects(annotations: ImageAnnotations | None, stored: tuple[int, int],
                   rotation: int, plan: FramePlan | Frame, config: Config,
                   vocabulary: Vocabulary) -> list[Objects | None]:
    """The objects (and class mask) of each window of ``plan``, in grid order; None for
    each when no boxes, polygons or masks are configured.

    A function of the original's header facts (its stored size and EXIF orientation; the
    decode scale is in ``plan``, see ``imaging.plan_frame``), its annotations and the
    config: no pixel of the original is needed, so a dataset's objects and masks can be
    derived again while its JPEG bytes are copied.
    """
    notes = config.source.annotations
    if not notes.has_objects:
        return [None for _ in plan.windows]
    upright = upright_size(*stored, rotation)
    cut = _Cutter(annotations, notes.coordinates == "stored", rotation, stored, upright,
                  plan.placement, vocabulary, notes.has_masks, notes.merge_iou)
    return [cut.objects(tile, plan.window,
                        plan.placement.shifted(tile.x, tile.y, plan.window), notes.min_visible)
            for tile in plan.windows]


class _Cutter:
    """The annotations of one original in the frame of its decoded (scaled) pixels, cut into
    the objects of each sample taken from them."""

    def __init__(self, annotations: ImageAnnotations | None, stored_frame: bool, rotation: int,
                 stored: tuple[int, int], upright: tuple[int, int], placement: Placement,
                 vocabulary: Vocabulary, with_mask: bool, merge_iou: float = 0.0):
        self.placement, self.upright = placement, upright
        self.names = list(vocabulary.object_classes)
        self.instances: list[_Instance] = []
        full_mask = None  # the class mask at the original's resolution, when there are pixels
        if annotations is not None:
            if annotations.mask is not None and with_mask:
                full_mask = self._upright_mask(annotations, stored_frame, rotation)
                self.instances += self._components(annotations, full_mask)
            made = (self._instance(to_upright(shape, rotation, stored) if stored_frame
                                   else shape, rotation, stored_frame)
                    for shape in annotations.shapes)
            shapes = [instance for instance in made if instance is not None]
            if with_mask and any(instance.patch is not None for instance in shapes):
                if full_mask is None:
                    full_mask = np.zeros(upright[::-1], np.uint8)
                self._paint(full_mask, shapes)
            self.instances = merge_boxes(shapes + self.instances, merge_iou)
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

    def _instance(self, shape: Shape, rotation: int, stored_frame: bool) -> _Instance | None:
        """The shape as an instance; None for a polygon or RLE without a pixel (not there)."""
        if shape.polygons:
            instance = _Instance(shape, *polygon_patch(shape.polygons, self.upright))
            return instance if instance.pixels else None
        if shape.rle is not None:
            found = binary_patch(self._rle_pixels(shape.rle, rotation, stored_frame))
            return _Instance(shape, *found) if found is not None else None
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
        window, through ``placement`` (the frame's, shifted to the window).

        An object with pixels is there when one of its pixels overlaps the window (at the
        original's resolution); it shows the share of its pixels that do, and its box is the
        box of its marked pixels in the sample.  A box-only object shows the share of its box
        (``geometry.place``); one whose stored box is under the exports' precision
        (``metadata.too_small``) is not there.  The class mask keeps the pixels of the objects
        kept; those of an object dropped by ``min_visible`` become ``IGNORE`` (unless a kept
        object marks them).
        """
        rect = (tile.x, tile.y, *size)
        seen = _original_window(placement)
        boxes, names, polygons, rles = [], [], [], []
        kept_pixels = dropped_pixels = None
        merged = 0
        cut: list[CutObject] = []
        for instance, reduced in zip(self.instances, self.reduced, strict=True):
            if instance.patch is None:
                placed = place(instance.shape, placement)
                box = rounded_box(placed.box) if placed is not None else None
                if box is None or too_small(box, *size, steps=1):
                    # not there: a box of which the record keeps less than an export writes
                    # (a label ending 0.0004 px past a tile's border) shows no part of it
                    continue
                if placed.visible < min_visible:
                    cut.append(CutObject(instance.shape.name, box))
                    continue
                boxes.append(box)
                names.append(instance.shape.name)
                polygons.append(())
                rles.append(None)
                continue
            inside = _pixels_inside(instance, seen)
            if not inside:
                continue  # no pixel of it in the window: it is not there
            canvas = _instance_canvas(reduced, rect)
            if canvas is None:
                continue
            if inside / instance.pixels < min_visible:
                cut.append(CutObject(instance.shape.name, _extent(canvas), rle_encode(canvas)))
                dropped_pixels = canvas if dropped_pixels is None else dropped_pixels | canvas
                continue
            kept_pixels = canvas if kept_pixels is None else kept_pixels | canvas
            boxes.append(_extent(canvas))
            names.append(instance.shape.name)
            placed = place(instance.shape, placement) if instance.shape.polygons else None
            polygons.append(tuple(rounded_ring(ring) for ring in placed.polygons)
                            if placed is not None else ())
            rles.append(rle_encode(canvas))
            merged += instance.merged
        mask = cut_window(self.mask, tile, size, 0) if self.mask is not None else None
        if mask is not None and dropped_pixels is not None:
            ignored = dropped_pixels if kept_pixels is None else dropped_pixels & ~kept_pixels
            mask[ignored] = IGNORE
        marked = bool(mask is not None and ((mask > 0) & (mask != IGNORE)).any())
        return Objects(tuple(boxes), tuple(names), tuple(polygons), tuple(rles),
                       mask_png(mask) if mask is not None else None,
                       tuple(self.names) if mask is not None else (), marked, merged, len(cut),
                       tuple(cut))


def merge_boxes(instances: list[_Instance], threshold: float) -> list[_Instance]:
    """One object a defect: each instance with pixels takes in the box-only instance of its
    class whose IoU with its pixels' box is highest and at least ``threshold`` (0: never),
    one to one, greedy by IoU (ties: the earlier instance, then the earlier box), so the same
    annotations always merge the same way.  The merged instance keeps its pixels (its box
    comes from them) and its place in the list; the box leaves."""
    if threshold <= 0:
        return instances
    pairs: list[tuple[float, int, int]] = []
    by_class: dict[str, list[int]] = {}
    for number, instance in enumerate(instances):
        if instance.patch is None:
            by_class.setdefault(instance.shape.name, []).append(number)
    if not by_class:
        return instances
    corners = {name: np.array([instances[number].shape.box for number in numbers], np.float64)
               for name, numbers in by_class.items()}
    for number, instance in enumerate(instances):
        if instance.patch is None or instance.shape.name not in by_class:
            continue
        overlaps = _box_iou(instance.bounds, corners[instance.shape.name])
        for at in np.flatnonzero(overlaps >= threshold).tolist():
            pairs.append((-float(overlaps[at]), number, by_class[instance.shape.name][at]))
    pairs.sort()
    taken: set[int] = set()
    gone: set[int] = set()
    for _, number, box in pairs:
        if number in taken or box in gone:
            continue
        taken.add(number)
        gone.add(box)
    return [replace(instance, merged=True) if number in taken else instance
            for number, instance in enumerate(instances) if number not in gone]


def _box_iou(box: tuple[int, int, int, int], others: np.ndarray) -> np.ndarray:
    """IoU of one box with each row (x0, y0, x1, y1) of ``others``."""
    width = np.clip(np.minimum(others[:, 2], box[2]) - np.maximum(others[:, 0], box[0]), 0,
                    None)
    height = np.clip(np.minimum(others[:, 3], box[3]) - np.maximum(others[:, 1], box[1]), 0,
                     None)
    common = width * height
    areas = (np.clip(others[:, 2] - others[:, 0], 0, None)
             * np.clip(others[:, 3] - others[:, 1], 0, None))
    union = (box[2] - box[0]) * (box[3] - box[1]) + areas - common
    return np.divide(common, union, out=np.zeros_like(common), where=union > 0)


def _original_window(placement: Placement) -> tuple[float, float, float, float]:
    """The part of the upright original a sample shows, in the original's pixels."""
    x0, y0, x1, y1 = placement.window
    return ((x0 - placement.offset_x) / placement.scale_x,
            (y0 - placement.offset_y) / placement.scale_y,
            (x1 - placement.offset_x) / placement.scale_x,
            (y1 - placement.offset_y) / placement.scale_y)


def _pixels_inside(instance: _Instance, window: tuple[float, float, float, float]) -> int:
    """How many of the instance's pixels overlap ``window`` (original pixels, continuous
    coordinates; an area that only touches a pixel's edge does not overlap it, as in
    ``masks``)."""
    x0, y0, x1, y1 = window
    left, top, right, bottom = instance.bounds
    low_x, high_x = max(left, math.floor(x0 + EPSILON)), min(right, math.ceil(x1 - EPSILON))
    low_y, high_y = max(top, math.floor(y0 + EPSILON)), min(bottom, math.ceil(y1 - EPSILON))
    if high_x <= low_x or high_y <= low_y:
        return 0
    origin_x, origin_y = instance.origin
    return int(np.count_nonzero(instance.patch[low_y - origin_y : high_y - origin_y,
                                               low_x - origin_x : high_x - origin_x]))


def _instance_canvas(reduced: tuple[np.ndarray, tuple[int, int]],
                     rect: tuple[int, int, int, int]) -> np.ndarray | None:
    """An instance's reduced pixels inside ``rect`` as a rect-sized boolean mask; None when
    none of them is there."""
    counts, (left, top) = reduced
    x, y, width, height = rect
    x0, y0 = max(x, left), max(y, top)
    x1, y1 = min(x + width, left + counts.shape[1]), min(y + height, top + counts.shape[0])
    if x1 <= x0 or y1 <= y0:
        return None
    part = counts[y0 - top : y1 - top, x0 - left : x1 - left] > 0
    if not part.any():
        return None
    canvas = np.zeros((height, width), bool)
    canvas[y0 - y : y1 - y, x0 - x : x1 - x] = part
    return canvas


def _extent(canvas: np.ndarray) -> tuple[float, float, float, float]:
    """The box (x0, y0, x1, y1) of a sample mask's marked pixels, edges included."""
    rows, cols = np.flatnonzero(canvas.any(axis=1)), np.flatnonzero(canvas.any(axis=0))
    return float(cols[0]), float(rows[0]), float(cols[-1] + 1), float(rows[-1] + 1)


def _windows(base: Sample, frame: Frame, found: list[Objects | None],
             config: Config) -> list[Sample]:
    """Every kept window of the frame as a sample, in grid order: each tile, or the whole
    image (a grid of one tile, which ``kept`` always keeps)."""
    tiles, notes = config.image.tiles, config.source.annotations
    # a tile showing a defect, even one cut below min_visible, is never drawn as background
    marked = [not objects_are_normal(objects) for objects in found]
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
                             tile=tile_record(tile, frame.placement, tiles.scale))
        samples.append(sample)
    return samples


def tile_record(tile: Tile, placement: Placement, scale: float) -> dict[str, Any]:
    """Where a tile is: grid position, rectangle in the scaled original, the scale, and the
    rectangle in the upright original's pixels."""
    x0 = (tile.x - placement.offset_x) / placement.scale_x
    y0 = (tile.y - placement.offset_y) / placement.scale_y
    x1 = (tile.x + tile.width - placement.offset_x) / placement.scale_x
    y1 = (tile.y + tile.height - placement.offset_y) / placement.scale_y
    return {"row": tile.row, "column": tile.column, "x": tile.x, "y": tile.y,
            "width": tile.width, "height": tile.height, "scale": scale,
            "original": list(rounded_box((x0, y0, x1, y1)))}
