"""One validated configuration object: YAML file + CLI overrides, resolved once.

Every option lives in a frozen dataclass; the YAML file mirrors the dataclass tree
(``source.path``, ``image.size``, ...).  Validation errors name the offending key path so a
user can fix the file without reading code.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError

FORMATS = ("webdataset", "tfrecord")
RESIZE_MODES = ("fit", "shorter", "center_crop", "pad", "stretch")
COLOR_MODES = ("rgb", "gray", "keep")
LABEL_MODES = ("folders", "none", "file")
ANNOTATION_FILES = ("", "yolo", "voc", "labelme")
ANNOTATION_PRESETS = ("", "mvtec")
COORDINATES = ("stored", "upright")
MASK_VALUES = ("binary", "index")
TILE_KEEP = ("annotated", "all")
SUBSAMPLING = ("420", "422", "444")
DEFAULT_EXTENSIONS = ("jpg", "jpeg", "png", "tif", "tiff", "bmp", "webp")
BACKENDS = ("local", "dask")
CHANGE_DETECTION = ("content", "edges")
SPLIT_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
MAX_CONFIG_VALUES = 10_000  # scalars after YAML alias expansion: a job file holds ~50
MAX_CONFIG_DEPTH = 32  # nesting of YAML collections: a job file nests 4 deep
# Every count and size in a job fits in 63 bits; a larger integer is refused before it is
# turned into a float (OverflowError) or printed (Python's 4,300-digit limit).
MAX_CONFIG_INTEGER = 2**63 - 1
MAX_SHARD_MB = 1024 * 1024
DEFAULT_SPLITS = (("train", 1.0),)
# Past a few processes a core, more only cost memory (each holds its own image libraries).
LOCAL_WORKERS_PER_CORE = 4


def fingerprinted_unless_default(default: Any) -> Any:
    """A setting added after datasets were first written: at its default it stays out of the
    fingerprint, so an upgrade does not turn every existing dataset into a foreign one."""
    return field(default=default, metadata={"fingerprint": "unless_default"})


def section_fingerprinted_unless_default(factory: type) -> Any:
    """A section added after datasets were first written: left out of the fingerprint while
    every setting in it is at its default."""
    return field(default_factory=factory, metadata={"fingerprint": "unless_default"})


@dataclass(frozen=True)
class AnnotationConfig:
    """Where each original's annotations come from (YAML ``source.annotations``).

    Paths are relative to ``source.path`` unless absolute.  Every input is optional; an image
    without an annotation has no objects (a background image).
    """

    preset: str = ""  # "mvtec": the MVTec AD layout (labels, masks and splits from folders)
    labels: str = ""  # CSV or JSON Lines file of (path, label), read with source.labels: file
    files: str = ""  # per-image files with the image's stem: yolo (.txt), voc (.xml), labelme
    files_dir: str = ""  # "" beside the image, else a tree mirroring the source tree
    coco: str = ""  # one COCO instances JSON: boxes, polygons, RLE
    coco_root: str = ""  # the folder under source.path that COCO file_name values start from
    masks: str = ""  # "" none, "beside" (with mask_suffix), or a tree mirroring the source tree
    mask_suffix: str = ""  # added to the image's stem: "_mask" -> x_mask.png
    mask_values: str = "binary"  # binary: non-zero = the image's class; index: k = classes[k-1]
    classes: tuple[str, ...] = ()  # object classes in id order (1, 2, ...): YOLO ids, masks
    coordinates: str = "stored"  # stored: as the file's pixels are stored; upright: after EXIF
    min_visible: float = 0.25  # objects with less of them left in a crop or tile are dropped

    @property
    def enabled(self) -> bool:
        return self != AnnotationConfig()

    @property
    def has_objects(self) -> bool:
        """Boxes, polygons or masks are read (not only image labels)."""
        return bool(self.preset or self.files or self.coco or self.masks)

    @property
    def has_masks(self) -> bool:
        """Every sample carries a class mask (``KEY.mask.png``)."""
        return bool(self.preset or self.masks or self.coco or self.files == "labelme")


@dataclass(frozen=True)
class SourceConfig:
    """Where the originals are and which of them to take."""

    path: str = ""
    extensions: tuple[str, ...] = DEFAULT_EXTENSIONS
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    labels: str = "folders"
    follow_symlinks: bool = False
    annotations: AnnotationConfig = section_fingerprinted_unless_default(AnnotationConfig)


@dataclass(frozen=True)
class TileConfig:
    """Cut each original into tiles at (near) full resolution instead of resizing it
    (YAML ``image.tiles``; off while ``size`` is 0)."""

    size: int = 0  # tile side in pixels; 0 = no tiling
    overlap: int = 0  # pixels shared by neighbouring tiles
    scale: float = 1.0  # the original is scaled by this before it is cut (0 < scale <= 1)
    keep: str = "annotated"  # annotated: tiles holding an annotation + background_fraction
    background_fraction: float = 0.1  # of the tiles without one, kept at random (seeded)

    @property
    def enabled(self) -> bool:
        return self.size > 0


@dataclass(frozen=True)
class ImageConfig:
    """How each original becomes a training sample (everything that changes pixels)."""

    size: int = 512
    resize: str = "fit"
    upscale: bool = False
    quality: int = 90
    subsampling: str = "420"
    color: str = "rgb"
    background: tuple[int, int, int] = (255, 255, 255)
    pad_color: tuple[int, int, int] = (0, 0, 0)
    max_pixels: int = 300_000_000
    max_decoded_mb: int = fingerprinted_unless_default(1024)
    tiles: TileConfig = section_fingerprinted_unless_default(TileConfig)


@dataclass(frozen=True)
class OutputConfig:
    """Where the shards go and how they are cut."""

    path: str = ""
    format: str = "webdataset"
    shard_size_mb: float = 256.0
    shard_samples: int | None = None

    @property
    def shard_bytes(self) -> int:
        return int(self.shard_size_mb * 1024 * 1024)


@dataclass(frozen=True)
class RunConfig:
    """How the job runs; none of this changes the output bytes."""

    workers: int = 0
    backend: str = "local"
    scheduler: str = ""
    readahead: bool = False
    max_reject_fraction: float = 0.01
    quiet: bool = False
    overwrite: bool = False
    compact: bool = False
    change_detection: str = "content"

    @property
    def worker_count(self) -> int:
        return self.workers if self.workers > 0 else machine_cores()


def machine_cores() -> int:
    """The cores this process may use (its CPU affinity, as a container or taskset sets it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def check_workers(run: RunConfig) -> None:
    """Refuse more local worker processes than this machine can hold: each one loads its own
    image libraries, so ``run.workers: 100000`` would exhaust the memory before any work.
    A job file may come from a bigger machine, so this is checked where the job runs, not
    when the file is read.  Dask workers run elsewhere: their number is the cluster's."""
    if run.backend != "local":
        return
    cores = machine_cores()
    limit = LOCAL_WORKERS_PER_CORE * cores
    if run.workers > limit:
        raise ConfigError(
            f"run.workers: {run.workers:,} worker processes are more than this machine can "
            f"run ({LOCAL_WORKERS_PER_CORE} per core, {cores} cores: at most {limit}); "
            "0 starts one per core"
        )


@dataclass(frozen=True)
class StageConfig:
    """Destination of ``shardsmith stage`` on the training machine."""

    to: str = ""


@dataclass(frozen=True)
class Config:
    """The whole job. ``splits`` maps split name to fraction, in the order given."""

    source: SourceConfig = field(default_factory=SourceConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    image: ImageConfig = field(default_factory=ImageConfig)
    splits: tuple[tuple[str, float], ...] = DEFAULT_SPLITS
    # YAML ``splits.group``: a regular expression on the relative path whose match (or named
    # group ``group``) names a part, lot or camera session; a group goes to one split.
    split_group: str = field(default="", metadata={"yaml": "splits.group"})
    # YAML ``splits.folder``: the top folder of a path names its split (train/, test/), and the
    # class folder is the one below it; the fractions are not used.
    split_folder: bool = field(default=False, metadata={"yaml": "splits.folder"})
    seed: int = 0
    run: RunConfig = field(default_factory=RunConfig)
    stage: StageConfig = field(default_factory=StageConfig)

    def dataset_settings(self) -> dict[str, Any]:
        """Every option that changes the shard bytes (not paths, workers or logging).

        This is what the manifest records as ``config`` and what the fingerprint hashes.
        """
        return {
            "source": _settings(self.source, skip="path"),
            "output": _settings(self.output, skip="path"),
            "image": _settings(self.image),
            "splits": dict(self.splits)
            | ({"group": self.split_group} if self.split_group else {})
            | ({"folder": True} if self.split_folder else {}),
            "seed": self.seed,
        }

    def fingerprint(self) -> str:
        """Hash of ``dataset_settings``: equal fingerprints mean equal shards from equal sources."""
        blob = json.dumps(self.dataset_settings(), separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()


def _settings(section: Any, skip: str = "") -> dict[str, Any]:
    out = {}
    for item in dataclasses.fields(section):
        value = getattr(section, item.name)
        if item.name == skip:
            continue
        if item.metadata.get("fingerprint") == "unless_default" and value == _default(item):
            continue
        if dataclasses.is_dataclass(value):
            out[item.name] = _settings(value)
            continue
        out[item.name] = _plain(value)
    return out


def _default(item: dataclasses.Field) -> Any:
    if item.default_factory is not dataclasses.MISSING:
        return item.default_factory()
    return item.default


def _plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple):
        return [_plain(item) for item in obj]
    return obj


def check_paths(config: Config) -> tuple[Path, Path]:
    """Resolve and check source and output (and the local worker count) before any work;
    returns (source, output)."""
    check_workers(config.run)
    if not config.source.path:
        raise ConfigError("source.path: no source directory given (argument SOURCE or config)")
    if not config.output.path:
        raise ConfigError("output.path: no output directory given (argument OUTPUT or config)")
    source = Path(config.source.path).expanduser().resolve()
    output = Path(config.output.path).expanduser().resolve()
    if not source.is_dir():
        raise ConfigError(f"source.path: {source} is not a directory")
    if output == source or source in output.parents:
        raise ConfigError(f"output.path: {output} is inside the source tree {source}")
    if output in source.parents:
        raise ConfigError(f"output.path: {output} contains the source tree {source}")
    if output.exists() and not output.is_dir():
        raise ConfigError(f"output.path: {output} exists and is not a directory")
    return source, output
