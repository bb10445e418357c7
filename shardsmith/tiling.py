"""Tiles: a grid of size x size windows over an original, and which of them to keep.

The grid steps by ``size - overlap``; its last row and column are aligned to the image's
border (they overlap their neighbour by more), so every pixel is in a tile and no tile hangs
over the edge.  An image smaller than a tile is one tile, padded at its right and bottom.

Which tiles are kept is decided per tile from a hash of (seed, path, row, column): the same on
every run and worker, and unchanged for one image when others are added.

An original gives at most ``MAX_TILES`` tiles: all of them are held at once (their objects,
then the kept ones' JPEGs), so a dense grid (tile 16, overlap 15: 148,000 tiles of a 400 x 400
original) would cost without bound.  The count is known from the original's size before it
is decoded: an original past it is rejected (``too_large``).  A config whose grid passes it
already on a one-megapixel original (``REFERENCE_SIDE`` square, before ``scale``) is refused
when loaded: it would reject nearly every image.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Protocol

MAX_TILES = 4096  # tiles an original
REFERENCE_SIDE = 1024  # the original a config's grid must fit in MAX_TILES


class TileSettings(Protocol):
    """The settings a grid is cut by (``config.TileConfig``, YAML ``image.tiles``)."""

    size: int
    overlap: int
    scale: float
    keep: str
    background_fraction: float


@dataclass(frozen=True, slots=True)
class Tile:
    """One tile: grid position and its rectangle in the scaled original (``width`` and
    ``height`` are less than the tile size only for an image smaller than a tile)."""

    row: int
    column: int
    x: int
    y: int
    width: int
    height: int


def starts(length: int, size: int, overlap: int) -> list[int]:
    """Where the tiles along one axis start; the last one ends at the border."""
    if length <= size:
        return [0]
    stride = size - overlap
    return list(range(0, length - size, stride)) + [length - size]


def count_along(length: int, size: int, overlap: int) -> int:
    """``len(starts(length, size, overlap))`` without the list."""
    return 1 if length <= size else -(-(length - size) // (size - overlap)) + 1


def tile_count(width: int, height: int, config: TileSettings) -> int:
    """How many tiles ``grid`` gives a ``width`` x ``height`` (scaled) image."""
    return (count_along(width, config.size, config.overlap)
            * count_along(height, config.size, config.overlap))


def scaled_size(width: int, height: int, scale: float) -> tuple[int, int]:
    """The size an upright ``width`` x ``height`` original is cut at."""
    return max(1, round(width * scale)), max(1, round(height * scale))


def grid_problem(config: TileSettings) -> str | None:
    """Why a tile config would reject nearly every image (too many tiles already on a
    ``REFERENCE_SIDE`` square original), or None."""
    side = scaled_size(REFERENCE_SIDE, REFERENCE_SIDE, config.scale)[0]
    count = tile_count(side, side, config)
    if count <= MAX_TILES:
        return None
    return (f"size {config.size} with overlap {config.overlap} (a step of "
            f"{config.size - config.overlap} pixels) cuts a {REFERENCE_SIDE}x{REFERENCE_SIDE} "
            f"original into {count:,} tiles, more than the {MAX_TILES:,} an original may "
            "have: use a smaller overlap or a larger tile")


def grid(width: int, height: int, config: TileSettings) -> list[Tile]:
    """The tiles of a ``width`` x ``height`` (scaled) image, row by row."""
    size = config.size
    return [Tile(row, column, x, y, min(size, width), min(size, height))
            for row, y in enumerate(starts(height, size, config.overlap))
            for column, x in enumerate(starts(width, size, config.overlap))]


def draw(seed: int, relpath: str, tile: Tile) -> float:
    """A number in [0, 1) fixed by (seed, path, grid position)."""
    digest = hashlib.sha256(f"tile:{seed}:{tile.row}:{tile.column}:".encode()
                            + os.fsencode(relpath)).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def kept(tiles: list[Tile], annotated: list[bool], config: TileSettings, seed: int,
         relpath: str, has_annotations: bool) -> list[bool]:
    """Which tiles become samples: all of them (``keep: all``, or a dataset without box or
    mask annotations); else the annotated ones plus a seeded ``background_fraction`` of the
    others.  An image keeps at least one tile (the one with the lowest draw), so every packed
    original has a sample and later versions know it."""
    if config.keep == "all" or not has_annotations:
        return [True] * len(tiles)
    draws = [draw(seed, relpath, tile) for tile in tiles]
    keep = [marked or value < config.background_fraction
            for marked, value in zip(annotated, draws, strict=True)]
    if not any(keep):
        keep[min(range(len(tiles)), key=draws.__getitem__)] = True
    return keep
