"""``splits.near_duplicates: together``: the images of one part shot more than once in one split.

The plan gives each original its split from its path (its group's, its folder) before any
pixel is read, but a near-duplicate hash needs its fixture's background, so the clusters are
known only once the version's samples are written and hashed (``nearhash``).  They are then
found as ``inspect --near-duplicates`` finds them (the same search, check and threshold),
and a sample of this run in another split than its unit's is moved: the shards holding one
are copied again, the records that stay first, then those that move, into new shards of
the split they join (``ShardFormat.with_split``; a record is copied, not encoded again).

A unit is an original joined to every original it shares a cluster with and, with
``splits.group``, a group with.  Its split:

* a unit holding samples of earlier versions keeps them where they are: an increment never
  moves a packed sample (an original packed again, changed, stays in its split too).  Its
  new originals join the split of the first of those by path; when those already sit in
  several splits (a new image that joins two clusters packed apart), the pack says so;
* a unit of new originals only goes to the split of its first original by path: the split
  that one has on its own, so that the fractions hold on average;
* a dense cluster (over ``hashing.DENSE_SIZE`` originals: a slow belt's frames chain into
  one) joins nothing: reported, not forced into one split;
* with ``splits.folder`` the folders name the splits: the clusters across them are
  reported and nothing moves.

The same bits whatever the worker count (the hashes and the check's scores are, and every
choice is by path).  The splits depend on history: an increment keeps what earlier versions
placed, so they may differ from those a fresh pack of the same tree gives, and so may the
totals.  Memory in the driver: ~280 bytes a line (a path, a split, a group, its hashes)
until the index is written.
"""

from __future__ import annotations

import itertools
import logging
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import numpy as np

from ..dataset.formats import ShardFormat, ShardLimits, ShardRoller
from ..dataset.manifest import SampleRecord
from ..neardup import hashing
from ..text import plural, printable
from . import nearhash
from .incremental import Rewritten
from .jpegcopy import PreviousJpegs
from .nearhash import Line, NearHashes, _get
from .parallel import WorkerPool

log = logging.getLogger(__name__)


class _Observer:
    """Sees the new version's lines as the hash pass reads them (``lines``): the previous
    version's (``previous``), then the two streams (``kept``, then ``packed``)."""

    def lines(self, kept: Callable[[Callable | None], Iterable[SampleRecord]],
              packed: Callable[[], Iterable[dict]], removed: nearhash.Removed
              ) -> Iterator[Line]:
        """``kept(observer)`` (whose observer sees the previous version's lines, as
        ``removed`` does too), then ``packed()``, observed."""
        def previous(record: SampleRecord, leaves: bool) -> None:
            removed(record, leaves)
            self.previous(record, leaves)

        return itertools.chain(self.kept(kept(previous)), self.packed(packed()))

    def previous(self, record: SampleRecord, leaves: bool) -> None: ...

    def kept(self, lines: Iterable[SampleRecord]) -> Iterable[SampleRecord]:
        return lines

    def packed(self, lines: Iterable[dict]) -> Iterable[dict]: ...


class Placement(_Observer):
    """What the rule needs of each line of the new version, in the index's order."""

    def __init__(self, split_names: Iterable[str], resplit: bool = False) -> None:
        self.number = {name: number for number, name in enumerate(split_names)}
        self.resplit = resplit  # nothing is where an earlier version put it: all placed anew
        self.paths: list[str] = []
        self.groups: list[str | None] = []
        self.split = array("i")  # where the line is now
        self.fixed = array("i")  # where an earlier version put its original, or -1
        self.own = array("Q")  # its hashes as the line holds them (``nearhash.row_of``)
        self.was: dict[str, int] = {}  # an original the new version packs again: its split
        self.kept_lines = 0  # the lines of earlier versions come first

    def previous(self, record: SampleRecord, leaves: bool) -> None:
        if leaves and not self.resplit:
            self.was[record.path] = self._number(record.split)

    def kept(self, lines: Iterable[SampleRecord]) -> Iterator[SampleRecord]:
        for line in lines:
            self._add(line, -1 if self.resplit else self._number(line.split))
            self.kept_lines += 1
            yield line

    def packed(self, lines: Iterable[dict]) -> Iterator[dict]:
        for line in lines:
            self._add(line, self.was.get(line["path"], -1))
            yield line

    def _number(self, split: str) -> int:
        return self.number.setdefault(split, len(self.number))

    def _add(self, line: Line, fixed: int) -> None:
        self.paths.append(_get(line, "path"))
        self.groups.append(_get(line, "group"))
        self.split.append(self._number(_get(line, "split")))
        self.fixed.append(fixed)
        self.own.frombytes(nearhash.row_of(line).tobytes())


class Stay(_Observer):
    """``splits.near_duplicates: independent`` (the default): an original packed again (a
    changed one) stays in the split an earlier version put it in, as with ``together``, not
    in its path's, which differs where a version kept near-duplicates together (turning the
    option off moves nothing).  Memory: a path and a split an original that leaves."""

    def __init__(self) -> None:
        self.was: dict[str, str] = {}  # an original the new version packs again: its split
        self.moves: dict[str, str] = {}  # key -> the split it stays in
        self.shards: dict[str, str] = {}  # key -> the shard this run wrote it in

    def previous(self, record: SampleRecord, leaves: bool) -> None:
        if leaves:
            self.was[record.path] = record.split

    def packed(self, lines: Iterable[dict]) -> Iterator[dict]:
        for line in lines:
            split = self.was.get(line["path"])
            if split is not None and split != line["split"]:
                self.moves[line["key"]], self.shards[line["key"]] = split, line["shard"]
            yield line


@dataclass(frozen=True)
class Placed:
    """Where the lines go: the split of each line that moves (by line), and what the pack
    reports: the originals moved, the clusters left in several splits by why (``dense``,
    ``earlier``: samples of earlier versions, which never move; ``folders``: the folders
    name the splits), and the new originals that joined units already in several splits."""

    moves: Mapping[int, int]
    moved_originals: int  # new originals put in their unit's split (not packed ones kept)
    across: Mapping[str, int]
    torn: tuple[str, ...]


def place(paths: list[str], split: np.ndarray, fixed: np.ndarray, groups: list[str | None],
          roots: np.ndarray, move: bool = True) -> Placed:
    """The rule of the module docstring, over lines: ``split`` where each is now, ``fixed``
    where an earlier version put it (-1: nowhere), ``groups`` its group id, ``roots`` its
    cluster (``nearhash.components``).  ``move`` False: only report (folder splits)."""
    original: dict[str, int] = {}
    of_line = [original.setdefault(path, len(original)) for path in paths]
    clusters = roots.tolist()
    parent = np.arange(len(original))

    def root(item: int) -> int:
        while parent[item] != item:
            parent[item] = parent[parent[item]]
            item = int(parent[item])
        return item

    def join(a: int, b: int) -> None:
        a, b = root(a), root(b)
        if a != b:
            parent[max(a, b)] = min(a, b)

    # a cluster's size in originals (a tile's lines are one original's)
    sizes = Counter(np.unique(np.column_stack([roots, of_line]), axis=0)[:, 0].tolist())
    dense = {cluster for cluster, size in sizes.items() if size > hashing.DENSE_SIZE}
    first: dict[object, int] = {}  # the first original of each cluster and group
    for item, cluster, group in zip(of_line, clusters, groups, strict=True):
        for joined in ((0, cluster) if sizes[cluster] > 1 and cluster not in dense else None,
                       (1, group) if group is not None else None):
            if joined is not None:
                join(first.setdefault(joined, item), item)
    fixed_at, split_at = fixed.tolist(), split.tolist()
    where = [was if was >= 0 else now for was, now in zip(fixed_at, split_at, strict=True)]
    unit = [root(item) for item in of_line]
    target: dict[int, tuple[bool, str, int]] = {}  # unit -> (not fixed, first path, split)
    splits_fixed: dict[int, set[int]] = {}
    for at, (one, path, was) in enumerate(zip(unit, paths, fixed_at, strict=True)):
        choice = (was < 0, path, where[at])
        if one not in target or choice < target[one]:
            target[one] = choice
        if was >= 0:
            splits_fixed.setdefault(one, set()).add(was)
    goes = [where[at] if was >= 0 else target[one][2]
            for at, (one, was) in enumerate(zip(unit, fixed_at, strict=True))]
    moves = {at: to for at, (to, now) in enumerate(zip(goes, split_at, strict=True))
             if to != now} if move else {}
    torn = () if not move else tuple(dict.fromkeys(
        path for path, one, was in zip(paths, unit, fixed_at, strict=True)
        if was < 0 and len(splits_fixed.get(one, ())) > 1))
    ends: dict[int, set[int]] = {}
    for at, cluster in enumerate(clusters):
        if sizes[cluster] > 1:
            ends.setdefault(cluster, set()).add(moves.get(at, split_at[at]))
    across = Counter("folders" if not move else "dense" if cluster in dense else "earlier"
                     for cluster, splits in ends.items() if len(splits) > 1)
    return Placed(MappingProxyType(moves), len({paths[at] for at in moves if fixed_at[at] < 0}),
                  MappingProxyType(dict(across)), torn)


def settle(placement: Placement, near: NearHashes, jpegs: PreviousJpegs, pool: WorkerPool,
           quiet: bool, move: bool) -> Placed:
    """The clusters of the new version's lines (``near``: the hashes this run made, the
    others as the lines hold them) and where their samples go (``move`` False: reported
    only)."""
    seen = near.seen
    own = np.frombuffer(placement.own, np.uint64).reshape(-1, nearhash.WIDTH)
    hashes = own.copy() if near.made is None else np.where(near.made[:, None], near.hashes,
                                                           own if near.trusted else 0)
    have = hashes.any(axis=1)
    fixed = np.frombuffer(placement.fixed, np.int32)
    # the pairs of a sample that may move: in an increment, those of its new samples (a
    # packed sample stays where it is, whatever joins it to another)
    focus = None if (fixed < 0).all() else fixed < 0
    if focus is None or focus.any():
        pairs, checks, failed = nearhash.verified(seen, hashes, have, jpegs, pool, quiet,
                                                  focus=focus)
        roots = nearhash.components(seen, hashes, failed,
                                    pairs[hashing.joined(checks, hashing.DEFAULT_THRESHOLD)])
    else:  # nothing new: only an original packed again goes back to its split
        roots = np.arange(len(fixed))
    placed = place(placement.paths, np.frombuffer(placement.split, np.int32), fixed,
                   placement.groups, roots, move)
    _report(placed, move)
    return placed


def _report(placed: Placed, move: bool) -> None:
    if placed.moved_originals:
        log.info("splits.near_duplicates: %s put in the split of their near-duplicates",
                 plural(placed.moved_originals, "original"))
    if placed.torn:
        log.warning("splits.near_duplicates: %s joined near-duplicates that earlier versions "
                    "packed in several splits (%s%s); each went to the split of the first "
                    "packed one by path, and the packed ones stay where they are: shardsmith "
                    "inspect --near-duplicates lists them",
                    plural(len(placed.torn), "new original"), printable(placed.torn[0]),
                    ", ..." if len(placed.torn) > 1 else "")
    why = {"dense": f"dense: over {hashing.DENSE_SIZE} originals, a belt's frames, say",
           "earlier": "packed apart by earlier versions, whose samples never move",
           "folders": "the folders name the splits"}
    for reason, count in sorted(placed.across.items()):
        log.warning("splits.near_duplicates: %s of near-duplicates left in several splits "
                    "(%s): shardsmith inspect --near-duplicates lists them",
                    plural(count, "cluster"), why[reason])


def relocate(done: Rewritten, moves: Mapping[str, str], shard_of: Mapping[str, str],
             output: Path, fmt: ShardFormat, limits: ShardLimits,
             split_order: list[str]) -> Rewritten:
    """``done`` with the samples of ``moves`` (key -> split) in new shards of their split:
    each shard holding one (``shard_of``: key -> shard) copied again, split by split, the
    records that stay in their split as they are.  Deterministic, like ``rewrite``."""
    names = set(shard_of[key] for key in moves)
    obsolete = [shard for shard in done.shards if shard.name in names]
    order = {split: number for number, split in enumerate(split_order)}
    obsolete.sort(key=lambda shard: (order.get(shard.split, len(order)), shard.name))
    roller = ShardRoller(fmt, output, limits, Counter(done.numbers))
    placed = dict(done.moved)
    try:
        for split in split_order:
            for shard in obsolete:
                for _, record in fmt.records(output / shard.name, shard.bytes):
                    goes = moves.get(record.key, shard.split)
                    if goes == split:
                        record = fmt.with_split(record, goes) if goes != shard.split else record
                        placed[record.key], _ = roller.add(goes, record)
        roller.close()
    except BaseException:
        roller.discard()
        raise
    kept = [shard for shard in done.shards if shard.name not in names]
    return Rewritten(tuple(kept + roller.closed), MappingProxyType(placed),
                     done.obsolete + tuple(obsolete), MappingProxyType(dict(roller.numbers)))
