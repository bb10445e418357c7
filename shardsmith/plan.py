"""Decide, before any pixel is touched, which split each file goes to and in what order.

Everything here is a pure function of the scanned files and the config, so the plan (and
therefore every shard byte) is the same on every run, whatever the worker count.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
from dataclasses import dataclass

from .scan import SourceFile

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


@dataclass(frozen=True, slots=True)
class PlanItem:
    """One file to process, with its sample key and split.

    ``expected_digest`` is set for a file already packed whose stat changed: the worker
    decodes it only if its content differs.  ``group`` is its group id (``splits.group``),
    None when there is no grouping or its path does not match.
    """

    source: SourceFile
    key: str
    split: str
    expected_digest: str | None = None
    group: str | None = None


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


def group_of(relpath: str, pattern: re.Pattern[str]) -> str | None:
    """The group id of a path: the named group ``group`` of the first match of ``pattern``
    (the whole match without one); None when nothing (or only an empty string) matches."""
    match = pattern.search(relpath)
    if match is None:
        return None
    found = match["group"] if "group" in pattern.groupindex else match[0]
    return found or None


def make_plan(
    files: tuple[SourceFile, ...], splits: tuple[tuple[str, float], ...], seed: int,
    group: str = "",
) -> list[PlanItem]:
    """Order of work: split by split (config order), each split shuffled with ``seed``.

    With ``group`` (``splits.group``), a file whose path matches goes to its group's split;
    a file that does not match is a group of its own (split by its path, as without one).
    """
    pattern = re.compile(group) if group else None
    by_split: dict[str, list[PlanItem]] = {name: [] for name, _ in splits}
    for source in files:
        group_id = group_of(source.relpath, pattern) if pattern is not None else None
        split = (assign_split(source.relpath, splits) if group_id is None
                 else assign_group_split(group_id, splits))
        by_split[split].append(PlanItem(source, sample_key(source.relpath), split,
                                        group=group_id))
    plan: list[PlanItem] = []
    for name, items in by_split.items():
        random.Random(f"{seed}:{name}").shuffle(items)
        plan.extend(items)
    return plan
