"""``inspect --near-duplicates``: the originals of a dataset shot more than once, found from
the samples it stores.

Each sample's stored JPEG is reduced to the hash frame (grey, 256 px on the long side,
``hashing.frame``); its fixture is the folder of its original with the sample's size (and a
tile's place in its original), and the fixture's background is made from the first
``BACKGROUND_SHOTS`` of its samples in the sample index's order, so it is the same however
the dataset is read.  Then: two hashes a sample (``hashing.part_hashes``), the ``cap`` nearest
of each within ``distance`` bits from a multi-index search (``search.build``), each candidate
pair checked on the parts registered (``hashing.check``), and the clusters are the connected
components of the pairs that pass.  A cluster of more than ``hashing.DENSE_SIZE`` originals is
reported as dense (a slow belt's frames chain into one), not as one part.

Memory: two hashes, a fixture and a few ints a sample (~100 bytes), the fixtures'
backgrounds (49 KB each), and the part views of the last ``VIEWS_KEPT`` samples checked.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..dataset.formats import shard_format
from ..dataset.manifest import SampleRecord, iter_sample_index, read_manifest
from ..errors import ConfigError, ShardFormatError
from ..neardup import fixtures, hashing, search
from ..packing import nearhash
from ..packing.jpegcopy import PreviousJpegs
from ..progress import Progress
from ..storage import is_url, location
from ..text import plural, printable

log = logging.getLogger(__name__)

VIEWS_KEPT = 1024  # part views kept for the checks (2 x 192 x 192 bytes each: 75 MB)


@dataclass(frozen=True)
class Member:
    """One sample of a cluster."""

    key: str
    path: str
    split: str
    shard: str  # where its JPEG is (for the sheet)


@dataclass(frozen=True)
class Pair:
    """A checked pair of a cluster: its members (indexes into ``Cluster.members``), the nearer
    of their two hash distances, and the check's score (percent of the parts that differ)."""

    first: int
    second: int
    distance: int
    score: float


@dataclass(frozen=True)
class Cluster:
    members: tuple[Member, ...]
    pairs: tuple[Pair, ...]  # the verified pairs that join it (none for equal images only)
    dense: bool

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(sorted({member.split for member in self.members}))

    @property
    def leakage(self) -> bool:
        """Its samples sit in more than one split: validation would measure memory."""
        return len(self.splits) > 1


@dataclass(frozen=True)
class NearDuplicates:
    """What ``find`` reports: clusters, leakage first, then the largest."""

    directory: str
    samples: int
    fixtures: int
    candidates: int  # pairs checked
    clusters: tuple[Cluster, ...]
    distance: int
    threshold: float
    unreadable: tuple[str, ...]  # keys whose stored JPEG could not be read or decoded
    made: int = 0  # hashes made from the stored samples (the sample index had none)


def find(directory: str | Path, distance: int = hashing.DEFAULT_DISTANCE,
         threshold: float = hashing.DEFAULT_THRESHOLD, cap: int = hashing.DEFAULT_CAP,
         quiet: bool = True, touching: frozenset[str] | None = None) -> NearDuplicates:
    """The near-duplicate clusters of the dataset in ``directory``: the hashes its sample
    index holds (made from its stored samples where it holds none), the candidate pairs
    checked on its stored samples.  ``touching``: only the pairs with a sample of these keys
    are checked (a version's new samples: what the nightly report shows)."""
    where = location(directory)
    if is_url(where):
        raise ConfigError("--near-duplicates reads the shards of a dataset on disk: stage "
                          f"{where} first and inspect the copy")
    path = Path(where)
    manifest = read_manifest(path)
    records = list(iter_sample_index(path, manifest))
    fixture_of = _fixtures(records)
    with PreviousJpegs(shard_format(manifest.format), path, manifest.shards) as jpegs:
        stored = _Stored(jpegs, records)
        backgrounds = _Backgrounds(stored, fixture_of)
        hashes, made = _hashes(stored, fixture_of, backgrounds,
                               manifest.near_hash == nearhash.CURRENT, quiet)
        readable = np.flatnonzero(~stored.failed)
        index = [search.build(hashes[readable, column], distance, cap) for column in (0, 1)]
        pairs = np.unique(np.concatenate([readable[one.pairs()] for one in index]), axis=0)
        if touching is not None:
            new = np.array([record.key in touching for record in records], bool)
            pairs = pairs[new[pairs].any(axis=1)]
        views = _Views(stored, fixture_of, backgrounds)
        verified = []
        progress = Progress(len(pairs), 0, "pair", "check", quiet)
        try:
            for first, second in pairs.tolist():
                score = _checked(views, first, second)
                if score <= threshold:
                    verified.append((first, second, _nearer(hashes[first], hashes[second]),
                                     score))
                progress.update(1)
        finally:
            progress.close()
    clusters = _clusters(records, hashes, stored.failed, verified, touching)
    return NearDuplicates(str(path), len(records), len(set(fixture_of)), len(pairs),
                          tuple(clusters), distance, threshold,
                          tuple(records[at].key for at in np.flatnonzero(stored.failed)), made)


def _checked(views: _Views, first: int, second: int) -> float:
    """The check's score of a pair; UNLIKE where one cannot be read (it is named)."""
    one, other = views.of(first), views.of(second)
    return hashing.UNLIKE if one is None or other is None else hashing.check(one, other)


def _nearer(first: np.ndarray, second: np.ndarray) -> int:
    return int(search.popcount(np.asarray(first, np.uint64) ^ np.asarray(second, np.uint64))
               .min())


def _fixtures(records: list[SampleRecord]) -> list[fixtures.Fixture]:
    return [fixtures.fixture_of(record.path, record.width, record.height, record.key)
            for record in records]


class _Stored:
    """The hash frame of each sample, from its stored JPEG; a sample that cannot be read is
    marked in ``failed`` and left out of the search (named in the report)."""

    def __init__(self, jpegs: PreviousJpegs, records: list[SampleRecord]):
        self.jpegs, self.records = jpegs, records
        self.failed = np.zeros(len(records), bool)

    def frame(self, at: int) -> np.ndarray | None:
        record = self.records[at]
        try:
            return hashing.frame(self.jpegs.jpeg(record.shard, record.key))
        except (ShardFormatError, OSError, ValueError) as exc:
            if not self.failed[at]:
                log.warning("%s (%s): cannot be read for near-duplicates: %s", record.key,
                            record.path, exc)
            self.failed[at] = True
            return None


class _Backgrounds:
    """Each fixture's background, made when first asked for, from the frames of its first
    samples (``neardup.fixtures``); a fixture of few samples compares its own with those of
    the fuller fixtures of its size."""

    def __init__(self, stored: _Stored, fixture_of: list[fixtures.Fixture]):
        self.stored = stored
        self.counts: Counter[fixtures.Fixture] = Counter(fixture_of)
        self.shots: dict[fixtures.Fixture, list[int]] = {}
        for at, fixture in enumerate(fixture_of):
            chosen = self.shots.setdefault(fixture, [])
            if len(chosen) < fixtures.BACKGROUND_SHOTS:
                chosen.append(at)
        self.own: dict[fixtures.Fixture, np.ndarray | None] = {}
        self.chosen: dict[fixtures.Fixture, np.ndarray | None] = {}

    def _own(self, fixture: fixtures.Fixture) -> np.ndarray | None:
        if fixture not in self.own:
            frames = [frame for frame in map(self.stored.frame, self.shots[fixture])
                      if frame is not None]
            self.own[fixture] = hashing.fixture_median(frames) if frames else None
        return self.own[fixture]

    def of(self, fixture: fixtures.Fixture) -> np.ndarray | None:
        if fixture not in self.chosen:
            own = self._own(fixture)
            choices = {fixture: own} if own is not None else {}
            if own is not None and self.counts[fixture] < fixtures.FEW_SHOTS:
                for other in self.counts:
                    if other[1:3] == fixture[1:3] and self.counts[other] >= fixtures.FEW_SHOTS:
                        background = self._own(other)
                        if background is not None:
                            choices[other] = background
            self.chosen[fixture] = fixtures.borrowed(choices, self.counts).get(fixture)
        return self.chosen[fixture]


def _hashes(stored: _Stored, fixture_of: list[fixtures.Fixture], backgrounds: _Backgrounds,
            indexed: bool, quiet: bool) -> tuple[np.ndarray, int]:
    """(samples, 2) uint64: the part hashes of each sample, as the sample index holds them
    (``indexed``: made by this algorithm), else made from its stored JPEG; and how many were
    made.  A sample that cannot be read is marked failed."""
    hashes = np.zeros((len(fixture_of), 2), np.uint64)
    missing = []
    for at, record in enumerate(stored.records):
        if indexed and record.near is not None:
            hashes[at] = int(record.near[0], 16), int(record.near[1], 16)
        else:
            missing.append(at)
    if not missing:
        return hashes, 0
    progress = Progress(len(missing), 0, "img", "hash", quiet)
    try:
        for at in sorted(missing, key=lambda at: stored.records[at].shard):  # a shard at a time
            frame, background = stored.frame(at), backgrounds.of(fixture_of[at])
            if frame is not None and background is not None \
                    and frame.shape == background.shape:
                hashes[at] = hashing.part_hashes(frame, background)
            else:
                stored.failed[at] = True
            progress.update(1)
    finally:
        progress.close()
    return hashes, len(missing)


class _Views:
    """Part views (``hashing.part_view``) of the samples checked, the last VIEWS_KEPT kept:
    the candidate pairs come sorted, so a sample's pairs are checked together."""

    def __init__(self, stored: _Stored, fixture_of: list[fixtures.Fixture],
                 backgrounds: _Backgrounds):
        self.stored, self.fixture_of, self.backgrounds = stored, fixture_of, backgrounds
        self.kept: OrderedDict[int, np.ndarray | None] = OrderedDict()

    def of(self, at: int) -> np.ndarray | None:
        if at in self.kept:
            self.kept.move_to_end(at)
            return self.kept[at]
        frame = self.stored.frame(at)
        background = self.backgrounds.of(self.fixture_of[at])
        view = None
        if frame is not None and background is not None and frame.shape == background.shape:
            view = hashing.part_view(frame, background)
        else:
            self.stored.failed[at] = True
        self.kept[at] = view
        if len(self.kept) > VIEWS_KEPT:
            self.kept.popitem(last=False)
        return view


def _clusters(records: list[SampleRecord], hashes: np.ndarray, failed: np.ndarray,
              verified: Iterable[tuple[int, int, int, float]],
              touching: frozenset[str] | None = None) -> list[Cluster]:
    """Connected components of the verified pairs and of samples with equal hashes (the
    same image, whatever the check says), leakage first, then the largest; with
    ``touching``, those holding one of its keys."""
    parent = list(range(len(records)))

    def root(item: int) -> int:
        while parent[item] != item:
            parent[item] = parent[parent[item]]
            item = parent[item]
        return item

    def join(a: int, b: int) -> None:
        a, b = root(a), root(b)
        if a != b:
            parent[max(a, b)] = min(a, b)

    readable = np.flatnonzero(~failed)
    if len(readable):
        _, first, group = np.unique(hashes[readable], axis=0, return_index=True,
                                    return_inverse=True)
        for member, same in zip(readable.tolist(), readable[first[group.reshape(-1)]].tolist(),
                                strict=True):
            if member != same:
                join(member, same)
    verified = list(verified)
    for first, second, _, _ in verified:
        join(first, second)
    members: dict[int, list[int]] = {}
    for item in range(len(records)):
        members.setdefault(root(item), []).append(item)
    by_root: dict[int, list[tuple[int, int, int, float]]] = {}
    for pair in verified:
        by_root.setdefault(root(pair[0]), []).append(pair)
    clusters = []
    for top, items in members.items():
        if len(items) < 2 or touching is not None and \
                not any(records[at].key in touching for at in items):
            continue
        position = {item: number for number, item in enumerate(items)}
        clusters.append(Cluster(
            tuple(Member(records[at].key, records[at].path, records[at].split, records[at].shard)
                  for at in items),
            tuple(Pair(position[a], position[b], near, round(score, 3))
                  for a, b, near, score in by_root.get(top, ())),
            len(items) > hashing.DENSE_SIZE))
    clusters.sort(key=lambda cluster: (not cluster.leakage, -len(cluster.members),
                                       cluster.members[0].key))
    return clusters



CLUSTERS_SHOWN = 20  # clusters the text lists (--json has every one)
MEMBERS_SHOWN = 6  # samples of one cluster the text lists


def near_duplicates_text(found: NearDuplicates) -> str:
    """The report for people: counts, then the clusters, leakage first."""
    clusters = found.clusters
    leaking = sum(cluster.leakage for cluster in clusters)
    dense = sum(cluster.dense for cluster in clusters)
    lines = [f"near-duplicates in {printable(found.directory)}: {plural(found.samples, 'sample')}"
             f" on {plural(found.fixtures, 'fixture')}, {plural(found.candidates, 'pair')} "
             f"checked (within {found.distance} bits, under {found.threshold:g}% differing)",
             f"{plural(len(clusters), 'cluster')}: {leaking:,} across splits (leakage), "
             f"{dense:,} dense (over {hashing.DENSE_SIZE} samples: a slow belt's frames chain "
             "into one)"]
    if found.made:
        lines.append(f"{plural(found.made, 'hash', 'hashes')} made from the stored samples: the "
                     "sample index holds none for them (a dataset of an older release, or "
                     "output.near_hashes: false); the next pack stores them")
    if found.unreadable:
        lines.append(f"{plural(len(found.unreadable), 'sample')} could not be read and were "
                     f"left out (shardsmith verify --decode): {', '.join(found.unreadable[:3])}"
                     + (", ..." if len(found.unreadable) > 3 else ""))
    for cluster in clusters[:CLUSTERS_SHOWN]:
        kind = "leakage" if cluster.leakage else "one split"
        lines.append(f"{kind}{', dense' if cluster.dense else ''}: "
                     f"{plural(len(cluster.members), 'sample')} in {', '.join(cluster.splits)}")
        nearest = {}
        for pair in cluster.pairs:
            for member in (pair.first, pair.second):
                if member not in nearest or pair.score < nearest[member].score:
                    nearest[member] = pair
        width = max(len(member.split) for member in cluster.members)
        for number, member in enumerate(cluster.members[:MEMBERS_SHOWN]):
            pair = nearest.get(number) if number else None
            how = (f"  ({pair.distance} bits, {pair.score:g}% differs)" if pair is not None
                   else "  (the same image)" if number else "")
            lines.append(f"  {member.split:<{width}}  {printable(member.path)}{how}")
        if len(cluster.members) > MEMBERS_SHOWN:
            lines.append(f"  ... {len(cluster.members) - MEMBERS_SHOWN:,} more (--json)")
    if len(clusters) > CLUSTERS_SHOWN:
        lines.append(f"... {len(clusters) - CLUSTERS_SHOWN:,} more clusters (--json)")
    return "\n".join(lines)


def near_duplicates_json(found: NearDuplicates) -> dict:
    """The report for scripts: every cluster, its samples and the checked pairs joining it."""
    return {
        "dataset": found.directory,
        "samples": found.samples,
        "fixtures": found.fixtures,
        "pairs_checked": found.candidates,
        "distance": found.distance,
        "threshold": found.threshold,
        "algorithm": {"name": hashing.ALGORITHM, "version": hashing.VERSION},
        "dense_size": hashing.DENSE_SIZE,
        "hashes_made": found.made,
        "unreadable": list(found.unreadable),
        "clusters": [{
            "leakage": cluster.leakage,
            "dense": cluster.dense,
            "splits": list(cluster.splits),
            "samples": [{"key": member.key, "path": member.path, "split": member.split}
                        for member in cluster.members],
            "pairs": [{"first": pair.first, "second": pair.second, "distance": pair.distance,
                       "differs_percent": pair.score} for pair in cluster.pairs],
        } for cluster in found.clusters],
    }
