"""One validated configuration object: YAML file + CLI overrides, resolved once.

Every option lives in a frozen dataclass; the YAML file mirrors the dataclass tree
(``source.path``, ``image.size``, ...).  Each field is declared once, with ``setting()``: its
example-file comment and, where ``pack`` overrides it, its flag and help; ``config.settings``
derives the command-line options and the example job file from that.  Validation errors
name the offending key path so a user can fix the file without reading code.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..storage import Location, is_url, location
from .declare import default_of, setting

# The shard formats (``dataset.formats`` has an object for each) and their files' extension.
FORMATS = {"webdataset": ".tar", "tfrecord": ".tfrecord"}
RESIZE_MODES = ("fit", "shorter", "center_crop", "pad", "stretch")
COLOR_MODES = ("rgb", "gray", "keep")
LABEL_MODES = ("folders", "none", "file")
# The per-image annotation files (``annotations.parse.FILE_PARSERS`` reads each) and their
# extension.
ANNOTATION_FILES = {"yolo": ".txt", "voc": ".xml", "labelme": ".json"}
ANNOTATION_PRESETS = ("", "mvtec")
COORDINATES = ("stored", "upright")
MASK_VALUES = ("binary", "index")
TILE_KEEP = ("annotated", "all")
SUBSAMPLING = ("420", "422", "444")
# Settings in seconds kept as text (``""``: the default): a YAML number is read as its text.
SECONDS_SETTINGS = ("storage.connect_timeout", "storage.read_timeout")
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


@dataclass(frozen=True)
class AnnotationConfig:
    """Where each original's annotations come from (YAML ``source.annotations``).

    Paths are relative to ``source.path`` unless absolute.  Every input is optional; an image
    without an annotation has no objects (a background image).
    """

    preset: str = setting("", comment=(
        "mvtec: the MVTec AD layout (train/good, test/DEFECT,",
        "ground_truth/DEFECT/NAME_mask.png); splits come from its folders"))
    labels: str = setting("", comment=(
        "with labels: file, a CSV (path,label) or JSON Lines file of labels"))
    files: str = setting("", comment=(
        "per-image files with the image's stem: yolo (.txt) | voc (.xml) |",
        "labelme (.json: polygons, rectangles, circles; imageData ignored)"))
    files_dir: str = setting("", comment=(
        '"" = beside the image, else a folder mirroring the source tree'))
    coco: str = setting("", comment="a COCO instances JSON file (boxes, polygons, RLE)")
    coco_root: str = setting("", comment=(
        "the folder under source.path that COCO file_name values start from"))
    masks: str = setting("", comment=(
        "PNG masks: beside (with mask_suffix) or a folder mirroring the tree"))
    mask_suffix: str = setting("", comment=(
        "added to the image's stem for its mask: _mask -> x_mask.png"))
    mask_values: str = setting("binary", comment=(
        "binary: non-zero = the image's class; index: value k = classes[k-1]"))
    mask_class: str = setting("", fingerprinted_unless_default=True, comment=(
        "binary masks: the object class of their marked pixels (e.g. crack);",
        '"" = the image\'s class (its folder name), with a warning'))
    classes: tuple[str, ...] = setting((), comment=(
        "object classes in id order (ids from 1): YOLO ids, index masks; other",
        "names (VOC, LabelMe, COCO) are appended, never reordered"))
    coordinates: str = setting("stored", comment=(
        "stored: annotations describe the file's pixels as stored (they",
        "are turned with the image's EXIF orientation); upright: as displayed"))
    min_visible: float = setting(0.25, comment=(
        "an object of which less shows in a crop or tile is dropped (share of",
        "its polygon's area, or of its box)"))
    merge_iou: float = setting(0.5, fingerprinted_unless_default=True, comment=(
        "a mask and a box of one class whose boxes overlap by this IoU or more",
        "are one object (its box from the mask); 0 = never merge"))

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

    path: str = setting("", example="/mnt/nas/line3/originals", comment=(
        "the image tree (a NAS is just a mounted path) or s3://bucket/prefix"))
    extensions: tuple[str, ...] = setting(DEFAULT_EXTENSIONS, comment="case-insensitive")
    include: tuple[str, ...] = setting((), comment=(
        'glob patterns on the relative path; empty = everything, e.g. ["*/cam1_*"]'))
    exclude: tuple[str, ...] = setting((), comment=(
        """glob patterns to leave out, e.g. ["*_tmp.*"]  ('*' also matches '/')"""))
    labels: str = setting(
        "folders", flag="--labels", choices=LABEL_MODES,
        help="folders: the first folder under SOURCE is the class; none: no labels (a flat "
        "folder).",
        comment=("folders: label = first directory under path (class folders);",
                 "none: no labels (a flat folder), also --labels none",
                 "file: labels from annotations.labels (a CSV or JSON Lines file)"))
    follow_symlinks: bool = setting(False, comment=(
        "symlinked files and folders are skipped unless true"))
    annotations: AnnotationConfig = setting(
        factory=AnnotationConfig, fingerprinted_unless_default=True,
        comment=("defect annotations, carried through every resize, EXIF turn and tile;",
                 "paths are relative to source.path unless absolute; an image without",
                 "an annotation has no objects (a background image); annotation files",
                 "and mask folders are never packed as images"))


@dataclass(frozen=True)
class TileConfig:
    """Cut each original into tiles at (near) full resolution instead of resizing it
    (YAML ``image.tiles``; off while ``size`` is 0)."""

    size: int = setting(0, comment="tile side in pixels; 0 = no tiles")
    overlap: int = setting(0, comment=(
        "pixels shared by neighbouring tiles (the last row and column are",
        "aligned to the border)"))
    scale: float = setting(1.0, comment=(
        "scale the original by this first (0 < scale <= 1; a reduced decode)"))
    keep: str = setting("annotated", comment=(
        "annotated: tiles holding an annotation, plus background_fraction of",
        "the others (seeded); all: every tile.  Without box or mask",
        "annotations every tile is kept, with the image's label"))
    background_fraction: float = setting(0.1)

    @property
    def enabled(self) -> bool:
        return self.size > 0


@dataclass(frozen=True)
class ImageConfig:
    """How each original becomes a training sample (everything that changes pixels)."""

    size: int = setting(
        512, flag="--size", help="Target size in pixels (meaning depends on --resize).",
        comment="target size in pixels; what it measures depends on resize:")
    resize: str = setting(
        "fit", flag="--resize", choices=RESIZE_MODES,
        help="fit: longest side = size; shorter: shorter side = size; center_crop: size x "
        "size from the centre; pad: fit, then letterbox to size x size; stretch: size x size "
        "ignoring aspect.",
        comment=("fit: longest side = size, aspect kept",
                 "shorter: shorter side = size, aspect kept",
                 "center_crop: size x size from the centre of the image",
                 "pad: fit, then letterbox to size x size with pad_color",
                 "stretch: size x size, aspect not kept"))
    upscale: bool = setting(False, comment=(
        "images smaller than the target keep their size unless true"))
    quality: int = setting(
        90, flag="--quality", help="JPEG quality 1-100.",
        comment="JPEG quality 1-100 (baseline JPEG, as GPU decoders want)")
    subsampling: str = setting("420", comment='chroma subsampling: "420" | "422" | "444"')
    color: str = setting("rgb", comment=(
        "rgb: every sample 3 channels; gray: every sample 1 channel;",
        "keep: grayscale originals stay 1 channel, colour ones RGB"))
    # The next four are long lines: their comments share a column of their own.
    background: tuple[int, int, int] = setting(
        (255, 255, 255), comment_column=32,
        comment="RGB under transparent pixels (alpha is composited)")
    pad_color: tuple[int, int, int] = setting(
        (0, 0, 0), comment_column=32, comment="RGB of the letterbox bars (resize: pad)")
    max_pixels: int = setting(300_000_000, comment_column=32, comment=(
        "originals with more pixels are rejected (decompression bombs);",
        "line-scan cameras legitimately exceed Pillow's 89 MP warning"))
    max_decoded_mb: int = setting(
        1024, fingerprinted_unless_default=True, comment_column=32,
        comment=("memory one worker may need to decode an original (file bytes",
                 "+ decoded pixels at their depth, from the header); over it the",
                 "original is rejected as too_large before decoding.  Worst-case",
                 "memory of a pack: workers x this + the driver"))
    tiles: TileConfig = setting(
        factory=TileConfig, fingerprinted_unless_default=True,
        comment=("cut each original into tiles instead of resizing it (size and resize",
                 "then do not apply), so small defects keep their pixels"))


@dataclass(frozen=True)
class OutputConfig:
    """Where the shards go and how they are cut."""

    path: str = setting("", example="/data/shards/line3")
    format: str = setting(
        "webdataset", flag="--format", choices=tuple(FORMATS), help="Shard format.",
        comment="webdataset (SPLIT-NNNNNN.tar) | tfrecord (SPLIT-NNNNNN.tfrecord + .idx)")
    shard_size_mb: float = setting(
        256.0, flag="--shard-size", help="Target shard size in MB.", example="256",
        comment="target shard size; a shard never grows past it (unless one sample does)")
    shard_samples: int | None = setting(
        None, flag="--shard-samples", help="Samples per shard (instead of a size target).",
        comment="or a fixed number of samples per shard (takes precedence)")
    near_hashes: bool = setting(True, comment=(
        "hash each sample for shardsmith inspect --near-duplicates: the sample index",
        "only, ~2 ms a sample of the pool's time (not part of the fingerprint)"))
    keep_changes: int = setting(30, comment=(
        "keep changes-vN.jsonl (what a version changed: shardsmith diff) for the",
        "last this many versions; 0 = none (not part of the fingerprint)"))

    @property
    def shard_bytes(self) -> int:
        return int(self.shard_size_mb * 1024 * 1024)


@dataclass(frozen=True)
class RunConfig:
    """How the job runs; none of this changes the output bytes."""

    workers: int = setting(
        0, flag="--workers", help="Worker processes; 0 = all cores.",
        comment="worker processes; 0 = all cores (local backend)")
    backend: str = setting(
        "local", flag="--backend", choices=BACKENDS,
        help="Where images are processed: local processes, or an existing Dask cluster "
        "(needs --scheduler).",
        comment="local: worker processes on this machine; dask: an existing Dask cluster")
    scheduler: str = setting(
        "", flag="--scheduler", help="Dask scheduler address, e.g. tcp://scheduler-host:8786.",
        comment="dask only: scheduler address, e.g. tcp://scheduler-host:8786")
    readahead: bool = setting(False, comment=(
        "hint the kernel to fetch upcoming files while workers decode; costs a",
        "second open per file: more --workers than cores usually overlaps",
        "NAS reads better (shardsmith probe says when)"))
    max_reject_fraction: float = setting(
        0.01, flag="--max-reject-fraction",
        help="Exit with code 3 when more than this fraction of images is rejected (the "
        "dataset is written all the same).",
        comment="exit code 3 when a larger fraction of images is rejected")
    quiet: bool = setting(
        False, flag="--quiet",
        help="No progress output (without a terminal, progress is a log line a minute).",
        comment="no progress bar (for cron)")
    overwrite: bool = setting(
        False, flag="--overwrite", help="Replace a dataset packed with different settings.",
        comment="replace a dataset in output.path packed with other settings")
    compact: bool = setting(
        False, flag="--compact",
        help="Merge shards under half the target size (small nightly deltas) into full ones.",
        comment="merge shards under half the target size (small nightly deltas)")
    change_detection: str = setting("content", comment=(
        "an original whose size or mtime changed is read again and",
        "decoded only if its content changed: content = XXH3 of every byte",
        "(sound; reads the whole file again), edges = the first and last",
        "64 KiB (reads 128 KiB; misses a same-size edit in the middle of an",
        "uncompressed BMP or TIFF)"))

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

    to: str = setting("", example="/nvme/shards/line3", comment=(
        "destination of `shardsmith stage` on the training machine"))


@dataclass(frozen=True)
class StorageConfig:
    """How to reach an ``s3://`` source (YAML ``storage``): handed to s3fs, with the same keys
    as ``--storage``.  Each is optional: the standard AWS variables and files serve otherwise.
    Never part of the fingerprint, the manifest, a report or a log line (``repr`` hides the
    credentials)."""

    endpoint_url: str = setting("", comment=(
        "e.g. http://minio.lan:9000 (MinIO); \"\" = AWS_ENDPOINT_URL or AWS itself"))
    region: str = setting("", comment='"" = AWS_DEFAULT_REGION')
    key: str = setting("", comment='credentials: "" = the AWS variables or ~/.aws (better)')
    secret: str = setting("")
    token: str = setting("")
    profile: str = setting("", comment="a profile of ~/.aws/credentials")
    anon: bool = setting(False, comment="true: a public bucket, no credentials")
    connect_timeout: str = setting("", comment='seconds; "" = 10 (docs/storage.md)')
    read_timeout: str = setting("", comment='seconds; "" = 30 (docs/storage.md)')

    def options(self) -> dict[str, str]:
        """The options given, as ``storage.locate`` takes them."""
        return {item.name: "true" if getattr(self, item.name) is True
                else getattr(self, item.name)
                for item in dataclasses.fields(self) if getattr(self, item.name)}

    def credentials(self) -> tuple[str, ...]:
        """The names of the credentials given here (never their values)."""
        return tuple(name for name in ("key", "secret", "token") if getattr(self, name))

    def __repr__(self) -> str:
        shown = {name: value for name, value in self.options().items()
                 if name not in ("key", "secret", "token")}
        return f"StorageConfig({shown}, credentials={list(self.credentials())})"


@dataclass(frozen=True)
class Config:
    """The whole job. ``splits`` maps split name to fraction, in the order given."""

    source: SourceConfig = setting(factory=SourceConfig)
    output: OutputConfig = setting(factory=OutputConfig)
    image: ImageConfig = setting(factory=ImageConfig)
    splits: tuple[tuple[str, float], ...] = setting(
        DEFAULT_SPLITS, flag="--split",
        help="Split fractions, e.g. train=0.9,val=0.1 (assigned by path hash, stable when "
        "files are added).",
        comment=("fractions adding up to 1, e.g. train: 0.9 and val: 0.1; a file's split",
                 "comes from a hash of its relative path, so it never moves when other",
                 "files are added"))
    split_group: str = setting(
        "", yaml="splits.group", flag="--group", metavar="REGEX",
        help="Keep the images of one part, lot or camera session in one split: a regular "
        "expression on the relative path whose match (or named group 'group') is the group id "
        "(splits.group).",
        comment=("or (--group) a regular expression on the relative path whose match",
                 '(or named group "group") names a part, lot or camera session, e.g.',
                 "'^[^/]+/(?P<group>lot[0-9]+)_': all images of a group go to the same",
                 "split (by a hash of the group id), so a model is never validated on",
                 'the part it trained on; "" = every file on its own'))
    split_folder: bool = setting(
        False, yaml="splits.folder",
        comment=("true: the top folder names the split (train/, test/) and the class",
                 "folder is the one below it; the fractions are not used"))
    split_near_duplicates: str = setting(
        "independent", yaml="splits.near_duplicates", choices=("independent", "together"),
        flag="--near-duplicates",
        help="together: the shots of one part (a cluster of inspect --near-duplicates) go to "
        "one split; a packed sample never moves (splits.near_duplicates).",
        comment=("together: the shots of one part (a cluster",
                 "of shardsmith inspect --near-duplicates) go to one split, so validation",
                 "does not score what training saw; a new image joins its cluster's split,",
                 "a packed one never moves (docs/know-your-data.md); needs",
                 "output.near_hashes (not part of the fingerprint)"))
    seed: int = setting(
        0, flag="--seed", help="Shuffle seed.",
        comment="shuffle seed: samples are shuffled (per split) before sharding")
    run: RunConfig = setting(factory=RunConfig)
    stage: StageConfig = setting(factory=StageConfig)
    storage: StorageConfig = setting(factory=StorageConfig, comment=(
        "an s3:// source: how to reach it (the AWS variables serve without it)"))

    def dataset_settings(self) -> dict[str, Any]:
        """Every option that changes the shard bytes (not paths, workers or logging).

        This is what the manifest records as ``config`` and what the fingerprint hashes.
        """
        return {
            "source": _settings(self.source, skip="path"),
            # which changes files are kept changes no sample
            "output": _settings(self.output, skip=("path", "keep_changes", "near_hashes")),
            "image": _settings(self.image),
            "splits": dict(self.splits)
            | ({"group": self.split_group} if self.split_group else {})
            | ({"folder": True} if self.split_folder else {}),
            "seed": self.seed,
        }

    def fingerprint(self, classes: tuple[str, ...] | None = None) -> str:
        """Hash of ``dataset_settings``: equal fingerprints mean equal shards from equal sources.

        With ``classes``: the fingerprint this config would have with
        ``source.annotations.classes`` set to them.  A dataset's fingerprint equal to it means
        its settings differ from these in the class list alone (the list may grow: ids index
        it, so an appended class changes no packed sample).  Computed, not stored, so every
        manifest ever written keeps the one fingerprint it has."""
        settings = self if classes is None else dataclasses.replace(
            self, source=dataclasses.replace(
                self.source, annotations=dataclasses.replace(self.source.annotations,
                                                             classes=tuple(classes))))
        blob = json.dumps(settings.dataset_settings(), separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()


def _settings(section: Any, skip: str | tuple[str, ...] = ()) -> dict[str, Any]:
    out = {}
    for item in dataclasses.fields(section):
        value = getattr(section, item.name)
        if item.name in ((skip,) if isinstance(skip, str) else skip):
            continue
        if item.metadata.get("fingerprint") == "unless_default" and value == default_of(item):
            continue
        if dataclasses.is_dataclass(value):
            out[item.name] = _settings(value)
            continue
        out[item.name] = _plain(value)
    return out


def _plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple):
        return [_plain(item) for item in obj]
    return obj


def check_paths(config: Config) -> tuple[Location, Location]:
    """Resolve and check source and output (and the local worker count) before any work;
    returns (source, output): each its backend's location for a URL (``s3://``: an
    ``ObjectPath``; a URL stays a URL: never a path under the working directory)."""
    check_workers(config.run)
    if not config.source.path:
        raise ConfigError("source.path: no source directory given (argument SOURCE or config)")
    if not config.output.path:
        raise ConfigError("output.path: no output directory given (argument OUTPUT or config)")
    output: Location
    if is_url(config.output.path):
        output = location(config.output.path, config.storage.options())
        if "/" not in str(output).partition("://")[2]:
            raise ConfigError(f"output.path: {output}: give a prefix for the dataset "
                              "(s3://bucket/name)")
    else:
        output = Path(location(config.output.path)).expanduser().resolve()
    if is_url(config.source.path):
        source = check_object_source(config)
        inside, around = f"{source}/", f"{output}/"
        if str(output) == str(source) or str(output).startswith(inside):
            raise ConfigError(f"output.path: {output} is inside the source {source}")
        if str(source).startswith(around):
            raise ConfigError(f"output.path: {output} contains the source {source}")
        return source, output
    source = Path(location(config.source.path)).expanduser().resolve()
    if not source.is_dir():
        raise ConfigError(f"source.path: {source} is not a directory")
    if is_url(output):
        return source, output
    if output == source or source in output.parents:
        raise ConfigError(f"output.path: {output} is inside the source tree {source}")
    if output in source.parents:
        raise ConfigError(f"output.path: {output} contains the source tree {source}")
    if output.exists() and not output.is_dir():
        raise ConfigError(f"output.path: {output} exists and is not a directory")
    return source, output


def check_object_source(config: Config) -> Location:
    """The source of ``config`` in a store: ConfigError (one line, exit 2) for a bad URL, for
    links (a bucket has none), and for credentials in the job file with the Dask
    backend (they would travel to the workers in the task graph)."""
    source = location(config.source.path, config.storage.options())
    if config.source.follow_symlinks:
        raise ConfigError("source.follow_symlinks: an s3:// source has no links")
    if config.run.backend == "dask" and config.storage.credentials():
        raise ConfigError(f"storage.{config.storage.credentials()[0]}: credentials are not "
                          "sent to Dask workers (they would be in the task graph); give the "
                          "workers the AWS variables or a profile")
    return source
