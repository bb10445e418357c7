"""COCO run-length encodings, read and checked without pycocotools.

An RLE is untrusted: its declared size and its counts are checked (counts non-negative, adding
up to height x width, within the decode budget) before any pixel exists, and both forms
(a list of counts and the compressed string) are decoded here, in Python and numpy: a wrong
size handed to pycocotools' C code crashes the process instead of raising.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class RleError(ValueError):
    """An RLE that cannot be used; the message says why (without the file's name)."""


def counts_of(counts: Any, budget: int) -> list[int]:
    """The run lengths of an RLE's ``counts``: a list of ints as it is, a compressed string
    (COCO's LEB128-like text form) decoded.  ``budget`` bounds how many runs are read: an
    RLE of ``h x w`` pixels has at most ``h x w + 1`` runs."""
    if isinstance(counts, list):
        if len(counts) > budget + 1:
            raise RleError(f"{len(counts):,} runs for at most {budget:,} pixels")
        if not all(isinstance(value, int) and not isinstance(value, bool) for value in counts):
            raise RleError("RLE counts must be whole numbers")
        return counts
    if not isinstance(counts, str):
        raise RleError("RLE counts must be a list or a compressed string")
    return _from_string(counts, budget)


def _from_string(text: str, budget: int) -> list[int]:
    """pycocotools' ``rleFrString``: 5 bits a character, a continuation bit, a sign bit on the
    last character of a number; from the fourth count on, each is a delta to the one two
    before."""
    runs: list[int] = []
    at, end = 0, len(text)
    while at < end:
        if len(runs) > budget:
            raise RleError(f"more than {budget + 1:,} runs for {budget:,} pixels")
        value, shift, more = 0, 0, True
        while more:
            if at >= end:
                raise RleError("a compressed RLE that ends inside a number")
            code = ord(text[at]) - 48
            if not 0 <= code < 64:
                raise RleError(f"a compressed RLE with the character {text[at]!r}")
            value |= (code & 0x1F) << shift
            more = bool(code & 0x20)
            at += 1
            shift += 5
            if shift > 60:
                raise RleError("a compressed RLE count of more than 60 bits")
            if not more and code & 0x10:
                value |= -1 << shift
        if len(runs) > 2:
            value += runs[-2]
        runs.append(value)
    return runs


def checked(runs: list[int], height: int, width: int) -> np.ndarray:
    """``runs`` as int64, after ``check_counts``."""
    return np.asarray(check_counts(runs, height, width), np.int64)


def check_counts(runs: list[int], height: int, width: int) -> list[int]:
    """``runs`` (as ``counts_of`` gives them) once they are non-negative and cover the
    ``height x width`` pixels exactly: the one check of an RLE's counts, in annotation files,
    shard metadata and readers' targets."""
    pixels = height * width
    # Each count on its own first, in Python's integers: no count past the pixels means an
    # int64 sum of them cannot wrap (four counts of 2**62 add up to 4 in int64).
    if any(count < 0 for count in runs):
        raise RleError("RLE counts must not be negative")
    if any(count > pixels for count in runs):
        raise RleError(f"RLE counts: one is more than the {pixels:,} pixels of the image")
    total = sum(runs)
    if total != pixels:
        raise RleError(f"RLE counts add up to {total:,}, not {height} x {width} = {pixels:,}")
    return runs


def box_of(runs: np.ndarray, height: int) -> tuple[float, float, float, float]:
    """The continuous box ``(x0, y0, x1, y1)`` of the marked pixels of checked column-major
    runs (the first run is of zeros); RleError when no pixel is marked."""
    ends = np.cumsum(runs)
    starts = ends - runs
    marked = (np.arange(len(runs)) % 2 == 1) & (runs > 0)
    if not marked.any():
        raise RleError("an empty RLE")
    first, last = starts[marked], ends[marked] - 1
    first_column, last_column = first // height, last // height
    x0, x1 = int(first_column.min()), int(last_column.max()) + 1
    within = first_column == last_column  # a run inside one column: its rows only
    top = np.where(within, first % height, 0)
    bottom = np.where(within, last % height, height - 1)
    return float(x0), float(top.min()), float(x1), float(bottom.max()) + 1


def decode(runs: np.ndarray, height: int, width: int) -> np.ndarray:
    """Checked runs as a uint8 ``height x width`` mask (1 where marked)."""
    values = (np.arange(len(runs)) % 2).astype(np.uint8)
    return np.repeat(values, runs).reshape(width, height).T.copy()
