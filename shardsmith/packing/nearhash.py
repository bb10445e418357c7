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
``BACKGROUND_SHOTS`` samples that grew or lost samples; one whose first samples changed), so
that a version's hashes are those a fresh pack of its originals makes, but in a fuller
fixture that changed: its first samples in the index, a fresh pack orders them anew.

The driver reads the JPEG bytes (the shards were just written: the page cache holds them) and
the pool hashes them, a task of ``CHUNK`` samples, results in order; a sample whose bytes
cannot be read or decoded keeps no hash, with a warning (``inspect`` tries it again and names
it).  Memory in the driver: ~110 bytes a line (its key, and numbers in arrays) and 144 of
hashes (``WIDTH`` words) until the index is written.
"""

from __future__ import annotations

import base64
import logging
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from ..dataset.formats import shard_format
from ..dataset.manifest import NearHashEntry, SampleRecord, ShardEntry
from ..errors import ConfigError, OutputStateError, ShardFormatError
from ..neardup import fixtures, hashing, search, tasks
from ..progress import Progress
from .jpegcopy import PreviousJpegs
from .parallel import WorkerPool

log = logging.getLogger(__name__)

CURRENT = NearHashEntry(hashing.ALGORITHM, hashing.VERSION)
GROUP = 256  # fixtures whose backgrounds are held at once (49 KB each at 256 x 192)
# fixtures a block of the check's pairs may name, and backgrounds kept from one block to the
# next (~50 MB): pairs may join any two fixtures, a sample's pairs split over blocks are read
# again, and a background made again costs up to 255 decodes.  (On 300 fixtures whose pairs
# crossed at random, blocks of 256 and none kept made 4,343 backgrounds: 125 s against 79.)
KEPT = 1024
CHUNK = 64  # samples a task: ~2 MB of JPEG bytes at 512 px, ~0.2 s of one worker's time

Line = dict[str, Any] | SampleRecord
# uint64 words of a line's row of hashes: its two hashes, then its signature (zero-padded)
WIDTH = 2 + -(-hashing.SIGNATURE // 8)
Kept = OrderedDict[int, np.ndarray | None]  # backgrounds by fixture, last used last; None: none


def _get(line: Line, name: str) -> Any:
    return line.get(name) if isinstance(line, dict) else getattr(line, name)


def row(made: tuple[int, int, bytes] | None) -> np.ndarray:
    """A line's row of hashes (WIDTH words) from ``hashing.part_hashes``; zeros for none."""
    words = np.zeros(WIDTH, np.uint64)
    if made is not None:
        words[:2] = made[:2]
        words[2:].view(np.uint8)[: hashing.SIGNATURE] = np.frombuffer(made[2], np.uint8)
    return words


def row_of(line: Line) -> np.ndarray:
    """The row of hashes a line holds (``near``, ``near_signature``); zeros where it holds
    either not (a line of an older release is hashed again)."""
    near, signature = _get(line, "near"), _get(line, "near_signature")
    if near is None or signature is None:
        return row(None)
    return row((int(near[0], 16), int(near[1], 16), base64.b64decode(signature)))


def signatures(hashes: np.ndarray) -> np.ndarray:
    """The signatures of rows of hashes: (rows, SIGNATURE) int8."""
    return np.ascontiguousarray(hashes[:, 2:]).view(np.int8)[:, : hashing.SIGNATURE]


class SampleLines:
    """What the pass needs of each line, in the index's order: ~110 bytes a line (its key,
    numbers in arrays)."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.shard_numbers: dict[str, int] = {}
        self.shard_names: list[str] = []
        self.shard = array("i")
        self.fixture = array("i")
        self.against = array("q")  # the background its hash was made against, or -1
        self.run = array("i")  # the run of consecutive lines of one path it is in
        self.run_path = array("Q")  # each run's path, hashed (xxh3): 8 bytes an original
        self.last_path: str | None = None
        self.fixtures: dict[fixtures.Fixture, int] = {}
        self.shots: list[list[int]] = []  # each fixture's first lines
        self.counts: list[int] = []

    def add(self, line: Line, trusted: bool = True) -> None:
        """One more line; ``trusted``: its ``near``, if any, is of this algorithm (else it is
        made again)."""
        at, key, path = len(self.keys), _get(line, "key"), _get(line, "path")
        fixture = fixtures.fixture_of(path, _get(line, "width"), _get(line, "height"), key)
        if not at or path != self.last_path:
            self.run_path.append(xxhash.xxh3_64_intdigest(path.encode("utf-8", "surrogateescape")))
            self.last_path = path
        self.run.append(len(self.run_path) - 1)
        place = self.fixtures.setdefault(fixture, len(self.fixtures))
        if place == len(self.shots):
            self.shots.append([])
            self.counts.append(0)
        if len(self.shots[place]) < fixtures.BACKGROUND_SHOTS:
            self.shots[place].append(at)
        self.counts[place] += 1
        near = _get(line, "near") if trusted and _get(line, "near_signature") else None
        self.keys.append(key)
        shard = _get(line, "shard")
        number = self.shard_numbers.setdefault(shard, len(self.shard_numbers))
        if number == len(self.shard_names):
            self.shard_names.append(shard)
        self.shard.append(number)
        self.fixture.append(place)
        self.against.append(int(near[2], 16) if near is not None else -1)

    def shard_of(self, at: int) -> str:
        return self.shard_names[self.shard[at]]

    def originals(self) -> np.ndarray:
        """Each line's original, numbered: one number for the lines of one path (a tiled
        original's tiles; the pack writes them one after the other, a forged index may not)."""
        if not self.keys:
            return np.zeros(0, np.int64)
        _, number = np.unique(np.frombuffer(self.run_path, np.uint64), return_inverse=True)
        return number.reshape(-1)[np.frombuffer(self.run, np.int32)]

    def tiled(self) -> np.ndarray:
        """Whether each line is a tile's (its fixture is a place in its original)."""
        tile = np.array([bool(fixture[3]) for fixture in self.fixtures] or [False])
        return tile[np.frombuffer(self.fixture, np.int32)]


class Removed:
    """The fixtures that lose samples in this version: an observer of the previous version's
    lines as they are read (``incremental.kept_samples``)."""

    def __init__(self) -> None:
        self.fixtures: set[fixtures.Fixture] = set()

    def __call__(self, record: SampleRecord, leaves: bool) -> None:
        if leaves:
            self.fixtures.add(fixtures.fixture_of(record.path, record.width, record.height,
                                                  record.key))


class NearHashes:
    """The hashes one run makes (``make``), then set into the lines (``attached``: the same
    lines in the same order, a position each)."""

    def __init__(self, seen: SampleLines | None = None, hashes: np.ndarray | None = None,
                 made: np.ndarray | None = None, digests: dict[int, str] | None = None,
                 trusted: bool = True):
        self.seen, self.hashes, self.made, self.digests = seen, hashes, made, digests or {}
        self.trusted = trusted  # else a line's own hash, of another algorithm, is dropped
        self.position = 0

    @classmethod
    def make(cls, lines: Iterable[Line], output: Path, fmt: str,
             shards: Iterable[ShardEntry], pool: WorkerPool, quiet: bool,
             trusted: bool, removed: Removed | None = None) -> NearHashes:
        """The hashes ``lines`` lack, from the JPEG bytes in ``shards``; ``trusted``: the
        hashes the lines hold are of this algorithm (the previous manifest's ``near_hash``
        says so), else every line is hashed again.  A fixture that lost samples (``removed``,
        filled as ``lines`` are read) has its background made again."""
        seen = SampleLines()
        for line in lines:
            seen.add(line, trusted)
        touched = {seen.fixture[at] for at, against in enumerate(seen.against) if against < 0}
        if removed is not None:
            touched |= {seen.fixtures[fixture] for fixture in removed.fixtures
                        if fixture in seen.fixtures}
        # a fixture of few samples may borrow a fuller one's background: when that one's
        # changes, it may borrow another, or the new one (``fixtures.borrowed``)
        sizes = {fixture[1:3] for fixture, number in seen.fixtures.items()
                 if number in touched and seen.counts[number] >= fixtures.FEW_SHOTS}
        touched |= {number for fixture, number in seen.fixtures.items()
                    if fixture[1:3] in sizes and seen.counts[number] < fixtures.FEW_SHOTS}
        if not touched:
            return cls(seen)
        hashes = np.zeros((len(seen.keys), WIDTH), np.uint64)
        made = np.zeros(len(seen.keys), bool)
        progress = Progress(sum(seen.counts[number] for number in touched), 0, "img", "hash",
                            quiet)
        try:
            with PreviousJpegs(shard_format(fmt), output, shards) as jpegs:
                digests = hash_fixtures(seen, touched, jpegs, pool, progress, hashes, made)
        finally:
            progress.close()
        return cls(seen, hashes, made, digests, trusted)

    def attached(self, lines: Iterable[Line]) -> Iterator[Line]:
        """``lines`` with the hashes made for them."""
        if self.made is None:
            yield from lines
            return
        for line in lines:
            at = self.position
            self.position += 1
            if self.seen.keys[at] != _get(line, "key"):
                raise OutputStateError(f"sample {_get(line, 'key')}: the sample lines changed "
                                       "while the pack ran; run it again")
            if not self.made[at]:
                if self.trusted or _get(line, "near") is None:
                    yield line
                elif isinstance(line, dict):
                    yield {name: value for name, value in line.items()
                           if name not in ("near", "near_signature")}
                else:
                    yield replace(line, near=None, near_signature=None)
                continue
            near = (f"{int(self.hashes[at, 0]):016x}", f"{int(self.hashes[at, 1]):016x}",
                    self.digests[self.seen.fixture[at]])
            signature = base64.b64encode(signatures(self.hashes[at : at + 1])[0].tobytes())
            yield line | {"near": list(near), "near_signature": signature.decode()} \
                if isinstance(line, dict) \
                else replace(line, near=near, near_signature=signature.decode())


def hash_fixtures(seen: SampleLines, touched: set[int], jpegs: PreviousJpegs,
                  pool: WorkerPool, progress: Progress, hashes: np.ndarray,
                  made: np.ndarray, kept: Kept | None = None) -> dict[int, str]:
    """Hash the lines of the ``touched`` fixtures that have no hash or one made against
    another background, into ``hashes`` (``made`` marks them), GROUP fixtures' backgrounds
    held at a time; the digest of each touched fixture's background (by number).  ``kept``:
    the last KEPT backgrounds are left there for ``checked``, not made again."""
    digests: dict[int, str] = {}
    lines_of = _lines_by_fixture(seen)
    lenders: dict[int, np.ndarray] = {}
    ordered = sorted(touched)
    for start in range(0, len(ordered), GROUP):
        group = set(ordered[start : start + GROUP])
        early: dict[int, tuple[int, int, bytes] | None] = {}
        grounds = backgrounds(seen, group, jpegs, pool, lenders, early)
        if kept is not None:
            _keep(kept, {number: grounds.get(number) for number in group}, KEPT)
        digests |= {number: fixtures.digest(background)
                    for number, background in grounds.items()}
        wanted = [at for number in sorted(grounds) for at in lines_of[number]
                  if seen.against[at] != int(digests[number], 16)]
        for at in wanted:
            if early.get(at) is not None:
                hashes[at], made[at] = row(early[at]), True
        wanted = [at for at in wanted if at not in early]
        progress.update(sum(seen.counts[number] for number in group) - len(wanted))
        hashed(seen, wanted, grounds, jpegs, pool, progress, hashes, made)
    return digests


def backgrounds(seen: SampleLines, touched: set[int], jpegs: PreviousJpegs,
                pool: WorkerPool, lenders: dict[int, np.ndarray] | None = None,
                early: dict[int, tuple[int, int, bytes] | None] | None = None
                ) -> dict[int, np.ndarray]:
    """The backgrounds of the touched fixtures (by number): each its own, or for one of few
    samples the one it borrows (``fixtures.borrowed``) from the fuller fixtures of its size,
    whose backgrounds are kept in ``lenders`` from one call to the next.  With ``early``,
    the hashes of the first samples of a touched full fixture, some without a hash (by line;
    None: no hash), made in the same task as its background, which is its own."""
    by_number = {number: fixture for fixture, number in seen.fixtures.items()}
    lenders = {} if lenders is None else lenders
    sizes = {by_number[number][1:3] for number in touched
             if seen.counts[number] < fixtures.FEW_SHOTS}
    full = {number for number, fixture in by_number.items()
            if fixture[1:3] in sizes and seen.counts[number] >= fixtures.FEW_SHOTS}
    order = sorted((touched | full) - lenders.keys())
    # a new pack's fixtures, or a fixture whose first samples are new; in an increment to a
    # full fixture they have their hashes, most likely against the background it keeps
    with_hashes = set() if early is None else \
        {number for number in touched if seen.counts[number] >= fixtures.FEW_SHOTS
         and any(seen.against[at] < 0 for at in seen.shots[number])}
    own: dict[int, np.ndarray] = {}
    work = _Shots(seen, order, jpegs, with_hashes)
    for number, (background, made) in zip(order, pool.map_ordered(tasks.background_task, work),
                                          strict=True):
        if background is not None:
            own[number] = background
        if early is not None and made:
            early.update(zip(seen.shots[number], made, strict=True))
    lenders.update({number: own[number] for number in full if number in own})
    # a touched full fixture lent in an earlier call is not made again: it is a lender's
    choices = {by_number[number]: background for number, background
               in (own | {number: lenders[number] for number in touched | full
                          if number in lenders}).items()}
    chosen = fixtures.borrowed(choices, {by_number[number]: seen.counts[number]
                                         for number in touched | full})
    return {number: chosen[by_number[number]] for number in touched
            if by_number[number] in chosen}


class _Shots(Sequence):
    """The background tasks: the JPEG bytes of each fixture's first samples, read when the
    pool takes its task (up to 255 shots a fixture, ~5 MB at 256 px: 256 fixtures read at
    once would hold over a GB)."""

    def __init__(self, seen: SampleLines, order: list[int], jpegs: PreviousJpegs,
                 with_hashes: set[int]):
        self.seen, self.order, self.jpegs, self.with_hashes = seen, order, jpegs, with_hashes

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, number: int) -> tuple[list[bytes | None], bool]:  # type: ignore[override]
        if not 0 <= number < len(self):
            raise IndexError(number)
        fixture = self.order[number]
        return ([_jpeg(self.jpegs, self.seen, at) for at in self.seen.shots[fixture]],
                fixture in self.with_hashes)


def hashed(seen: SampleLines, wanted: list[int], grounds: dict[int, np.ndarray],
           jpegs: PreviousJpegs, pool: WorkerPool, progress: Progress,
           hashes: np.ndarray, made: np.ndarray) -> None:
    """The part hashes of the ``wanted`` lines against their fixtures' backgrounds
    (``grounds``, by fixture number), into ``hashes`` (uint64, a row a line); ``made``
    marks those made."""
    # a task each worker's share of a small job (96 samples on 2 workers: 24, not 64 and 32)
    size = max(1, min(CHUNK, -(-len(wanted) // (2 * pool.workers))))
    chunks = _Chunks(seen, wanted, grounds, jpegs, size)
    for number, results in enumerate(pool.map_ordered(tasks.hash_task, chunks)):
        chunk = chunks.lines(number)
        for at, result in zip(chunk, results, strict=True):
            if result is not None:
                hashes[at], made[at] = row(result), True
        progress.update(len(chunk))


class _Chunks(Sequence):
    """The hash tasks, ``size`` lines each: a task's JPEG bytes are read when the pool takes
    it, so what waits in memory is the pool's window of tasks."""

    def __init__(self, seen: SampleLines, wanted: list[int], backgrounds: dict[int, np.ndarray],
                 jpegs: PreviousJpegs, size: int = CHUNK):
        self.seen, self.wanted, self.backgrounds, self.jpegs = seen, wanted, backgrounds, jpegs
        self.size = size

    def lines(self, number: int) -> list[int]:
        return self.wanted[number * self.size : (number + 1) * self.size]

    def __len__(self) -> int:
        return -(-len(self.wanted) // self.size)

    def __getitem__(self, number: int) -> list[tuple[bytes | None, np.ndarray]]:  # type: ignore[override]
        if not 0 <= number < len(self):
            raise IndexError(number)
        return [(_jpeg(self.jpegs, self.seen, at), self.backgrounds[self.seen.fixture[at]])
                for at in self.lines(number)]


def _lines_by_fixture(seen: SampleLines) -> list[list[int]]:
    """Each fixture's lines, in the index's order."""
    order = np.argsort(np.frombuffer(seen.fixture, np.int32), kind="stable")
    counts = np.bincount(np.frombuffer(seen.fixture, np.int32), minlength=len(seen.counts))
    return [part.tolist() for part in np.split(order, np.cumsum(counts)[:-1])]


def _jpeg(jpegs: PreviousJpegs, seen: SampleLines, at: int) -> bytes | None:
    try:
        return jpegs.jpeg(seen.shard_of(at), seen.keys[at])
    except (ShardFormatError, OSError) as exc:
        log.warning("sample %s: its JPEG cannot be read for its near-duplicate hash: %s",
                    seen.keys[at], exc)
        return None


def verified(seen: SampleLines, hashes: np.ndarray, have: np.ndarray, jpegs: PreviousJpegs,
             pool: WorkerPool, quiet: bool, distance: int = hashing.DEFAULT_DISTANCE,
             cap: int = hashing.DEFAULT_CAP, kept: Kept | None = None,
             focus: np.ndarray | None = None, threshold: float = hashing.DEFAULT_THRESHOLD,
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The candidate pairs of lines (of each hash's RANKED nearest within ``distance`` bits,
    the ``cap`` nearest by signature; over the lines that ``have`` a hash; with ``focus``, a
    mask, those of the clusters its lines are in: ``_reached``), checked: (pairs, their
    checks (``hashing.CHECKS``), the lines that failed: no hash, unreadable, or of a fixture
    without a background).  A pair with a failed line is left out."""
    readable = np.flatnonzero(have)
    if len(readable) > search.MAX_HASHES:
        raise ConfigError(f"{len(readable):,} hashed samples: the near-duplicate search takes "
                          f"{search.MAX_HASHES:,} at most")
    # each hash's RANKED nearest (of equal distance the nearest by the other hash first),
    # then of them the cap nearest by signature, an index at a time (160 B a line)
    ranks, original = signatures(hashes[readable]), seen.originals()
    pairs = search.unique_pairs(np.concatenate(
        [readable[search.ranked(search.build(hashes[readable, column], distance,
                                             max(cap, hashing.RANKED),
                                             ties=hashes[readable, 1 - column]),
                                ranks, cap, original[readable])] for column in (0, 1)]
        + [_equal_tiles(hashes, readable[seen.tiled()[readable]])]))
    pairs = pairs[original[pairs[:, 0]] != original[pairs[:, 1]]]  # two tiles of one image
    if focus is None:
        checks, unreadable, without = checked(seen, pairs, jpegs, pool, quiet, kept)
    else:
        checks, unreadable, without = _reached(seen, hashes, have, pairs, focus, threshold,
                                               jpegs, pool, quiet, kept)
        looked = ~np.isnan(checks["score"])
        pairs, checks = pairs[looked], checks[looked]
    grounded = ~np.isin(pairs, list(without)).any(axis=1) if len(pairs) else np.ones(0, bool)
    failed = ~have
    failed[list(unreadable | without)] = True
    return pairs[grounded], checks[grounded], failed


def _reached(seen: SampleLines, hashes: np.ndarray, have: np.ndarray, pairs: np.ndarray,
             focus: np.ndarray, threshold: float, jpegs: PreviousJpegs, pool: WorkerPool,
             quiet: bool, kept: Kept | None) -> tuple[np.ndarray, set[int], set[int]]:
    """``checked`` of the pairs of the clusters the ``focus`` lines are in, found outward:
    the pairs touching a focus line first, then those touching a line they join (within
    ``threshold``, or of one surface), or an equal image or another tile of an original they
    reach, until none is new; NaN for the pairs not reached.  So a cluster holds what a check
    of every pair puts in it: an earlier sample that a new one's twin joins is in the new
    one's cluster, though no pair of theirs is a candidate.  A line first reached by ring k
    is k joins of k + 1 originals from a focus line, so after DENSE_SIZE + 1 rings a cluster
    of up to DENSE_SIZE originals is whole, and one still growing is dense, however far it
    goes on (a slow belt's frames chain): the rings stop there.  A ring costs the checks of
    its new pairs and passes over the lines and pairs (0.5 s for a million lines and 9.3
    million pairs)."""
    checks = np.zeros(len(pairs), hashing.CHECKS)
    checks["score"] = np.nan
    unreadable: set[int] = set()
    without: set[int] = set()
    kept = OrderedDict() if kept is None else kept  # a ring's backgrounds, for the next
    alike = np.flatnonzero(have & ~seen.tiled())
    _, image = np.unique(hashes[alike, :2], axis=0, return_inverse=True)
    image = image.reshape(-1)
    original = seen.originals()
    reached = focus.copy()
    progress = Progress(0, 0, "pair", "check", quiet)
    try:
        for _ in range(hashing.DENSE_SIZE + 1):
            reached[alike[np.isin(image, image[reached[alike]])]] = True  # equal images
            reached |= np.isin(original, original[reached])  # the other tiles of an original
            ring = np.flatnonzero(np.isnan(checks["score"]) & reached[pairs].any(axis=1))
            if not len(ring):
                break
            checks[ring], failed, grounds = checked(seen, pairs[ring], jpegs, pool, quiet,
                                                    kept, progress)
            unreadable |= failed
            without |= grounds
            reached[pairs[ring][hashing.joined(checks[ring], threshold)].ravel()] = True
    finally:
        progress.close()
    return checks, unreadable, without


def _equal_tiles(hashes: np.ndarray, lines: np.ndarray) -> np.ndarray:
    """Pairs of the tiles among ``lines`` whose hashes are equal, each to the next: equal
    tiles are checked, not taken for one image (a tile of bare plate has the hash of the bare
    plate at its place in every original), and the search pairs a hash's first line only."""
    if not len(lines):
        return np.zeros((0, 2), np.int64)
    _, group = np.unique(hashes[lines, :2], axis=0, return_inverse=True)
    order = np.argsort(group.reshape(-1), kind="stable")
    ranked, same = lines[order], group.reshape(-1)[order]
    step = same[1:] == same[:-1]
    return np.column_stack([ranked[:-1][step], ranked[1:][step]])


def components(seen: SampleLines, hashes: np.ndarray, failed: np.ndarray,
               joined: np.ndarray) -> np.ndarray:
    """The connected component of each line (its smallest line): of the ``joined`` pairs, of
    equal hashes of whole images (the same image, whatever the check says; equal tiles are
    checked: ``verified``) and of an original's lines that join another's (two tiles, each a
    re-shot's, join one pair of originals); a line that failed or joins nothing alone."""
    alike = ~failed & ~seen.tiled()
    roots = _components(hashes, alike, joined)
    joining = np.flatnonzero(np.bincount(roots, minlength=len(roots))[roots] > 1)
    original = seen.originals()[joining]
    _, first, of = np.unique(original, return_index=True, return_inverse=True)
    ones = np.column_stack([joining[first[of.reshape(-1)]], joining])
    if not (ones[:, 0] != ones[:, 1]).any():
        return roots
    return _components(hashes, alike,
                       np.concatenate([np.asarray(joined, np.int64).reshape(-1, 2), ones]))


def _components(hashes: np.ndarray, alike: np.ndarray, joined: np.ndarray) -> np.ndarray:
    """The connected component of each line (its smallest line): of the ``joined`` pairs and
    of equal hashes among the lines ``alike`` marks."""
    parent = np.arange(len(hashes))
    readable = np.flatnonzero(alike)
    if len(readable):  # equal hashes: joined to the first of them, in one sort
        _, first, group = np.unique(hashes[readable, :2], axis=0, return_index=True,
                                    return_inverse=True)
        parent[readable] = np.minimum(parent[readable], readable[first[group.reshape(-1)]])

    def root(item: int) -> int:
        while parent[item] != item:
            parent[item] = parent[parent[item]]
            item = int(parent[item])
        return item

    for a, b in np.asarray(joined, np.int64).reshape(-1, 2).tolist():
        a, b = root(a), root(b)
        if a != b:
            parent[max(a, b)] = min(a, b)
    return np.array([root(item) for item in range(len(parent))], np.int64)


def checked(seen: SampleLines, pairs: np.ndarray, jpegs: PreviousJpegs, pool: WorkerPool,
            quiet: bool, kept: Kept | None = None, progress: Progress | None = None,
            ) -> tuple[np.ndarray, set[int], set[int]]:
    """The check of each pair of lines (``hashing.check``, in ``hashing.CHECKS``; UNLIKE
    where a sample cannot be read or its fixture has no background), the lines that could not
    be read, and those of a fixture none of whose first samples reads.  The pairs are checked
    a block of at most KEPT fixtures at a time; the KEPT backgrounds used last are held (in
    ``kept``, which may hold those ``hash_fixtures`` made); ``progress``, if given, grows by
    them."""
    checks = np.zeros(len(pairs), hashing.CHECKS)
    checks["score"] = hashing.UNLIKE
    unreadable: set[int] = set()
    without: set[int] = set()
    lenders: dict[int, np.ndarray] = {}
    kept = OrderedDict() if kept is None else kept
    fixture = np.frombuffer(seen.fixture, np.int32)
    own = progress is None
    progress = Progress(0, 0, "pair", "check", quiet) if progress is None else progress
    progress.grow(len(pairs))
    try:
        for block in _fixture_blocks(fixture[pairs]):
            part = pairs[block]
            named = set(fixture[part].ravel().tolist())
            made = backgrounds(seen, named - kept.keys(), jpegs, pool, lenders)
            _keep(kept, {number: kept.get(number, made.get(number)) for number in named},
                  max(KEPT, len(named)))
            grounds = {number: kept[number] for number in named if kept[number] is not None}
            grounded = np.isin(fixture[part], list(grounds))
            without.update(part[~grounded].tolist())
            block, part = block[grounded.all(axis=1)], part[grounded.all(axis=1)]
            progress.update(len(grounded) - len(part))
            chunks = _PairChunks(seen, part, grounds, jpegs)
            for number, (results, failed) in enumerate(pool.map_ordered(tasks.check_task,
                                                                         chunks)):
                start = number * CHUNK
                checks[block[start : start + len(results)]] = results
                unreadable.update(chunks.samples(number)[at] for at in failed)
                progress.update(len(results))
    finally:
        if own:
            progress.close()
    return checks, unreadable, without


def _keep(kept: Kept, grounds: dict[int, np.ndarray | None], most: int) -> None:
    """``grounds`` kept as the last used, the least recently used dropped past ``most``."""
    kept.update(grounds)
    for number in grounds:
        kept.move_to_end(number)
    while len(kept) > most:
        kept.popitem(last=False)


def _fixture_blocks(fixtures_of: np.ndarray) -> Iterator[np.ndarray]:
    """Positions of pairs (``fixtures_of``: the fixture of each member) in blocks naming at
    most KEPT fixtures, each block in the pairs' order (a sample's pairs stay together)."""
    if not len(fixtures_of):
        return
    if len(np.unique(fixtures_of)) <= KEPT:
        yield np.arange(len(fixtures_of))
        return
    low, high = fixtures_of.min(axis=1), fixtures_of.max(axis=1)
    block: list[int] = []
    named: set[int] = set()
    for at in np.lexsort((high, low)).tolist():
        pair = {int(low[at]), int(high[at])}
        if block and len(named | pair) > KEPT:
            yield np.sort(np.array(block))
            block, named = [], set()
        block.append(at)
        named |= pair
    if block:
        yield np.sort(np.array(block))


class _PairChunks(Sequence):
    """The check tasks, CHUNK pairs each (sorted: a sample's pairs mostly in one task), with
    the JPEG bytes and background of each sample they name, once."""

    def __init__(self, seen: SampleLines, pairs: np.ndarray, grounds: dict[int, np.ndarray],
                 jpegs: PreviousJpegs):
        self.seen, self.pairs, self.grounds, self.jpegs = seen, pairs, grounds, jpegs
        self.tiled = seen.tiled()

    def samples(self, number: int) -> list[int]:
        return list(dict.fromkeys(self.pairs[number * CHUNK : (number + 1) * CHUNK].ravel()
                                  .tolist()))

    def __len__(self) -> int:
        return -(-len(self.pairs) // CHUNK)

    def __getitem__(self, number: int) -> tuple[list, list[tuple[int, int]]]:  # type: ignore[override]
        if not 0 <= number < len(self):
            raise IndexError(number)
        samples = self.samples(number)
        local = {at: place for place, at in enumerate(samples)}
        work = [(_jpeg(self.jpegs, self.seen, at), self.grounds[self.seen.fixture[at]],
                 bool(self.tiled[at])) for at in samples]
        pairs = [(local[a], local[b])
                 for a, b in self.pairs[number * CHUNK : (number + 1) * CHUNK].tolist()]
        return work, pairs
