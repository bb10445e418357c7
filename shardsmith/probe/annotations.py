"""The annotations of a job checked before the night, without decoding an original's pixels.

``pack --dry-run`` of a job with boxes, polygons or masks runs what the pack's driver runs
first (``annotations.prepare``: a missing folder or file is an error naming its setting; the
COCO file read; orphan annotation files counted), then reads the annotations of a seeded
sample of originals as a worker would, against each original's header as the header survey
read it (``headers.survey_headers``: its stored size and EXIF orientation, the worker's
frame): unknown YOLO ids, malformed files, and the image sizes that VOC, LabelMe and COCO
files record, which must be the original's.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..annotations.audit import SourceReport
from ..annotations.geometry import upright_size
from ..annotations.prepare import prepare
from ..annotations.read import read_annotations
from ..config import Config
from ..errors import BadImage
from ..packing.scan import ScanResult
from ..storage import Location
from .headers import HeaderSurvey, seeded_sample

PROBLEMS_KEPT = 20


@dataclass(frozen=True)
class AnnotationCheck:
    """``checked`` of ``originals`` had their annotations read against their header (seed
    ``seed``); the problems found (``path: detail``, the first ``PROBLEMS_KEPT``, of
    ``problem_count``); the survey of the sources (orphans, warnings); the sampled originals
    a pack would reject."""

    originals: int
    checked: int
    seed: int
    problems: tuple[str, ...]
    problem_count: int
    sources: SourceReport | None
    rejected: tuple[tuple[str, str], ...] = ()  # (relpath, problem): sampled originals a
    # pack would reject


def check_annotations(scanned: ScanResult, config: Config, source: Location,
                      survey: HeaderSurvey) -> AnnotationCheck | None:
    """The annotation check of a dry run, in the frames of the seeded sample's headers that
    ``survey`` read; None for a job without box, polygon or mask annotations.  Raises
    AnnotationError (exit 2) for a source that is not there."""
    notes = config.source.annotations
    if not notes.has_objects:
        return None
    files = scanned.files
    prepared = prepare(files.relpaths, scanned.classes, source, config, None,
                       scanned.annotation_objects)
    problems = [f"{path}: {detail}" for path, detail in prepared.problems]
    chosen = seeded_sample(len(files), config.seed)
    checked, rejected = 0, []
    for index in chosen:
        item = files[index]
        label = item.label
        image_class = scanned.classes[label] if 0 <= label < len(scanned.classes) else ""
        try:
            header = survey.frames[item.relpath]
            if isinstance(header, Exception):  # as reading it again would
                raise header
            stored, rotation = header
            frame = stored if notes.coordinates == "stored" else upright_size(*stored, rotation)
            read_annotations(item.relpath, prepared.records.get(item.relpath), source, notes,
                             config.source.follow_symlinks, frame, image_class, notes.coco)
        except BadImage as exc:
            if exc.reason != "bad_annotation":  # the pack rejects the original itself
                problems.append(f"{item.relpath}: the original: {exc.reason} ({exc.detail})")
            else:
                problems.append(f"{item.relpath}: {exc.detail}")
            rejected.append((item.relpath, problems[-1]))
        except OSError as exc:
            problems.append(f"{item.relpath}: cannot read: {exc.strerror or exc}")
            rejected.append((item.relpath, problems[-1]))
        checked += 1
    return AnnotationCheck(len(files), checked, config.seed, tuple(problems[:PROBLEMS_KEPT]),
                           len(problems), prepared.report, tuple(rejected))

