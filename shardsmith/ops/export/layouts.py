"""The files of each layout: per sample (an image, its labels, its mask) and per split (YOLO's
``data.yaml``, COCO's instances files).

Values in, values out: a sample's metadata, JPEG and class mask become (relative path, bytes)
pairs; the caller writes them.  A malformed sample (metadata that does not fit the sample) is a
ValueError the caller names with its shard and key.
"""

from __future__ import annotations

import hashlib
import json
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
from ...annotations.maskpng import class_mask
from ...dataset.formats.metadata import MAX_SIDE, box_problem, rle_counts
from ...dataset.manifest import CutRecord, SampleRecord
from ...dataset.normal import IGNORE, is_normal
from ...errors import ConfigError, ManifestError, ShardFormatError
from ...readers.sample_jpeg import SampleJpegError, check_header, decode_sample
from ...text import plural, shown
from . import objects
from .record import CocoObject, ExportedSample, ExportOptions

NORMAL_FOLDER = "good"  # MVTec's name for normal images, whatever --normal calls them
# the mvtec folder of a sample whose only defect was cut below min_visible, where an index of
# an earlier release does not say of which class
UNKNOWN_DEFECT = "cut_defect"


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
    """A packed sample's metadata, as its format checked it (``checked_metadata``: sizes,
    boxes, polygons, RLEs, one entry each per object), turned into objects; ValueError for
    what does not fit the sample (its JPEG's size, its class mask's) or the dataset (an object
    class id it does not have)."""
    width, height = metadata["width"], metadata["height"]
    try:
        check_header(jpeg, expect=(height, width))
    except SampleJpegError as exc:
        raise ValueError(str(exc)) from None
    sample = Sample(key, split, class_name, width, height, jpeg)
    if mask_png is not None:
        sample.class_mask = class_mask(mask_png, width, height)
    if object_classes is None:
        return sample
    boxes, labels = metadata.get("boxes", []), metadata.get("labels", [])
    polygons = metadata.get("polygons") or [[] for _ in boxes]
    rles = metadata.get("rle", [None] * len(boxes))
    fallback: list[np.ndarray | None] = [None] * len(boxes)
    if "rle" not in metadata and boxes:
        on_fallback()
        fallback = objects.fallback_masks(boxes, labels, sample.class_mask, height, width)
    for box, label, rings, rle, spare in zip(boxes, labels, polygons, rles, fallback,
                                             strict=True):
        if not 1 <= label <= len(object_classes):
            raise ValueError(f"object class id {label} is not one of the dataset's")
        sample.objects.append(SampleObject([float(v) for v in box], label,
                                           object_classes[label - 1],
                                           [[float(v) for v in ring] for ring in rings], rle,
                                           spare, height, width))
    # An instance mask is decoded when a layout asks for it (``SampleObject.mask``): its runs
    # were checked with the metadata (``checked_metadata``: sizes, counts covering the
    # sample), and a mask that fails anyway fails inside ``Layout.files``, named by its
    # sample.  COCO takes an RLE from its counts: the mask of each object was decoded for
    # nothing (62 us for a 1024 x 1024 mask of 501 runs, timeit).
    return sample


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
        images.append(_Image(image_id, f"{sample.key}.jpg", sample.width, sample.height))
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


# A COCO box's corner and size, rounded to 3 decimals each, may pass its image's edge by this.
COCO_ROUNDING = 0.002
COCO_RLE = re.compile(r"[0-o]*")  # pycocotools' compressed counts: 6 bits a character from 48


class Layout:
    """An export layout: the files it gives a sample as ``schemes`` (each one way to write a
    sample: its paths as templates of ``{split}``, ``{key}`` and, where a class names the
    folder, ``{folder}``), its split-wide files (``shared``, a template of ``{split}``), and
    what it takes of a sample.  ``LAYOUTS`` holds one of each, ``layout_of`` an export's."""

    name: str = ""  # --layout
    variant: str | None = None  # --task (yolo), --anomalib-layout (anomalib)
    schemes: tuple[tuple[str, ...], ...] = ()
    shared: str | None = None
    with_objects = True  # its files show objects (classify follows image classes only)
    every_class_mask = False  # it reads each sample's class mask (else: one without RLEs)
    leaves_out_cut = True  # a sample with a cut defect is left out unless --keep-cut

    def folders(self, classes: tuple[str, ...], object_classes: tuple[str, ...] | None,
                normal: str) -> Iterable[str]:
        """What ``{folder}`` may be."""
        return ()

    def paths(self, scheme: int, sample: Sample, folder: str = "") -> tuple[str, ...]:
        return tuple(template.format(split=sample.split, key=sample.key, folder=folder)
                     for template in self.schemes[scheme])

    def files(self, options: ExportOptions, sample: Sample
              ) -> tuple[list[tuple[str, bytes]], tuple[CocoObject, ...] | None]:
        """The files of ``sample`` (relative path, bytes), and its COCO objects."""
        raise NotImplementedError

    def shared_files(self, object_classes: tuple[str, ...] | None, splits: list[str],
                     samples: list[ExportedSample], folder: str,
                     warn: Callable[[str], None]) -> list[tuple[str, bytes]]:
        """The split-wide files (relative path, bytes)."""
        return []

    def recorded_fit(self, object_classes: tuple[str, ...] | None
                     ) -> Callable[[ExportedSample], bool]:
        """A test of what a sample's record gives the new version besides its files."""
        return lambda sample: True

    def check(self, records: list[SampleRecord], classes: tuple[str, ...]) -> None:
        """Refuse, before a file is written, samples this layout cannot write."""


class YoloDetect(Layout):
    name, variant = "yolo", "detect"
    schemes = (("images/{split}/{key}.jpg", "labels/{split}/{key}.txt"),)
    shared = "data.yaml"

    def files(self, options, sample):
        labels = "".join(yolo_lines(sample, self.variant == "segment")).encode("ascii")
        return list(zip(self.paths(0, sample), (sample.jpeg, labels), strict=True)), None

    def shared_files(self, object_classes, splits, samples, folder, warn):
        return [(self.shared, data_yaml(object_classes or (), splits, folder, warn))]


class YoloSegment(YoloDetect):
    variant = "segment"


class YoloClassify(Layout):
    name, variant = "yolo", "classify"
    schemes = (("{split}/{folder}/{key}.jpg",),)
    with_objects = leaves_out_cut = False

    def folders(self, classes, object_classes, normal):
        return classes

    def files(self, options, sample):
        return [(self.paths(0, sample, sample.class_name)[0], sample.jpeg)], None

    def check(self, records, classes):
        """Every sample has an image class: its folder.  A sample outside every class folder
        was written loose in ``SPLIT/`` (ImageFolder drops it) under a record the next export
        refused as damaged."""
        unlabelled = [record.key for record in records if record.label == -1]
        if unlabelled:
            raise ConfigError(f"--task classify: {plural(len(unlabelled), 'sample')} without "
                              f"an image class (label -1; the first: {unlabelled[0]}): the "
                              "layout puts each sample in its class's folder; export with "
                              "--task detect, or pack them with a class")
        for record in records:
            if not 0 <= record.label < len(classes):
                raise ManifestError(f"sample {record.key}: label {record.label} is not a class "
                                    f"of the dataset ({plural(len(classes), 'class', 'classes')}"
                                    "): the sample index is damaged (shardsmith verify)")


class Coco(Layout):
    name = "coco"
    schemes = (("images/{split}/{key}.jpg",),)
    shared = "annotations/instances_{split}.json"

    def files(self, options, sample):
        return [(self.paths(0, sample)[0], sample.jpeg)], coco_objects(
            sample, bool(options.box_polygons))

    def shared_files(self, object_classes, splits, samples, folder, warn):
        return [(self.shared.format(split=split),
                 instances(object_classes or (), [s for s in samples if s.split == split]))
                for split in splits]

    def recorded_fit(self, object_classes):
        """A test of a sample's recorded COCO objects (what a new version's instances files
        take for a linked or kept sample, its shard unread): ``fits(sample)`` when they are
        ones ``coco_objects`` can have made for an image of its recorded size, a category of
        the dataset each, a box of positive size inside the image, its polygons or else its
        RLE (or neither: a box only)."""
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

    def check(self, records, classes):
        seen: dict[int, str] = {}
        for record in records:
            image_id = coco_image_id(record.key)
            if seen.get(image_id) == record.key:  # the sample index refuses it first
                raise ManifestError(f"sample key {record.key} is in the sample index twice")
            if image_id in seen:
                raise ConfigError(f"samples {seen[image_id]} and {record.key} get the same "
                                  f"COCO image id {image_id} (53 bits of sha256 of the key "
                                  "collide)")
            seen[image_id] = record.key


class AnomalibFolder(Layout):
    name, variant = "anomalib", "folder"
    schemes = (("normal/{key}.jpg",), ("normal_test/{key}.jpg",),
               ("abnormal/{key}.jpg", "mask/{key}.png"))
    every_class_mask, leaves_out_cut = True, False

    def files(self, options, sample):
        if not is_abnormal(options, sample):
            where = 0 if sample.split == "train" else 1
            return [(self.paths(where, sample)[0], self.image(sample))], None
        marked = sample.objects + sample.cut
        mask = objects.png(objects.anomaly_mask(sample.class_mask, [item.box for item in marked],
                                                [item.mask for item in marked], sample.height,
                                                sample.width))
        paths = self.paths(2, sample, self.defect(options, sample))
        return list(zip(paths, (self.image(sample), mask), strict=True)), None

    def image(self, sample: Sample) -> bytes:
        return sample.jpeg

    def defect(self, options: ExportOptions, sample: Sample) -> str:
        return ""


class Mvtec(AnomalibFolder):
    """anomalib's MVTecAD reads ``.png`` images only (anomalib 2.7, datasets/image/mvtecad.py):
    the shard's JPEG decoded and written lossless."""

    variant = "mvtec"
    schemes = ((f"train/{NORMAL_FOLDER}/{{key}}.png",), (f"test/{NORMAL_FOLDER}/{{key}}.png",),
               ("test/{folder}/{key}.png", "ground_truth/{folder}/{key}_mask.png"))

    def folders(self, classes, object_classes, normal):
        return defect_names(classes, object_classes, normal)

    def image(self, sample):
        return png_image(sample)

    def defect(self, options, sample):
        defect = defect_name(options, sample)
        if not safe_folder_name(defect) or defect == NORMAL_FOLDER:
            raise ValueError(f"its defect class {defect!r} cannot be an MVTec folder name")
        return defect


LAYOUTS: dict[tuple[str, str | None], Layout] = {
    (layout.name, layout.variant): layout
    for layout in (YoloDetect(), YoloSegment(), YoloClassify(), Coco(), AnomalibFolder(),
                   Mvtec())}


def layout_of(options: ExportOptions) -> Layout:
    """The layout an export's options name."""
    return LAYOUTS[options.layout, options.task or options.anomalib_layout]


def paths_fit(options: ExportOptions, classes: tuple[str, ...],
              object_classes: tuple[str, ...] | None) -> Callable[[str, str, tuple[str, ...]],
                                                                  bool]:
    """A test of a sample's recorded paths: ``fits(key, split, paths)`` when ``paths`` are
    files the layout gives the sample ``key`` of ``split`` (one of its ``schemes``), without
    building a list per class: a class's folder is read off the path and looked up in the
    set of the folders, made once (a list per sample made an up-to-date classify re-export of
    8,000 samples in 10,000 classes take 10 to 12 s instead of 0.4 s: docs/performance.md,
    "Export")."""
    layout = layout_of(options)
    folders = frozenset(layout.folders(classes, object_classes, options.normal or ""))
    by_class = ["{folder}" in scheme[0] for scheme in layout.schemes]
    by_split: dict[str, list[list[tuple[str, str, str]]]] = {}  # the schemes' pieces

    def fits(key: str, split: str, paths: tuple[str, ...]) -> bool:
        schemes = by_split.get(split)
        if schemes is None:  # split in once (a format a path made the check 25 times slower)
            schemes = by_split[split] = [[_pieces(template, split) for template in scheme]
                                         for scheme in layout.schemes]
        for scheme, with_folder in zip(schemes, by_class, strict=True):
            if len(scheme) != len(paths):
                continue
            folder = ""
            if with_folder:
                head, middle, tail = scheme[0]
                folder = _between(paths[0], head, middle + key + tail)
                if folder not in folders:
                    continue
            for path, (head, middle, tail) in zip(paths, scheme, strict=True):
                if path != head + folder + middle + key + tail:
                    break
            else:
                return True
        return False

    return fits


def _pieces(template: str, split: str) -> tuple[str, str, str]:
    """``template`` of ``split`` in three: before ``{folder}`` (empty where it has none),
    from there to ``{key}``, after ``{key}``."""
    head, _, tail = template.partition("{key}")
    before, _, middle = head.rpartition("{folder}")
    return tuple(piece.replace("{split}", split) for piece in (before, middle, tail))


def _between(path: str, head: str, tail: str) -> str | None:
    """What lies between ``head`` and ``tail`` in ``path`` (a class's folder), None where
    ``path`` does not begin with the one and end with the other."""
    if len(path) < len(head) + len(tail) or not (path.startswith(head)
                                                  and path.endswith(tail)):
        return None
    return path[len(head):len(path) - len(tail)]


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
    if (options.layout, options.task or options.anomalib_layout) not in LAYOUTS:
        return f"{options.layout} is not a layout of this release"
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
    template = layout_of(options).shared or ""
    by_split = "{split}" in template
    head, _, tail = template.partition("{split}")
    for path in shared:
        split = _between(path, head, tail) if by_split else ""
        if not template or split is None or (by_split and not safe_folder_name(split)) \
                or path != template.format(split=split) or path in seen:
            return f"{shown(path)} is not a file of the {options.layout} layout"
        seen.add(path)
    return None
