"""The near-duplicate hashes of a version's samples, written into its sample index.

``inspect --near-duplicates`` finds the originals shot more than once from these hashes
(``neardup``; docs/know-your-data.md, "Near-duplicates").  A hash needs its fixture's
background (``neardup.fixtures``), which needs the first samples of that fixture, so the
hashes are made once the version's shards are written, from the JPEG bytes they hold: the
shard bytes are never changed, and a hash made now equals one made later from the same
sample (a dataset of an older release gets its hashes from its stored samples, bit for bit
what a pack would have made).

What is hashed: every line without a hash, and every line of a fixture whose background this
run makes and which differs from the one its hash was made against (a fixture of under
``BACKGROUND_SHOTS`` samples that grew; one whose first samples changed).  A fixture whose
samples were only removed keeps the background its hashes were made against.

The driver reads the JPEG bytes (the shards were just written: the page cache holds them) and
the pool hashes them, a task of ``CHUNK`` samples, results in order; a sample whose bytes
cannot be read or decoded keeps no hash, with a warning (``inspect`` tries it again and names
it).  Memory in the driver: a key, a shard and a fixture number a line (~150 bytes), and the
hashes made (~150 bytes each) until the index is written.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..dataset.formats import shard_format
from ..dataset.manifest import NearHashEntry, SampleRecord, ShardEntry
from ..errors import ShardFormatError
from ..neardup import fixtures, hashing
from ..progress import Progress
from .jpegcopy import PreviousJpegs
from .parallel import WorkerPool

log = logging.getLogger(__name__)

CURRENT = NearHashEntry(hashing.ALGORITHM, hashing.VERSION)
CHUNK = 64  # samples a task: ~2 MB of JPEG bytes at 512 px, ~0.2 s of one worker's time

Line = dict[str, Any] | SampleRecord
Hashes = tuple[str, str, str]  # the two part hashes (16 hex digits each), the background's


def _get(line: Line, name: str) -> Any:
    return line.get(name) if isinstance(line, dict) else getattr(line, name)


@dataclass
class _Lines:
    """What the pass needs of each line, in the index's order."""

    keys: list[str] = field(default_factory=list)
    shards: list[str] = field(default_factory=list)
    fixture: list[int] = field(default_factory=list)
    made_against: list[str | None] = field(default_factory=list)  # its hash's background
    fixtures: dict[fixtures.Fixture, int] = field(default_factory=dict)
    shots: list[list[int]] = field(default_factory=list)  # each fixture's first lines
    counts: list[int] = field(default_factory=list)

    def add(self, line: Line) -> None:
        at = len(self.keys)
        fixture = fixtures.fixture_of(_get(line, "path"), _get(line, "width"),
                                      _get(line, "height"), _get(line, "key"))
        number = self.fixtures.setdefault(fixture, len(self.fixtures))
        if number == len(self.shots):
            self.shots.append([])
            self.counts.append(0)
        if len(self.shots[number]) < fixtures.BACKGROUND_SHOTS:
            self.shots[number].append(at)
        self.counts[number] += 1
        near = _get(line, "near")
        self.keys.append(_get(line, "key"))
        self.shards.append(_get(line, "shard"))
        self.fixture.append(number)
        self.made_against.append(near[2] if near is not None else None)


class NearHashes:
    """The hashes one run makes (``make``), then set into the lines (``attached``)."""

    def __init__(self, made: dict[str, Hashes]):
        self.made = made

    @classmethod
    def make(cls, lines: Iterable[Line], output: Path, fmt: str,
             shards: Iterable[ShardEntry], pool: WorkerPool, quiet: bool) -> NearHashes:
        seen = _Lines()
        for line in lines:
            seen.add(line)
        touched = {seen.fixture[at] for at, against in enumerate(seen.made_against)
                   if against is None}
        if not touched:
            return cls({})
        with PreviousJpegs(shard_format(fmt), output, shards) as jpegs:
            backgrounds = _backgrounds(seen, touched, jpegs, pool)
            digests = {number: fixtures.digest(background)
                       for number, background in backgrounds.items()}
            wanted = [at for at, number in enumerate(seen.fixture)
                      if number in digests and seen.made_against[at] != digests[number]]
            made = _hashed(seen, wanted, backgrounds, digests, jpegs, pool, quiet)
        return cls(made)

    def attached(self, lines: Iterable[Line]) -> Iterator[Line]:
        """``lines`` with the hashes made for them."""
        for line in lines:
            near = self.made.get(_get(line, "key"))
            if near is None:
                yield line
            elif isinstance(line, dict):
                yield line | {"near": list(near)}
            else:
                yield replace(line, near=near)


def _backgrounds(seen: _Lines, touched: set[int], jpegs: PreviousJpegs,
                 pool: WorkerPool) -> dict[int, np.ndarray]:
    """The backgrounds of the touched fixtures, and of the fuller ones a touched fixture of
    few samples may borrow from (``fixtures.borrowed``)."""
    by_number = {number: fixture for fixture, number in seen.fixtures.items()}
    made = set(touched)
    if any(seen.counts[number] < fixtures.FEW_SHOTS for number in touched):
        sizes = {by_number[number][1:3] for number in touched}
        made |= {number for number, fixture in by_number.items()
                 if fixture[1:3] in sizes and seen.counts[number] >= fixtures.FEW_SHOTS}
    order = sorted(made)
    work = [[_jpeg(jpegs, seen, at) for at in seen.shots[number]] for number in order]
    own = {number: background for number, background
           in zip(order, pool.map_ordered(_background_task, work), strict=True)
           if background is not None}
    backgrounds = fixtures.borrowed({by_number[number]: background
                                     for number, background in own.items()},
                                    {fixture: seen.counts[number]
                                     for fixture, number in seen.fixtures.items()})
    return {seen.fixtures[fixture]: background for fixture, background in backgrounds.items()}


def _hashed(seen: _Lines, wanted: list[int], backgrounds: dict[int, np.ndarray],
            digests: dict[int, str], jpegs: PreviousJpegs, pool: WorkerPool,
            quiet: bool) -> dict[str, Hashes]:
    chunks = _Chunks(seen, wanted, backgrounds, jpegs)
    made: dict[str, Hashes] = {}
    progress = Progress(len(wanted), 0, "img", "hash", quiet)
    try:
        for number, results in enumerate(pool.map_ordered(_hash_task, chunks)):
            chunk = chunks.lines(number)
            for at, result in zip(chunk, results, strict=True):
                if result is not None:
                    made[seen.keys[at]] = (f"{result[0]:016x}", f"{result[1]:016x}",
                                           digests[seen.fixture[at]])
            progress.update(len(chunk))
    finally:
        progress.close()
    return made


class _Chunks(Sequence):
    """The hash tasks, CHUNK lines each: a task's JPEG bytes are read when the pool takes
    it, so what waits in memory is the pool's window of tasks."""

    def __init__(self, seen: _Lines, wanted: list[int], backgrounds: dict[int, np.ndarray],
                 jpegs: PreviousJpegs):
        self.seen, self.wanted, self.backgrounds, self.jpegs = seen, wanted, backgrounds, jpegs

    def lines(self, number: int) -> list[int]:
        return self.wanted[number * CHUNK : (number + 1) * CHUNK]

    def __len__(self) -> int:
        return -(-len(self.wanted) // CHUNK)

    def __getitem__(self, number: int) -> list[tuple[bytes | None, np.ndarray]]:  # type: ignore[override]
        if not 0 <= number < len(self):
            raise IndexError(number)
        return [(_jpeg(self.jpegs, self.seen, at), self.backgrounds[self.seen.fixture[at]])
                for at in self.lines(number)]


def _jpeg(jpegs: PreviousJpegs, seen: _Lines, at: int) -> bytes | None:
    try:
        return jpegs.jpeg(seen.shards[at], seen.keys[at])
    except (ShardFormatError, OSError) as exc:
        log.warning("sample %s: its JPEG cannot be read for its near-duplicate hash: %s",
                    seen.keys[at], exc)
        return None


def _frame(jpeg: bytes | None) -> np.ndarray | None:
    if jpeg is None:
        return None
    try:
        return hashing.frame(jpeg)
    except ValueError:
        return None


def _background_task(shots: list[bytes | None]) -> np.ndarray | None:
    """A fixture's background from the JPEG bytes of its first samples (a worker's task)."""
    frames = [frame for frame in map(_frame, shots) if frame is not None]
    return hashing.fixture_median(frames) if frames else None


def _hash_task(work: list[tuple[bytes | None, np.ndarray]]) -> list[tuple[int, int] | None]:
    """The part hashes of samples, each from its JPEG bytes and its fixture's background."""
    results: list[tuple[int, int] | None] = []
    for jpeg, background in work:
        frame = _frame(jpeg)
        results.append(None if frame is None or frame.shape != background.shape
                       else hashing.part_hashes(frame, background))
    return results
