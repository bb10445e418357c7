"""One validated configuration object: YAML file + CLI overrides, resolved once.

Every option lives in a frozen dataclass; the YAML file mirrors the dataclass tree
(``source.path``, ``image.size``, ...).  Validation errors name the offending key path so a
user can fix the file without reading code.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError
from .jsonmodel import cut, shown

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
MAX_CONFIG_BYTES = 1024 * 1024
MAX_CONFIG_VALUES = 10_000  # scalars after YAML alias expansion: a job file holds ~50
MAX_SHARD_MB = 1024 * 1024
DEFAULT_SPLITS = (("train", 1.0),)


def since_v2(default: Any) -> Any:
    """A setting added after datasets were first written: at its default it stays out of the
    fingerprint, so an upgrade does not turn every existing dataset into a foreign one."""
    return field(default=default, metadata={"fingerprint": "unless_default"})


def since_v2_section(factory: type) -> Any:
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
    annotations: AnnotationConfig = since_v2_section(AnnotationConfig)


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
    max_decoded_mb: int = since_v2(1024)
    tiles: TileConfig = since_v2_section(TileConfig)


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
        if self.workers > 0:
            return self.workers
        try:
            return len(os.sched_getaffinity(0))  # the cores this process may use
        except AttributeError:
            return os.cpu_count() or 1


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


def load_config(
    path: str | os.PathLike | None = None, overrides: Mapping[str, Any] | None = None
) -> Config:
    """Read an optional YAML file, apply dotted-key overrides (``{"image.size": 256}``), validate.

    Raises ConfigError naming the key for unknown keys, wrong types and bad values.
    """
    raw: dict[str, Any] = {}
    if path is not None:
        raw = _read_yaml(Path(path))
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        if dotted == "splits":  # --split replaces the fractions, not the file's splits.group
            value = _split_mapping(value, "splits")
            previous = raw.get("splits")
            for kept in ("group", "folder"):
                if isinstance(previous, dict) and kept in previous and kept not in value:
                    value[kept] = previous[kept]
        node = raw
        *parents, leaf = dotted.split(".")
        for part in parents:
            child = node.setdefault(part, {})
            if part == "splits" and isinstance(child, str):
                child = node[part] = _split_mapping(child, "splits")
            if not isinstance(child, dict):
                raise ConfigError(f"{part}: expected a mapping, got {type(child).__name__}")
            node = child
        node[leaf] = value
    return _validate(_build(Config, raw, ""))


def config_from_settings(settings: Mapping[str, Any]) -> Config:
    """The config a dataset was packed with, from the settings its manifest records
    (``Config.dataset_settings``); raises ConfigError when they do not validate."""
    return _validate(_build(Config, dict(settings), ""))


class _StrictLoader(yaml.SafeLoader):
    """Safe YAML that refuses a key given twice (the second would silently win)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str) and key in seen:
                raise ConfigError(f"line {key_node.start_mark.line + 1}: the key {shown(key)} "
                                  "is given twice")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: over {MAX_CONFIG_BYTES // 1024} KiB: not a job config")
    try:
        data = yaml.load(raw.decode("utf-8"), Loader=_StrictLoader)  # noqa: S506 (safe loader)
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except (yaml.YAMLError, RecursionError) as exc:
        raise ConfigError(f"{path}: not valid YAML: {shown(str(exc), 200)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    if _count_values(data, MAX_CONFIG_VALUES) > MAX_CONFIG_VALUES:
        raise ConfigError(f"{path}: expands to more than {MAX_CONFIG_VALUES:,} values "
                          "(YAML aliases?): not a job config")
    return data


def _count_values(node: Any, budget: int) -> int:
    """Values in ``node`` with aliases expanded, counting no further than ``budget``."""
    count, stack = 0, [node]
    while stack and count <= budget:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack += list(item.keys()) + list(item.values())
        elif isinstance(item, list):
            stack += item
    return count


def _build(cls: type, raw: Any, prefix: str) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping, got {type(raw).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls) if "yaml" not in f.metadata}
    unknown = sorted(str(key) for key in set(raw) - set(fields))
    if unknown:
        raise ConfigError(f"{cut(prefix + unknown[0])}: unknown key (known here: "
                          f"{', '.join(sorted(fields))})")
    values = {}
    for name, value in raw.items():
        key = f"{prefix}{name}"
        default = getattr(cls(), name)
        if dataclasses.is_dataclass(default):
            values[name] = _build(type(default), value, key + ".")
        elif name == "splits":
            values[name], group, folder = _splits(value, key)
            if group:
                values["split_group"] = group
            if folder:
                values["split_folder"] = True
        else:
            values[name] = _coerce(value, default, fields[name].type, key)
    return cls(**values)


def _coerce(value: Any, default: Any, annotation: Any, key: str) -> Any:
    """Check one leaf value against the type of its default (the annotation for ``None``)."""
    if default is None:
        if value is None:
            return None
        default = 0 if "int" in str(annotation) else ""
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{key}: expected true or false, got {shown(value)}")
    if isinstance(default, tuple):
        return _coerce_list(value, default, key)
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if is_number and not math.isfinite(value):
        raise ConfigError(f"{key}: expected a finite number, got {shown(value)}")
    if isinstance(default, float):
        if is_number:
            return float(value)
        raise ConfigError(f"{key}: expected a number, got {shown(value)}")
    if isinstance(default, int):
        if is_number and value == int(value):
            return int(value)
        raise ConfigError(f"{key}: expected an integer, got {shown(value)}")
    if isinstance(value, str) or is_number:
        return str(value)
    raise ConfigError(f"{key}: expected a string, got {shown(value)}")


def _coerce_list(value: Any, default: tuple, key: str) -> tuple:
    """Lists of strings (comma-separated strings accepted) or fixed-length colour triples."""
    if isinstance(value, str):
        value = [part.strip() for part in value.split(",") if part.strip()]
    if not isinstance(value, (list, tuple)):
        raise ConfigError(f"{key}: expected a list, got {shown(value)}")
    if default and isinstance(default[0], int):
        if len(value) != len(default) or not all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 255 for v in value
        ):
            raise ConfigError(f"{key}: expected {len(default)} integers 0-255, got "
                              f"{shown(value)}")
        return tuple(value)
    if not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{key}: expected a list of strings, got {shown(value)}")
    return tuple(value)


def _split_mapping(value: Any, key: str) -> Any:
    """The CLI form ``"train=0.9,val=0.1"`` as a mapping; anything else as it is."""
    if not isinstance(value, str):
        return dict(value) if isinstance(value, dict) else value
    pairs: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in value.split(","))):
        name, sep, fraction = part.partition("=")
        if not sep:
            raise ConfigError(f"{key}: expected NAME=FRACTION, got {part!r}")
        try:
            pairs[name.strip()] = float(fraction)
        except ValueError:
            raise ConfigError(f"{key}.{cut(name.strip())}: not a number: "
                              f"{shown(fraction)}") from None
    return pairs


def _splits(value: Any, key: str) -> tuple[tuple[tuple[str, float], ...], str, bool]:
    """Accept ``{train: 0.9, val: 0.1, group: REGEX}`` or the CLI form ``"train=0.9,val=0.1"``.

    Returns the fractions in order (``train: 1`` when only a group is given), the group
    pattern ("" for none) and whether the top folder names the split (``folder: true``).
    """
    value = _split_mapping(value, key)
    if not isinstance(value, dict) or not value:
        raise ConfigError(f"{key}: expected a mapping of split name to fraction")
    group = _group_pattern(value.pop("group"), f"{key}.group") if "group" in value else ""
    folder = value.pop("folder", False)
    if not isinstance(folder, bool):
        raise ConfigError(f"{key}.folder: expected true or false, got {shown(folder)}")
    splits = []
    for name, fraction in value.items():
        if not isinstance(name, str) or not SPLIT_NAME.match(name):
            raise ConfigError(f"{key}.{cut(str(name))}: split names are lower-case words "
                              "(a-z, 0-9, _; at most 64)")
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
            raise ConfigError(f"{key}.{name}: expected a fraction, got {shown(fraction)}")
        if not 0 < fraction <= 1:
            raise ConfigError(f"{key}.{name}: fraction must be in (0, 1], got {fraction}")
        splits.append((name, float(fraction)))
    if not splits:
        return DEFAULT_SPLITS, group, folder
    total = sum(fraction for _, fraction in splits)
    if abs(total - 1.0) > 1e-6 and not folder:
        raise ConfigError(f"{key}: fractions must add up to 1, they add up to {total:g}")
    return tuple(splits), group, folder


def _group_pattern(value: Any, key: str) -> str:
    """Check ``splits.group``: a regular expression (the name ``group`` is not a split)."""
    if not isinstance(value, str):
        raise ConfigError(f"{key}: expected a regular expression on the relative path (the "
                          f"name group is reserved for it, not a split), got {shown(value)}")
    try:
        re.compile(value)
    except re.error as exc:
        raise ConfigError(f"{key}: not a valid regular expression: {exc}") from None
    return value


def _validate(config: Config) -> Config:
    """Value checks that need more than a type (paths are checked by ``check_paths``)."""
    src, img, out, run = config.source, config.image, config.output, config.run
    _one_of("source.labels", src.labels, LABEL_MODES)
    _one_of("output.format", out.format, FORMATS)
    _one_of("image.resize", img.resize, RESIZE_MODES)
    _one_of("image.color", img.color, COLOR_MODES)
    _one_of("image.subsampling", img.subsampling, SUBSAMPLING)
    if not src.extensions:
        raise ConfigError("source.extensions: at least one extension is needed")
    extensions = tuple(sorted({e.lower().lstrip(".") for e in src.extensions}))
    if not 16 <= img.size <= 16384:
        raise ConfigError(f"image.size: expected 16..16384 pixels, got {img.size}")
    if not 1 <= img.quality <= 100:
        raise ConfigError(f"image.quality: expected 1..100, got {img.quality}")
    if img.max_pixels <= 0:
        raise ConfigError(f"image.max_pixels: must be positive, got {img.max_pixels}")
    if img.max_decoded_mb <= 0:
        raise ConfigError(f"image.max_decoded_mb: must be positive, got {img.max_decoded_mb}")
    if not 0 < out.shard_size_mb <= MAX_SHARD_MB:
        raise ConfigError(f"output.shard_size_mb: expected more than 0 and at most "
                          f"{MAX_SHARD_MB:,} (1 TiB), got {out.shard_size_mb:g}")
    if out.shard_samples is not None and out.shard_samples <= 0:
        raise ConfigError(f"output.shard_samples: must be positive, got {out.shard_samples}")
    _one_of("run.backend", run.backend, BACKENDS)
    _one_of("run.change_detection", run.change_detection, CHANGE_DETECTION)
    if run.backend == "dask" and not run.scheduler:
        raise ConfigError("run.scheduler: the dask backend needs a scheduler address, "
                          "e.g. tcp://scheduler-host:8786")
    if run.workers < 0:
        raise ConfigError(f"run.workers: must be 0 (all cores) or more, got {run.workers}")
    if not 0 <= run.max_reject_fraction <= 1:
        raise ConfigError(
            f"run.max_reject_fraction: expected 0..1, got {run.max_reject_fraction}"
        )
    _validate_tiles(img.tiles)
    config = _validate_annotations(config)
    src = config.source
    return dataclasses.replace(config, source=dataclasses.replace(src, extensions=extensions))


def _validate_tiles(tiles: TileConfig) -> None:
    if not tiles.enabled:
        if tiles.size < 0:
            raise ConfigError(f"image.tiles.size: expected 0 (no tiles) or 16..16384, got "
                              f"{tiles.size}")
        return
    if not 16 <= tiles.size <= 16384:
        raise ConfigError(f"image.tiles.size: expected 16..16384 pixels, got {tiles.size}")
    if not 0 <= tiles.overlap < tiles.size:
        raise ConfigError(f"image.tiles.overlap: expected 0..{tiles.size - 1} (less than the "
                          f"tile), got {tiles.overlap}")
    if not 0 < tiles.scale <= 1:
        raise ConfigError(f"image.tiles.scale: expected more than 0 and at most 1, got "
                          f"{tiles.scale:g}")
    _one_of("image.tiles.keep", tiles.keep, TILE_KEEP)
    if not 0 <= tiles.background_fraction <= 1:
        raise ConfigError(f"image.tiles.background_fraction: expected 0..1, got "
                          f"{tiles.background_fraction:g}")


def _validate_annotations(config: Config) -> Config:
    """Check ``source.annotations`` and resolve its preset into the settings it implies."""
    src = config.source
    notes = src.annotations
    _one_of("source.annotations.preset", notes.preset, ANNOTATION_PRESETS)
    _one_of("source.annotations.files", notes.files, ANNOTATION_FILES)
    _one_of("source.annotations.coordinates", notes.coordinates, COORDINATES)
    _one_of("source.annotations.mask_values", notes.mask_values, MASK_VALUES)
    if not 0 <= notes.min_visible <= 1:
        raise ConfigError(f"source.annotations.min_visible: expected 0..1, got "
                          f"{notes.min_visible:g}")
    if (src.labels == "file") != bool(notes.labels):
        raise ConfigError("source.labels: file reads the labels from source.annotations.labels "
                          "(a CSV or JSON Lines file of path,label): set both or neither")
    if notes.files_dir and not notes.files:
        raise ConfigError("source.annotations.files_dir: set source.annotations.files (yolo, "
                          "voc or labelme) too")
    if notes.coco_root and not notes.coco:
        raise ConfigError("source.annotations.coco_root: set source.annotations.coco too")
    if notes.mask_suffix and not notes.masks:
        raise ConfigError("source.annotations.mask_suffix: set source.annotations.masks too "
                          "(beside, or a folder mirroring the source tree)")
    if notes.masks == "beside" and not notes.mask_suffix:
        raise ConfigError("source.annotations.masks: beside needs a mask_suffix (e.g. _mask): "
                          "the mask of x.jpg is then x_mask.png, never scanned as an image")
    if notes.files == "yolo" and not notes.classes:
        raise ConfigError("source.annotations.classes: YOLO files give class ids; list their "
                          "names in id order (as in the dataset's data.yaml)")
    if notes.mask_values == "index" and not notes.classes:
        raise ConfigError("source.annotations.classes: index masks give class ids; list their "
                          "names in id order (pixel value 1 is the first)")
    if len(set(notes.classes)) != len(notes.classes) or "" in notes.classes:
        raise ConfigError("source.annotations.classes: names must be distinct and not empty")
    if notes.preset != "mvtec":
        return config
    if notes.masks or notes.files or notes.coco or notes.labels:
        raise ConfigError("source.annotations.preset: mvtec reads labels and masks from the "
                          "MVTec AD layout; leave masks, files, coco and labels unset")
    if src.labels != "folders":
        raise ConfigError("source.annotations.preset: mvtec takes the labels from the defect "
                          "folders; leave source.labels at folders")
    splits = config.splits if config.splits != DEFAULT_SPLITS else (("train", 0.5),
                                                                     ("test", 0.5))
    if {"train", "test"} - {name for name, _ in splits}:
        raise ConfigError("splits: the mvtec preset keeps MVTec's own train/ and test/ "
                          "folders as splits; name both (or leave splits unset)")
    return dataclasses.replace(config, splits=splits, split_folder=True)


def _one_of(key: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}: expected one of {', '.join(allowed)}, got {shown(value)}")


def check_paths(config: Config) -> tuple[Path, Path]:
    """Resolve and check source and output before any work; returns (source, output)."""
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
