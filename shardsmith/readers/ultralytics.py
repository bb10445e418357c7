"""Ultralytics YOLO training straight from a packed or staged dataset's shards (either format).

    from ultralytics import YOLO
    from shardsmith.readers.ultralytics import ShardDetectionTrainer
    YOLO("yolo11n.yaml").train(trainer=ShardDetectionTrainer, data="/nvme/shards/line3",
                               epochs=100, imgsz=640)

No export and no copy: ``data`` is the dataset folder (its manifest), not a data YAML.  Built
on Ultralytics' public extension points only, nothing of it patched:

* ``ShardYOLODataset`` is a ``YOLODataset`` whose documented hooks read the shards:
  ``get_img_files`` lists the split's samples (a name per sample, ``DATASET/SPLIT/KEY.jpg``,
  not a file), ``get_labels`` builds each sample's labels from its metadata (``KEY.json``,
  read by offset from the per-shard index), ``load_image`` reads its JPEG by offset and
  decodes it after the header check every shardsmith reader makes.  Ultralytics'
  augmentation (mosaic, mixup, copy-paste, letterbox), its ``Format`` and ``collate_fn`` run
  unchanged.
* ``ShardDetectionTrainer`` / ``ShardSegmentationTrainer`` are Ultralytics' trainers with
  ``get_dataset`` (names and splits from the manifest), ``build_dataset`` (the dataset above,
  with the arguments ``build_yolo_dataset`` gives its own) and ``get_validator`` overridden.

Labels: a box is the object's ``[x0, y0, x1, y1]`` normalised to centre, width and height;
the class is the object class id - 1 (``names`` in id order).  For ``segment`` each object is
one polygon by the rule the export follows (``annotations/polygons.py``): its ring, several
rings joined at their nearest points, traced from its instance mask (RLE) along pixel borders
when it has no polygon, its box's corners when it has neither; its box is then the polygon's
extent, as Ultralytics derives it from a polygon label file.  Segment is refused where objects
have a box only (a rectangle is no mask), unless the trainer's ``boxes_as_polygons`` says to
take their corners anyway (``readers.segments``).  What stays on disk and what does not work
is in ``docs/ultralytics-reader.md``.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

try:
    import cv2
    from ultralytics.data.dataset import YOLODataset
    from ultralytics.data.utils import get_split_fraction
    from ultralytics.models.yolo.detect import DetectionTrainer
    from ultralytics.models.yolo.segment import SegmentationTrainer
    from ultralytics.utils import YAML, colorstr
    from ultralytics.utils.ops import segments2boxes
    from ultralytics.utils.torch_utils import unwrap_model
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "shardsmith.readers.ultralytics needs Ultralytics: pip install ultralytics "
        "(in a venv of its own: it wants opencv-python, not the headless build)"
    ) from exc

import numpy as np

from ..annotations.polygons import object_ring
from ..dataset.manifest import iter_sample_index, read_manifest
from ..errors import ConfigError, CorruptSampleError
from . import largest_image_size, select_shards
from .cut import without_cut
from .plan import check_shards, load_table
from .samples import SampleReader
from .segments import check_segments
from .targets import detection_target

__all__ = ["ShardDetectionTrainer", "ShardSegmentationTrainer", "ShardYOLODataset",
           "shard_data", "shard_yolo_dataset"]

log = logging.getLogger(__name__)

COLORSPACE = {3: "BGR", 1: "GRAY"}  # what cv2.imread gives Ultralytics for 3 and 1 channels


class ShardYOLODataset(YOLODataset):
    """The samples of one split of a dataset as Ultralytics' ``YOLODataset``.

    ``shards`` is the dataset folder and ``img_path`` the split's name; every other argument
    is ``YOLODataset``'s.  ``im_files`` are names (``DATASET/SPLIT/KEY.jpg``, whose stem is
    the sample key), never opened: images and labels come from the shards.  ``task="segment"``
    is refused (``ConfigError`` naming how many) where objects have a box only, unless
    ``boxes_as_polygons`` (``readers.segments``).
    """

    def __init__(self, *args: Any, shards: str | Path, boxes_as_polygons: bool = False,
                 **kwargs: Any):
        self.shards_dir = Path(shards)
        split = kwargs.get("img_path", args[0] if args else None)
        if not isinstance(split, str):
            raise ConfigError(f"img_path: expected a split name of {self.shards_dir}, got "
                              f"{split!r}")
        self.manifest, selected = select_shards(self.shards_dir, split, None)
        if self.manifest.object_classes is None:
            raise ConfigError(f"{self.shards_dir} has no box or mask annotations (packed "
                              "without source.annotations): YOLO detect and segment need them")
        self.object_classes = list(self.manifest.object_classes)
        self.table = load_table(self.shards_dir, [shard for _, shard in selected],
                                self.manifest)
        check_shards(self.table)  # a shard swapped for another is refused now, not served
        # a sample with a defect cut below min_visible would teach its defect as background
        self.table = without_cut(self.shards_dir, self.manifest, self.table)
        if kwargs.get("task") == "segment":  # a box is no mask: the yolo export's rule
            check_segments(self.shards_dir, self.manifest, self.table, boxes_as_polygons)
        self.sizes = {record.key: (record.height, record.width)
                      for record in iter_sample_index(self.shards_dir, self.manifest)
                      if record.split == split}
        # No JPEG header may say more than the largest sample the index records (a 16x16
        # JPEG whose header says 65500x65500 would allocate 12 GB when decoded).
        largest = largest_image_size(self.shards_dir, self.manifest, split)
        self.reader = SampleReader(self.table, len(self.manifest.classes),
                                   len(self.object_classes), largest)
        self.rows: dict[str, int] = {}
        super().__init__(*args, **kwargs)

    # --- the documented hooks -------------------------------------------------------------

    def get_img_files(self, img_path: str | list[str]) -> list[str]:
        """A name per sample of the split, sorted (the order of an export's image folder),
        cut to ``fraction`` as Ultralytics cuts its file list."""
        rows: dict[str, int] = {}
        left_out = 0
        for index in range(len(self.table)):
            key = self.table.key(index)
            if key is None or key not in self.sizes:
                left_out += 1
                continue
            rows[str(self.shards_dir / str(img_path) / f"{key}.jpg")] = index
        if left_out:
            log.warning("%s%d samples of the shards are not in the sample index, left out "
                        "(shardsmith verify tells why)", self.prefix, left_out)
        names = sorted(rows)
        if not names:
            raise ConfigError(f"{self.prefix}split {img_path!r} of {self.shards_dir} has no "
                              "samples")
        count = self.fraction if isinstance(self.fraction, int) else \
            max(1, round(len(names) * self.fraction))
        names = names[:count]
        self.rows = {name: rows[name] for name in names}
        return names

    def get_labels(self) -> list[dict[str, Any]]:
        """Each sample's labels from its metadata; a sample whose metadata is unreadable or
        malformed is left out with a warning naming it, as Ultralytics leaves out a corrupt
        image or label file."""
        labels, corrupt = [], []
        for name in self.im_files:
            try:
                labels.append(self.sample_label(name))
            except CorruptSampleError as exc:
                corrupt.append(str(exc))
        if corrupt:
            log.warning("%s%d samples left out: %s%s", self.prefix, len(corrupt),
                        ", ".join(corrupt[:5]), ", ..." if len(corrupt) > 5 else "")
        if not labels:
            raise ConfigError(f"{self.prefix}no readable samples in {self.shards_dir}")
        self.im_files = [label["im_file"] for label in labels]
        self.verify_labels(labels, self.shards_dir)
        return labels

    def load_image(self, i: int, rect_mode: bool = True,
                   resize_short: bool = False) -> tuple[np.ndarray, tuple[int, int],
                                                        tuple[int, int]]:
        """Sample ``i``'s pixels (BGR, or gray with ``channels=1``) read from its shard, then
        resized and buffered exactly as ``BaseDataset.load_image`` does with a file (its
        reading and resizing are one method, so the resizing is repeated here)."""
        if self.ims[i] is not None:
            return self.ims[i], self.im_hw0[i], self.im_hw[i]
        index = self.rows[self.im_files[i]]
        reader = self.reader
        jpeg, _ = reader.read(index)
        expect = self.sizes[self.table.key(index)]
        im = reader.decode(index, jpeg, COLORSPACE.get(self.channels, "BGR"), expect=expect)
        h0, w0 = im.shape[:2]
        shape = tuple(self.imgsz) if isinstance(self.imgsz, tuple | list) else \
            (self.imgsz, self.imgsz)
        size = max(shape)
        if rect_mode:  # the long side (or the short one) to imgsz, aspect ratio kept
            ratio = size / (min(h0, w0) if resize_short else max(h0, w0))
            if ratio != 1:
                if resize_short:
                    w, h = (math.ceil(w0 * ratio), size) if h0 < w0 else \
                        (size, math.ceil(h0 * ratio))
                else:
                    w, h = min(math.ceil(w0 * ratio), size), min(math.ceil(h0 * ratio), size)
                im = cv2.resize(im, (w, h), interpolation=cv2.INTER_LINEAR)
        elif (h0, w0) != shape:  # stretched to the requested shape
            im = cv2.resize(im, shape[::-1], interpolation=cv2.INTER_LINEAR)
        if im.ndim == 2:
            im = im[..., None]
        if self.augment and self.cache != "ram":  # the mosaic buffer, bounded as Ultralytics'
            self.ims[i], self.im_hw0[i], self.im_hw[i] = im, (h0, w0), im.shape[:2]
            self.buffer.append(i)
            if 1 < len(self.buffer) >= self.max_buffer_length:
                j = self.buffer.pop(0)
                self.ims[j], self.im_hw0[j], self.im_hw[j] = None, None, None
        return im, (h0, w0), im.shape[:2]

    def check_cache_disk(self, safety_margin: float = 0.1) -> bool:
        """``cache="disk"`` writes ``.npy`` files beside each image; there are none (and a
        staged or shared dataset is no place for them): not cached, with a warning."""
        log.warning("%scache='disk' needs image files to write .npy files beside; reading "
                    "the shards uncached (cache='ram' caches the decoded images)", self.prefix)
        self.cache = None
        return False

    # --- labels from a sample's metadata -----------------------------------------------------

    def sample_label(self, name: str) -> dict[str, Any]:
        """The label dict ``YOLODataset.get_labels`` gives for the sample named ``name``."""
        index = self.rows[name]
        height, width = self.sizes[self.table.key(index)]
        meta = self.reader.metadata(index)  # its KEY.json alone, or its TFRecord record
        try:
            target = detection_target(meta, height, width, False, len(self.object_classes))
        except ValueError as exc:
            raise self.reader.named(index, f"bad annotations ({exc})") from None
        classes = (target["labels"] - 1).astype(np.float32).reshape(-1, 1)
        segments: list[np.ndarray] = []
        if self.use_segments and len(classes):
            segments = self.object_segments(index, meta, target["boxes"], height, width)
            boxes = segments2boxes(segments)
        else:
            boxes = xyxy_to_normalised_xywh(target["boxes"], height, width)
        rows = np.concatenate((classes, boxes), 1).astype(np.float32)
        rows, segments = _without_duplicates(rows, segments)
        return {"im_file": name, "shape": (height, width), "cls": rows[:, 0:1],
                "bboxes": rows[:, 1:], "segments": segments, "keypoints": None,
                "normalized": True, "bbox_format": "xywh"}

    def object_segments(self, index: int, meta: dict, boxes: np.ndarray, height: int,
                        width: int) -> list[np.ndarray]:
        """One normalised polygon (K x 2 float32) per object."""
        polygons = meta.get("polygons")
        if not isinstance(polygons, list) or len(polygons) != len(boxes):
            polygons = [[] for _ in boxes]
        masks = None
        segments = []
        for number, (rings, box) in enumerate(zip(polygons, boxes, strict=True)):
            try:
                points = _rings_points(rings)
            except (TypeError, ValueError) as exc:
                raise self.reader.named(index, f"object {number}: bad polygon ({exc})") \
                    from None
            if not points and meta.get("rle") is not None and masks is None:
                try:
                    masks = detection_target(meta, height, width, True,
                                             len(self.object_classes))["masks"]
                except ValueError as exc:
                    raise self.reader.named(index, f"bad annotations ({exc})") from None
            mask = masks[number] if masks is not None and not points else None
            polygon = np.asarray(object_ring([float(value) for value in box],
                                             [ring.reshape(-1).tolist() for ring in points],
                                             mask), np.float32)
            scale = np.array([width, height], np.float32)
            segments.append(np.clip(polygon.reshape(-1, 2) / scale, 0, 1).astype(np.float32))
        return segments


def xyxy_to_normalised_xywh(boxes: np.ndarray, height: int, width: int) -> np.ndarray:
    """Pixel boxes ``x0, y0, x1, y1`` as Ultralytics' label rows: centre x, centre y, width,
    height, each over the image's width or height, clipped to the image."""
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    clipped = np.clip(boxes, 0, [width, height, width, height])
    x0, y0, x1, y1 = clipped.T
    return np.stack(((x0 + x1) / 2 / width, (y0 + y1) / 2 / height, (x1 - x0) / width,
                     (y1 - y0) / height), 1).astype(np.float32)


def _rings_points(rings: Any) -> list[np.ndarray]:
    if not isinstance(rings, list):
        raise TypeError("not a list of rings")
    points = []
    for ring in rings:
        array = np.asarray(ring, np.float64)
        if array.ndim != 1 or len(array) % 2 or len(array) < 6 or not np.isfinite(array).all():
            raise ValueError("a ring is not a flat list of at least 3 x, y points")
        points.append(array.reshape(-1, 2).astype(np.float32))
    return points


def _without_duplicates(rows: np.ndarray,
                        segments: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Repeated objects left out, as Ultralytics' label check (``verify_image_label``) leaves
    out repeated rows of a label file, so both give a model the same instances."""
    if not len(rows):
        return np.zeros((0, 5), np.float32), segments
    _, keep = np.unique(rows, axis=0, return_index=True)
    if len(keep) < len(rows) and segments:  # distinct polygons may share a class and box
        joined = np.array([c.tobytes() + s.tobytes() for c, s in zip(rows[:, 0], segments,
                                                                      strict=True)], object)
        _, keep = np.unique(joined, return_index=True)
    if len(keep) < len(rows):
        rows = rows[keep]
        segments = [segments[i] for i in keep] if segments else segments
    return rows, segments


def shard_yolo_dataset(cfg: Any, shards: str | Path, split: str, batch: int | None,
                       data: dict[str, Any], mode: str = "train", rect: bool = False,
                       stride: int = 32, boxes_as_polygons: bool = False) -> ShardYOLODataset:
    """``ShardYOLODataset`` of ``split`` with the arguments Ultralytics'
    ``build_yolo_dataset`` gives its ``YOLODataset`` (ultralytics/data/build.py)."""
    return ShardYOLODataset(
        img_path=split, shards=shards, boxes_as_polygons=boxes_as_polygons, imgsz=cfg.imgsz,
        batch_size=batch,
        augment=mode == "train", hyp=cfg, rect=cfg.rect or rect, cache=cfg.cache or None,
        single_cls=cfg.single_cls or False, stride=stride,
        pad=0.0 if mode == "train" else 0.5, prefix=colorstr(f"{mode}: "), task=cfg.task,
        classes=cfg.classes, data=data,
        fraction=get_split_fraction(cfg.fraction, "train" if mode == "train" else cfg.split))


def shard_data(directory: str | Path, split: str = "val") -> dict[str, Any]:
    """The dataset dict Ultralytics' trainers read from a data YAML, from the manifest:
    ``train``, ``val`` (``split`` when the dataset has it, else test, else train, with a
    warning) and ``test`` as split names, ``names`` the object classes in id order."""
    directory = Path(directory)
    manifest = read_manifest(directory)
    if manifest.object_classes is None:
        raise ConfigError(f"{directory} has no box or mask annotations (packed without "
                          "source.annotations): YOLO detect and segment need them")
    splits = list(manifest.splits)
    if "train" not in splits:
        raise ConfigError(f"{directory} has no train split (splits: {', '.join(splits)})")
    val = next(name for name in (split, "test", "train") if name in splits)
    if val != split:
        log.warning("%s has no %s split: validating on %s", directory, split, val)
    data: dict[str, Any] = {"path": directory, "train": "train", split: val,
                            "names": dict(enumerate(manifest.object_classes)),
                            "nc": len(manifest.object_classes), "channels": 3}
    data.setdefault("val", val)
    if "test" in splits:
        data.setdefault("test", "test")
    return data


class _FromShards:
    """What a trainer changes to read a dataset folder's shards instead of a data YAML."""

    args: Any
    save_dir: Path
    model: Any
    data: dict[str, Any]
    # segment over objects that have a box only: their boxes as rectangle polygons (a
    # subclass sets it True); refused otherwise, as `export --task segment` refuses
    boxes_as_polygons: bool = False

    def get_dataset(self) -> dict[str, Any]:
        """Names and splits from the manifest of ``data`` (the dataset folder)."""
        data = shard_data(self.args.data, self.args.split or "val")
        if self.args.single_cls:
            data["names"], data["nc"] = {0: "item"}, 1
        # The validation of best.pt after training is a standalone one, which reads
        # args.data as a data YAML (check_det_dataset) for names and paths before it uses
        # the trainer's loader; this one gives it the names and an existing path.
        self.data_yaml = Path(self.save_dir) / "shardsmith-data.yaml"
        YAML.save(self.data_yaml, {"path": str(Path(self.args.data).resolve()),
                                   "train": ".", "val": ".", "names": data["names"]})
        return data

    def build_dataset(self, img_path: str, mode: str = "train", batch: int | None = None):
        """``ShardYOLODataset`` of the split ``img_path`` (as ``DetectionTrainer`` builds
        its dataset: rectangular batches for validation, the model's stride)."""
        stride = max(int(unwrap_model(self.model).stride.max()), 32)
        return shard_yolo_dataset(self.args, self.args.data, img_path, batch, self.data,
                                  mode=mode, rect=mode == "val", stride=stride,
                                  boxes_as_polygons=self.boxes_as_polygons)

    def get_validator(self):
        """The trainer's validator, reading the shards through the trainer's loader."""
        validator = super().get_validator()
        validator.args.data = str(self.data_yaml)
        return validator


class ShardDetectionTrainer(_FromShards, DetectionTrainer):
    """Ultralytics' ``DetectionTrainer`` over a dataset folder's shards:
    ``model.train(trainer=ShardDetectionTrainer, data=DATASET_DIR, ...)``."""


class ShardSegmentationTrainer(_FromShards, SegmentationTrainer):
    """Ultralytics' ``SegmentationTrainer`` over a dataset folder's shards (objects as
    polygons: see the module's docstring)."""
