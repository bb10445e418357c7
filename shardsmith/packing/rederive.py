"""Objects and masks derived again for an original whose pixels stay as packed.  Runs in the
worker processes.

When annotation rules change, an older dataset's annotated samples are re-derived
(``delta.COPY``): their JPEG bytes are copied from the previous version, so only what the
samples' objects depend on is read here: the original's header (stored size, EXIF
orientation, format and mode, and from them the size ``imaging.decode_upright`` would decode
it at), its annotations, and the config.  ``imaging.plan_frame`` places it and
``annotated.window_objects`` cuts its objects and class mask per window, the very functions
the full path runs on the decoded frame, so the objects are those a full decode gives.

Where the header cannot tell the decoded size (a JPEG that Pillow decodes: CMYK, YCCK; a
TIFF turned by its orientation, which may be decoded by Pillow at its upright size), where the
full path would refuse the original, or where a window now kept was not packed before
(``tiles.keep: annotated`` keeps the tiles that show an object, and the rules changed which
do), the original is decoded as a new one would be (``annotated.process_annotated``):
correct, only slower.
"""

from __future__ import annotations

import warnings
from dataclasses import replace

from ..annotations.geometry import upright_size
from ..annotations.model import Vocabulary
from ..config import Config
from ..dataset.normal import objects_are_normal
from ..dataset.records import Rederived, Reject, Sample, Unchanged
from ..decoders import jpeg_scale, open_header, orientation
from ..errors import BadImage
from ..tiling import MAX_TILES, kept, scaled_size, tile_count
from .annotated import (
    MASK_BYTES_PER_PIXEL,
    image_annotations,
    process_annotated,
    tile_record,
    window_objects,
)
from .delta import RederiveItem
from .imaging import (
    TRANSPOSING_ORIENTATIONS,
    Output,
    budget_bytes,
    layout,
    plan_frame,
    stored_size,
)
from .originals import open_source, original_cap

# Read of an original's start that holds a JPEG's header (markers up to the scan: EXIF in
# APP1 is at most 64 KiB, an ICC profile a few hundred KiB at worst); a header that does not
# fit is read whole.
HEADER_BYTES = 256 * 1024


def rederive(item: RederiveItem, root: str, config: Config, vocabulary: Vocabulary
             ) -> Rederived | tuple[Sample, ...] | Reject | Unchanged:
    """The samples of ``item``'s original with objects and masks derived anew and no JPEG
    (``Rederived``: the writer copies the JPEG bytes of the same keys from ``item.previous``);
    else, where that cannot be done exactly, what ``process_annotated`` makes of it."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Pillow's warnings on damaged headers
            found = _rederived(item, root, config, vocabulary)
    except (BadImage, OSError):
        found = None  # the full path says what is wrong with it, as for any original
    if found is None:
        return process_annotated(item, root, config, vocabulary)
    return found


def _rederived(item: RederiveItem, root: str, config: Config,
               vocabulary: Vocabulary) -> Rederived | None:
    notes, image = config.source.annotations, config.image
    relpath = item.source.relpath
    with open_source(root, relpath, config.source.follow_symlinks, original_cap(image),
                     item.source.identity) as handle:
        info, size = handle.info, handle.size
        head = handle.pread(HEADER_BYTES, 0)  # an object has no descriptor: a ranged GET
        try:
            facts = _header(head, size, config)
        except BadImage:
            if len(head) == size:
                raise
            facts = None
        if facts is None or facts[2].format != "JPEG":
            head = handle.read() if len(head) < size else head  # every tag, wherever it is
            facts = _header(head, size, config)
    if facts is None:
        return None
    stored, rotation, header, decoded = facts
    upright = upright_size(*stored, rotation)
    tiles = image.tiles if image.tiles.enabled else None
    plan = plan_frame(upright, decoded, image, tiles)
    annotations = image_annotations(item, root, config, vocabulary, stored, upright)
    found = window_objects(annotations, stored, rotation, plan, config, vocabulary)
    # a tile showing a defect, even one cut below min_visible, is never drawn as background
    marked = [not objects_are_normal(objects) for objects in found]
    keep = kept(list(plan.windows), marked, image.tiles, config.seed, relpath,
                notes.has_objects)
    base = Sample(key=item.key, relpath=relpath, split=item.split, label=item.source.label,
                  jpeg=b"",
                  width=plan.window[0], height=plan.window[1], channels=0,
                  original_width=upright[0], original_height=upright[1],
                  original_mode=header.mode, original_format=header.format,
                  source_size=info.st_size, source_mtime_ns=info.st_mtime_ns,
                  source_digest=item.source_digest,
                  annotation_digest=annotations.digest if annotations is not None else None)
    shard_of = dict(item.previous)
    samples, shards = [], []
    for tile, objects, chosen in zip(plan.windows, found, keep, strict=True):
        if not chosen:
            continue
        sample = replace(base, objects=objects)
        if image.tiles.enabled:
            sample = replace(sample, key=f"{base.key}_r{tile.row:03d}c{tile.column:03d}",
                             tile=tile_record(tile, plan.placement, image.tiles.scale))
        if sample.key not in shard_of:
            return None  # a window kept now that was not packed before: no bytes to copy
        samples.append(sample)
        shards.append(shard_of[sample.key])
    return Rederived(tuple(samples), tuple(shards))


class _Header:
    """The header facts a sample records: the original's mode and format."""

    __slots__ = ("mode", "format")

    def __init__(self, mode: str, format_name: str):
        self.mode, self.format = mode, format_name


def _header(data: bytes, size: int, config: Config
            ) -> tuple[tuple[int, int], int, _Header, tuple[int, int]] | None:
    """(stored size, EXIF orientation, mode and format, the upright size the full path
    decodes at) from the first bytes of a ``size``-byte original; None where the header
    cannot tell the decoded size, or the full path would refuse the original (the decode
    budget, the tile limit).  Raises BadImage for a header it cannot read."""
    image, notes = config.image, config.source.annotations
    with open_header(data) as header:
        stored, rotation = stored_size(header), orientation(header)
        upright = upright_size(*stored, rotation)
        transposed = rotation in TRANSPOSING_ORIENTATIONS
        tiles = image.tiles if image.tiles.enabled else None
        if stored[0] * stored[1] > image.max_pixels:
            return None
        if tiles is not None and tile_count(*scaled_size(*upright, tiles.scale),
                                            tiles) > MAX_TILES:
            return None
        planned = layout(*upright, image, tiles)
        need_w, need_h = planned.need[::-1] if transposed else planned.need
        if header.format == "JPEG":
            if header.mode not in ("RGB", "L"):
                return None  # decoded by Pillow's draft, whose scale only decoding tells
            decoded = jpeg_scale(*stored, need_w, need_h)
        elif header.format == "TIFF" and transposed:
            return None  # Pillow, where tifffile declines it, decodes it upright
        else:
            decoded = stored  # decoded whole
        # the full path's budget check (imaging.decode_upright), on the file's size
        extra = upright[0] * upright[1] * MASK_BYTES_PER_PIXEL if notes.has_masks else 0
        peak = budget_bytes(header, data, size, (need_w, need_h), rotation,
                            Output(planned.geometry.size, planned.window), image) + extra
        if peak > image.max_decoded_mb * 2**20:
            return None
        facts = _Header(header.mode, header.format or "unknown")
    decoded_upright = decoded[::-1] if transposed else decoded
    return stored, rotation, facts, decoded_upright
