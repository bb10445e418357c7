"""Reading a job config: strict, safe YAML, every value checked against its setting's type
by the one schema (``shardsmith.schema``: no ``"1"`` for 1, no ``1.0`` for 1) and then against
what the setting allows, errors naming the key (``config.load_config`` is the way in).

A job file is untrusted input: a key given twice, an alias bomb, a value of the wrong type or
an impossible number is one ``ConfigError`` line, and values quoted in errors are cut short.
What is here is what a type cannot say: the YAML's safety limits, duplicate and unknown keys,
the ``splits`` mapping, regular expressions, and the rules between settings.
"""

from __future__ import annotations

import dataclasses
import math
import os
import typing
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import regex
import yaml

from ..door import CONFIG_CAP, Refused, read_file
from ..errors import ConfigError
from ..schema import parse
from ..text import cut, shown
from ..tiling import grid_problem
from .model import (
    ANNOTATION_FILES,
    ANNOTATION_PRESETS,
    BACKENDS,
    CHANGE_DETECTION,
    COLOR_MODES,
    COORDINATES,
    DEFAULT_SPLITS,
    FORMATS,
    LABEL_MODES,
    MASK_VALUES,
    MAX_CONFIG_DEPTH,
    MAX_CONFIG_INTEGER,
    MAX_CONFIG_VALUES,
    MAX_SHARD_MB,
    RESIZE_MODES,
    SECONDS_SETTINGS,
    SPLIT_NAME,
    SUBSAMPLING,
    TILE_KEEP,
    Config,
    TileConfig,
)
from .pattern import check_group_pattern


def build(raw: dict[str, Any]) -> Config:
    """The validated ``Config`` of a raw settings tree (YAML file plus overrides)."""
    return _validate(_build(raw))


class _StrictLoader(yaml.SafeLoader):
    """Safe YAML for an untrusted job file: every construct it cannot take is a ``ConfigError``
    naming the line, never another exception.  It refuses a key given twice (the second would
    silently win), a key that is a list or a mapping (unhashable), collections nested past
    ``MAX_CONFIG_DEPTH`` (the composer recurses per level), integers past
    ``MAX_CONFIG_INTEGER`` and scalars their tag cannot build (``2001-13-45``, ``!!int x``)."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        self.depth += 1
        try:
            if self.depth > MAX_CONFIG_DEPTH:
                raise ConfigError(f"line {self.peek_event().start_mark.line + 1}: nested more "
                                  f"than {MAX_CONFIG_DEPTH} deep: not a job config")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, OverflowError):
            tag = node.tag.rsplit(":", 1)[-1]
            value = shown(node.value) if isinstance(node, yaml.ScalarNode) else "the value"
            raise ConfigError(f"line {node.start_mark.line + 1}: {value} cannot be read as "
                              f"a YAML {tag}") from None

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen = set()
        for key_node, _ in node.value:
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode):
                kind = "list" if isinstance(key_node, yaml.SequenceNode) else "mapping"
                raise ConfigError(f"line {line}: a key must be a name, not a {kind}")
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise ConfigError(f"line {line}: the key {shown(key)} is given twice")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_bounded_int(self, node: yaml.ScalarNode) -> int:
        # 2**63 is 64 binary digits: a longer one is out of range before Python's 4,300-digit
        # limit on int() could raise
        digits = str(node.value).replace("_", "")
        if len(digits) > 80 or abs(number := self.construct_yaml_int(node)) > MAX_CONFIG_INTEGER:
            raise ConfigError(f"line {node.start_mark.line + 1}: {shown(node.value)} is out "
                              "of range (at most 2**63 - 1)")
        return number


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_bounded_int)


def read_yaml(path: Path) -> dict[str, Any]:
    """The settings tree of a job file, read through the door (a symlink named on the command
    line is the user's choice and is followed; a FIFO, device or folder is refused unread)."""
    try:
        raw = read_file(path, CONFIG_CAP, follow_symlinks=True)
    except Refused as exc:
        if exc.reason == "too_large":
            raise ConfigError(f"{path}: over {CONFIG_CAP // 1024 // 1024} MiB: not a job "
                              "config") from None
        raise ConfigError(f"config file {path} {exc.detail}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
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


def _build(raw: dict[str, Any]) -> Config:
    """``raw`` as a ``Config``: the keys checked here, the types by ``shardsmith.schema``,
    ``splits`` (a mapping with reserved keys, or the CLI's ``train=0.9,val=0.1``) by hand."""
    raw = dict(raw)
    splits = _splits(raw.pop("splits"), "splits") if "splits" in raw else None
    _check_section(Config, raw, "")
    config = parse(Config, raw, "", error=ConfigError)
    if splits is None:
        return config
    fractions, group, folder, near = splits
    return dataclasses.replace(config, splits=fractions, split_group=group, split_folder=folder,
                               split_near_duplicates=near)


@cache
def _keys(cls: type) -> dict[str, Any]:
    """The YAML keys of a settings section and their types (``splits.group``,
    ``splits.folder`` and ``splits.near_duplicates`` are keys of ``splits``, not of the
    section holding their fields)."""
    hints = typing.get_type_hints(cls)
    return {item.name: hints[item.name] for item in dataclasses.fields(cls)
            if "yaml" not in item.metadata}


def _check_section(cls: type, raw: Any, prefix: str) -> None:
    """Refuse what the schema would not name well, in place: a section that is not a mapping,
    an unknown key, an integer past 63 bits (before it is turned into a float, or printed past
    Python's 4,300-digit limit), a number that is not finite; and read a comma-separated string
    where a list of names belongs (``extensions: jpg, png``) as that list."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'}: expected a mapping, got "
                          f"{type(raw).__name__}")
    known = _keys(cls)
    unknown = sorted(str(key) for key in set(raw) - set(known))
    if unknown:
        raise ConfigError(f"{cut(prefix + unknown[0])}: unknown key (known here: "
                          f"{', '.join(sorted(known))})")
    for name, value in raw.items():
        key, annotation = f"{prefix}{name}", known[name]
        if dataclasses.is_dataclass(annotation):
            _check_section(annotation, value, key + ".")
        elif isinstance(value, str) and annotation == tuple[str, ...]:
            raw[name] = [part.strip() for part in value.split(",") if part.strip()]
        elif annotation is str and type(value) is int and str(value) in SUBSAMPLING:
            # ``subsampling: 444`` unquoted is how YAML users write it, and every release
            # before the strict schema read it as the name "444": it stays readable.
            raw[name] = str(value)
        elif key in SECONDS_SETTINGS and isinstance(value, (int, float)) \
                and not isinstance(value, bool):
            # ``connect_timeout: 1`` unquoted: seconds, as ``--storage connect_timeout=1``
            # says them (the client checks the range when it is made).
            _check_number(value, key)
            raw[name] = str(value)
        else:
            for item in value if isinstance(value, list) else (value,):
                _check_number(item, key)


def _check_number(value: Any, key: str) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and \
            abs(value) > MAX_CONFIG_INTEGER:  # from JSON settings; YAML refuses it when read
        raise ConfigError(f"{key}: a {value.bit_length():,}-bit integer is out of range (at "
                          "most 2**63 - 1)")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{key}: expected a finite number, got {shown(value)}")


def split_mapping(value: Any, key: str) -> Any:
    """The CLI form ``"train=0.9,val=0.1"`` as a mapping; anything else as it is."""
    if not isinstance(value, str):
        return dict(value) if isinstance(value, dict) else value
    pairs: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in value.split(","))):
        name, sep, fraction = part.partition("=")
        if not sep:
            raise ConfigError(f"{key}: expected NAME=FRACTION, got {part!r}")
        if name.strip() in pairs:  # the last would silently win, and the sum blame the rest
            raise ConfigError(f"{key}.{cut(name.strip())}: the split is given twice in "
                              f"{shown(value)}")
        try:
            pairs[name.strip()] = float(fraction)
        except ValueError:
            raise ConfigError(f"{key}.{cut(name.strip())}: not a number: "
                              f"{shown(fraction)}") from None
    return pairs


def _splits(value: Any, key: str) -> tuple[tuple[tuple[str, float], ...], str, bool, str]:
    """Accept ``{train: 0.9, val: 0.1, group: REGEX}`` or the CLI form ``"train=0.9,val=0.1"``.

    Returns the fractions in order (``train: 1`` when only a group is given), the group
    pattern ("" for none), whether the top folder names the split (``folder: true``) and
    what near-duplicates do (``near_duplicates``: independent or together).
    """
    value = split_mapping(value, key)
    if not isinstance(value, dict) or not value:
        raise ConfigError(f"{key}: expected a mapping of split name to fraction")
    group = _group_pattern(value.pop("group"), f"{key}.group") if "group" in value else ""
    folder = value.pop("folder", False)
    if not isinstance(folder, bool):
        raise ConfigError(f"{key}.folder: expected true or false, got {shown(folder)}")
    near = value.pop("near_duplicates", "independent")
    if near not in ("independent", "together"):
        raise ConfigError(f"{key}.near_duplicates: expected independent or together, got "
                          f"{shown(near)}")
    splits = []
    for name, fraction in value.items():
        if not isinstance(name, str) or not SPLIT_NAME.match(name):
            raise ConfigError(f"{key}.{cut(str(name))}: split names are lower-case words "
                              "(a-z, 0-9, _; at most 64)")
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
            raise ConfigError(f"{key}.{name}: expected a fraction, got {shown(fraction)}")
        _check_number(fraction, f"{key}.{name}")
        if not 0 < fraction <= 1:
            raise ConfigError(f"{key}.{name}: fraction must be in (0, 1], got {fraction}")
        splits.append((name, float(fraction)))
    if not splits:
        return DEFAULT_SPLITS, group, folder, near
    total = sum(fraction for _, fraction in splits)
    if abs(total - 1.0) > 1e-6 and not folder:
        raise ConfigError(f"{key}: fractions must add up to 1, they add up to {total:g}")
    return tuple(splits), group, folder, near


def _group_pattern(value: Any, key: str) -> str:
    """Check ``splits.group``: a regular expression (the name ``group`` is not a split)."""
    if not isinstance(value, str):
        raise ConfigError(f"{key}: expected a regular expression on the relative path (the "
                          f"name group is reserved for it, not a split), got {shown(value)}")
    check_group_pattern(value, key)  # before compiling: compiling expands counted repeats
    try:
        regex.compile(value)  # as the plan compiles it (plan.group_pattern)
    except regex.error as exc:
        raise ConfigError(f"{key}: not a valid regular expression: {exc}") from None
    return value


def _validate(config: Config) -> Config:
    """Value checks that need more than a type (paths are checked by ``check_paths``)."""
    src, img, out, run = config.source, config.image, config.output, config.run
    _one_of("source.labels", src.labels, LABEL_MODES)
    _one_of("output.format", out.format, tuple(FORMATS))
    _one_of("image.resize", img.resize, RESIZE_MODES)
    _one_of("image.color", img.color, COLOR_MODES)
    _one_of("image.subsampling", img.subsampling, SUBSAMPLING)
    if not src.extensions:
        raise ConfigError("source.extensions: at least one extension is needed")
    extensions = tuple(sorted({e.lower().lstrip(".") for e in src.extensions}))
    for key, color in (("image.background", img.background), ("image.pad_color", img.pad_color)):
        if not all(0 <= value <= 255 for value in color):
            raise ConfigError(f"{key}: expected 3 integers 0-255, got {list(color)}")
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
    if not 0 <= out.keep_changes <= 10**9:
        raise ConfigError(f"output.keep_changes: must be from 0 to 1000000000 (versions), got "
                          f"{out.keep_changes}")
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
    if config.split_near_duplicates == "together" and not out.near_hashes:
        raise ConfigError("splits.near_duplicates: together finds the clusters from the "
                          "samples' hashes; leave output.near_hashes on")
    _validate_tiles(img.tiles)
    config = _validate_annotations(config)
    src = config.source
    return dataclasses.replace(config, source=dataclasses.replace(src, extensions=extensions))


def _validate_tiles(tiles: TileConfig) -> None:
    # The ranges that do not depend on the tile size hold with tiles off too: a wrong value
    # there is a mistake the day tiles are turned on, and would be recorded as it is.
    if not 0 < tiles.scale <= 1:
        raise ConfigError(f"image.tiles.scale: expected more than 0 and at most 1, got "
                          f"{tiles.scale:g}")
    _one_of("image.tiles.keep", tiles.keep, TILE_KEEP)
    if not 0 <= tiles.background_fraction <= 1:
        raise ConfigError(f"image.tiles.background_fraction: expected 0..1, got "
                          f"{tiles.background_fraction:g}")
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
    if (problem := grid_problem(tiles)) is not None:
        raise ConfigError(f"image.tiles: {problem}")


def _validate_annotations(config: Config) -> Config:
    """Check ``source.annotations`` and resolve its preset into the settings it implies."""
    src = config.source
    notes = src.annotations
    _one_of("source.annotations.preset", notes.preset, ANNOTATION_PRESETS)
    _one_of("source.annotations.files", notes.files, ("", *ANNOTATION_FILES))
    _one_of("source.annotations.coordinates", notes.coordinates, COORDINATES)
    _one_of("source.annotations.mask_values", notes.mask_values, MASK_VALUES)
    if not 0 <= notes.min_visible <= 1:
        raise ConfigError(f"source.annotations.min_visible: expected 0..1, got "
                          f"{notes.min_visible:g}")
    if not 0 <= notes.merge_iou <= 1:
        raise ConfigError(f"source.annotations.merge_iou: expected 0..1 (0 = never merge), "
                          f"got {notes.merge_iou:g}")
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
    if notes.mask_class and not (notes.masks and notes.mask_values == "binary"):
        raise ConfigError("source.annotations.mask_class: names the class of binary masks; set "
                          "source.annotations.masks too (and mask_values: binary)")
    if notes.mask_class != notes.mask_class.strip():
        raise ConfigError("source.annotations.mask_class: a class name without leading or "
                          "trailing blanks")
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


def load_config(
    path: str | os.PathLike | None = None, overrides: Mapping[str, Any] | None = None
) -> Config:
    """Read an optional YAML file, apply dotted-key overrides (``{"image.size": 256}``), validate.

    Raises ConfigError naming the key for unknown keys, wrong types and bad values.
    """
    raw: dict[str, Any] = {}
    if path is not None:
        raw = read_yaml(Path(path))
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        if dotted == "splits":  # --split replaces the fractions, not the file's splits.group
            value = split_mapping(value, "splits")
            previous = raw.get("splits")
            for kept in ("group", "folder", "near_duplicates"):
                if isinstance(previous, dict) and kept in previous and kept not in value:
                    value[kept] = previous[kept]
        node = raw
        *parents, leaf = dotted.split(".")
        for part in parents:
            child = node.setdefault(part, {})
            if part == "splits" and isinstance(child, str):
                child = node[part] = split_mapping(child, "splits")
            if not isinstance(child, dict):
                raise ConfigError(f"{part}: expected a mapping, got {type(child).__name__}")
            node = child
        node[leaf] = value
    return build(raw)


def config_from_settings(settings: Mapping[str, Any]) -> Config:
    """The config a dataset was packed with, from the settings its manifest records
    (``Config.dataset_settings``); raises ConfigError when they do not validate."""
    return build(dict(settings))
