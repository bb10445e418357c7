"""``pack --dry-run``: what a pack of this job would do, without writing anything.

It scans and splits the tree exactly as a pack would (the same scan, the same path hash for
the split) and counts per class and split; it never creates, locks or changes the output
directory, and only reads its manifest when there is one.  Expected shards come from the
output bytes per sample measured by the probe (``--probe``), or else from a stated assumption.

The headers of a seeded sample of originals and of the largest files are read
(``headers.survey_headers``): the memory of the pack's process tree is predicted from the
largest decode among them and the samples they make (``memory.pack_memory``); the worst case
the limits allow (``memory.worst_case_memory``) is shown apart.  The originals of the sample
that a pack would reject (their headers, their annotations) predict its rejects, and the dry
run refuses a job (``refusal``: exit 3, as the pack would exit) whose predicted rejects exceed
``run.max_reject_fraction``: annotations using a class the job does not list, for one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..annotations.sources import file_stat
from ..config import Config, check_paths
from ..dataset.manifest import MANIFEST_NAME, read_manifest
from ..errors import ManifestError, ShardsmithError
from ..packing.outputdir import previous_dataset
from ..packing.scan import ScanResult
from ..storage import Location, is_url
from ..text import plural
from . import ProbeOptions, ProbeReport, Say, probe_tree
from .annotations import AnnotationCheck, check_annotations
from .headers import HeaderSurvey, survey_headers
from .memory import Conversion, MemoryEstimate, MemoryTerm, pack_memory, worst_case_memory
from .predict import ShardEstimate, TreeCounts, count_tree, estimate_shards
from .storage import scan_as_pack

# Without --probe: a baseline JPEG of a textured camera image at quality ~90 takes ~2.5 bits
# per pixel (the 8000x6000 benchmark originals at 512 px: ~60 kB for 512x384).
ASSUMED_BITS_PER_PIXEL = 2.5
ASSUMED_ASPECT = 4 / 3
ASSUMED_FRAMING_BYTES = 2048  # tar headers / TFRecord framing and the per-sample metadata


@dataclass(frozen=True)
class DryRun:
    """What a pack would take, in which splits, and what it would write."""

    source: str
    output: str
    tree: TreeCounts
    excluded: dict[str, int]
    unreadable: int
    shards: ShardEstimate
    existing: str
    memory: MemoryEstimate
    probe: ProbeReport | None = None
    changes: str | None = None  # the Delta against the dataset there, when it builds on one
    annotations: AnnotationCheck | None = None  # with box, polygon or mask annotations
    survey: HeaderSurvey | None = None  # the headers read
    worst_case: MemoryEstimate | None = None  # the memory the limits allow (``memory``: the
    # prediction from the headers)
    rejects: RejectForecast | None = None
    refusal: str | None = None  # why a pack of this job would exit 3; None when it would not


@dataclass(frozen=True)
class RejectForecast:
    """The originals a pack would reject: ``found`` of the ``sampled`` originals of the seeded
    sample (their headers and annotations read), ``certain`` known for sure in the whole
    tree (found, the largest files refused, files the scan could not read), and the count
    predicted for the tree, of ``candidates`` originals."""

    rejects: int
    candidates: int
    sampled: int
    found: int
    certain: int
    allowed: float

    @property
    def fraction(self) -> float:
        return self.rejects / self.candidates if self.candidates else 0.0


def dry_run(config: Config, probe_options: ProbeOptions | None = None,
            say: Say | None = None) -> DryRun:
    """Scan and plan the pack of ``config`` without writing; with ``probe_options`` also
    measure (``probe``) and estimate its time."""
    source, output = check_paths(config)
    report = None
    if probe_options is not None:
        report, scanned = probe_tree(config, probe_options, say)
    else:
        if say is not None:
            say(f"scanning {source}")
        scanned = scan_as_pack(source, config)
    if not scanned.files:
        raise ShardsmithError(f"no image files to pack under {source} (left out: "
                              f"{_left_out(scanned) or 'none'})")
    if report is not None:
        tree, shards = report.tree, report.prediction.output
    else:
        tree = count_tree(scanned.files, scanned.classes, config)
        if config.image.tiles.enabled:
            shards = ShardEstimate({}, 0, 0.0, "not estimated: image.tiles cuts a number of "
                                   "samples from each original that only decoding tells")
        else:
            shards = estimate_shards(tree, config, assumed_bytes_per_sample(config),
                                     assumption(config))
    delta = changes(scanned, config, source, output)  # first: it raises what a pack would
    survey = survey_headers(scanned, config, source)
    notes = check_annotations(scanned, config, source, survey)
    coco = _coco_bytes(source, config, scanned)
    memory = pack_memory(config, tree.files, tree.bytes, coco, predicted_conversion(survey))
    worst = worst_case_memory(config, tree.files, tree.bytes, coco)
    rejects = forecast_rejects(survey, notes, len(scanned.unreadable), config)
    return DryRun(str(source), str(output), tree, dict(sorted(scanned.excluded.items())),
                  len(scanned.unreadable), shards, existing_output(output, config), memory,
                  report, delta, notes, survey, worst, rejects,
                  refusal(rejects, survey, notes))


def predicted_conversion(survey: HeaderSurvey) -> Conversion:
    """What converting an original takes, from the headers read: the largest decode among
    them (the pack's own count, ``imaging.budget_bytes``) and their samples' mean size."""
    heaviest = survey.heaviest
    if heaviest is None:
        decode = MemoryTerm("largest decode", 0, f"none of the {survey.read} originals "
                            "read would be converted")
    else:
        decode = MemoryTerm("largest decode", heaviest.budget_bytes,
                            f"{heaviest.what}, the largest of {plural(survey.read, 'header')} "
                            f"read: {heaviest.relpath}")
    samples, pixels = survey.mean_samples, survey.mean_pixels
    sample_bytes = round(pixels * ASSUMED_BITS_PER_PIXEL / 8 + samples * ASSUMED_FRAMING_BYTES)
    return Conversion(decode, sample_bytes,
                      f"{samples:,.1f} samples of {pixels / max(samples, 1.0) / 1e6:,.2f} MP "
                      f"an original (headers) at {ASSUMED_BITS_PER_PIXEL:g} bits a pixel",
                      samples=max(1.0, samples))


def forecast_rejects(survey: HeaderSurvey, notes: AnnotationCheck | None, unreadable: int,
                     config: Config) -> RejectForecast:
    """The rejects of a pack, from the seeded sample: its share refused (by header or by
    annotations) over the tree, and never fewer than those known for sure."""
    found = len(survey.sample_refused | {path for path, _ in notes.rejected} if notes is not None
                else survey.sample_refused)
    certain = found + sum(survey.other_rejects.values()) + unreadable
    estimated = (round(found / survey.sampled * survey.originals) if survey.sampled else 0) \
        + unreadable
    return RejectForecast(max(estimated, certain), survey.originals + unreadable,
                          survey.sampled, found, certain, config.run.max_reject_fraction)


def refusal(rejects: RejectForecast, survey: HeaderSurvey,
            notes: AnnotationCheck | None) -> str | None:
    """Why a pack of this job would exit 3, in one line (more rejects predicted than
    ``run.max_reject_fraction`` allows); None when it would not.  An annotation problem comes
    first among the examples: a class the job does not list rejects every original using it."""
    if rejects.fraction <= rejects.allowed:
        return None
    examples = [problem for _, problem in (notes.rejected if notes is not None else ())]
    examples += survey.examples
    needed = math.ceil(rejects.fraction * 1000) / 1000
    return (f"a pack would reject about {rejects.rejects:,} of "
            f"{plural(rejects.candidates, 'original')} ({rejects.fraction:.1%}; "
            f"{rejects.found:,} of the {rejects.sampled:,} sampled"
            + (f", e.g. {examples[0]}" if examples else "")
            + f"), more than the allowed {rejects.allowed:.1%}: fix those files or the job, or "
            f"allow it with --max-reject-fraction {needed:g} (run.max_reject_fraction)")


def changes(scanned: ScanResult, config: Config, source: Location,
            output: Location) -> str | None:
    """What a pack would change in the dataset in ``output`` (its Delta, in one line: "2 new,
    1 removed, up to 1 changed; 1 shard rewritten, 3 kept"); None when there is none to
    build on (``existing_output`` says why).

    It decides as the pack does, by the pack's own steps, so a pack that would refuse (a
    manifest it cannot read, other settings, a sample index missing or damaged) is refused
    here with the same error: the same line and exit code, not a plan that will not run.
    None too for an ``s3://`` output, whose delta the pack finds against its local spool."""
    from ..packing.pipeline import find_delta, make_job, up_to_date

    if is_url(output):  # the pack works out its delta in its spool
        return None
    previous = previous_dataset(output, config)
    if previous is None:
        return None
    job = make_job(scanned, config, source, output, previous, 0.0)
    up_to_date(output, previous, job)  # its refusal of a damaged index is the pack's
    return find_delta(job, previous).summary()


def _coco_bytes(source: Location, config: Config, scanned: ScanResult) -> int:
    """The size of the COCO file the driver will parse (0 without one, or when it is not
    there: the pack says so); in a bucket, the size its listing gave."""
    coco = config.source.annotations.coco
    if not coco:
        return 0
    _, size, _ = file_stat(source, coco, config.source.follow_symlinks,
                           scanned.annotation_objects)
    return size or 0


def assumed_bytes_per_sample(config: Config) -> float:
    """A sample's bytes in a shard, assumed (not measured) from the target size."""
    size = config.image.size
    if config.image.resize == "fit":
        pixels = size * size / ASSUMED_ASPECT
    elif config.image.resize == "shorter":
        pixels = size * size * ASSUMED_ASPECT
    else:
        pixels = size * size
    return pixels * ASSUMED_BITS_PER_PIXEL / 8 + ASSUMED_FRAMING_BYTES


def assumption(config: Config) -> str:
    return (f"assumed, not measured: {ASSUMED_BITS_PER_PIXEL:g} bits per output pixel, "
            f"4:3 originals ({config.image.size} px {config.image.resize}); "
            "--probe measures it")


def existing_output(output: Location, config: Config) -> str:
    """What the output directory (or bucket prefix) holds, and what a pack would therefore do
    with it."""
    if is_url(output):
        if not (output / MANIFEST_NAME).exists():
            return "holds no dataset: a pack creates it"
        return f"holds version {read_manifest(output).version}: a pack adds what changed" + (
            " (--overwrite: replaces it with a fresh pack)" if config.run.overwrite else "")
    if not output.exists():
        return "does not exist yet: a pack creates it"
    if not (output / MANIFEST_NAME).exists():
        return "holds no finished dataset: a pack starts (or resumes) there"
    if config.run.overwrite:  # without it, a dataset a pack refuses is refused by ``changes``
        try:
            version = f"version {read_manifest(output).version}"
        except ManifestError:
            version = "a manifest it cannot read"
        return f"holds {version}: --overwrite replaces it with a fresh pack"
    manifest = read_manifest(output)
    return (f"holds version {manifest.version} ({manifest.totals.packed:,} samples) with these "
            "settings: a pack only adds what changed (the counts above are the whole tree)")


def _left_out(scanned: ScanResult) -> str:
    return ", ".join(f"{count} {why}" for why, count in scanned.excluded.most_common())
