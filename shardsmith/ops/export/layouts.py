"""The files of each layout: per sample (an image, its labels, its mask) and per split (YOLO's
``data.yaml``, COCO's instances files).

Values in, values out: a sample's metadata, JPEG and class mask become (relative path, bytes)
pairs; the caller writes them.  A malformed sample (metadata that does not fit the sample) is a
ValueError the caller names with its shard and key.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import msgspec
import numpy as np
import yaml
from pycocotools import mask as coco_mask

from ...annotations import polygons
from ...dataset.formats.metadata import MAX_SIDE, box_problem, rle_counts
from ...dataset.manifest import CutRecord
from ...dataset.normal import IGNORE, is_normal
from ...errors import ConfigError, ShardFormatError
from ...readers.sample_jpeg import SampleJpegError, check_header, decode_sample
from ...text import shown
from . import objects
from .record import CocoObject, ExportedSample, ExportOptions

NORMAL_FOLDER = "good"  # MVTec's name for normal images, whatever --normal calls them
# the mvtec folder of a sample whose only defect was cut below min_visible, where an index of
# an earlier release does not say of which class
UNKNOWN_DEFECT = "cut_defect"
JPEG, LABEL, MASK = ".jpg", ".txt", ".png"
# anomalib's MVTecAD reads ``.png`` images only (anomalib 2.7, datasets/image/mvtecad.py)
MVTEC_IMAGE = ".png"


def safe_folder_name(name: str) -> bool:
    """A class name usable as one folder: not empty, ``.`` or ``..``, no ``/``, NUL or
    control character, at most 255 bytes."""
    return bool(name) and name not in (".", "..") and "/" not in name \
        and not any(ord(char) < 32 or ord(char) == 127 for char in name) \
        and len(name.encode("utf-8", "surrogateescape")) <= 255


def same_folder_key(name: str) -> str:
    """What a share makes of a folder name when it compares two: case ignored (SMB, macOS),
    composed and decomposed accents alike (macOS stores ``café`` decomposed, NFD; a name
    written in NFC finds it), trailing dots and spaces dropped (SMB: ``scratch.`` and
    ``scratch`` are one folder).  Case is folded one character at a time, as those file
    systems do (Unicode's simple case folding): ``straße`` and ``strasse`` stay two folders
    there, so they are two here (full folding, ``str.casefold``, makes ``ß`` ``ss``)."""
    folded = "".join(map(_simple_fold, unicodedata.normalize("NFD", name)))
    return unicodedata.normalize("NFC", folded).rstrip(". ")


def _simple_fold(char: str) -> str:
    """``char`` case-folded to one character (``Σ``, ``ς`` -> ``σ``; ``ẞ`` -> ``ß``), or
    itself where only a longer mapping exists."""
    for folded in (char.casefold(), char.lower()):
        if len(folded) == 1:
            return folded
    return char


def check_folder_names(names: Iterable[str], what: str, why: str,
                       reserved: str | None = None) -> None:
    """Every name can be a folder of its own, and no two become one folder on a share that
    ignores case, Unicode form or trailing dots and spaces (SMB, macOS; ``same_folder_key``):
    ConfigError naming the first that cannot."""
    seen: dict[str, str] = {}
    for name in dict.fromkeys(names):
        if not safe_folder_name(name):
            raise ConfigError(f"{what} {shown(name)} cannot be a folder name (empty, '.', "
                              "'..', with '/', NUL or a control character, or over 255 "
                              f"bytes): {why}")
        key = same_folder_key(name)
        if reserved is not None and key == same_folder_key(reserved):
            raise ConfigError(f"{what} {shown(name)}: the folder {reserved!r} holds the "
                              f"normal images: {why}")
        other = seen.setdefault(key, name)
        if other != name:
            raise ConfigError(f"{what}es {shown(other)} and {shown(name)} differ only in "
                              "case, accent encoding (NFC/NFD) or trailing dots and spaces: "
                              f"one folder on a share that ignores those (SMB, macOS); {why}")


def defect_names(classes: tuple[str, ...], object_classes: tuple[str, ...] | None,
                 normal: str) -> list[str]:
    """The folder names the mvtec layout may give abnormal samples: the image classes but the
    normal one, and the object classes (a normal-class sample with objects)."""
    return [name for name in classes if name != normal] + list(object_classes or ()) + (
        [UNKNOWN_DEFECT] if object_classes else [])


@dataclass
class SampleObject:
    """One object of a sample, its instance mask decoded only when a layout asks for it."""

    box: list[float]
    label: int
    name: str
    rings: list[list[float]]
    rle: dict | None
    fallback: np.ndarray | None  # an old TFRecord: class-mask pixels of its class in its box
    height: int
    width: int

    @cached_property
    def mask(self) -> np.ndarray | None:
        if self.rle is not None:
            return objects.rle_mask(self.rle, self.height, self.width)
        return self.fallback

    def pixel_count(self) -> int | None:
        if self.rle is not None:
            return sum(self.rle["counts"][1::2])
        return None if self.fallback is None else int(self.fallback.sum())


@dataclass
class Sample:
    """What a layout needs of one packed sample."""

    key: str
    split: str
    class_name: str
    width: int
    height: int
    jpeg: bytes
    objects: list[SampleObject] = field(default_factory=list)
    class_mask: np.ndarray | None = None
    # the objects min_visible dropped, where the sample index says where they are, and how
    # many it dropped (an index of an earlier release may count them without saying where)
    cut: list[SampleObject] = field(default_factory=list)
    cut_count: int = 0

    def is_normal(self) -> bool:
        """No defect in it, kept or cut (``dataset.normal``)."""
        return is_normal(len(self.objects), self.cut_count,
                         self.class_mask is not None and bool((self.class_mask == IGNORE).any()))


def cut_objects(cut: Iterable[CutRecord], object_classes: tuple[str, ...] | None,
                height: int, width: int) -> list[SampleObject]:
    """The objects min_visible dropped, from their sample index records; ValueError for one
    that does not fit the sample."""
    found = []
    for item in cut:
        if object_classes is None or not 1 <= item.label <= len(object_classes):
            raise ValueError(f"cut object class id {item.label} is not one of the dataset's")
        problem = box_problem(item.box, width, height)
        if problem is not None:
            raise ValueError(f"a cut object's {problem}")
        rle = None
        if item.rle is not None:
            try:
                counts = rle_counts(item.rle.encode("ascii"), height, width)
            except (UnicodeEncodeError, ShardFormatError) as exc:
                raise ValueError(f"a cut object's RLE: {exc}") from None
            rle = {"size": [height, width], "counts": counts}
        found.append(SampleObject([float(v) for v in item.box], item.label,
                                  object_classes[item.label - 1], [], rle, None, height,
                                  width))
    return found


def parse_sample(key: str, split: str, class_name: str, metadata: dict, jpeg: bytes,
                 mask_png: bytes | None, object_classes: tuple[str, ...] | None,
                 on_fallback: Callable[[], None]) -> Sample:
    """A packed sample's metadata checked and turned into objects; ValueError saying what
    does not fit."""
    width, height = metadata.get("width"), metadata.get("height")
    if not (isinstance(width, int) and isinstance(height, int) and 0 < width <= 1 << 20
            and 0 < height <= 1 << 20):
        raise ValueError("its width and height are not positive integers")
    try:
        check_header(jpeg, expect=(height, width))
    except SampleJpegError as exc:
        raise ValueError(str(exc)) from None
    sample = Sample(key, split, class_name, width, height, jpeg)
    if mask_png is not None:
        sample.class_mask = objects.class_pixels(mask_png)
        if sample.class_mask.shape != (height, width):
            raise ValueError("its class mask is not the sample's size")
    if object_classes is None:
        return sample
    boxes, labels = metadata.get("boxes", []), metadata.get("labels", [])
    polygons = metadata.get("polygons") or [[] for _ in boxes]
    if not (isinstance(boxes, list) and isinstance(labels, list) and isinstance(polygons, list)
            and len(boxes) == len(labels) == len(polygons)):
        raise ValueError("its boxes, labels and polygons do not pair up")
    has_rle = "rle" in metadata
    rles = metadata["rle"] if has_rle else [None] * len(boxes)
    if not isinstance(rles, list) or len(rles) != len(boxes):
        raise ValueError("its instance masks do not pair up with its boxes")
    fallback: list[np.ndarray | None] = [None] * len(boxes)
    if not has_rle and boxes:
        on_fallback()
        fallback = objects.fallback_masks(boxes, labels, sample.class_mask, height, width)
    for box, label, rings, rle, spare in zip(boxes, labels, polygons, rles, fallback,
                                             strict=True):
        if not (isinstance(box, list) and len(box) == 4 and all(
                isinstance(value, (int, float)) and math.isfinite(value) for value in box)):
            raise ValueError(f"box {str(box)[:40]} is not four numbers")
        problem = box_problem(box, width, height)
        if problem is not None:
            raise ValueError(problem)
        if not (isinstance(label, int) and 1 <= label <= len(object_classes)):
            raise ValueError(f"object class id {str(label)[:20]} is not one of the dataset's")
        if not (isinstance(rings, list) and all(isinstance(ring, list) and len(ring) % 2 == 0
                                                and all(isinstance(v, (int, float))
                                                        and math.isfinite(v) for v in ring)
                                                for ring in rings)):
            raise ValueError("a polygon is not a list of x, y numbers")
        if rle is not None and not isinstance(rle, dict):
            raise ValueError("an instance mask is not an RLE")
        sample.objects.append(SampleObject([float(v) for v in box], label,
                                           object_classes[label - 1],
                                           [[float(v) for v in ring] for ring in rings], rle,
                                           spare, height, width))
    # An instance mask is decoded when a layout asks for it (``SampleObject.mask``): its runs
    # were checked with the metadata (``checked_metadata``: sizes, counts covering the
    # sample), and a mask that fails anyway fails inside ``sample_files``, named by its
    # sample.  COCO takes an RLE from its counts: the mask of each object was decoded for
    # nothing (62 us for a 1024 x 1024 mask of 501 runs, timeit).
    return sample


def sample_files(options: ExportOptions, sample: Sample) -> tuple[list[tuple[str, bytes]],
                                                                 tuple[CocoObject, ...] | None]:
    """The files of ``sample`` in the layout (relative path, bytes), and its COCO objects."""
    key, split = sample.key, sample.split
    if options.layout == "coco":
        return [(f"images/{split}/{key}{JPEG}", sample.jpeg)], coco_objects(
            sample, bool(options.box_polygons))
    if options.layout == "anomalib":
        return anomalib_files(options, sample), None
    if options.task == "classify":
        return [(f"{split}/{sample.class_name}/{key}{JPEG}", sample.jpeg)], None
    lines = yolo_lines(sample, options.task == "segment")
    return [(f"images/{split}/{key}{JPEG}", sample.jpeg),
            (f"labels/{split}/{key}{LABEL}", "".join(lines).encode("ascii"))], None


def _clip(value: float) -> float:
    return min(1.0, max(0.0, value))


def yolo_lines(sample: Sample, segment: bool) -> list[str]:
    """One line per object: ``CLASS cx cy w h`` (detect) or ``CLASS x1 y1 ...`` (segment),
    normalised, CLASS counted from 0."""
    width, height = sample.width, sample.height
    lines = []
    for item in sample.objects + sample.cut:  # cut objects only with --keep-cut
        if segment:
            ring = polygons.object_ring(item.box, item.rings, item.mask)
            coordinates = " ".join(
                f"{_clip(value / (width if index % 2 == 0 else height)):.6f}"
                for index, value in enumerate(ring))
            lines.append(f"{item.label - 1} {coordinates}\n")
        else:
            x0, y0, x1, y1 = (_clip(item.box[0] / width), _clip(item.box[1] / height),
                              _clip(item.box[2] / width), _clip(item.box[3] / height))
            lines.append(f"{item.label - 1} {(x0 + x1) / 2:.6f} {(y0 + y1) / 2:.6f} "
                         f"{x1 - x0:.6f} {y1 - y0:.6f}\n")
    return lines


def coco_objects(sample: Sample, box_polygons: bool = False) -> tuple[CocoObject, ...]:
    """Each object as a COCO annotation: its polygons when it has them, else its RLE, else
    (an object with a box only) no segmentation at all, or its box as a polygon with
    ``box_polygons``; ``area`` the pixels of its mask (of its polygons when it has no mask),
    the box's area for a box-only object."""
    found = []
    for item in sample.objects + sample.cut:  # cut objects only with --keep-cut
        x0, y0, x1, y1 = item.box
        bbox = (round(x0, 3), round(y0, 3), round(x1 - x0, 3), round(y1 - y0, 3))
        rings = tuple(tuple(ring) for ring in item.rings if len(ring) >= 6)
        pixels = item.pixel_count()
        if pixels is None and rings:
            encoded = coco_mask.merge(coco_mask.frPyObjects(
                [list(ring) for ring in rings], sample.height, sample.width))
            pixels = int(coco_mask.area(encoded))
        rle = None
        if not rings and item.rle is not None:
            encoded = coco_mask.frPyObjects(
                {"size": [sample.height, sample.width], "counts": list(item.rle["counts"])},
                sample.height, sample.width)
            rle = encoded["counts"].decode("ascii")
        elif not rings and item.mask is not None and pixels:
            rle = objects.compressed(item.mask)
        elif not rings and box_polygons:
            rings = (tuple(polygons.box_ring(item.box)),)
        area = float(pixels) if pixels else round((x1 - x0) * (y1 - y0), 3)
        found.append(CocoObject(item.label, bbox, area, (rings or None) if rle is None else None,
                                rle))
    return tuple(found)


def is_abnormal(options: ExportOptions, sample: Sample) -> bool:
    """Abnormal: it shows a defect (an object, kept or cut: ``dataset.normal``), or its image
    class is not the normal one."""
    return not sample.is_normal() or (bool(sample.class_name)
                                      and sample.class_name != options.normal)


def defect_name(options: ExportOptions, sample: Sample) -> str:
    """The mvtec folder of an abnormal sample: its image class, else its first object's
    class (kept, else cut); a cut the index does not locate (an earlier release):
    ``UNKNOWN_DEFECT``."""
    if sample.class_name and sample.class_name != options.normal:
        return sample.class_name
    found = sample.objects or sample.cut
    return found[0].name if found else UNKNOWN_DEFECT


def anomalib_files(options: ExportOptions, sample: Sample) -> list[tuple[str, bytes]]:
    key = sample.key
    mvtec = options.anomalib_layout == "mvtec"
    if not is_abnormal(options, sample):
        if mvtec:
            where = "train" if sample.split == "train" else "test"
            return [(f"{where}/{NORMAL_FOLDER}/{key}{MVTEC_IMAGE}", png_image(sample))]
        where = "normal" if sample.split == "train" else "normal_test"
        return [(f"{where}/{key}{JPEG}", sample.jpeg)]
    shown = sample.objects + sample.cut
    boxes = [item.box for item in shown]
    masks = [item.mask for item in shown]
    mask = objects.png(objects.anomaly_mask(sample.class_mask, boxes, masks, sample.height,
                                            sample.width))
    if mvtec:
        defect = defect_name(options, sample)
        if not safe_folder_name(defect) or defect == NORMAL_FOLDER:
            raise ValueError(f"its defect class {defect!r} cannot be an MVTec folder name")
        return [(f"test/{defect}/{key}{MVTEC_IMAGE}", png_image(sample)),
                (f"ground_truth/{defect}/{key}_mask{MASK}", mask)]
    return [(f"abnormal/{key}{JPEG}", sample.jpeg), (f"mask/{key}{MASK}", mask)]


def png_image(sample: Sample) -> bytes:
    """The sample's JPEG decoded and written lossless as PNG (gray stays one channel)."""
    try:
        pixels = decode_sample(sample.jpeg, "KEEP", expect=(sample.height, sample.width))
    except SampleJpegError as exc:
        raise ValueError(str(exc)) from None
    if pixels.shape[2] == 1:
        return objects.png(pixels[:, :, 0])
    return objects.png(np.ascontiguousarray(pixels[:, :, ::-1]))  # OpenCV writes BGR


# A re-export asks for every key's id twice (the collision check, the instances files): a
# hit is ~0.1 us, a sha256 ~2 us (10,000 keys: 0.04 s of a 0.6 s re-export, profiled).
@lru_cache(maxsize=1 << 18)
def coco_image_id(key: str) -> int:
    """The first 53 bits of sha256(key): stable across versions, exact as a JSON double."""
    return int(hashlib.sha256(key.encode("ascii")).hexdigest()[:14], 16) >> 3


def shared_files(options: ExportOptions, object_classes: tuple[str, ...] | None,
                 splits: list[str], samples: list[ExportedSample], folder: str,
                 warn: Callable[[str], None]) -> list[tuple[str, bytes]]:
    """The split-wide files: YOLO's ``data.yaml`` (detect, segment), COCO's instances files."""
    if options.layout == "yolo" and options.task != "classify":
        return [("data.yaml", data_yaml(object_classes or (), splits, folder, warn))]
    if options.layout == "coco":
        return [(f"annotations/instances_{split}.json",
                 instances(object_classes or (), [s for s in samples if s.split == split]))
                for split in splits]
    return []


def data_yaml(object_classes: tuple[str, ...], splits: list[str], folder: str,
              warn: Callable[[str], None]) -> bytes:
    """Ultralytics' dataset file: an absolute ``path`` (it resolves a relative one against the
    working directory), the split folders, ``names`` in id order."""
    train = "train" if "train" in splits else splits[0]
    if train != "train":
        warn(f"no train split: data.yaml trains on {train}")
    val = next((name for name in ("val", "test") if name in splits), None)
    if val is None:
        val = train
        warn(f"no val or test split: data.yaml validates on {train}")
    document: dict = {"path": folder, "train": f"images/{train}", "val": f"images/{val}"}
    if "test" in splits:
        document["test"] = "images/test"
    document["names"] = dict(enumerate(object_classes))
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True).encode("utf-8")


class _Image(msgspec.Struct):
    id: int
    file_name: str
    width: int
    height: int


class _Annotation(msgspec.Struct):
    id: int
    image_id: int
    category_id: int
    bbox: tuple[float, ...]
    area: float
    segmentation: object  # left out (UNSET) for an object with a box only
    iscrowd: int = 0


# Structs in one msgspec encode: 9,000 images of 0 to 2 objects in 47 to 100 ms, where dicts
# through json.dumps took 100 to 150 ms (the file is made again at each re-export).
# Numbers parse to the same values; msgspec writes a float's exponent as 1e16, not 1e+16.
_INSTANCES_ENCODER = msgspec.json.Encoder()


def instances(object_classes: tuple[str, ...], samples: list[ExportedSample]) -> bytes:
    """A COCO instances file: images in key order, annotations numbered from 1 in image order,
    the categories in id order."""
    images, annotations = [], []
    for sample in sorted(samples, key=lambda s: s.key):
        image_id = coco_image_id(sample.key)
        images.append(_Image(image_id, f"{sample.key}{JPEG}", sample.width, sample.height))
        for item in sample.coco or ():
            segmentation: object
            if item.polygons is not None:
                segmentation = item.polygons
            elif item.rle is not None:
                segmentation = {"size": [sample.height, sample.width], "counts": item.rle}
            else:
                segmentation = msgspec.UNSET
            annotations.append(_Annotation(len(annotations) + 1, image_id, item.category_id,
                                           item.bbox, item.area, segmentation))
    categories = [{"id": number, "name": name, "supercategory": "defect"}
                  for number, name in enumerate(object_classes, 1)]
    document = {"images": images, "annotations": annotations, "categories": categories}
    encoded = _INSTANCES_ENCODER.encode(document)
    if not encoded.isascii():  # a class name beyond ASCII: escaped, as json.dumps writes it
        # (a reader opening the file in a legacy locale's encoding reads it the same)
        encoded = json.dumps(json.loads(encoded), separators=(",", ":")).encode("ascii")
    return encoded + b"\n"


KEY = re.compile(r"[A-Za-z0-9_-]{1,128}")


def layout_paths(options: ExportOptions, key: str, split: str, classes: tuple[str, ...],
                 object_classes: tuple[str, ...] | None) -> list[tuple[str, ...]]:
    """Every list of files the layout can give the sample ``key`` of ``split``: a record
    naming others is not one this release wrote."""
    if options.layout == "coco":
        return [(f"images/{split}/{key}{JPEG}",)]
    if options.layout == "yolo" and options.task == "classify":
        return [(f"{split}/{name}/{key}{JPEG}",) for name in classes]
    if options.layout == "yolo":
        return [(f"images/{split}/{key}{JPEG}", f"labels/{split}/{key}{LABEL}")]
    if options.anomalib_layout == "mvtec":
        normal = [(f"{where}/{NORMAL_FOLDER}/{key}{MVTEC_IMAGE}",) for where in ("train", "test")]
        return normal + [(f"test/{defect}/{key}{MVTEC_IMAGE}",
                          f"ground_truth/{defect}/{key}_mask{MASK}")
                         for defect in defect_names(classes, object_classes,
                                                    options.normal or "")]
    return [(f"normal/{key}{JPEG}",), (f"normal_test/{key}{JPEG}",),
            (f"abnormal/{key}{JPEG}", f"mask/{key}{MASK}")]


def paths_fit(options: ExportOptions, classes: tuple[str, ...],
              object_classes: tuple[str, ...] | None) -> Callable[[str, str, tuple[str, ...]],
                                                                  bool]:
    """A test of a sample's recorded paths: ``fits(key, split, paths)`` when ``paths`` are
    files the layout gives the sample ``key`` of ``split`` (a sound key and split), as
    ``layout_paths`` lists them.  The detect, segment and coco layouts give a sample one list
    of files, compared whole without building the lists; the classify and mvtec layouts a
    list per class, whose folder is read off the path and looked up in the classes' set,
    made once (a list per sample made an up-to-date classify re-export of 8,000 samples in
    10,000 classes take 10 to 12 s instead of 0.4 s: docs/performance.md, "Export")."""
    if options.layout == "coco":
        return lambda key, split, paths: paths == (f"images/{split}/{key}{JPEG}",)
    if options.layout == "yolo" and options.task != "classify":
        return lambda key, split, paths: paths == (f"images/{split}/{key}{JPEG}",
                                                   f"labels/{split}/{key}{LABEL}")
    if options.layout == "yolo":
        names = frozenset(classes)
        return lambda key, split, paths: len(paths) == 1 and _folder_between(
            paths[0], f"{split}/", f"/{key}{JPEG}") in names
    if options.anomalib_layout == "mvtec":
        defects = frozenset(defect_names(classes, object_classes, options.normal or ""))

        def fits(key: str, split: str, paths: tuple[str, ...]) -> bool:
            if len(paths) == 1:
                return paths[0] in (f"train/{NORMAL_FOLDER}/{key}{MVTEC_IMAGE}",
                                    f"test/{NORMAL_FOLDER}/{key}{MVTEC_IMAGE}")
            if len(paths) != 2:
                return False
            defect = _folder_between(paths[0], "test/", f"/{key}{MVTEC_IMAGE}")
            return defect in defects and paths[1] == f"ground_truth/{defect}/{key}_mask{MASK}"

        return fits
    return lambda key, split, paths: paths in layout_paths(options, key, split, classes,
                                                           object_classes)


def _folder_between(path: str, head: str, tail: str) -> str | None:
    """What lies between ``head`` and ``tail`` in ``path`` (a class's folder), None where
    ``path`` does not begin with the one and end with the other."""
    if len(path) < len(head) + len(tail) or not (path.startswith(head)
                                                  and path.endswith(tail)):
        return None
    return path[len(head):len(path) - len(tail)]


# A COCO box's corner and size, rounded to 3 decimals each, may pass its image's edge by this.
COCO_ROUNDING = 0.002
COCO_RLE = re.compile(r"[0-o]*")  # pycocotools' compressed counts: 6 bits a character from 48


def coco_fits(object_classes: tuple[str, ...] | None) -> Callable[[ExportedSample], bool]:
    """A test of a sample's recorded COCO objects (what a new version's instances files take
    for a linked or kept sample, its shard unread): ``fits(sample)`` when they are ones
    ``coco_objects`` can have made for an image of its recorded size, a category of the
    dataset each, a box of positive size inside the image, its polygons or else its RLE (or
    neither: a box only)."""
    categories = len(object_classes or ())

    def fits(sample: ExportedSample) -> bool:
        width, height = sample.width, sample.height
        if sample.coco is None or not (1 <= width <= MAX_SIDE and 1 <= height <= MAX_SIDE):
            return False
        for item in sample.coco:
            x, y, w, h = item.bbox
            if not (1 <= item.category_id <= categories and x >= 0 and y >= 0 and w > 0
                    and h > 0 and x + w <= width + COCO_ROUNDING
                    and y + h <= height + COCO_ROUNDING and 0 <= item.area <= width * height):
                return False
            if item.polygons is None:
                if item.rle is not None and COCO_RLE.fullmatch(item.rle) is None:
                    return False
            elif item.rle is not None or not item.polygons or any(
                    len(ring) < 6 or len(ring) % 2 for ring in item.polygons):
                return False
        return True

    return fits


def check_record_paths(options: ExportOptions, classes: tuple[str, ...],
                       object_classes: tuple[str, ...] | None,
                       samples: Iterable[ExportedSample],
                       shared: Iterable[str] = ()) -> str | None:
    """What in a record (or journal) names files the layout does not give its samples: a key
    that is no sample key, a split that is no folder name, a path not the layout's, a file
    named twice; None when everything fits."""
    seen: set[str] = set()
    keys: set[str] = set()
    # A split is a folder name or not whatever the sample (a handful of splits, 10,000
    # samples: the check a sample was a third of this walk).
    splits: dict[str, bool] = {}
    fits = paths_fit(options, classes, object_classes)
    for sample in samples:
        key, split = sample.key, sample.split
        if KEY.fullmatch(key) is None:
            return f"sample key {shown(key)} is not a sample key"
        sound = splits.get(split)
        if sound is None:
            sound = splits[split] = safe_folder_name(split)
        if not sound:
            return f"sample {key}: split {shown(split)} is not a folder name"
        paths = tuple(file.path for file in sample.files)
        if not fits(key, split, paths):
            return f"sample {key}: its files are not the {options.layout} layout's"
        if seen.intersection(paths) or sample.key in keys:
            return f"sample {sample.key}: named twice"
        seen.update(paths)
        keys.add(sample.key)
    for path in shared:
        if options.layout == "yolo" and options.task != "classify":
            fits = path == "data.yaml"
        elif options.layout == "coco":
            split = path.removeprefix("annotations/instances_").removesuffix(".json")
            fits = path == f"annotations/instances_{split}.json" and safe_folder_name(split)
        else:
            fits = False
        if not fits or path in seen:
            return f"{shown(path)} is not a file of the {options.layout} layout"
        seen.add(path)
    return None
