"""Decide, before any pixel is touched, which split each file goes to and in what order.

Everything here is a pure function of the scanned files and the config, so the plan (and
therefore every shard byte) is the same on every run, whatever the worker count.  A ``Plan``
is an order over the scan's ``SourceTable`` (a NumPy array of table positions and one byte a
file for its split); its ``PlanItem``s are made when they are used, so the plan of ten
million files costs tens of megabytes, not gigabytes.
"""

from __future__ import annotations

import functools
import hashlib
import os
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import regex

from ..config.pattern import check_group_pattern
from ..errors import ConfigError
from ..text import printable, shown
from .scan import SourceFile, SourceTable

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
# ``splits.group`` is the user's regular expression: a nested repetition such as ``(a|aa)+$``
# backtracks for hours on one long name.  A match on a path takes microseconds; past this it
# is one of those.
GROUP_MATCH_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class PlanItem:
    """One file to process, with its split.

    ``expected_digest`` is set for a file already packed whose stat changed: the worker
    decodes it only if its content differs.  ``group`` is its group id (``splits.group``),
    None when there is no grouping or its path does not match.  ``annotation`` is the image's
    record from the shared annotation files (COCO), None without one.
    """

    source: SourceFile
    split: str
    expected_digest: str | None = None
    group: str | None = None
    annotation: bytes | None = None

    @property
    def key(self) -> str:
        return sample_key(self.source.relpath)


def sample_key(relpath: str) -> str:
    """A stable, unique key free of dots and slashes: readable stem + hash of the full path.

    The path is hashed as the bytes the file system holds (``os.fsencode``), so a name that
    is not valid UTF-8 gets a key like any other.
    """
    stem = _UNSAFE.sub("_", relpath.rsplit(".", 1)[0]).strip("_")[-48:]
    digest = hashlib.sha256(os.fsencode(relpath)).hexdigest()[:12]
    return f"{stem}_{digest}" if stem else digest


def assign_split(relpath: str, splits: tuple[tuple[str, float], ...]) -> str:
    """Split by a hash of the relative path: a file keeps its split when others are added."""
    return _split_at(hashlib.sha256(b"split:" + os.fsencode(relpath)).digest(), splits)


def assign_group_split(group: str, splits: tuple[tuple[str, float], ...]) -> str:
    """Split by a hash of the group id: every image of a group lands in the same split, and a
    group keeps its split when other groups (or images of this one) are added."""
    return _split_at(hashlib.sha256(b"split-group:" + os.fsencode(group)).digest(), splits)


def _split_at(digest: bytes, splits: tuple[tuple[str, float], ...]) -> str:
    position = int.from_bytes(digest[:8], "big") / 2**64
    cumulative = 0.0
    for name, fraction in splits:
        cumulative += fraction
        if position < cumulative:
            return name
    return splits[-1][0]


@functools.cache
def group_pattern(group: str) -> regex.Pattern[str]:
    """``splits.group`` compiled: the ``regex`` module (``re`` syntax and more: lookarounds,
    backreferences), because it can bound the time of one match.  Raises ConfigError for a
    pattern too big to compile safely (``config.pattern``: compiling expands counted repeats)."""
    check_group_pattern(group)
    return regex.compile(group)


def group_of(relpath: str, pattern: regex.Pattern[str] | re.Pattern[str]) -> str | None:
    """The group id of a path: the named group ``group`` of the first match of ``pattern``
    (the whole match without one); None when nothing (or only an empty string) matches.
    Raises ConfigError when the match takes more than ``GROUP_MATCH_SECONDS``."""
    if not isinstance(pattern, regex.Pattern):  # an ``re`` pattern: matched the same way
        pattern = group_pattern(pattern.pattern)
    try:
        match = pattern.search(relpath, timeout=GROUP_MATCH_SECONDS)
    except TimeoutError:
        raise ConfigError(
            f"splits.group: the pattern {shown(pattern.pattern)} took more than "
            f"{GROUP_MATCH_SECONDS:g} s on one path, {printable(relpath)}: it backtracks "
            "(a nested repetition such as (a|aa)+ does); simplify it"
        ) from None
    if match is None:
        return None
    found = match["group"] if "group" in pattern.groupindex else match[0]
    return found or None


class Plan(Sequence[PlanItem]):
    """The order of work over a ``SourceTable``: split by split, each split shuffled."""

    def __init__(self, table: SourceTable, split_names: tuple[str, ...],
                 split_of: np.ndarray, order: np.ndarray, group: regex.Pattern[str] | None = None,
                 annotations: dict[str, bytes] | None = None):
        self.table, self.split_names = table, split_names
        self.split_of = split_of  # uint8 per table position
        self.order = order  # int32: plan position -> table position
        self.group = group  # group ids are derived from the path when an item is made
        self.annotations = annotations  # relpath -> record, for images that have one

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return Plan(self.table, self.split_names, self.split_of, self.order[index],
                        self.group, self.annotations)
        position = int(self.order[index])
        source = self.table[position]
        return PlanItem(source, self.split_names[self.split_of[position]],
                        group=group_of(source.relpath, self.group) if self.group else None,
                        annotation=self.annotations.get(source.relpath)
                        if self.annotations else None)

    def __iter__(self) -> Iterator[PlanItem]:
        return (self[index] for index in range(len(self)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Plan) and self.split_names == other.split_names and \
            np.array_equal(self.order, other.order) and \
            np.array_equal(self.split_of, other.split_of) and \
            self.table.relpaths == other.table.relpaths

    def position_of(self) -> np.ndarray:
        """Table position -> plan position (an int32 array; -1 for files not planned)."""
        positions = np.full(len(self.table), -1, np.int32)
        positions[self.order] = np.arange(len(self.order), dtype=np.int32)
        return positions


def make_plan(files: SourceTable, splits: tuple[tuple[str, float], ...], seed: int,
              group: str = "", folder: bool = False,
              annotations: dict[str, bytes] | None = None) -> Plan:
    """Order of work: split by split (config order), each split shuffled with ``seed``.

    With ``group`` (``splits.group``), a file whose path matches goes to its group's split;
    a file that does not match is a group of its own (split by its path, as without one).
    With ``folder`` (``splits.folder``), the top folder of a path is its split.
    ``annotations``: each image's record from the shared annotation files (by path).
    """
    pattern = group_pattern(group) if group else None
    names = tuple(name for name, _ in splits)
    number_of = {name: number for number, name in enumerate(names)}

    def split(relpath: str) -> int:
        if folder and relpath.split("/", 1)[0] in number_of:
            return number_of[relpath.split("/", 1)[0]]
        group_id = group_of(relpath, pattern) if pattern is not None else None
        name = assign_split(relpath, splits) if group_id is None \
            else assign_group_split(group_id, splits)
        return number_of[name]

    split_of = np.fromiter((split(relpath) for relpath in files.relpaths), np.uint8,
                           len(files))
    parts = []
    for number, name in enumerate(names):
        positions = np.flatnonzero(split_of == number).tolist()
        random.Random(f"{seed}:{name}").shuffle(positions)  # depends on the length only
        parts.append(np.asarray(positions, np.int32))
    order = np.concatenate(parts) if parts else np.zeros(0, np.int32)
    return Plan(files, names, split_of, order, pattern, annotations)
