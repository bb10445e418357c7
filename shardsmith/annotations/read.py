"""One image's annotations, gathered in the worker: its record from the shared files (carried by
its plan item) and its own files (read here once, as regular files, never through a link
unless ``source.follow_symlinks``; from a bucket source, as objects through the same door)."""

from __future__ import annotations

import errno
import json
import posixpath

from ..config import AnnotationConfig
from ..door import ANNOTATION_CAP, Refused, open_file
from ..errors import BadImage, ConfigError
from .model import ImageAnnotations
from .parse import FILE_PARSERS, Frame, read_mask, shapes_from_record
from .sources import Root, annotation_digest, object_etag, own_files, resolved

MISSING = (errno.ENOENT, errno.ENOTDIR)


def _read_own(root: Root, path: str, follow_symlinks: bool
              ) -> tuple[bytes | None, tuple[str, int | None, int | str | None]]:
    """(bytes or None when the file is not there, (path, size, mtime) for the digest), read
    through the door: a regular file of at most ``door.ANNOTATION_CAP`` bytes (an object:
    its size and ETag, as the driver's listing gives them)."""
    try:
        with open_file(resolved(root, path), ANNOTATION_CAP,
                       follow_symlinks=follow_symlinks) as handle:
            if handle.fd < 0:  # an object in a store: no stat, its ETag
                return handle.read(), (path, handle.size, object_etag(handle.head))
            return handle.read(), (path, handle.size, handle.info.st_mtime_ns)
    except ConfigError as exc:  # a key that leads out of the bucket prefix
        raise BadImage("bad_annotation", str(exc)) from None
    except Refused as exc:
        raise BadImage("bad_annotation", f"{path}: {exc.detail}") from None
    except OSError as exc:
        if exc.errno in MISSING:
            return None, (path, None, None)
        raise BadImage("unreadable", f"{path}: cannot read: {exc.strerror or exc}") from None


def _depth(relpath: str, path: str) -> int:
    """How many folders up a path written in the annotation file ``path`` may go and stay
    inside its tree: the file's depth under the source root, or, for a file outside it (an
    absolute ``files_dir``), the image's depth under the root."""
    folder = posixpath.dirname(relpath if posixpath.isabs(path) else path)
    return len(folder.split("/")) if folder else 0


def read_annotations(relpath: str, record: bytes | None, root: Root, config: AnnotationConfig,
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
    mask, mask_names, mask_file, stats = None, (), "", []
    for kind, path in own_files(relpath, config):
        data, stat = _read_own(root, path, follow_symlinks)
        stats.append(stat)
        if data is None:
            continue
        if kind == "mask":
            mask, mask_names = read_mask(data, path, frame, config.mask_values, config.classes,
                                         image_class, config.mask_class)
            mask_file = path
        else:
            shapes += FILE_PARSERS[config.files](data, path, frame, config.classes,
                                                 _depth(relpath, path))
    return ImageAnnotations(shapes, mask, mask_names, annotation_digest(record, stats),
                            mask_file)
