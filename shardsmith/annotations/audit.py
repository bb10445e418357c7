"""Whether the configured annotation sources are there and fit the images (driver, before any
image is read): nothing about annotations may pass in silence.

* ``check_sources``: a configured folder or file that does not exist is an ``AnnotationError``
  (one line, exit 2) naming the setting and the path: ``files_dir: ../labelz`` with a typo
  would otherwise pack every image as a background image.
* ``survey``: the annotation files that match no image (orphans: a label for a renamed or
  excluded image), counted, the first ``ORPHANS_KEPT`` named; warnings for a source that matches
  no image at all and for binary masks whose object class is the image's folder name.

Orphans are found by listing the annotation folders (a mirrored ``files_dir`` or ``masks``
tree) or, for files beside the images, each folder that holds images: one listing a folder,
never a stat a file (a bucket source: the scan's listing, no request).  An annotation file is
matched to an image by the image's path without its extension, by a binary search in the
sorted image paths (no set of every path in memory).
"""

from __future__ import annotations

import bisect
import os
import posixpath
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from ..config import ANNOTATION_FILES, AnnotationConfig
from ..errors import ConfigError, ManifestError
from ..schema import Count
from ..storage import Location, is_url
from ..text import plural, shown
from .model import AnnotationError
from .sources import Listing, Root, object_key, resolved

ORPHANS_KEPT = 20  # orphan paths a report names; the count is always complete
CLASSES_SHOWN = 6  # image classes a warning names


MAX_WARNINGS = 16  # what a manifest may list: a survey writes at most 4


@dataclass(frozen=True)
class SourceReport:
    """What the survey found: orphan annotation files (their count, the first few paths in
    sorted order, relative to the source root unless the source is outside it) and warnings.

    The manifest of an annotated dataset records it (``annotation_sources``), so ``inspect``
    shows it later; read back from an untrusted manifest, its lists are bounded."""

    orphans: Count = 0
    orphan_paths: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def check(self, where: str) -> None:
        if len(self.orphan_paths) > min(ORPHANS_KEPT, self.orphans):
            raise ManifestError(f"{where}.orphan_paths: more paths than the {ORPHANS_KEPT} "
                                "a pack records (or than the orphans counted)")
        if len(self.warnings) > MAX_WARNINGS:
            raise ManifestError(f"{where}.warnings: more than the {MAX_WARNINGS} a pack "
                                "records")


@dataclass
class _Found:
    """Annotation files of one source: how many, how many match an image, the orphans."""

    files: int = 0
    matched: int = 0
    orphans: list[str] = field(default_factory=list)


def check_sources(root: Root, config: AnnotationConfig, listing: Listing | None = None
                  ) -> None:
    """AnnotationError naming the setting when a configured annotation folder or file is not
    there (or is not a folder, or not a file); in a bucket source, when ``listing`` (the
    scan's) has no such object or no object under such a prefix."""
    wanted = [("files_dir", config.files_dir, True), ("coco", config.coco, False),
              ("labels", config.labels, False)]
    if config.masks != "beside":
        wanted.append(("masks", config.masks, True))
    for key, path, folder in wanted:
        if not path:
            continue
        if is_url(root) and not os.path.isabs(path):
            _check_object(root, key, path, folder, listing or {})
            continue
        where = resolved(root, path)
        try:
            info = os.stat(where)
        except OSError as exc:
            raise AnnotationError(f"source.annotations.{key}: {shown(path)} does not exist "
                                  f"({shown(where)}: {exc.strerror or exc})") from None
        if folder and not stat.S_ISDIR(info.st_mode):
            raise AnnotationError(f"source.annotations.{key}: {shown(path)} is not a folder "
                                  f"({shown(where)})")
        if not folder and not stat.S_ISREG(info.st_mode):
            raise AnnotationError(f"source.annotations.{key}: {shown(path)} is not a file "
                                  f"({shown(where)})")


def _check_object(root: Location, key: str, path: str, folder: bool,
                  listing: Listing) -> None:
    try:
        name = object_key(path)
    except ConfigError as exc:
        raise AnnotationError(f"source.annotations.{key}: {exc}") from None
    if folder:
        there = any(found.startswith(name + "/") for found in listing)
    else:
        there = name in listing
    if not there:
        what = "no object under the prefix" if folder else "no object"
        raise AnnotationError(f"source.annotations.{key}: {shown(path)} does not exist "
                              f"({what} {root}/{name})")


def survey(relpaths: Sequence[str], root: Root, config: AnnotationConfig,
           image_classes: tuple[str, ...], coco_images: int = -1,
           listing: Listing | None = None) -> SourceReport:
    """Orphans and warnings for the images ``relpaths`` (sorted) under ``root``;
    ``coco_images``: how many of them the COCO file lists (-1: no COCO file); ``listing``:
    the annotation objects of a bucket source."""
    warnings: list[str] = []
    orphans: list[str] = []
    count = 0
    sources = []
    if config.files:
        extension = ANNOTATION_FILES[config.files]
        key = "files_dir" if config.files_dir else "files"
        sources.append((key, config.files_dir or "", _files(relpaths, root, config.files_dir,
                                                             extension, listing)))
    if config.masks:
        suffix = f"{config.mask_suffix}.png"
        folder = "" if config.masks == "beside" else config.masks
        masks = _files(relpaths, root, folder, suffix, listing)
        sources.append(("masks", config.masks, masks))
        if masks.matched and config.mask_values == "binary" and not config.mask_class \
                and image_classes:
            shown_classes = ", ".join(image_classes[:CLASSES_SHOWN]) + (
                f" and {len(image_classes) - CLASSES_SHOWN:,} more"
                if len(image_classes) > CLASSES_SHOWN else "")
            warnings.append(
                "source.annotations.masks: binary masks take the class of their image, so "
                f"the image classes ({shown_classes}) become object classes, for good (the "
                "list only grows); set source.annotations.mask_class (e.g. crack) to name "
                "what the masks mark")
    for key, path, found in sources:
        count += len(found.orphans)
        orphans += found.orphans
        if not found.matched:
            what = (f"{shown(path)} holds no annotation file" if not found.files else
                    f"none of the {plural(found.files, 'annotation file')} in "
                    f"{shown(path or 'the image folders')} matches an image")
            warnings.append(f"source.annotations.{key}: {what} (every image packs without "
                            "these annotations: is it the right folder?)")
    if coco_images == 0:
        warnings.append(f"source.annotations.coco: {shown(config.coco)} lists none of the "
                        "images in the tree (check coco_root)")
    orphans.sort()
    return SourceReport(count, tuple(orphans[:ORPHANS_KEPT]), tuple(warnings))


def _files(relpaths: Sequence[str], root: Root, folder: str, ending: str,
           listing: Listing | None = None) -> _Found:
    """The annotation files ending in ``ending`` in the tree ``folder`` (mirroring the
    images), or, with ``folder`` "", beside the images; which match no image."""
    found = _Found()
    if is_url(root) and not os.path.isabs(folder):
        names = _listed(listing or {}, object_key(folder) if folder else "", ending,
                        None if folder else {posixpath.dirname(path) for path in relpaths})
    else:
        names = _walk(resolved(root, folder), ending) if folder else \
            _beside(relpaths, root, ending)
    for relpath in names:
        if not folder and is_image(relpaths, relpath):
            continue  # an image that happens to end like an annotation file (x_mask.png)
        found.files += 1
        if _has_image(relpaths, relpath[: len(relpath) - len(ending)]):
            found.matched += 1
        else:
            found.orphans.append(posixpath.join(folder, relpath) if folder else relpath)
    return found


def _listed(listing: Listing, folder: str, ending: str,
            beside: set[str] | None) -> Iterator[str]:
    """``_walk`` (or, with ``beside``, the image folders, ``_beside``) of a bucket source,
    from its listing: keys relative to ``folder``, in sorted order."""
    prefix = folder + "/" if folder else ""
    for key in sorted(listing):
        if not key.startswith(prefix) or not key.lower().endswith(ending.lower()):
            continue
        relpath = key[len(prefix):]
        if any(part.startswith(".") for part in relpath.split("/")):
            continue
        if beside is not None and posixpath.dirname(relpath) not in beside:
            continue
        yield relpath


def _walk(base: str, ending: str) -> Iterator[str]:
    """Relative paths of the files under ``base`` ending in ``ending`` (hidden entries and
    links skipped, in sorted order)."""
    stack = [""]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(os.path.join(base, folder) if folder else base) as entries:
                listed = sorted((entry.name, entry.is_dir(follow_symlinks=False),
                                 entry.is_file(follow_symlinks=False)) for entry in entries)
        except OSError:
            continue  # an unreadable folder: its files are not counted, the pack reads them
        for name, is_dir, is_file in listed:
            if name.startswith("."):
                continue
            relpath = f"{folder}/{name}" if folder else name
            if is_dir:
                stack.append(relpath)
            elif is_file and name.lower().endswith(ending.lower()):
                yield relpath


def _beside(relpaths: Sequence[str], root: str, ending: str) -> Iterator[str]:
    """Files ending in ``ending`` in the folders that hold images (each listed once)."""
    folders = sorted({posixpath.dirname(relpath) for relpath in relpaths})
    for folder in folders:
        try:
            with os.scandir(os.path.join(root, folder) if folder else root) as entries:
                names = sorted(entry.name for entry in entries
                               if entry.is_file(follow_symlinks=False))
        except OSError:
            continue
        for name in names:
            if not name.startswith(".") and name.lower().endswith(ending.lower()):
                yield f"{folder}/{name}" if folder else name


def _has_image(relpaths: Sequence[str], stem: str) -> bool:
    """Whether an image ``stem.EXT`` (any extension) is among the sorted ``relpaths``."""
    at = bisect.bisect_left(relpaths, stem + ".")
    while at < len(relpaths) and relpaths[at].startswith(stem + "."):
        if posixpath.splitext(relpaths[at])[0] == stem:
            return True
        at += 1
    return False


def is_image(relpaths: Sequence[str], relpath: str) -> bool:
    """Whether the sorted ``relpaths`` hold ``relpath`` (a binary search)."""
    at = bisect.bisect_left(relpaths, relpath)
    return at < len(relpaths) and relpaths[at] == relpath
