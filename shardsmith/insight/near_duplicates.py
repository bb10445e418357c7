"""``inspect --near-duplicates``: the originals of a dataset shot more than once, found from
the samples it stores.

Two hashes a sample, as the pack stores them in the sample index (``packing.nearhash``; made
the same way from the stored samples of a dataset whose index holds none), the ``cap``
nearest of each within ``distance`` bits from a multi-index search (``search.build``), each
candidate pair checked on the parts registered (``hashing.check``) by the worker processes,
and the clusters are the connected components of the pairs that pass, and of equal hashes.
A cluster of more than ``hashing.DENSE_SIZE`` originals is reported as dense (a slow belt's
frames chain into one), not as one part.  The tiles of one original are one original: their
pairs are not checked, and a cluster of one original's tiles is none.

Memory: ~250 bytes a sample (its key, path and shard; numbers in arrays), the backgrounds
(49 KB each) of the ``nearhash.KEPT`` fixtures used last (those made for the hashes a
dataset lacks are kept for the check, not made again) and of those a fixture of few samples
may borrow, and the clusters found.
"""

from __future__ import annotations

import logging
from array import array
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import RunConfig, check_workers
from ..dataset.formats import shard_format
from ..dataset.manifest import Manifest, iter_sample_index, read_manifest
from ..errors import ConfigError
from ..neardup import hashing, search
from ..packing import nearhash
from ..packing.jpegcopy import PreviousJpegs
from ..packing.parallel import WorkerPool
from ..progress import Progress
from ..storage import is_url, location
from ..text import plural, printable
from .census import require_split

log = logging.getLogger(__name__)



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
    of their two hash distances, the check's score (percent of the parts that differ) and
    whether their parts are of one surface (``hashing.check``)."""

    first: int
    second: int
    distance: int
    score: float
    one_surface: bool = False

    def __str__(self) -> str:
        """"12 bits, 0.1% differs", and ", one surface" where the parts' grain matches."""
        return f"{self.distance} bits, {self.score:g}% differs" \
            + (", one surface" if self.one_surface else "")


@dataclass(frozen=True)
class Cluster:
    members: tuple[Member, ...]
    pairs: tuple[Pair, ...]  # the verified pairs that join it (none for equal images only)
    dense: bool

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(sorted({member.split for member in self.members}))

    @property
    def originals(self) -> int:
        return len({member.path for member in self.members})

    def shown(self) -> list[tuple[Member, Pair | None]]:
        """Each original once, in order, as the sample of the best pair that joins it (a
        tiled original's best tile), with that pair (None: joined by equal hashes only)."""
        best: dict[str, tuple[int, Pair | None]] = {}
        for number, member in enumerate(self.members):
            best.setdefault(member.path, (number, None))
        for pair in sorted(self.pairs, key=lambda pair: pair.score):
            for number in (pair.first, pair.second):
                path = self.members[number].path
                if best[path][1] is None:
                    best[path] = (number, pair)
        return [(self.members[number], pair) for number, pair in best.values()]

    def size(self) -> str:
        """"2 samples", or for tiles "6 samples of 2 originals"."""
        of = f" of {plural(self.originals, 'original')}" \
            if self.originals != len(self.members) else ""
        return f"{plural(len(self.members), 'sample')}{of}"

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
    unreadable: tuple[str, ...]  # keys whose stored JPEG could not be read, decoded or hashed
    made: int = 0  # hashes made from the stored samples (the sample index had none)
    together: bool = False  # packed with splits.near_duplicates: together


def find(directory: str | Path, distance: int = hashing.DEFAULT_DISTANCE,
         threshold: float = hashing.DEFAULT_THRESHOLD, cap: int = hashing.DEFAULT_CAP,
         quiet: bool = True, touching: frozenset[str] | None = None,
         workers: int = 0, split: str | None = None) -> NearDuplicates:
    """The near-duplicate clusters of the dataset in ``directory``: the hashes its sample
    index holds (made from its stored samples where it holds none), the candidate pairs
    checked on its stored samples by ``workers`` processes (0: a core each).  ``touching``:
    only the clusters of the samples of these keys, their pairs checked outward from those
    samples (``nearhash.verified``; a version's new samples: what the nightly report shows);
    ``split``: only those of the samples of that split."""
    where = location(directory)
    if is_url(where):
        raise ConfigError("--near-duplicates reads the shards of a dataset on disk: stage "
                          f"{where} first and inspect the copy")
    path = Path(where)
    manifest = read_manifest(path)
    require_split(manifest, split)
    samples = _Samples.read(path, manifest)
    seen, hashes, have = samples.lines, samples.hashes, samples.have
    missing = np.flatnonzero(~have)
    made_count = 0
    run = RunConfig(workers=workers)
    check_workers(run)
    kept: nearhash.Kept = OrderedDict()  # the backgrounds made last, for the check
    with WorkerPool(run) as pool, \
            PreviousJpegs(shard_format(manifest.format), path, manifest.shards) as jpegs:
        if len(missing):  # a dataset of an older release: made as its next pack makes them
            touched = {seen.fixture[at] for at in missing.tolist()}
            made = np.zeros(len(have), bool)
            progress = Progress(sum(seen.counts[number] for number in touched), 0, "img",
                                "hash", quiet)
            try:
                nearhash.hash_fixtures(seen, touched, jpegs, pool, progress, hashes, made,
                                       kept)
            finally:
                progress.close()
            # hashes of 0: a frame without an edge (a uniform image), as a stored one reads
            have, made_count = have | (made & hashes.any(axis=1)), int(made.sum())
        focus = samples.focus(touching, split)
        pairs, checks, failed = nearhash.verified(seen, hashes, have, jpegs, pool, quiet,
                                                  distance, cap, kept, focus, threshold)
    join = hashing.joined(checks, threshold)
    verified = [(first, second, _nearer(hashes[first, :2], hashes[second, :2]), float(score),
                 bool(surface))
                for (first, second), (score, surface) in zip(pairs[join].tolist(),
                                                             checks[join].tolist(), strict=True)]
    clusters = _clusters(samples, failed, verified, focus)
    return NearDuplicates(str(path), len(seen.keys), len(seen.fixtures), len(pairs),
                          tuple(clusters), distance, threshold,
                          tuple(seen.keys[at] for at in np.flatnonzero(failed)), made_count,
                          manifest.near_duplicates == "together")


class _Samples:
    """What ``find`` keeps of each line of the sample index (~210 bytes a sample: its key,
    path and shard, numbers in arrays), and the hashes it holds."""

    def __init__(self) -> None:
        self.lines = nearhash.SampleLines()
        self.paths: list[str] = []
        self.split_names: dict[str, int] = {}
        self.split = array("i")
        self.hashes = np.zeros((0, nearhash.WIDTH), np.uint64)
        self.have = np.zeros(0, bool)

    @classmethod
    def read(cls, directory: Path, manifest: Manifest) -> _Samples:
        """The lines of ``manifest``'s sample index, with the hashes it holds when they were
        made by this algorithm."""
        samples, current = cls(), manifest.near_hash == nearhash.CURRENT
        hashes = array("Q")  # a row a line (``nearhash.row_of``)
        for record in iter_sample_index(directory, manifest):
            samples.lines.add(record, current)  # else its hash is made again
            samples.paths.append(record.path)
            samples.split.append(samples.split_names.setdefault(record.split,
                                                                len(samples.split_names)))
            row = nearhash.row_of(record) if current else nearhash.row(None)
            hashes.frombytes(row.tobytes())
        samples.hashes = np.frombuffer(hashes, np.uint64).reshape(-1, nearhash.WIDTH).copy()
        samples.have = samples.hashes.any(axis=1)
        return samples

    def focus(self, touching: frozenset[str] | None, split: str | None) -> np.ndarray | None:
        """The samples of these keys and of this split (None: every sample)."""
        if touching is None and split is None:
            return None
        mask = np.ones(len(self.paths), bool)
        if touching is not None:
            mask &= np.array([key in touching for key in self.lines.keys], bool)
        if split is not None:
            mask &= np.frombuffer(self.split, np.int32) == self.split_names.get(split, -1)
        return mask

    def member(self, at: int) -> Member:
        return Member(self.lines.keys[at], self.paths[at],
                      list(self.split_names)[self.split[at]], self.lines.shard_of(at))


def _nearer(first: np.ndarray, second: np.ndarray) -> int:
    return int(search.popcount(np.asarray(first, np.uint64) ^ np.asarray(second, np.uint64))
               .min())


def _clusters(samples: _Samples, failed: np.ndarray,
              verified: Iterable[tuple[int, int, int, float, bool]],
              focus: np.ndarray | None = None) -> list[Cluster]:
    """Connected components of the verified pairs and of samples with equal hashes (the
    same image, whatever the check says) that hold more than one original, leakage first,
    then the largest; with ``focus`` (a mask of the samples), those holding one of them."""
    verified = list(verified)
    roots = nearhash.components(samples.lines, samples.hashes, failed,
                                np.array([pair[:2] for pair in verified], np.int64))
    order = np.argsort(roots, kind="stable")
    cuts = np.flatnonzero(np.diff(roots[order])) + 1
    by_root: dict[int, list[tuple[int, int, int, float, bool]]] = {}
    for pair in verified:
        by_root.setdefault(int(roots[pair[0]]), []).append(pair)
    clusters = []
    for items in np.split(order, cuts):
        originals = len({samples.paths[at] for at in items.tolist()})
        if originals < 2 or focus is not None and not focus[items].any():
            continue
        position = {item: number for number, item in enumerate(items.tolist())}
        clusters.append(Cluster(
            tuple(samples.member(at) for at in items.tolist()),
            tuple(Pair(position[a], position[b], near, round(score, 3), surface)
                  for a, b, near, score, surface in by_root.get(int(roots[items[0]]), ())),
            originals > hashing.DENSE_SIZE))
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
             f"checked (within {found.distance} bits, under {found.threshold:g}% differing, "
             f"or {hashing.SURFACE_DIFFER:g}% on one surface)",
             f"{plural(len(clusters), 'cluster')}: {leaking:,} across splits (leakage), "
             f"{dense:,} dense (over {hashing.DENSE_SIZE} originals: a slow belt's frames chain "
             "into one)"]
    if found.together and leaking:
        lines.append("packed with splits.near_duplicates: together: a cluster across splits is "
                     "dense (not forced into one), or its samples were packed before they were "
                     "found together (a packed sample never moves)")
    if found.made:
        lines.append(f"{plural(found.made, 'hash', 'hashes')} made from the stored samples: the "
                     "sample index holds none for them (a dataset of an older release, or "
                     "output.near_hashes: false); the next pack stores them")
    if found.unreadable:
        lines.append(f"{plural(len(found.unreadable), 'sample')} could not be read (shardsmith "
                     f"verify --decode), show nothing (a uniform frame) or are under "
                     f"{hashing.MIN_SIDE} px on the short side at "
                     f"{hashing.FRAME} px, left out: {', '.join(found.unreadable[:3])}"
                     + (", ..." if len(found.unreadable) > 3 else ""))
    for cluster in clusters[:CLUSTERS_SHOWN]:
        kind = "leakage" if cluster.leakage else "one split"
        lines.append(f"{kind}{', dense' if cluster.dense else ''}: {cluster.size()} in "
                     f"{', '.join(cluster.splits)}")
        width = max(len(member.split) for member in cluster.members)
        shown = cluster.shown()
        for place, (member, pair) in enumerate(shown[:MEMBERS_SHOWN]):
            how = "" if not place else "  (the same image)" if pair is None \
                else f"  ({pair})"
            lines.append(f"  {member.split:<{width}}  {printable(member.path)}{how}")
        if len(shown) > MEMBERS_SHOWN:
            lines.append(f"  ... {len(shown) - MEMBERS_SHOWN:,} more (--json)")
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
        "together": found.together,
        "unreadable": list(found.unreadable),
        "clusters": [{
            "leakage": cluster.leakage,
            "dense": cluster.dense,
            "splits": list(cluster.splits),
            "samples": [{"key": member.key, "path": member.path, "split": member.split}
                        for member in cluster.members],
            "pairs": [{"first": pair.first, "second": pair.second, "distance": pair.distance,
                       "differs_percent": pair.score, "one_surface": pair.one_surface}
                      for pair in cluster.pairs],
        } for cluster in found.clusters],
    }
