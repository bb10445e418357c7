"""A contact sheet: one PNG that shows what a dataset holds.

From top to bottom: a title with the dataset's settings and totals; a bar per class, split
into its splits (the samples per class and split, and so each class's split fractions at a
glance); a row per class of seeded random samples as packed (read from the shards, so what a
model will see), each captioned with its split and size; and a strip of rejected originals,
as thumbnails where they still decode (a truncated JPEG shows how far it got) and as their
reason where they do not.  Drawn with Pillow alone; the same dataset and seed give the same
PNG, byte for byte.

With ``objects``, each sample of an annotated dataset shows its boxes with their class names
and the outlines of its class mask, one colour per object class (``objects_drawn``), so a
person can check the labels at a glance; a sample whose objects do not read is a tile saying
why.

Rejected originals are read only under the source the user names (``--source``, or the job
file's; never the one the untrusted manifest records: ``named_source``), each path checked
first (``originals.original_path``); without one, or when it is not mounted, the strip shows
reasons only and a note says why.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageDraw, ImageFile, ImageFont

from ..atomic import write_bytes_atomic
from ..config import ImageConfig
from ..dataset.manifest import Manifest, RejectEntry, SampleRecord
from ..errors import BadImage, ConfigError
from ..text import human_bytes, plural, printable
from .census import Census, packed_config, require_split, take_census
from .named_source import MAX_ORIGINAL_BYTES, NOT_READ, Originals, not_named
from .objects_drawn import (
    DrawnObject,
    PackedObjects,
    class_colour,
    cut_drawn,
    draw_objects,
    read_objects,
)
from .picks import pick_rejects, read_packed, sample_picture

Box = tuple[int, int, int, int]

MARGIN = 28
GAP = 10
LABEL_WIDTH = 250
CAPTION = 30
BAR_HEIGHT = 18
# The sheet stays one image a viewer opens (and under Pillow's decompression-bomb limit of
# 89 M pixels): at most this many pixels and class rows; classes past them are named in a
# note and on the sheet, not drawn (``inspect`` lists them all).
MAX_SHEET_PIXELS = 60_000_000
MAX_CLASS_ROWS = 100
TEXT_SHOWN = 160  # bytes of a text file named like an image shown on its tile
PAPER = (250, 250, 248)
INK = (34, 34, 38)
MUTED = (110, 112, 118)
TILE = (232, 232, 230)
REJECT = (178, 34, 34)
SPLIT_COLOURS = ((59, 111, 182), (224, 138, 44), (74, 154, 91), (155, 89, 182),
                 (192, 57, 43), (127, 140, 141))


@dataclass(frozen=True)
class SheetRow:
    """A class row: its label, its box, and the box of each sample drawn in it."""

    label: int
    name: str
    box: Box
    thumbnails: tuple[Box, ...]


@dataclass(frozen=True)
class Sheet:
    """The rendered sheet and where things are on it."""

    image: Image.Image
    rows: tuple[SheetRow, ...]
    rejects: tuple[Box, ...]
    reject_thumbnails: int
    notes: tuple[str, ...]
    objects: tuple[DrawnObject, ...] = ()  # with ``objects``: each box, in sheet pixels
    headline: str = ""  # the line under the title: format, version, settings, totals

    def png(self) -> bytes:
        buffer = io.BytesIO()
        self.image.save(buffer, "PNG", optimize=True)
        return buffer.getvalue()

    def save(self, path: Path) -> None:
        """Write the PNG atomically."""
        write_bytes_atomic(path, self.png())

    def summary(self, output: str, objects: bool) -> str:
        """``sheet.png: 1200x900 px, 3 class rows, 24 samples, 2 rejects``: what was drawn,
        with the objects when they were asked for."""
        return (f"{printable(output)}: {self.image.width}x{self.image.height} px, "
                f"{plural(len(self.rows), 'class row')}, "
                f"{plural(sum(len(row.thumbnails) for row in self.rows), 'sample')}, "
                f"{plural(len(self.rejects), 'reject')}"
                + (f", {plural(len(self.objects), 'object')} drawn" if objects else "")
                + cut_drawn(self.objects))


def render_sheet(directory: Path, manifest: Manifest, per_class: int = 8, seed: int = 0,
                 split: str | None = None, thumb: int = 160, objects: bool = False,
                 source: Originals | None = None) -> Sheet:
    """Draw the contact sheet of the dataset in ``directory``; with ``objects``, each
    sample's annotated objects over it (a ConfigError for a dataset without annotations).
    Rejected originals are drawn only from the ``source`` the user named
    (``named_source.named_originals``); without one, by their reason."""
    require_split(manifest, split)
    if objects and manifest.object_classes is None:
        raise ConfigError(f"{directory} has no box or mask annotations (packed without "
                          "source.annotations): --objects needs them")
    census = take_census(directory, manifest, split, duplicates=False, per_class=per_class,
                         seed=seed)
    notes: list[str] = []
    canvas = _Canvas(manifest, census, per_class, thumb)
    labels = census.labels[: _rows_that_fit(canvas.width, thumb)]
    left_out = len(census.labels) - len(labels)
    if left_out:
        notes.append(f"{plural(left_out, 'class', 'classes')} of {len(census.labels):,} not "
                     f"drawn (a sheet shows at most {len(labels):,} at this size; "
                     "shardsmith inspect lists them all)")
    shown = [record for label in labels for record in census.picks.get(label, [])]
    packed = read_packed(directory, manifest, shown)
    canvas.objects = read_objects(directory, manifest, shown) if objects else None
    rejects = pick_rejects(manifest.rejects, per_class, seed)
    texts: dict[str, str] = {}
    originals = _reject_images(source or not_named(manifest.source), rejects,
                               packed_config(manifest).image, thumb, notes, texts)
    canvas.labels = labels
    canvas.title(directory, seed, split)
    canvas.chart()
    rows = tuple(canvas.class_row(label, census.picks.get(label, []), packed) for label in labels)
    if left_out:
        canvas.left_out(left_out)
    tiles = canvas.reject_strip(rejects, originals, texts) if manifest.rejects else ()
    canvas.footer(directory, per_class, seed, split, objects)
    return Sheet(canvas.finish(), rows, tiles, sum(1 for image in originals if image),
                 tuple(notes), tuple(canvas.drawn), canvas.headline)


def image_settings(image: ImageConfig) -> str:
    """How the samples were made, in a few words: ``512 px fit`` for resized originals,
    ``1024 px tiles (overlap 128)`` for tiles, whose ``size`` and ``resize`` are not used."""
    if not image.tiles.enabled:
        return f"{image.size} px {image.resize}, JPEG quality {image.quality}"
    tiles = image.tiles
    scale = f", originals scaled by {tiles.scale:g}" if tiles.scale != 1 else ""
    return (f"{tiles.size} px tiles (overlap {tiles.overlap}{scale}), "
            f"JPEG quality {image.quality}")


def _rows_that_fit(width: int, thumb: int) -> int:
    """How many classes (a bar and a row each) a sheet ``width`` pixels wide draws within
    ``MAX_SHEET_PIXELS``, leaving room for the title, the reject strip and the footer."""
    fixed = 400 + 2 * (thumb + CAPTION + GAP) + 80
    per_class = BAR_HEIGHT + 8 + thumb + CAPTION + 2 * GAP
    return max(1, min(MAX_CLASS_ROWS, (MAX_SHEET_PIXELS // width - fixed) // per_class))


class _Canvas:
    """Lays the sheet out top to bottom on a canvas that grows as sections are added."""

    def __init__(self, manifest: Manifest, census: Census, per_class: int, thumb: int):
        self.manifest, self.census, self.thumb = manifest, census, thumb
        self.labels = census.labels  # the classes drawn
        self.width = 2 * MARGIN + LABEL_WIDTH + max(per_class, 4) * (thumb + GAP) - GAP
        self.image = Image.new("RGB", (self.width, 4096), PAPER)
        self.draw = ImageDraw.Draw(self.image)
        self.y = MARGIN
        self.colours = {name: SPLIT_COLOURS[i % len(SPLIT_COLOURS)]
                        for i, name in enumerate(dict.fromkeys((*manifest.splits,
                                                                *census.splits)))}
        self.fonts = {size: ImageFont.load_default(size=size) for size in (11, 12, 13, 15, 17, 24)}
        self.objects: dict[str, PackedObjects | str] | None = None  # key -> objects or why not
        self.drawn: list[DrawnObject] = []
        self.headline = ""

    def _room(self, height: int) -> None:
        """Grow the canvas so ``height`` more pixels fit below ``self.y``."""
        if self.y + height + MARGIN > self.image.height:
            room = max(self.y + height + MARGIN,
                       min(self.image.height * 2, MAX_SHEET_PIXELS // self.width))
            grown = Image.new("RGB", (self.width, room), PAPER)
            grown.paste(self.image, (0, 0))
            self.image, self.draw = grown, ImageDraw.Draw(grown)

    def text(self, xy: tuple[int, int], text: str, size: int, fill=INK, width: int = 0,
             keep_end: bool = False, anchor: str = "la") -> None:
        font = self.fonts[size]
        text = _clipped(printable(text), width or self.width, keep_end)
        if width:
            text = _fitted(self.draw, text, font, width, keep_end)
        self.draw.text(xy, text, font=font, fill=fill, anchor=anchor)

    def title(self, directory: Path, seed: int, split: str | None) -> None:
        manifest, census = self.manifest, self.census
        self._room(80)
        self.text((MARGIN, self.y), printable(str(directory)), 24, width=self.width - 2 * MARGIN,
                  keep_end=True)
        self.y += 34
        totals = manifest.totals
        line = (f"{manifest.format}, version {manifest.version}, "
                f"{image_settings(packed_config(manifest).image)} - "
                f"{plural(census.samples, 'sample')}"
                + (f" of split {split}" if split else "")
                + f" in {plural(len(census.labels), 'class', 'classes')}, "
                f"{plural(totals.rejected, 'reject')}, {plural(totals.excluded, 'file')} "
                f"excluded, {human_bytes(totals.bytes_out)} of shards - seed {seed}")
        self.text((MARGIN, self.y), line, 15, MUTED, width=self.width - 2 * MARGIN)
        self.headline = line
        self.y += 34
        if self.objects is not None:
            self.legend()

    def legend(self) -> None:
        """A swatch and name per object class: the colour its boxes and outlines have."""
        classes = tuple(self.manifest.object_classes or ())
        self._room(30)
        self.text((MARGIN, self.y), "Objects:", 13, MUTED)
        x = MARGIN + 70
        for name in classes:
            width = int(self.draw.textlength(_clipped(printable(name), 40, False),
                                             font=self.fonts[13]))
            if x + 18 + width > self.width - MARGIN:
                break  # the rest are named on their boxes
            self.draw.rectangle((x, self.y + 2, x + 12, self.y + 14),
                                fill=class_colour(classes, name))
            self.text((x + 18, self.y), name, 13, width=width + 1)
            x += 18 + width + 16
        self.y += 30

    def chart(self) -> None:
        census = self.census
        labels = self.labels
        self._room(40 + len(labels) * (BAR_HEIGHT + 8))
        self.text((MARGIN, self.y), "Samples per class and split", 17)
        x = self.width - MARGIN
        for name in reversed(census.splits):  # the legend, right-aligned
            width = int(self.draw.textlength(name, font=self.fonts[13]))
            x -= width
            self.text((x, self.y + 3), name, 13, MUTED)
            x -= 18
            self.draw.rectangle((x, self.y + 4, x + 12, self.y + 16), fill=self.colours[name])
            x -= 16
        self.y += 30
        largest = max((census.class_total(label) for label in labels), default=0) or 1
        bar_left = MARGIN + LABEL_WIDTH
        bar_room = self.width - MARGIN - bar_left - 120
        for label in labels:
            self.text((bar_left - 12, self.y + BAR_HEIGHT // 2), census.class_name(label), 13,
                      width=LABEL_WIDTH - 20, anchor="rm")
            x = bar_left
            for name in census.splits:
                count = census.counts.get((label, name), 0)
                width = round(bar_room * count / largest)
                if width:
                    self.draw.rectangle((x, self.y, x + width - 1, self.y + BAR_HEIGHT - 1),
                                        fill=self.colours[name])
                    label_text = f"{count:,}"
                    if self.draw.textlength(label_text, font=self.fonts[12]) + 6 < width:
                        self.text((x + 4, self.y + BAR_HEIGHT // 2), label_text, 12,
                                  (255, 255, 255), anchor="lm")
                x += width
            total = census.class_total(label)
            fractions = " / ".join(f"{census.counts.get((label, n), 0) / total:.0%}"
                                   for n in census.splits) if total else "no samples"
            self.text((x + 8, self.y + BAR_HEIGHT // 2), f"{total:,}  ({fractions})"
                      if len(census.splits) > 1 else f"{total:,}", 12, MUTED, anchor="lm")
            self.y += BAR_HEIGHT + 8
        self.y += 18

    def class_row(self, label: int, records: list[SampleRecord],
                  packed: dict[str, bytes]) -> SheetRow:
        census, thumb = self.census, self.thumb
        height = thumb + CAPTION + GAP
        self._room(height)
        top = self.y
        self.draw.line((MARGIN, top - GAP // 2, self.width - MARGIN, top - GAP // 2),
                       fill=TILE, width=1)
        self.text((MARGIN, top + 4), census.class_name(label), 17, width=LABEL_WIDTH - 16)
        per_split = ", ".join(f"{name} {census.counts.get((label, name), 0):,}"
                              for name in census.splits)
        self.text((MARGIN, top + 30), f"label {label}" if label >= 0 else "unlabelled", 13,
                  MUTED)
        self.text((MARGIN, top + 50), plural(census.class_total(label), "sample"), 13, MUTED)
        self.text((MARGIN, top + 70), per_split, 13, MUTED, width=LABEL_WIDTH - 16)
        boxes = []
        x = MARGIN + LABEL_WIDTH
        for record in records:
            box = (x, top, x + thumb, top + thumb)
            jpeg = packed.get(record.key)
            image = sample_picture(jpeg, record, thumb)
            image = None if image is None else _fitted_picture(image, thumb)
            message = "not found in its shard (shardsmith verify)" if jpeg is None \
                else f"{record.key}: unreadable, or not the size the index records " \
                "(shardsmith verify --decode)"
            if image is not None and self.objects is not None:
                image, message = self._with_objects(image, record, box)
            self._tile(box, image, message, self.colours.get(record.split, MUTED))
            self.text((x, top + thumb + 5), f"{record.split}  {record.width}x{record.height}",
                      12, MUTED, width=thumb)
            self.text((x, top + thumb + 18), printable(record.path), 12, MUTED, width=thumb,
                      keep_end=True)
            if image is not None:
                boxes.append(box)
            x += thumb + GAP
        if not records:
            self.text((x, top + thumb // 2), "no samples", 15, MUTED, anchor="lm")
        self.y += height + GAP
        return SheetRow(label, census.class_name(label), (MARGIN, top, self.width - MARGIN,
                                                             top + height), tuple(boxes))

    def _with_objects(self, image: Image.Image, record: SampleRecord,
                      box: Box) -> tuple[Image.Image | None, str]:
        """The thumbnail with the sample's objects drawn over it, or None and why not."""
        found = self.objects.get(record.key) if self.objects is not None else None
        if found is None:
            return None, f"{record.key}: not found in its shard (shardsmith verify)"
        if isinstance(found, str):
            return None, f"{record.key}: objects unreadable ({found})"
        drawn = draw_objects(image, found, record.key, (record.width, record.height),
                             tuple(self.manifest.object_classes or ()), self.fonts[11])
        # Where ``_tile`` pastes the picture: centred, standing on the tile's bottom bar.
        x = box[0] + (box[2] - box[0] - image.width) // 2
        y = box[3] - 4 - image.height
        self.drawn += [DrawnObject(item.key, item.name, item.colour,
                                   (item.box[0] + x, item.box[1] + y, item.box[2] + x,
                                    item.box[3] + y), item.cut) for item in drawn]
        return image, ""

    def left_out(self, count: int) -> None:
        """A line saying how many classes the sheet leaves out."""
        self._room(30)
        self.text((MARGIN, self.y), f"... and {plural(count, 'more class', 'more classes')}, "
                  "not drawn (shardsmith inspect lists them all)", 15, MUTED,
                  width=self.width - 2 * MARGIN)
        self.y += 30

    def reject_strip(self, rejects: list[RejectEntry], originals: list[Image.Image | None],
                     shown_text: dict[str, str]) -> tuple[Box, ...]:
        thumb = self.thumb
        self._room(40 + thumb + CAPTION + 20)
        total = len(self.manifest.rejects)
        self.y += 6
        self.text((MARGIN, self.y), f"Rejected originals ({len(rejects)} of {total:,} shown)",
                  17, REJECT)
        self.y += 30
        boxes = []
        x = MARGIN
        per_row = (self.width - 2 * MARGIN + GAP) // (thumb + GAP)
        for number, (reject, image) in enumerate(zip(rejects, originals, strict=True)):
            if number and number % per_row == 0:
                x = MARGIN
                self.y += thumb + CAPTION + GAP
                self._room(thumb + CAPTION + GAP)
            box = (x, self.y, x + thumb, self.y + thumb)
            self._tile(box, image, _reject_message(reject, shown_text.get(reject.path)), REJECT)
            self.text((x, self.y + thumb + 5), reject.reason, 12, REJECT, width=thumb)
            self.text((x, self.y + thumb + 18), printable(reject.path), 12, MUTED, width=thumb,
                      keep_end=True)
            boxes.append(box)
            x += thumb + GAP
        self.y += thumb + CAPTION + GAP
        return tuple(boxes)

    def _tile(self, box: Box, image: Image.Image | None, message: str, colour) -> None:
        """An image standing on a bar of ``colour`` at the tile's bottom edge, or a grey tile
        with ``message``."""
        left, top, right, bottom = box
        if image is not None:
            x = left + (right - left - image.width) // 2
            self.image.paste(image, (x, bottom - 4 - image.height))
            self.draw.rectangle((x, bottom - 4, x + image.width - 1, bottom - 1), fill=colour)
            return
        self.draw.rectangle(box, fill=TILE)
        self.draw.rectangle((left, bottom - 4, right - 1, bottom - 1), fill=colour)
        font = self.fonts[13]
        lines = _wrapped(self.draw, _clipped(printable(message), 6 * (right - left), False),
                         font, right - left - 16, 6)
        line_height = 17
        y = (top + bottom - 4) // 2 - line_height * len(lines) // 2
        for line in lines:
            self.text(((left + right) // 2, y), line, 13, MUTED, anchor="ma")
            y += line_height

    def footer(self, directory: Path, per_class: int, seed: int, split: str | None,
               objects: bool = False) -> None:
        self._room(30)
        self.y += 4
        command = (f"shardsmith sheet {printable(str(directory))} --per-class {per_class} "
                   f"--seed {seed}" + (f" --split {split}" if split else "")
                   + (" --objects" if objects else ""))
        self.text((MARGIN, self.y), command, 12, MUTED, width=self.width - 2 * MARGIN)
        self.y += 16

    def finish(self) -> Image.Image:
        return self.image.crop((0, 0, self.width, self.y + MARGIN))


def _clipped(text: str, width: int, keep_end: bool) -> str:
    """``text`` cut to as many characters as ``width`` pixels could ever show (no glyph is
    under a pixel wide), before any font measures it: a class name or path of a million
    characters is more than FreeType lays out, and more than a tile shows."""
    if len(text) <= width:
        return text
    return "..." + text[len(text) - width:] if keep_end else text[:width] + "..."


def _fitted(draw: ImageDraw.ImageDraw, text: str, font, width: int, keep_end: bool) -> str:
    """``text`` cut with an ellipsis to fit ``width`` pixels (keeping its end for paths)."""
    if draw.textlength(text, font=font) <= width:
        return text
    low, high = 0, len(text)
    while low < high:  # the most characters that fit with the ellipsis
        middle = (low + high + 1) // 2
        part = text[-middle:] if keep_end else text[:middle]
        candidate = "..." + part if keep_end else part + "..."
        if draw.textlength(candidate, font=font) <= width:
            low = middle
        else:
            high = middle - 1
    return ("..." + text[len(text) - low:]) if keep_end else (text[:low] + "...")


def _reject_images(originals: Originals, rejects: list[RejectEntry], limits: ImageConfig,
                   thumb: int, notes: list[str],
                   texts: dict[str, str]) -> list[Image.Image | None]:
    """Thumbnails of the rejected originals that still decode (None for the others); the
    start of those that are text is put in ``texts`` (path -> text)."""
    if not rejects:
        return []
    if originals.root is None:
        notes.append(f"{originals.why_not}: rejects are shown by their reason only")
        return [None] * len(rejects)
    for reject in rejects:
        originals.check(reject.path)  # every shown path is checked, read or not
    return [_reject_image(originals, reject, thumb, limits, texts) for reject in rejects]


def _reject_image(originals: Originals, reject: RejectEntry, thumb: int, limits: ImageConfig,
                  texts: dict[str, str]) -> Image.Image | None:
    if reject.reason in NOT_READ:
        return None  # nothing to see, or too much to decode
    try:
        data = originals.read(reject.path, MAX_ORIGINAL_BYTES)
    except (OSError, BadImage):
        return None
    if reject.reason == "not_an_image":
        start = data[:TEXT_SHOWN].decode("utf-8", "replace")
        if start.isprintable() or all(c.isprintable() or c in "\n\r\t" for c in start):
            texts[reject.path] = " ".join(start.split())
        return None
    return _partial_thumbnail(data, thumb, limits.max_pixels)


def _reject_message(reject: RejectEntry, text: str | None) -> str:
    """What a tile without a picture says: the text a non-image holds, or the detail."""
    if text:
        return f"text: \u201c{text}\u201d"
    return reject.detail or reject.reason


def _wrapped(draw: ImageDraw.ImageDraw, text: str, font, width: int,
             max_lines: int) -> list[str]:
    """``text`` broken into lines of at most ``width`` pixels (the last one cut short)."""
    lines: list[str] = []
    for word in text.split():
        if lines and draw.textlength(f"{lines[-1]} {word}", font=font) <= width:
            lines[-1] = f"{lines[-1]} {word}"
        else:
            lines.append(word)
    lines = [_fitted(draw, line, font, width, False) for line in lines]
    if len(lines) > max_lines:
        lines = lines[: max_lines - 1] + [_fitted(draw, lines[max_lines - 1] + " ...", font,
                                                  width, False)]
    return lines


def _fitted_picture(picture: Image.Image, thumb: int) -> Image.Image:
    """``picture`` scaled to fill a tile: smoothly down, or up by whole pixels (NEAREST), so
    a small sample shows its real resolution."""
    scale = min(thumb / picture.width, (thumb - 4) / picture.height)
    size = (max(1, round(picture.width * scale)), max(1, round(picture.height * scale)))
    if scale >= 1:
        factor = int(scale)
        size = (picture.width * factor, picture.height * factor)
    if size == picture.size:
        return picture
    return picture.resize(size, Image.Resampling.LANCZOS if scale < 1
                          else Image.Resampling.NEAREST)


@contextmanager
def _truncated_images_allowed() -> Iterator[None]:
    """Let Pillow show as much of a cut-short file as it has (grey below)."""
    before = ImageFile.LOAD_TRUNCATED_IMAGES
    ImageFile.LOAD_TRUNCATED_IMAGES = True
    try:
        yield
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES = before


def _partial_thumbnail(data: bytes, thumb: int, max_pixels: int) -> Image.Image | None:
    """What a damaged original still shows, within the dataset's pixel limit; or None."""
    try:
        with _truncated_images_allowed(), Image.open(io.BytesIO(data)) as image:
            if image.width * image.height > max_pixels:
                return None
            image.draft("RGB", (thumb, thumb))
            image.load()
            picture = image.convert("RGB")
    except (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError):
        return None
    return _fitted_picture(picture, thumb)
