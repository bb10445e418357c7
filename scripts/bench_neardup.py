"""Time the near-duplicate candidates: the exhaustive search (scripts/neardup_reference.py),
the index (``neardup.search``) at up to a million hashes, and the check.

    scripts/bench_neardup.py [--counts 5000,10000,20000] [--index-counts 10000,100000,1000000]
                             [--new 10000] [--repeat 3] [--sample 200] [--parts 2000]
                             [--kinds random,parts] [--exhaustive 10000]
                             [--distance 18] [--cap 8] [--rank 5]

Two kinds of hashes. ``random``: 64-bit values with 32 bits set (the part hash's shape); the
exhaustive search costs the same whatever the values are. ``parts``: the part hashes
(``part_hashes``) of ``--parts`` parts of scripts/reshots.py on two fixtures, each copied
with 4 to 12 random bits flipped (uniform) up to the count: the copies of one part sit 8 to
24 bits apart, as re-shots and different parts of one fixture do, and the parts keep the real
spread of different parts on one fixture, so hashes crowd as a defect line's do (less than
the measurement's fixtures would at a million: docs/performance.md). Each hash has a second
one that breaks ties, as a sample's two part hashes do in the product (random: another random
value; parts: the part's second hash, copied the same way).

Each index row runs in a child process of its own (its peak RSS is that child's VmHWM,
read before the recall is measured): the median seconds of ``--repeat`` runs,
the pairs found, and the recall of the index against the exhaustive search on a sample of
``--sample`` hashes (their cap nearest within the distance, each way round: the share of the
exhaustive lists' entries the index's lists hold). ``N new`` rows add the last N hashes to
the index of the others (its build not timed). The ratio is the exhaustive search's seconds
at ``--exhaustive`` hashes, measured in the same run, over the row's. ``--rank K``: a built
row's seconds include keeping K of each hash's ``--cap`` nearest by signature
(``search.ranked``, as ``inspect`` and ``pack`` do, over random signatures: its cost does not
depend on their values), and its pairs are those K.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import neardup_reference as reference  # noqa: E402
from neardup_curve import reduce  # noqa: E402
from reshots import fixture_scene, render  # noqa: E402

from shardsmith.neardup import hashing as neardup  # noqa: E402
from shardsmith.neardup import search as neardup_index  # noqa: E402

DISTANCE, CAP, RANK = 18, 8, 0
FLIPS = (4, 12)  # bits flipped in a copy of a part hash, fewest and most


def _hashes(count: int, rng: np.random.Generator) -> np.ndarray:
    bits = np.argsort(rng.random((count, 64)), axis=1)[:, :32]
    values = np.zeros(count, np.uint64)
    for column in range(32):
        values |= np.uint64(1) << bits[:, column].astype(np.uint64)
    return values


def _part_hashes(parts: int) -> np.ndarray:
    """The two part hashes of ``parts`` originals, half on each of two fixtures: (parts, 2)."""
    hashes = []
    for fixture in range(2):
        scene = fixture_scene(0, fixture)
        greys = [reduce(render(0, fixture, part, 0, scene)) for part in range(parts // 2)]
        median = neardup.fixture_median(greys[:63])
        hashes += [neardup.part_hashes(grey, median)[:2] for grey in greys]
    return np.array(hashes, np.uint64)


def _crowded(bases: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` rows of hashes: the bases, then copies of random bases, each hash with
    FLIPS bits flipped."""
    copies = bases[rng.integers(0, len(bases), count)]
    for hashes in copies.T:
        flips = rng.integers(FLIPS[0], FLIPS[1] + 1, count)
        for column in range(FLIPS[1]):
            bit = np.uint64(1) << rng.integers(0, 64, count).astype(np.uint64)
            hashes ^= np.where(column < flips, bit, np.uint64(0))
    copies[: min(count, len(bases))] = bases[:count]
    return copies


def _median_seconds(action, repeat: int) -> float:
    timings = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        timings.append(time.perf_counter() - started)
    return float(np.median(timings))


def _exhaustive_lists(hashes: np.ndarray, ties: np.ndarray, rows: np.ndarray) -> list[set[int]]:
    """For each of ``rows`` its cap nearest within DISTANCE (ties by the ties' distance, then
    by index), by every hash."""
    lists = []
    for start in range(0, len(rows), 16):
        block = rows[start : start + 16]
        apart = neardup_index.popcount(hashes[block, None] ^ hashes[None, :]).astype(np.int64)
        apart[np.arange(len(block)), block] = 99
        tie = neardup_index.popcount(ties[block, None] ^ ties[None, :]).astype(np.int64)
        keys = (apart << 7 | tie) << 32 | np.arange(len(hashes))
        nearest = np.sort(np.partition(keys, CAP, axis=1)[:, :CAP], axis=1)
        lists += [{int(key & 0xFFFFFFFF) for key in row if key >> 39 <= DISTANCE}
                  for row in nearest]
    return lists


def _recall(index: neardup_index.Index, rows: np.ndarray) -> float:
    """The share of the exhaustive lists of ``rows`` (distinct hashes) the index holds."""
    exact = _exhaustive_lists(index.hashes, index.ties, rows)
    found = []
    for row in rows:
        apart, neighbour = neardup_index.entries(index.near[row])
        found.append(set(neighbour[apart <= DISTANCE].tolist()))
    wanted = sum(len(want) for want in exact)
    return sum(len(want & have) for want, have in zip(exact, found, strict=True)) / max(1, wanted)


def _row(hashes: np.ndarray, new: int, repeat: int, sample: int, folder: Path) -> dict:
    """One index row, in this (child) process. A ``new`` row loads the index of the others
    that a child before it saved, so that its peak is the increment's."""
    rng = np.random.default_rng(1)
    timings = []
    if new:
        saved = np.load(folder / "old.npz")
        old = neardup_index.Index(saved["hashes"], saved["first"], saved["group"],
                                  saved["near"], DISTANCE, neardup_index.DEFAULT_SCHEME,
                                  saved["ties"])
        for _ in range(repeat):
            started = time.perf_counter()
            index, pairs = old.add(hashes[-new:, 0], new_ties=hashes[-new:, 1])
            timings.append(time.perf_counter() - started)
        rows = rng.choice(np.arange(len(old.hashes), len(index.hashes)),
                          min(sample, len(index.hashes) - len(old.hashes)), replace=False)
    else:
        signatures = rng.integers(-127, 128, (len(hashes), neardup.SIGNATURE), np.int8)
        for _ in range(repeat):
            started = time.perf_counter()
            index = neardup_index.build(hashes[:, 0], DISTANCE, CAP, ties=hashes[:, 1])
            pairs = neardup_index.ranked(index, signatures, RANK) if RANK else index.pairs()
            timings.append(time.perf_counter() - started)
        rows = rng.choice(len(index.hashes), min(sample, len(index.hashes)), replace=False)
    peak = _peak_mb()
    return {"seconds": float(np.median(timings)), "peak_mb": peak, "pairs": len(pairs),
            "recall": _recall(index, rows)}


def _peak_mb() -> float:
    """This process's peak resident memory since its exec: VmHWM (``ru_maxrss`` would hold
    the parent's, which a child inherits across fork and exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _save_old(hashes: np.ndarray, new: int, folder: Path) -> None:
    """Build the index of all but the last ``new`` hashes and save it for a ``new`` row."""
    index = neardup_index.build(hashes[:-new, 0], DISTANCE, CAP, ties=hashes[:-new, 1])
    np.savez(folder / "old.npz", hashes=index.hashes, first=index.first, group=index.group,
             near=index.near, ties=index.ties)


def _child_row(arguments: argparse.Namespace, source: Path, count: int, new: int,
               step: str = "row") -> dict:
    output = subprocess.run(
        [sys.executable, __file__, "--row", str(source), "--row-count", str(count),
         "--new", str(new), "--repeat", str(arguments.repeat), "--sample",
         str(arguments.sample), "--step", step, "--distance", str(DISTANCE), "--cap",
         str(CAP), "--rank", str(RANK)], check=True, capture_output=True,
        text=True).stdout
    return json.loads(output.splitlines()[-1])


def main() -> None:
    global DISTANCE, CAP, RANK
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("--counts", default="5000,10000,20000")
    parser.add_argument("--index-counts", default="10000,100000,1000000")
    parser.add_argument("--new", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sample", type=int, default=200)
    parser.add_argument("--parts", type=int, default=2000)
    parser.add_argument("--kinds", default="random,parts")
    parser.add_argument("--exhaustive", type=int, default=10000,
                        help="hashes of the exhaustive search the ratios divide")
    parser.add_argument("--distance", type=int, default=DISTANCE,
                        help="bits within which the index lists a hash's nearest")
    parser.add_argument("--cap", type=int, default=CAP, help="nearest listed per hash")
    parser.add_argument("--rank", type=int, default=RANK,
                        help="of them, kept per hash by signature (0: none)")
    parser.add_argument("--row", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--row-count", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--step", default="row", help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    DISTANCE, CAP, RANK = arguments.distance, arguments.cap, arguments.rank
    if arguments.row:
        hashes = np.load(arguments.row)[: arguments.row_count]
        if arguments.step == "save":
            _save_old(hashes, arguments.new, arguments.row.parent)
            print("{}")
        else:
            print(json.dumps(_row(hashes, arguments.new, arguments.repeat, arguments.sample,
                                  arguments.row.parent)))
        return
    rng = np.random.default_rng(0)
    print(f"{'hashes':>8}  {'candidates s':>12}  {'pairs':>7}  {'clusters s':>10}  {'ratio':>6}")
    baseline = None
    for count in (int(value) for value in arguments.counts.split(",") if value):
        hashes = _hashes(count, rng)
        pairs = reference.candidates(hashes)
        search = _median_seconds(lambda h=hashes: reference.candidates(h), arguments.repeat)
        cluster = _median_seconds(lambda p=pairs, c=count: reference.clusters(p, c),
                                  arguments.repeat)
        baseline = baseline or search
        print(f"{count:8d}  {search:12.2f}  {len(pairs):7d}  {cluster:10.3f}  "
              f"{search / baseline:6.1f}")
    _index_table(arguments)
    _check_timing()


def _index_table(arguments: argparse.Namespace) -> None:
    counts = [int(value) for value in arguments.index_counts.split(",") if value]
    if not counts:
        return
    largest = max(counts)
    random = np.stack([_hashes(largest, np.random.default_rng(seed)) for seed in (2, 4)], 1)
    sources = {"random": random} if "random" in arguments.kinds else {}
    if "parts" in arguments.kinds:
        sources["parts"] = _crowded(_part_hashes(arguments.parts), largest,
                                    np.random.default_rng(3))
    exhaustive = _median_seconds(
        lambda: reference.candidates(random[: arguments.exhaustive, 0],
                                     ties=random[: arguments.exhaustive, 1]), arguments.repeat)
    print(f"\nindex {neardup_index.DEFAULT_SCHEME} (certain within "
          f"{neardup_index.DEFAULT_SCHEME.certain} bits), D {DISTANCE}, cap {CAP}"
          f"{f', {RANK} of them ranked by signature' if RANK else ''}; "
          f"exhaustive at {arguments.exhaustive}: {exhaustive:.2f} s")
    print(f"{'hashes':>9}  {'kind':>6}  {'new':>6}  {'seconds':>8}  {'peak MB':>8}  "
          f"{'pairs':>9}  {'recall':>6}  {'ratio':>7}")
    with tempfile.TemporaryDirectory() as folder:
        for kind, hashes in sources.items():
            source = Path(folder) / f"{kind}.npy"
            np.save(source, hashes)
            rows = [(count, 0) for count in counts]
            if arguments.new:
                rows.append((largest, arguments.new))
            for count, new in rows:
                if new:
                    _child_row(arguments, source, count, new, "save")
                result = _child_row(arguments, source, count, new)
                print(f"{count:9d}  {kind:>6}  {new:6d}  {result['seconds']:8.2f}  "
                      f"{result['peak_mb']:8.0f}  {result['pairs']:9d}  "
                      f"{result['recall']:6.3f}  {exhaustive / result['seconds']:7.2f}",
                      flush=True)


def _check_timing() -> None:
    greys = [reduce(render(0, 0, part, shot)) for part in range(63)
             for shot in range(2 if part < 8 else 1)]
    median = neardup.fixture_median(greys[:63])
    views = [neardup.part_view(grey, median) for grey in greys]
    pairs = reference.candidates(np.array([reference.part_hash(g, median) for g in greys],
                                        np.uint64))
    timings = []
    for first, second in pairs:
        started = time.perf_counter_ns()
        neardup.check(views[first], views[second])
        timings.append(time.perf_counter_ns() - started)
    hash_timings = []
    for grey in greys:
        started = time.perf_counter_ns()
        reference.part_hash(grey, median)
        hash_timings.append(time.perf_counter_ns() - started)
    print(f"\ncheck: median {np.median(timings) / 1e6:.2f} ms a pair ({len(pairs)} candidates "
          f"of {len(greys)} shots on one fixture); "
          f"part hash: median {np.median(hash_timings) / 1e6:.2f} ms an image")


if __name__ == "__main__":
    main()
