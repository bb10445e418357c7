"""One image's annotations, gathered in the worker: its record from the shared files (carried by
its plan item) and its own files (read here once, as regular files, never through a link
unless ``source.follow_symlinks``)."""

from __future__ import annotations

import errno
import json
import os

from ..config import AnnotationConfig
from ..errors import BadImage
from ..originals import open_regular
from .model import ImageAnnotations
from .parse import (
    Frame,
    parse_labelme,
    parse_voc,
    parse_yolo,
    read_mask,
    shapes_from_record,
)
from .sources import MAX_ANNOTATION_BYTES, annotation_digest, own_files, resolved

MISSING = (errno.ENOENT, errno.ENOTDIR)


def _read_own(root: str, path: str, follow_symlinks: bool
              ) -> tuple[bytes | None, tuple[str, int | None, int | None]]:
    """(bytes or None when the file is not there, (path, size, mtime) for the digest)."""
    try:
        fd, info = open_regular(resolved(root, path), follow_symlinks)
    except BadImage as exc:
        raise BadImage("bad_annotation", f"{path}: {exc.detail}") from None
    except OSError as exc:
        if exc.errno in MISSING:
            return None, (path, None, None)
        raise BadImage("unreadable", f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        if info.st_size > MAX_ANNOTATION_BYTES:
            raise BadImage("bad_annotation", f"{path}: {info.st_size:,} bytes is too large for "
                           "an annotation file")
        chunks, size = [], 0
        while size <= MAX_ANNOTATION_BYTES and (chunk := os.read(fd, 1 << 20)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise BadImage("unreadable", f"{path}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if size > MAX_ANNOTATION_BYTES:
        raise BadImage("bad_annotation", f"{path}: grew past {MAX_ANNOTATION_BYTES:,} bytes "
                       "while read")
    return b"".join(chunks), (path, info.st_size, info.st_mtime_ns)


def read_annotations(relpath: str, record: bytes | None, root: str, config: AnnotationConfig,
                     follow_symlinks: bool, frame: Frame, image_class: str,
                     coco_name: str) -> ImageAnnotations:
    """Every annotation of the image ``relpath`` whose pixels (the frame the annotations
    describe) are ``frame``; raises BadImage (``bad_annotation``, ``unreadable``)."""
    shapes = []
    if record is not None:
        try:
            document = json.loads(record)
        except ValueError:  # made by the driver: not a file a user wrote
            raise BadImage("bad_annotation", f"{coco_name}: a damaged record") from None
        shapes += shapes_from_record(document, coco_name, frame)
    mask, mask_names, stats = None, (), []
    for kind, path in own_files(relpath, config):
        data, stat = _read_own(root, path, follow_symlinks)
        stats.append(stat)
        if data is None:
            continue
        if kind == "mask":
            mask, mask_names = read_mask(data, path, frame, config.mask_values, config.classes,
                                         image_class)
        elif config.files == "yolo":
            shapes += parse_yolo(data, path, frame, config.classes)
        elif config.files == "voc":
            shapes += parse_voc(data, path, frame)
        else:
            shapes += parse_labelme(data, path, frame)
    return ImageAnnotations(shapes, mask, mask_names, annotation_digest(record, stats))
