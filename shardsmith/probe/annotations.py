"""The annotations of a job checked before the night, without decoding an original's pixels.

``pack --dry-run`` of a job with boxes, polygons or masks runs what the pack's driver runs
first (``annotations.prepare``: a missing folder or file is an error naming its setting; the
COCO file read; orphan annotation files counted), then reads the annotations of a seeded
sample of originals as a worker would, against each original's header (its size and EXIF
orientation, read from the first ``HEADER_BYTES``): unknown YOLO ids, malformed files, and the
image sizes that VOC, LabelMe and COCO files record, which must be the original's.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from ..annotations.audit import SourceReport
from ..annotations.geometry import upright_size
from ..annotations.prepare import prepare
from ..annotations.read import read_annotations
from ..config import Config
from ..decoders import open_header, orientation
from ..errors import BadImage
from ..packing.originals import open_source, original_cap, read_all, use_storage
from ..packing.scan import ScanResult
from ..storage import ObjectPath

SAMPLE = 64  # originals whose annotations are read: a few seconds from a NAS
HEADER_BYTES = 1 << 20  # JPEG EXIF and PNG/TIFF headers fit; a TIFF with its IFD at the end
# is read whole (never decoded)
PROBLEMS_KEPT = 20


@dataclass(frozen=True)
class AnnotationCheck:
    """``checked`` of ``originals`` had their annotations read against their header (seed
    ``seed``); the problems found (``path: detail``, the first ``PROBLEMS_KEPT``, of
    ``problem_count``); the survey of the sources (orphans, warnings)."""

    originals: int
    checked: int
    seed: int
    problems: tuple[str, ...]
    problem_count: int
    sources: SourceReport | None


def check_annotations(scanned: ScanResult, config: Config, source: Path | ObjectPath,
                      sample: int = SAMPLE) -> AnnotationCheck | None:
    """The annotation check of a dry run; None for a job without box, polygon or mask
    annotations.  Raises AnnotationError (exit 2) for a source that is not there."""
    notes = config.source.annotations
    if not notes.has_objects:
        return None
    files = scanned.files
    root = source if isinstance(source, ObjectPath) else str(source)
    if isinstance(source, ObjectPath):
        use_storage(config.storage.options())  # the originals' headers: as a worker reads
    prepared = prepare(files.relpaths, scanned.classes, root, config, None,
                       scanned.annotation_objects)
    problems = [f"{path}: {detail}" for path, detail in prepared.problems]
    chosen = sorted(random.Random(f"dry-run:{config.seed}").sample(
        range(len(files)), min(sample, len(files))))
    checked = 0
    for index in chosen:
        item = files[index]
        label = item.label
        image_class = scanned.classes[label] if 0 <= label < len(scanned.classes) else ""
        try:
            stored, rotation = _header(str(source), item.relpath, config, item.identity)
            frame = stored if notes.coordinates == "stored" else upright_size(*stored, rotation)
            read_annotations(item.relpath, prepared.records.get(item.relpath), root, notes,
                             config.source.follow_symlinks, frame, image_class, notes.coco)
        except BadImage as exc:
            if exc.reason != "bad_annotation":  # the pack rejects the original itself
                problems.append(f"{item.relpath}: the original: {exc.reason} ({exc.detail})")
            else:
                problems.append(f"{item.relpath}: {exc.detail}")
        except OSError as exc:
            problems.append(f"{item.relpath}: cannot read: {exc.strerror or exc}")
        checked += 1
    return AnnotationCheck(len(files), checked, config.seed, tuple(problems[:PROBLEMS_KEPT]),
                           len(problems), prepared.report)


def _header(root: str, relpath: str, config: Config, identity) -> tuple[tuple[int, int], int]:
    """(stored width and height, EXIF orientation) of an original from its header: its first
    ``HEADER_BYTES``, or the whole file when the header is not all there (never decoded)."""
    with open_source(root, relpath, config.source.follow_symlinks,
                     original_cap(config.image), identity) as handle:
        try:
            with open_header(handle.pread(min(HEADER_BYTES, handle.size), 0)) as header:
                return header.size, orientation(header)
        except BadImage:
            with open_header(read_all(handle)) as header:
                return header.size, orientation(header)
