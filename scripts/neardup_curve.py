#!/usr/bin/env python3
"""Measure candidate near-duplicate hashes and a second-stage check on a re-shot corpus.

    scripts/neardup_curve.py TREE [--fixtures 3 --parts 2000 --reshots 200 --seed 0]
                             [--cap 8] [--threshold T] [--sample N]
                             [--pipeline [--no-check]]

With ``--pipeline`` it measures shardsmith/neardup/hashing.py instead (``measure_pipeline``); what
follows is the first measurement, kept for its tables. TREE is made by scripts/make_reshots.py
with the same numbers (made here when its truth.csv is missing). Each image is reduced as the
pack's worker holds it (decode at 1/2 DCT scale, area resize to 256 px on the long side,
grey), then hashed by each candidate:

* ``dct``: the 8x8 lowest DCT coefficients of a 32x32 block mean of the grey image, each bit
  "above the median of the 64";
* ``dct-fixture``: the same of the image less its fixture's median image (pixel-wise median of
  ``--sample`` images of that fixture), the median scaled to the image's exposure first;
* ``edge``: the same of the gradient magnitude (|Sobel x| + |Sobel y|) of the grey image;
* ``edge-fixture``: the gradient magnitude of the image less its fixture's median;
* ``dct-centred`` / ``edge-centred``: the same of a WINDOW (160 px) square of the image less
  its fixture, centred on the centroid of that difference's magnitude (integer moments): the
  part wherever it lies on the fixture.

The hash is integer arithmetic from the uint8 pixels on: block sums (shifted under 2**24),
an integer DCT basis (round(2**12 x cosine)) multiplied in int64 (|values| < 2**59: no
overflow), and a comparison with the median as ``2 x c > v[31] + v[32]`` of the sorted 64;
so the bits do not depend on the CPU's float rounding or summation order. Each hash has 32
bits set, so distances are even.

For each hash: Hamming distances of the re-shot pairs against all pairs of different parts of
one fixture; recall and precision of "distance <= D"; then the pipeline the pack would run:
the ``--cap`` nearest hashes of each sample within D are checked (``check_score``: 64x64
blurred grey thumbnails of the window around the part, registered by phase correlation then
ECC affine, the largest 8x8-block mean residual after a gain/offset fit); pairs under the
threshold (chosen on this corpus for the best F1 of the check over all candidates unless
``--threshold`` is given) are joined by connected components, and recall and precision are
of the co-cluster relation against the truth. Times are of one check, in this process.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import neardup_reference as reference  # noqa: E402
from reshots import read_truth, write_tree  # noqa: E402

from shardsmith.neardup import hashing as neardup  # noqa: E402

LONG_SIDE = 256
HASHES = ("dct", "dct-fixture", "edge", "edge-fixture", "dct-centred", "edge-centred")
WINDOW = 160  # px of the 256 px image around the part's centroid: 32 blocks of 5
MAX_DISTANCE = 24
CHOSEN_HASH = "edge-centred"  # see docs/know-your-data.md, "Near-duplicates: the measurement"
THUMB = (64, 64)
BLOCK = 8
BLUR = 1.0  # sigma in thumbnail pixels: JPEG and texture aliasing out, holes kept


def reduce(jpeg: bytes) -> np.ndarray:
    """The grey uint8 image the pack's worker holds for a 512 px original at 256 px."""
    pixels = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_REDUCED_COLOR_2)
    height, width = pixels.shape[:2]
    if max(width, height) != LONG_SIDE:
        scale = LONG_SIDE / max(width, height)
        pixels = cv2.resize(pixels, (round(width * scale), round(height * scale)),
                            interpolation=cv2.INTER_AREA)
    return cv2.cvtColor(pixels, cv2.COLOR_BGR2GRAY)


def _dct_basis(size: int = 32, rows: int = 8) -> np.ndarray:
    k, n = np.mgrid[0:rows, 0:size]
    basis = np.cos(np.pi * (2 * n + 1) * k / (2 * size))
    return np.round(basis * 4096).astype(np.int64)


DCT_BASIS = _dct_basis()


def block_sums(image: np.ndarray, size: int = 32) -> np.ndarray:
    """Integer sums of ``size`` x ``size`` equal blocks (the rest of rows/columns dropped)."""
    height, width = image.shape
    bh, bw = height // size, width // size
    trimmed = image[: bh * size, : bw * size].astype(np.int64)
    return trimmed.reshape(size, bh, size, bw).sum(axis=(1, 3))


def dct_hash(image: np.ndarray) -> int:
    """64-bit DCT hash of an integer image, integer arithmetic throughout."""
    blocks = block_sums(image)
    blocks = blocks >> max(0, int(np.abs(blocks).max()).bit_length() - 24)  # |x| < 2**24
    coefficients = (DCT_BASIS @ blocks @ DCT_BASIS.T).ravel()
    ordered = np.sort(coefficients)
    bits = 2 * coefficients > ordered[31] + ordered[32]
    return int(np.packbits(bits).view(">u8")[0])


def fixture_median(greys: list[np.ndarray]) -> np.ndarray:
    """Pixel-wise median (an odd count: an exact uint8) of a fixture's images."""
    stack = np.stack(greys[: len(greys) - (len(greys) + 1) % 2])
    return np.sort(stack, axis=0)[len(stack) // 2]


def less_fixture(grey: np.ndarray, median: np.ndarray) -> np.ndarray:
    """grey - median x (the image's exposure relative to the median), in integers: the
    exposure is the ratio of the two sums, so both terms are scaled by one of them."""
    image, reference = grey.astype(np.int64), median.astype(np.int64)
    image_sum, reference_sum = int(image.sum()), int(reference.sum())
    scale = max(1, reference_sum // 4096)
    return (image * (reference_sum // scale) - reference * (image_sum // scale)) // 256


def gradient(image: np.ndarray) -> np.ndarray:
    """|d/dx| + |d/dy| with integer 3x3 Sobel kernels, edges replicated, in int64 (of any
    integer image: ``neardup.gradient`` takes uint8)."""
    padded = np.pad(image.astype(np.int64), 1, mode="edge")
    gx = (padded[:-2, 2:] + 2 * padded[1:-1, 2:] + padded[2:, 2:]
          - padded[:-2, :-2] - 2 * padded[1:-1, :-2] - padded[2:, :-2])
    gy = (padded[2:, :-2] + 2 * padded[2:, 1:-1] + padded[2:, 2:]
          - padded[:-2, :-2] - 2 * padded[:-2, 1:-1] - padded[:-2, 2:])
    return np.abs(gx) + np.abs(gy)


def part_centre(residual: np.ndarray) -> tuple[int, int]:
    """(y, x): the centroid of the residual's magnitude, in integer moments."""
    weight = np.abs(residual)
    total = max(1, int(weight.sum()))
    ys, xs = np.indices(residual.shape)
    return int((weight * ys).sum()) // total, int((weight * xs).sum()) // total


def centred(image: np.ndarray, centre: tuple[int, int], mode: str = "constant") -> np.ndarray:
    """The WINDOW x WINDOW part of ``image`` centred on ``centre`` (padded by ``mode``)."""
    padded = np.pad(image, WINDOW // 2, mode=mode)
    return padded[centre[0] : centre[0] + WINDOW, centre[1] : centre[1] + WINDOW]


def hashes_of(grey: np.ndarray, median: np.ndarray) -> dict[str, int]:
    """Every candidate hash of one reduced grey image."""
    residual = less_fixture(grey, median)
    window = centred(residual, part_centre(residual))
    return {"dct": dct_hash(grey), "dct-fixture": dct_hash(residual),
            "edge": dct_hash(gradient(grey)), "edge-fixture": dct_hash(gradient(residual)),
            "dct-centred": dct_hash(window), "edge-centred": dct_hash(gradient(window))}


def thumbnail(grey: np.ndarray, median: np.ndarray) -> np.ndarray:
    """The float32 64x64 thumbnail the check compares: the grey WINDOW around the part's
    centroid, area-reduced and blurred."""
    window = centred(grey, part_centre(less_fixture(grey, median)), mode="edge")
    thumb = cv2.resize(window.astype(np.float32), THUMB, interpolation=cv2.INTER_AREA)
    return cv2.GaussianBlur(thumb, (0, 0), BLUR)


def check_score(first: np.ndarray, second: np.ndarray) -> float:
    """How unlike two thumbnails are once registered (phase correlation, then an ECC affine
    warp): the largest 8x8-block mean absolute residual after one gain/offset fit, over the
    first's spread; inf where ECC fails or the warp leaves under half the thumbnail."""
    window = cv2.createHanningWindow(THUMB, cv2.CV_32F)
    (shift_x, shift_y), _ = cv2.phaseCorrelate(first, second, window)
    warp = np.array([[1, 0, shift_x], [0, 1, shift_y]], np.float32)
    criteria = (cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, 40, 1e-4)
    try:
        _, warp = cv2.findTransformECC(first, second, warp, cv2.MOTION_AFFINE, criteria,
                                       None, 3)
    except cv2.error:
        return float("inf")
    flags = cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP
    moved = cv2.warpAffine(second, warp, THUMB, flags=flags)
    valid = cv2.warpAffine(np.ones_like(second), warp, THUMB, flags=flags) > 0.99
    if valid.sum() < 0.5 * valid.size:
        return float("inf")
    a, b = first[valid], moved[valid]
    design = np.stack([b, np.ones_like(b)], axis=1)
    (gain, offset), *_ = np.linalg.lstsq(design, a, rcond=None)
    residual = np.where(valid, np.abs(first - (gain * moved + offset)), 0)
    rows, columns = THUMB[1] // BLOCK, THUMB[0] // BLOCK
    counts = valid.reshape(rows, BLOCK, columns, BLOCK).sum(axis=(1, 3))
    sums = residual.reshape(rows, BLOCK, columns, BLOCK).sum(axis=(1, 3))
    full = counts >= BLOCK * BLOCK // 2
    return float((sums[full] / counts[full]).max()) / (float(np.std(first)) + 1e-6)


def popcount(values: np.ndarray) -> np.ndarray:
    """Set bits of each uint64 (NumPy 2's bitwise_count, else a byte table)."""
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(values).astype(np.int64)
    table = np.array([bin(i).count("1") for i in range(256)], np.int64)
    return table[values.view(np.uint8).reshape(*values.shape, 8)].sum(axis=-1)


def nearest(hashes: np.ndarray, cap: int) -> tuple[np.ndarray, np.ndarray]:
    """For each hash its ``cap`` nearest others (index ties by index): (indices, distances)."""
    count = len(hashes)
    indices = np.empty((count, cap), np.int64)
    distances = np.empty((count, cap), np.int64)
    for start in range(0, count, 512):
        block = popcount(hashes[start:start + 512, None] ^ hashes[None, :])
        block[np.arange(len(block)), np.arange(start, start + len(block))] = 99
        order = np.argsort(block, axis=1, kind="stable")[:, :cap]
        indices[start:start + 512] = order
        distances[start:start + 512] = np.take_along_axis(block, order, axis=1)
    return indices, distances


def different_part_histogram(hashes: np.ndarray, fixtures: np.ndarray,
                             parts: np.ndarray) -> np.ndarray:
    """Counts of distances 0..64 over all pairs of different parts on one fixture."""
    histogram = np.zeros(65, np.int64)
    for start in range(0, len(hashes), 512):
        stop = min(len(hashes), start + 512)
        block = popcount(hashes[start:stop, None] ^ hashes[None, :])
        keep = (fixtures[start:stop, None] == fixtures[None, :]) \
            & (parts[start:stop, None] != parts[None, :]) \
            & (np.arange(start, stop)[:, None] < np.arange(len(hashes))[None, :])
        histogram += np.bincount(block[keep], minlength=65)
    return histogram


def co_cluster(pairs: list[tuple[int, int]], count: int, truth: set[tuple[int, int]]
               ) -> tuple[float, float]:
    """Recall and precision of "in one connected component" against the true pairs."""
    groups, cluster_of = reference.clusters(pairs, count), {}
    for number, members in enumerate(groups):
        cluster_of.update(dict.fromkeys(members, number))
    predicted = sum(len(members) * (len(members) - 1) // 2 for members in groups)
    found = sum(i in cluster_of and cluster_of.get(j) == cluster_of[i] for i, j in truth)
    return found / len(truth), (found / predicted if predicted else 1.0)


def measure(root: Path, sample: int) -> dict:
    """Hashes, thumbnails and truth of every image of the tree."""
    rows = read_truth(root / "truth.csv")
    greys_by_fixture: dict[int, list[np.ndarray]] = {}
    for path, _, fixture in rows:  # the median from the first images of each fixture
        if len(greys_by_fixture.setdefault(fixture, [])) < sample:
            greys_by_fixture[fixture].append(reduce((root / path).read_bytes()))
    medians = {f: fixture_median(greys) for f, greys in greys_by_fixture.items()}
    hashes = {name: [] for name in HASHES}
    thumbs = []
    for path, _, fixture in rows:
        grey = reduce((root / path).read_bytes())
        for name, value in hashes_of(grey, medians[fixture]).items():
            hashes[name].append(value)
        thumbs.append(thumbnail(grey, medians[fixture]))
    part_ids = {part: i for i, part in enumerate(sorted({part for _, part, _ in rows}))}
    return {
        "hashes": {name: np.array(values, np.uint64) for name, values in hashes.items()},
        "thumbs": thumbs,
        "fixtures": np.array([fixture for _, _, fixture in rows]),
        "parts": np.array([part_ids[part] for _, part, _ in rows]),
    }


def measure_pipeline(root: Path, sample: int, cap: int, checked: bool = True) -> None:
    """The pipeline of ``shardsmith.neardup.hashing`` on the tree: per fixture (inspect takes
    it from the folder) its background from the first ``sample`` images, each image's two
    part hashes and its view, the ``cap`` nearest of either hash within the largest D as
    candidates, every candidate checked; then recall and precision of the co-cluster relation
    by distance (the nearer of the two hashes) and threshold, at the cap and at half of it."""
    rows = read_truth(root / "truth.csv")
    part_ids = {part: i for i, part in enumerate(sorted({part for _, part, _ in rows}))}
    parts = np.array([part_ids[part] for _, part, _ in rows])
    by_part: dict[int, list[int]] = {}
    for i, part in enumerate(parts.tolist()):
        by_part.setdefault(part, []).append(i)
    truth = {tuple(m) for m in by_part.values() if len(m) == 2}
    started = time.perf_counter()
    hashes = np.zeros((len(rows), 2), np.uint64)
    views: list[np.ndarray] = [np.empty(0)] * len(rows)
    capped: dict[int, set[tuple[int, int]]] = {cap // 2: set(), cap: set()}
    fixture_of = np.array([fixture for *_, fixture in rows])
    for fixture in sorted(set(fixture_of.tolist())):
        members = np.flatnonzero(fixture_of == fixture).tolist()
        greys = [reduce((root / rows[i][0]).read_bytes()) for i in members]
        median = neardup.fixture_median(greys[:sample])
        for i, grey in zip(members, greys, strict=True):
            hashes[i] = neardup.part_hashes(grey, median)[:2]
            views[i] = neardup.part_view(grey, median)
        here = {pair for pair in truth if fixture_of[pair[0]] == fixture}
        found = []
        for count, kept in capped.items():
            for column in (0, 1, slice(None)):
                local = reference.candidates(hashes[members, column], MAX_DISTANCE, count)
                pairs = {(members[i], members[j]) for i, j in local}
                found.append(f"{sum(p in pairs for p in here) / len(here):.3f}")
            kept.update(pairs)
        print(f"fixture {fixture}: {len(members)} images; re-shots among the candidates of "
              f"hash 1 / hash 2 / either: {' / '.join(found[:3])} (cap {cap // 2}), "
              f"{' / '.join(found[3:])} (cap {cap})", flush=True)
    pairs = sorted(capped[cap])
    print(f"{len(rows)} images, {len(part_ids)} parts, hashed in "
          f"{time.perf_counter() - started:.0f} s; {len(pairs)} candidates (cap {cap}, "
          f"D <= {MAX_DISTANCE}), {len(pairs) / len(rows):.1f} a sample; "
          f"{len(capped[cap // 2])} at cap {cap // 2}", flush=True)
    reshot = popcount(np.array([hashes[i] ^ hashes[j] for i, j in sorted(truth)])).min(axis=1)
    print(f"re-shot distance (nearer hash) p50/p95/max "
          f"{np.percentile(reshot, [50, 95, 100]).astype(int)}")
    if not checked:
        return
    checks, timings = {}, []
    for i, j in pairs:
        tick = time.perf_counter_ns()
        checks[i, j] = neardup.check(views[i], views[j])
        timings.append(time.perf_counter_ns() - tick)
    per_pair = float(np.median(timings)) / 1e6
    print(f"check: median {per_pair:.1f} ms a pair, {per_pair * len(pairs) / len(rows):.0f} ms "
          f"a sample at cap {cap}, {per_pair * len(capped[cap // 2]) / len(rows):.0f} ms at "
          f"{cap // 2}")
    for fixture in sorted(set(fixture_of.tolist())):
        here = [checks[p] for p in truth if fixture_of[p[0]] == fixture and p in checks]
        missed = sum(fixture_of[p[0]] == fixture for p in truth) - len(here)
        print(f"fixture {fixture}: re-shots joined (score <= {neardup.DEFAULT_THRESHOLD} or one "
              f"surface): {np.mean([c.joins() for c in here] + [False] * missed):.3f} "
              f"(of those among the candidates: {np.mean([c.joins() for c in here]):.3f})")
    others = np.array(sorted(c.score for p, c in checks.items() if p not in truth))
    print(f"different-part candidates scoring under 0.5 / 1.0 / 2.0: "
          f"{[int((others < cut).sum()) for cut in (0.5, 1.0, 2.0)]} of {len(others)}; of one "
          f"surface: {sum(c.one_surface for p, c in checks.items() if p not in truth)}")
    distance = dict(zip(pairs, popcount(np.array([hashes[i] ^ hashes[j] for i, j in pairs]))
                        .min(axis=1).tolist(), strict=True))
    thresholds = (0.5, 0.7, 1.0, 1.5, 2.0, 3.0)
    for count, kept in capped.items():
        print(f"cap {count}: cluster recall / precision by D (rows) and threshold (columns)")
        print(" D  " + "  ".join(f"{f't = {t}':>13}" for t in thresholds))
        for limit in range(10, MAX_DISTANCE + 1, 2):
            cells = []
            for cut in thresholds:
                verified = [p for p in kept if distance[p] <= limit and checks[p].joins(cut)]
                recall, precision = co_cluster(verified, len(rows), truth)
                cells.append(f"{recall:.3f} / {precision:.3f}")
            print(f"{limit:2d}  " + "  ".join(f"{c:>13}" for c in cells), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    parser.add_argument("tree", type=Path)
    parser.add_argument("--fixtures", type=int, default=3)
    parser.add_argument("--parts", type=int, default=2000)
    parser.add_argument("--reshots", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cap", type=int, default=8, help="candidates checked per sample")
    parser.add_argument("--threshold", type=float, help="check score under which a pair is one")
    parser.add_argument("--sample", type=int,
                        help="images per fixture background (63; 255 with --pipeline)")
    parser.add_argument("--hashes", default=",".join(HASHES))
    parser.add_argument("--pipeline", action="store_true",
                        help="measure shardsmith/neardup/hashing.py's hash, check and clusters")
    parser.add_argument("--no-check", action="store_true",
                        help="with --pipeline: the hash and its candidates only")
    arguments = parser.parse_args()
    if not (arguments.tree / "truth.csv").exists():
        write_tree(arguments.tree, arguments.fixtures, arguments.parts, arguments.reshots,
                   arguments.seed)
    if arguments.pipeline:
        measure_pipeline(arguments.tree, arguments.sample or 255, arguments.cap,
                         checked=not arguments.no_check)
        return
    started = time.perf_counter()
    data = measure(arguments.tree, arguments.sample or 63)
    parts, fixtures, thumbs = data["parts"], data["fixtures"], data["thumbs"]
    count = len(parts)
    print(f"{count} images, {len(set(parts.tolist()))} parts, "
          f"measured in {time.perf_counter() - started:.0f} s")
    by_part: dict[int, list[int]] = {}
    for i, part in enumerate(parts.tolist()):
        by_part.setdefault(part, []).append(i)
    truth = {tuple(sorted(m)) for m in by_part.values() if len(m) == 2}
    first, second = np.array([p for p, _ in truth]), np.array([q for _, q in truth])
    for name in arguments.hashes.split(","):
        hashes = data["hashes"][name]
        reshot = popcount(hashes[first] ^ hashes[second])
        others = different_part_histogram(hashes, fixtures, parts)
        cumulative = np.cumsum(others)
        print(f"\n== {name}: re-shot pairs at distance p5/p50/p95/max "
              f"{np.percentile(reshot, [5, 50, 95, 100]).astype(int).tolist()}; different "
              f"parts: min {int(np.argmax(others > 0))}, 0.1% at "
              f"{int(np.searchsorted(cumulative, 0.001 * cumulative[-1]))}, median at "
              f"{int(np.searchsorted(cumulative, 0.5 * cumulative[-1]))}")
        indices, distances = nearest(hashes, arguments.cap)
        candidates = sorted({tuple(sorted((i, int(j)))) for i in range(count)
                             for j, d in zip(indices[i], distances[i], strict=True)
                             if d <= MAX_DISTANCE})
        candidate_distances = {(i, j): int(popcount(np.array([hashes[i] ^ hashes[j]]))[0])
                               for i, j in candidates}
        scores, timings = {}, []
        for i, j in candidates:
            tick = time.perf_counter_ns()
            scores[i, j] = check_score(thumbs[i], thumbs[j])
            timings.append(time.perf_counter_ns() - tick)
        threshold = arguments.threshold
        if threshold is None:  # best F1 of the check over all candidates
            ranked = sorted((s, (i, j) in truth) for (i, j), s in scores.items())
            hits = np.cumsum([is_pair for _, is_pair in ranked])
            f1 = 2 * hits / (np.arange(1, len(ranked) + 1) + len(truth))
            best = int(np.argmax(f1))
            upper = ranked[best + 1][0] if best + 1 < len(ranked) else ranked[best][0] * 2
            threshold = (ranked[best][0] + upper) / 2
        reachable = sum(pair in scores for pair in truth) / len(truth)
        print(f"{reachable:.3f} of re-shots among the candidates; "
              f"check: {len(candidates)} pairs, median {np.median(timings) / 1000:.0f} us "
              f"a pair, threshold {threshold:.3f}")
        print(" D  hash recall  hash precision   checked  cluster recall  cluster precision")
        for limit in range(0, MAX_DISTANCE + 1, 2):  # 32 bits set in each: distances are even
            hash_recall = float((reshot <= limit).mean())
            found = int((reshot <= limit).sum())
            hash_precision = found / (found + int(cumulative[limit])) if found else 1.0
            within = [pair for pair in candidates if candidate_distances[pair] <= limit]
            verified = [pair for pair in within if scores[pair] <= threshold]
            recall, precision = co_cluster(verified, count, truth)
            print(f"{limit:2d}  {hash_recall:11.3f}  {hash_precision:14.3f}  {len(within):8d}"
                  f"  {recall:14.3f}  {precision:17.3f}")
        limit = next(d for d in range(65) if (reshot <= d).mean() >= 0.95)
        within = [pair for pair in candidates if candidate_distances[pair] <= limit]
        print(f"at D = {limit} (95% of re-shots within), by the check's threshold:")
        print("threshold  verified  cluster recall  cluster precision")
        for cut in (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0):
            verified = [pair for pair in within if scores[pair] <= cut]
            recall, precision = co_cluster(verified, count, truth)
            print(f"{cut:9.1f}  {len(verified):8d}  {recall:14.3f}  {precision:17.3f}")


if __name__ == "__main__":
    main()
