"""What the driver knows of the annotations before any image is processed (one pass)."""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..config import Config
from .audit import SourceReport, check_sources, is_image, survey
from .coco import read_coco
from .limits import COCO_CAP
from .model import ObjectClasses
from .sources import Listing, Root, digests, read_shared


@dataclass
class Prepared:
    """Per image, its record from the COCO file; problems that belong to no image (path of
    the annotation file, detail); the object classes known before any image is read (their
    ids first); per table position the ``annotation_digest`` (uint64); and the survey of the
    annotation sources (orphan files, warnings)."""

    records: dict[str, bytes] = field(default_factory=dict)
    problems: list[tuple[str, str]] = field(default_factory=list)
    known: tuple[str, ...] = ()
    digests: np.ndarray | None = None
    report: SourceReport | None = None  # with boxes, polygons or masks


def prepare(relpaths: Sequence[str], image_classes: tuple[str, ...], root: Root, config: Config,
            previous: tuple[str, ...] | None, listing: Listing | None = None) -> Prepared:
    """Check that every configured annotation source is there (AnnotationError naming the
    setting), read the shared annotation files, survey the annotation files for orphans, stat
    every image's own files, list the known object classes: the previous version's (ids never
    change), the configured ones, the COCO categories, the MVTec defect folders.
    ``relpaths``: the scanned images, sorted.  ``root``: a folder, or the location of a
    bucket source, whose annotation objects the scan listed (``listing``)."""
    notes = config.source.annotations
    prepared = Prepared()
    if notes.enabled:
        check_sources(root, notes, listing)
    if not notes.has_objects:
        return prepared
    known = list(previous or ()) + list(notes.classes)
    if notes.coco:
        data = read_shared(root, notes.coco, COCO_CAP, config.source.follow_symlinks)
        coco = read_coco(data, notes.coco,
                         posixpath.normpath(notes.coco_root) if notes.coco_root else "",
                         lambda relpath: is_image(relpaths, relpath),
                         min(config.image.max_pixels, config.image.max_decoded_mb * 2**20))
        del data  # the parsed records are all that is kept
        prepared.records = coco.records
        prepared.problems = [(notes.coco, problem) for problem in coco.problems]
        known += coco.categories
    if notes.preset == "mvtec":
        known += [name for name in image_classes if name != "good"]
    prepared.known = tuple(dict.fromkeys(known))
    if notes.has_masks:  # refused before any image is read, not at the 255th class
        ObjectClasses(prepared.known).check_mask_limit()
    prepared.report = survey(relpaths, root, notes, image_classes if config.source.labels
                             != "none" else (), len(prepared.records) if notes.coco else -1,
                             listing)
    prepared.digests = digests(relpaths, prepared.records, root, notes,
                               config.source.follow_symlinks, listing)
    return prepared
