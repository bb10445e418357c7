"""Where annotations are, and what the driver reads of them before any image is processed.

* Which paths hold annotations (``annotation_reason``): the scan leaves them out with the
  reason ``annotation`` instead of taking a mask for an image.
* The files next to each image (``own_files``): YOLO, VOC or LabelMe files with its stem, its
  PNG mask; workers read them, the driver only stats them (``digests``).
* The files shared by all images, read once here: the labels file (CSV or JSON Lines of path
  and label) and the COCO file, kept as one compact JSON record per image that has entries
  (what the worker needs, nothing else).
* ``annotation_digest``: per image, a digest of its record and of the size and mtime of its own
  files.  Stored with each sample, it tells the next version which images' annotations changed:
  an edit to one image's entries in a COCO file re-encodes that image only.

A source in a store (``is_url(root)``) has its annotation files read through the same
door (ranged GETs within their caps); the driver knows them from the scan's listing (``Listing``:
size and ETag per key, no request), and an own file's digest takes its size and ETag in place of
size and mtime, from the listing in the driver and from the worker's HEAD, which agree for one
version of an object.
"""

from __future__ import annotations

import csv
import io
import json
import os
import posixpath
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import xxhash

from ..config import ANNOTATION_FILES, AnnotationConfig
from ..door import SHARED_ANNOTATION_CAP, Refused, read_file
from ..errors import ConfigError
from ..ordered import in_order
from ..storage import Location, is_url
from ..text import shown
from .model import AnnotationError

# The annotation objects of a bucket source, from the scan's listing: key under the source
# prefix -> (size, ETag).
Listing = dict[str, tuple[int, str]]
Root = str | Location  # a folder, or a location in a store (``is_url``)

MVTEC_MASKS = "ground_truth"
STAT_THREADS = 16
STAT_BATCH = 256


def _relative_dir(path: str) -> str | None:
    """A config folder inside the source tree, as a relative POSIX path (None: outside)."""
    if not path or os.path.isabs(path):
        return None
    normal = posixpath.normpath(path.replace(os.sep, "/"))
    return None if normal.startswith("..") or normal == "." else normal


def annotation_reason(relpath: str, is_dir: bool, config: AnnotationConfig) -> str | None:
    """``annotation`` when ``relpath`` (under the source root) holds annotations, not images:
    a mask or annotation tree, an annotation file beside an image, the COCO or labels file."""
    if not config.enabled:
        return None
    folders = [_relative_dir(config.files_dir) if config.files else None,
               _relative_dir(config.masks) if config.masks not in ("", "beside") else None,
               MVTEC_MASKS if config.preset == "mvtec" else None]
    for folder in filter(None, folders):
        if relpath == folder or relpath.startswith(folder + "/"):
            return "annotation"
    if is_dir:
        return None
    if relpath in {_relative_dir(config.coco), _relative_dir(config.labels)}:
        return "annotation"
    stem, extension = posixpath.splitext(relpath)
    if config.files and not config.files_dir and extension.lower() == ANNOTATION_FILES[
            config.files]:
        return "annotation"
    if config.mask_suffix and stem.endswith(config.mask_suffix) and extension.lower() == ".png":
        return "annotation"
    return None


def own_files(relpath: str, config: AnnotationConfig) -> list[tuple[str, str]]:
    """(kind, path) of the files that annotate the image ``relpath`` alone: ``files`` (YOLO,
    VOC or LabelMe) and ``mask``; paths relative to the source root unless absolute."""
    folder, name = posixpath.split(relpath)
    stem = posixpath.splitext(name)[0]
    found = []
    if config.files:
        base = config.files_dir
        found.append(("files", posixpath.join(base, folder, stem + ANNOTATION_FILES[config.files])
                      if base else posixpath.join(folder, stem + ANNOTATION_FILES[config.files])))
    if config.masks:
        mask_name = f"{stem}{config.mask_suffix}.png"
        found.append(("mask", posixpath.join(folder, mask_name) if config.masks == "beside"
                      else posixpath.join(config.masks, folder, mask_name)))
    if config.preset == "mvtec":
        parts = relpath.split("/")
        if len(parts) >= 3:  # SPLIT/DEFECT/NAME -> ground_truth/DEFECT/STEM_mask.png
            found.append(("mask", posixpath.join(MVTEC_MASKS, *parts[1:-1],
                                                 f"{stem}_mask.png")))
    return found


def annotation_digest(record: bytes | None,
                      files: list[tuple[str, int | None, int | str | None]]) -> str:
    """The digest of an image's annotations: its shared-file record and the (path, size,
    mtime) of its own files (None for a file that is not there; an object's ETag in place
    of its mtime)."""
    digest = xxhash.xxh3_64(record or b"")
    for path, size, mtime_ns in files:
        digest.update(os.fsencode(f"\0{path}\0{size}\0{mtime_ns}"))
    return digest.hexdigest()


def resolved(root: Root, path: str) -> str | Location:
    """Where the annotation file ``path`` is: an absolute path as it is (a local file, also
    for a bucket source), else under ``root`` (for a bucket, the object of that key: a key
    leading out of the prefix is a ConfigError)."""
    if os.path.isabs(path):
        return path
    if is_url(root):
        return root / object_key(path)
    return os.path.join(root, path)


def object_key(path: str) -> str:
    """A relative annotation path as a key under a bucket prefix (``./a//b`` is ``a/b``);
    ConfigError for one that leads out of it."""
    normal = posixpath.normpath(path.replace(os.sep, "/"))
    if normal == ".." or normal.startswith("../") or normal == ".":
        raise ConfigError(f"{shown(path)}: leads out of the s3:// source prefix")
    return normal


def object_etag(entry: dict[str, Any]) -> str:
    """An object's ETag as a listing or a HEAD gives it, without its quotes."""
    return str(entry.get("ETag") or "").strip('"')


def file_stat(root: Root, path: str, follow_symlinks: bool,
              listing: Listing | None = None) -> tuple[str, int | None, int | str | None]:
    """(path, size, mtime) of an own annotation file, None when it is not there; with a
    bucket source, (path, size, ETag) from ``listing`` (no request)."""
    if is_url(root) and not os.path.isabs(path):
        try:
            found = (listing or {}).get(object_key(path))
        except ConfigError:
            found = None
        return (path, None, None) if found is None else (path, *found)
    try:
        info = os.stat(resolved(root, path), follow_symlinks=follow_symlinks)
    except OSError:
        return path, None, None
    return path, info.st_size, info.st_mtime_ns


def has_own_files(config: AnnotationConfig) -> bool:
    return bool(config.files or config.masks or config.preset == "mvtec")


def digests(relpaths: list[str], records: dict[str, bytes], root: Root,
            config: AnnotationConfig, follow_symlinks: bool,
            listing: Listing | None = None) -> np.ndarray:
    """``annotation_digest`` of every image as uint64 (8 bytes a file), its own files statted
    in batches on a pool of threads (a NAS answers many at once), a bounded number of batches
    in flight.  A bucket source's files are looked up in ``listing`` instead."""
    out = np.empty(len(relpaths), np.uint64)

    def batch(start: int) -> None:
        for at in range(start, min(start + STAT_BATCH, len(relpaths))):
            relpath = relpaths[at]
            files = [file_stat(root, path, follow_symlinks, listing)
                     for _, path in own_files(relpath, config)]
            out[at] = int(annotation_digest(records.get(relpath), files), 16)

    if not has_own_files(config):
        for at, relpath in enumerate(relpaths):
            out[at] = int(annotation_digest(records.get(relpath), []), 16)
        return out
    with ThreadPoolExecutor(STAT_THREADS, thread_name_prefix="shardsmith-annotations") as pool:
        starts = range(0, len(relpaths), STAT_BATCH)
        for _ in in_order(partial(pool.submit, batch), starts, 2 * STAT_THREADS):
            pass
    return out


def read_shared(root: Root, path: str, cap: int = SHARED_ANNOTATION_CAP,
                follow_symlinks: bool = False) -> bytes:
    """A labels or COCO file, whole, through the door (a regular file of at most ``cap``
    bytes: a FIFO or a link to ``/dev/zero`` is refused at once, not read; an object larger
    than ``cap`` is refused unread); AnnotationError when it cannot be read."""
    try:
        where = resolved(root, path)
    except ConfigError as exc:
        raise AnnotationError(str(exc)) from None
    try:
        return read_file(where, min(cap, SHARED_ANNOTATION_CAP),
                         follow_symlinks=follow_symlinks)
    except Refused as exc:
        raise AnnotationError(f"{path}: {exc.detail}") from None
    except OSError as exc:
        raise AnnotationError(f"{path}: cannot read the annotation file: "
                              f"{exc.strerror or exc}") from None


def safe_relpath(path: Any) -> str | None:
    """A path from an annotation file as a relative POSIX path inside the source tree, or None
    (absolute, a drive, ``..`` out of the tree, NUL, empty)."""
    if not isinstance(path, str) or not path or "\0" in path:
        return None
    path = path.replace("\\", "/")
    if path.startswith("/") or (len(path) > 1 and path[1] == ":"):
        return None
    normal = posixpath.normpath(path)
    return None if normal.startswith("../") or normal in (".", "..") else normal


@dataclass
class LabelRows:
    """What a labels file says: path -> label name; bad rows by path (rejected) and rows that
    name no image (reported under the file's name)."""

    labels: dict[str, str] = field(default_factory=dict)
    bad: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def read_labels(data: bytes, where: str) -> LabelRows:
    """A CSV file of ``path,label`` rows (a ``path,label`` header is skipped) or JSON Lines of
    ``{"path": ..., "label": ...}``, as exported by QC systems."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise AnnotationError(f"{where}: not UTF-8 text (byte {exc.start})") from None
    rows = LabelRows()
    lines = where.lower().endswith((".jsonl", ".ndjson")) or text.lstrip().startswith("{")
    seen_at: dict[str, int] = {}
    for number, path, label in (_json_rows(text, where) if lines else _csv_rows(text, where)):
        here = f"{where} line {number}"
        if not isinstance(path, str):
            rows.problems.append(f"{here}: the path {shown(path)} is not text")
            continue
        relpath = safe_relpath(path)
        if relpath is None:
            rows.problems.append(f"{here}: the path {shown(path)} leads out of the source "
                                 "tree (refused)")
            continue
        if not isinstance(label, str) or not label.strip():
            rows.bad[relpath] = f"{here}: no label for {relpath}"
            continue
        if relpath in seen_at and rows.labels.get(relpath) != label.strip():
            rows.bad[relpath] = (f"{here}: a second label for {relpath} (line "
                                 f"{seen_at[relpath]} says {shown(rows.labels.get(relpath))})")
            continue
        seen_at[relpath] = number
        rows.labels[relpath] = label.strip()
    for relpath in rows.bad:
        rows.labels.pop(relpath, None)
    return rows


def _csv_rows(text: str, where: str) -> Iterator[tuple[int, Any, Any]]:
    # newline="": the csv module splits the lines itself, so \r\n, \n and the old Mac \r
    # all end a row, and a quoted field may hold a line break.
    reader = csv.reader(io.StringIO(text, newline=""))
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:  # a field over the csv module's limit, a stray quote
            raise AnnotationError(f"{where} line {reader.line_num}: not a CSV row ({exc})"
                                  ) from None
        number = reader.line_num
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != 2:
            raise AnnotationError(f"{where} line {number}: expected path,label; got "
                                  f"{len(row)} fields")
        if number == 1 and [cell.strip().lower() for cell in row] == ["path", "label"]:
            continue
        yield number, row[0].strip(), row[1]


def _json_rows(text: str, where: str) -> Iterator[tuple[int, Any, Any]]:
    # JSON Lines ends a line at \n (or \r\n) only: str.splitlines() would also split at
    # U+2028, U+0085 or \x0c, which JSON allows raw inside a string.
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise AnnotationError(f"{where} line {number}: not valid JSON ({exc})") from None
        except RecursionError:
            raise AnnotationError(f"{where} line {number}: not valid JSON (nested too "
                                  "deeply)") from None
        if not isinstance(row, dict) or "path" not in row:
            raise AnnotationError(f"{where} line {number}: expected an object with path and "
                                  "label")
        yield number, row["path"], row.get("label")
