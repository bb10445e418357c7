"""``sheet --near-duplicates``: the clusters of ``inspect --near-duplicates`` drawn side by side,
leakage first, each sample as packed (read from its shard) under its split and path, so a
person sees at a glance whether two samples are one part.  Drawn with Pillow alone."""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from ..dataset.formats import shard_format
from ..dataset.manifest import Manifest
from ..errors import ShardFormatError
from ..packing.jpegcopy import PreviousJpegs
from ..text import plural, printable
from .near_duplicates import MEMBERS_SHOWN, Cluster, NearDuplicates
from .sheet import GAP, INK, MARGIN, MUTED, PAPER, REJECT, SPLIT_COLOURS, TILE, _clipped, _fitted

CLUSTERS_DRAWN = 24  # rows of one sheet; --json lists every cluster
HEADER = 22  # a row's line above its pictures
CAPTION = 30  # two lines under a picture: split, path


def near_sheet_png(found: NearDuplicates, directory: Path, manifest: Manifest,
                   thumb: int) -> bytes:
    """The clusters of ``found`` (of the dataset in ``directory``), a row each, as a PNG."""
    clusters = found.clusters[:CLUSTERS_DRAWN]
    width = 2 * MARGIN + MEMBERS_SHOWN * (thumb + GAP) - GAP
    row = HEADER + thumb + CAPTION + GAP
    height = 2 * MARGIN + 40 + max(1, len(clusters)) * row + 20
    image = Image.new("RGB", (width, height), PAPER)
    draw = ImageDraw.Draw(image)
    fonts = {size: ImageFont.load_default(size=size) for size in (11, 13, 17)}
    colours = {name: SPLIT_COLOURS[i % len(SPLIT_COLOURS)] for i, name in
               enumerate(manifest.splits)}
    leaking = sum(cluster.leakage for cluster in found.clusters)
    draw.text((MARGIN, MARGIN), _fitted(draw, _clipped(
        f"{printable(found.directory)}: {plural(len(found.clusters), 'cluster')} of "
        f"near-duplicates, {leaking:,} across splits", width, True), fonts[17],
        width - 2 * MARGIN, True), font=fonts[17], fill=INK)
    y = MARGIN + 40
    if not clusters:
        draw.text((MARGIN, y), "no near-duplicates found", font=fonts[13], fill=MUTED)
    with PreviousJpegs(shard_format(manifest.format), directory, manifest.shards) as jpegs:
        for cluster in clusters:
            _row(draw, image, cluster, jpegs, y, thumb, fonts, colours)
            y += row
    if len(found.clusters) > len(clusters):
        draw.text((MARGIN, y), f"... {len(found.clusters) - len(clusters):,} more clusters: "
                  "shardsmith inspect --near-duplicates --json", font=fonts[13], fill=MUTED)
    buffer = io.BytesIO()
    image.save(buffer, "PNG", optimize=True)
    return buffer.getvalue()


def _row(draw: ImageDraw.ImageDraw, image: Image.Image, cluster: Cluster,
         jpegs: PreviousJpegs, y: int, thumb: int, fonts: dict, colours: dict) -> None:
    best = min(cluster.pairs, key=lambda pair: pair.score, default=None)
    how = f" · {best}" if best is not None else " · the same image"
    head = ("leakage" if cluster.leakage else "one split") + (", dense" if cluster.dense else "")
    draw.text((MARGIN, y), f"{head}: {cluster.size()} in {', '.join(cluster.splits)}{how}",
              font=fonts[13], fill=REJECT if cluster.leakage else INK)
    for number, (member, _) in enumerate(cluster.shown()[:MEMBERS_SHOWN]):
        x = MARGIN + number * (thumb + GAP)
        top = y + HEADER
        draw.rectangle((x, top, x + thumb - 1, top + thumb - 1), fill=TILE,
                       outline=colours.get(member.split, MUTED), width=3)
        try:
            picture = Image.open(io.BytesIO(jpegs.jpeg(member.shard, member.key)))
            picture.draft("RGB", (thumb, thumb))
            picture = picture.convert("RGB")
            picture.thumbnail((thumb - 8, thumb - 8))
            image.paste(picture, (x + (thumb - picture.width) // 2,
                                  top + (thumb - picture.height) // 2))
        except (ShardFormatError, OSError, ValueError) as exc:
            draw.text((x + 6, top + 6), _fitted(draw, f"cannot read: {exc}", fonts[11],
                                                 thumb - 12, False), font=fonts[11], fill=REJECT)
        draw.text((x, top + thumb + 3), member.split, font=fonts[11],
                  fill=colours.get(member.split, MUTED))
        draw.text((x, top + thumb + 16), _fitted(draw, _clipped(printable(member.path), thumb,
                                                                True), fonts[11], thumb, True),
                  font=fonts[11], fill=MUTED)
