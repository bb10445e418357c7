"""Every command's parameters, declared as data: one frozen dataclass per command, a field per
argument or option in the order ``--help`` lists them (``config.declare.option``).  ``cli``
makes the click parameters from them and calls each command with one instance; a ``settings``
field stands for ``pack``'s setting flags (``config.settings``), holding their overrides.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .declare import PARAMETER, Parameter, argument, option
from .settings import flag_kind

CONFIG_HELP = ("The job file: its output.path is the dataset (when DATASET is not given), its "
               "storage: section reaches an s3:// one (--storage over it).")


def _config_file(help: str = CONFIG_HELP) -> Any:  # noqa: A002 (the name click uses)
    return option(None, "--config", path="file", help=help)


def _storage() -> Any:
    return option((), "--storage", metavar="KEY=VALUE", help=(
        "For an s3:// dataset: endpoint_url, region, key, secret, token, profile or anon, "
        "over the job file's storage: section (default: the AWS variables, "
        "AWS_ENDPOINT_URL for MinIO)."))


def _named_source() -> Any:
    return option(None, "--source", metavar="DIR|s3://...", help=(
        "Where the originals are (the folder or URL packed from): rejected originals and "
        "--quality are read only under a source named here or in a --config job file, never "
        "under the one the dataset records."))


@dataclass(frozen=True)
class PackCommand:
    source: str | None = argument(path="dir")
    output: str | None = argument(path="dir")
    config_file: str | None = _config_file(
        "YAML config file (`shardsmith init-config > job.yaml` writes one with every key and "
        "its default); options below override it.")
    settings: dict[str, Any] = field(default_factory=dict)
    report_file: str | None = option(None, "--report", path="file", help=(
        "Also write a machine-readable summary (JSON) here, on success or failure."))
    dry_run: bool = option(False, "--dry-run", help=(
        "Scan and plan only: counts per class and split, bytes in, expected shards. Writes "
        "nothing (the output directory is not even created)."))
    with_probe: bool = option(False, "--probe", help=(
        "With --dry-run: also measure the storage and the CPU on a sample (as `shardsmith "
        "probe`) and estimate the time."), needs="dry_run")
    storage_options: tuple[str, ...] = _storage()


@dataclass(frozen=True)
class ProbeCommand:
    source: str | None = argument(path="dir")
    config_file: str | None = _config_file(
        "The job's YAML config: its source, image settings, format and splits.")
    sample: int = option(32, "--sample", bounds=(1, None), show_default=True, help=(
        "Originals to read and convert (a seeded random sample, seed = the job's)."))
    workers: int | None = option(None, "--workers", bounds=(0, None), help=(
        "Cores to predict for; 0 = all cores of this machine.  [default: the job's "
        "run.workers]"))
    gpu_demand: float | None = option(None, "--gpu-demand", bounds=(0, None), above=True,
                                      help="Images/s the training GPU consumes: adds its "
                                      "expected utilisation.")
    as_json: bool = option(False, "--json", help="Print one JSON document instead.")
    quiet: bool = option(False, "--quiet", help="No progress lines on stderr.")


@dataclass(frozen=True)
class InitConfigCommand:
    pass


@dataclass(frozen=True)
class InspectCommand:
    dataset: str | None = argument(path="dataset", exists=True)
    split: str | None = option(None, "--split", help=(
        "Only this split (rejects and excluded files are the dataset's)."))
    as_json: bool = option(False, "--json", help="One JSON document, for scripts.")
    all_rejects: bool = option(False, "--rejects",
                               help="List every reject (default: the first 20).")
    all_excluded: bool = option(False, "--excluded", help=(
        "List every recorded excluded path (default: the first 20 of each reason)."))
    quality: int = option(0, "--quality", bounds=(0, None), metavar="N", help=(
        "Also measure N seeded samples against an exact resize of their originals (PSNR, SSIM "
        "per class; reads the originals under --source)."))
    seed: int = option(0, "--seed", show_default=True, help=(
        "Seed of the samples --quality measures, and of the --weights draw (the readers' "
        "seed=)."))
    imbalance: float = option(10.0, "--imbalance", bounds=(1, None), show_default=True, help=(
        "Warn when the largest class has more than this many times the samples of the "
        "smallest."))
    weights: str | None = option(None, "--weights", metavar="SPEC", help=(
        "Instead, show the class mix these class weights draw in an epoch of the torch and "
        "DALI readers (their weights=): SPEC like 'scratch=10,dent=10,*=1' (CLASS or #ID = "
        "weight; * every other class)."))
    draws: int | None = option(None, "--draws", bounds=(1, None), metavar="N", help=(
        "Samples of the --weights epoch (the readers' draws=; default: the selection's "
        "size)."), needs="weights",
        needs_why="--draws sets the size of the --weights epoch: give --weights too")
    near_duplicates: bool = option(False, "--near-duplicates", help=(
        "Instead, list the originals shot more than once (re-shots, frames of a slow belt, "
        "re-exports): clusters of samples whose parts match, those across splits first "
        "(reads every stored sample)."))
    distance: int = option(14, "--distance", bounds=(0, 30), metavar="BITS",
                           show_default=True, help=(
        "Hash bits within which two samples are checked as --near-duplicates."),
        needs="near_duplicates",
        needs_why="--distance is the reach of --near-duplicates: give --near-duplicates too")
    workers: int = option(0, "--workers", bounds=(0, None), show_default=True, help=(
        "Processes that check --near-duplicates (and hash a dataset packed without "
        "hashes); 0 = all cores."), needs="near_duplicates",
        needs_why="--workers runs the checks of --near-duplicates: give --near-duplicates too")
    named_source: str | None = _named_source()
    config_file: str | None = _config_file()
    storage_options: tuple[str, ...] = _storage()


@dataclass(frozen=True)
class SheetCommand:
    dataset: str | None = argument(path="dataset", exists=True)
    output: str = option(None, "-o", "--output", path="file", required=True,
                         help="The PNG to write.")
    split: str | None = option(None, "--split", help="Only samples of this split.")
    per_class: int = option(8, "--per-class", bounds=(1, 64), show_default=True,
                            help="Samples shown per class.")
    seed: int = option(0, "--seed", show_default=True,
                       help="Which samples: the same seed draws the same sheet.")
    thumb: int = option(160, "--thumb", bounds=(64, 512), show_default=True,
                        help="Thumbnail size in pixels.")
    objects: bool = option(False, "--objects", help=(
        "Draw each sample's boxes (with class names) and class mask outlines, one colour per "
        "object class (an annotated dataset)."))
    near_duplicates: bool = option(False, "--near-duplicates", help=(
        "Instead, draw the clusters of inspect --near-duplicates side by side, those across "
        "splits first (reads every stored sample)."))
    named_source: str | None = _named_source()
    config_file: str | None = _config_file()
    storage_options: tuple[str, ...] = _storage()


@dataclass(frozen=True)
class ReportCommand:
    dataset: str | None = argument(path="dataset")
    output: str = option(None, "-o", "--output", path="file", required=True,
                         help="The HTML file to write.")
    config_file: str | None = _config_file()
    rejects_shown: int = option(48, "--rejects", bounds=(0, 1000), show_default=True,
                                help="Rejects shown with a thumbnail of their original.")
    samples_shown: int = option(24, "--samples", bounds=(0, 1000), show_default=True,
                                help="New samples shown, with their objects drawn.")
    named_source: str | None = _named_source()
    storage_options: tuple[str, ...] = _storage()


@dataclass(frozen=True)
class LogCommand:
    dataset: str | None = argument(path="dataset", exists=True)
    config_file: str | None = _config_file()
    storage_options: tuple[str, ...] = _storage()


@dataclass(frozen=True)
class DiffCommand:
    dataset: str | None = argument(path="dataset")
    versions: tuple[str, ...] = argument((), metavar="[vA [vB]]")
    as_json: bool = option(False, "--json", help="Print the diff as JSON.")
    examples: int = option(50, "--examples", bounds=(0, 1_000_000), show_default=True,
                           help="Paths listed per kind of change (--json; the summary shows "
                           "10).")
    config_file: str | None = _config_file()
    storage_options: tuple[str, ...] = _storage()


@dataclass(frozen=True)
class StageCommand:
    dataset: str | None = argument(path="dataset")
    destination: str | None = option(None, "--to", path="dir", help=(
        "Local destination directory (or stage.to in the config)."))
    config_file: str | None = _config_file(
        "The pack config: its output.path is the dataset, stage.to the destination, its "
        "storage: section reaches an s3:// one (--storage over it).")
    split: str | None = option(None, "--split", help="Stage only this split.")
    prune: bool = option(False, "--prune",
                         help="Remove staged shards the manifest no longer lists.")
    workers: int = option(4, "--workers", show_default=True, help="Parallel copies.")
    rehash: bool = option(False, "--rehash", help=(
        "Re-read already staged files instead of trusting size and mtime."))
    quiet: bool = option(False, "--quiet", help="No progress bar.")
    storage_options: tuple[str, ...] = _storage()


@dataclass(frozen=True)
class VerifyCommand:
    dataset: str | None = argument(path="dataset")
    config_file: str | None = _config_file()
    decode: bool = option(False, "--decode", help="Also decode every image and check its size.")
    workers: int = option(4, "--workers", show_default=True, help="Shards checked at once.")
    quiet: bool = option(False, "--quiet", help="Print only problems.")
    storage_options: tuple[str, ...] = _storage()


@dataclass(frozen=True)
class ExportCommand:
    dataset: str | None = argument(path="dataset", metavar="[DATASET]")
    destination: str | None = argument(path="any", metavar="DESTINATION")
    layout: str = option(None, "--layout", required=True, choices=("yolo", "coco", "anomalib"),
                         help="The trainer's folder layout (docs/export.md).")
    task: str = option("auto", "--task", choices=("auto", "detect", "segment", "classify"),
                       show_default=True, help=(
                           "yolo: auto = classify without objects, segment when every object "
                           "has a polygon or mask, else detect."))
    boxes_as_polygons: bool = option(False, "--boxes-as-polygons", help=(
        "An object with a box only gets its box as a polygon (yolo segment, COCO "
        "segmentation); default: yolo segment refuses, COCO leaves it out."))
    normal: str = option("good", "--normal", show_default=True,
                         help="anomalib: the image class of normal samples.")
    anomalib_layout: str = option("folder", "--anomalib-layout", choices=("folder", "mvtec"),
                                  show_default=True,
                                  help="anomalib: its Folder layout or the MVTec one.")
    splits: tuple[str, ...] = option((), "--split", help=(
        "Export only this split (repeatable; default every split)."))
    keep_cut: bool = option(False, "--keep-cut", help=(
        "yolo, coco: export the samples showing a defect cut below min_visible, the cut "
        "objects labelled (default: left out, and counted)."))
    keep: int = option(2, "--keep", bounds=(1, 1000), show_default=True, help=(
        "Versions kept: the current one and the ones before it (a training run started on "
        "one keeps its files)."))
    quiet: bool = option(False, "--quiet", help="No progress bar.")
    config_file: str | None = _config_file()
    storage_options: tuple[str, ...] = _storage()


@dataclass(frozen=True)
class BenchReadCommand:
    shards: str = argument(path="dir", exists=True, required=True)
    source: str | None = option(None, "--source", path="dir", exists=True, help=(
        "The original tree the shards were packed from: adds a loader over the originals."))
    cold: bool = option(False, "--cold", help=(
        "Drop each original from the page cache before reading it (what a loader on a NAS "
        "gets)."))
    tfrecords: str | None = option(None, "--tfrecords", path="dir", exists=True, help=(
        "A TFRecord dataset of the same images: adds the tf.data reader."))
    split: str | None = option(None, "--split", help="Read only this split.")
    workers: int | None = option(None, "--workers", help=(
        "DataLoader workers and processes for the originals (default: all cores)."))
    batch_size: int = option(64, "--batch-size", show_default=True)
    seconds: float = option(10.0, "--seconds", show_default=True, help="Time per row.")
    json_file: str | None = option(None, "--json", path="file",
                                   help="Also write the results as JSON.")


@dataclass(frozen=True)
class Declared:
    """One field of a command's declaration, as the command line offers it."""

    name: str
    kind: type  # int, float, str or bool (a switch)
    many: bool  # repeatable (an option) or any number (an argument)
    default: Any
    parameter: Parameter


def parameters(declaration: type) -> Iterator[Declared]:
    """The fields of a command's declaration in order (``settings`` with an empty one)."""
    hints = typing.get_type_hints(declaration)
    for item in dataclasses.fields(declaration):
        hint = hints[item.name]
        yield Declared(item.name, flag_kind(hint), typing.get_origin(hint) is tuple,
                       item.default, item.metadata.get(PARAMETER, Parameter()))
