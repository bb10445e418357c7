#!/usr/bin/env python3
"""Benchmark of the image path and of `shardsmith pack`, against baselines measured in the same run.

    scripts/bench_pack.py [--jpegs N] [--others N] [--reps R] [--cache DIR] [--json FILE]

On a cached corpus of realistic originals (8000x6000 JPEG q95 ~19 MB; 16-bit TIFF, PNG and
BMP of ~20 MB, made by scripts/make_sample_tree.py) it measures, one worker each:
  naive   a plain Pillow loop: full decode -> LANCZOS -> JPEG
  floor   decode only, the fastest decoder for the format (reduced DCT decode for JPEG)
  pack1   `shardsmith pack --workers 1` end to end (scan, shards, manifest included)
and then `shardsmith pack` with all cores, with and without its near-duplicate hashes
(``output.near_hashes``: the A/B of their cost).  Each measurement runs in a fresh process (so its
peak RSS is its own) and is the median of --reps repetitions.  Prints a table and the ratios,
checks the targets, and writes the same numbers as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from benchkit import (  # noqa: E402
    CORPUS_KINDS,
    ensure_corpus,
    files_of,
    link_subset,
    parser,
    write_report,
)

# ----------------------------------------------------------------------------- methods
# Each runs in a child process: `bench_pack.py --child METHOD SOURCE SIZE REPS WORKERS`.


def naive(path: Path, size: int) -> bytes:
    """What a training script does without shardsmith: full decode, LANCZOS, re-encode."""
    from PIL import Image

    image = Image.open(path).convert("RGB")
    scale = size / max(image.size)
    image = image.resize((round(image.width * scale), round(image.height * scale)), Image.LANCZOS)
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def decode_floors(path: Path, size: int) -> dict[str, float]:
    """Seconds for each decode-only candidate (reduced where the format allows)."""
    import cv2
    import numpy as np
    import simplejpeg
    from PIL import Image

    data = path.read_bytes()
    candidates = {}
    if data[:2] == b"\xff\xd8":
        width, height = Image.open(io.BytesIO(data)).size
        scale = size / max(width, height)
        need = (round(width * scale), round(height * scale))
        reduction = max(f for f in (1, 2, 4, 8) if width // f >= need[0] and height // f >= need[1])
        flag = {1: cv2.IMREAD_COLOR, 2: cv2.IMREAD_REDUCED_COLOR_2,
                4: cv2.IMREAD_REDUCED_COLOR_4, 8: cv2.IMREAD_REDUCED_COLOR_8}[reduction]

        def pillow_draft():
            image = Image.open(io.BytesIO(data))
            image.draft("RGB", need)
            image.load()

        candidates = {
            "simplejpeg": lambda: simplejpeg.decode_jpeg(data, min_width=need[0],
                                                         min_height=need[1]),
            "opencv_reduced": lambda: cv2.imdecode(np.frombuffer(data, np.uint8), flag),
            "pillow_draft": pillow_draft,
        }
    else:
        candidates = {
            "opencv": lambda: cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED),
            "pillow": lambda: Image.open(io.BytesIO(data)).load(),
        }
        if data[:4] in (b"II*\x00", b"MM\x00*"):
            import tifffile

            candidates["tifffile"] = lambda: tifffile.imread(io.BytesIO(data))
    timings = {}
    for name, decode in candidates.items():
        started = time.perf_counter()
        path.read_bytes()  # reading is part of every method
        decode()
        timings[name] = time.perf_counter() - started
    return timings


class TreeRss:
    """Peak resident memory of this process and all its descendants, sampled from /proc."""

    def __init__(self, interval: float = 0.2):
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _run(self, interval: float) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, sum(_rss(pid) for pid in _descendants(os.getpid())))
            self._stop.wait(interval)


def _descendants(pid: int) -> list[int]:
    """``pid`` and all its descendants, via /proc/PID/task/TID/children (cheap to read)."""
    found, frontier = [pid], [pid]
    while frontier:
        parent = frontier.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children") as handle:
                    children = [int(child) for child in handle.read().split()]
            except OSError:
                continue
            found += children
            frontier += children
    return found


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def own_peak_rss() -> int:
    """This process's high-water RSS in bytes (VmHWM: unlike ru_maxrss, not inherited)."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def warm_up(method: str, path: Path, size: int) -> None:
    """One untimed pass on one file: first-call costs (lazy library set-up, allocator growth)
    are paid once per process and are not what a per-image figure should measure."""
    if method == "naive":
        naive(path, size)
    elif method == "floor":
        decode_floors(path, size)
    elif method == "pack1":
        from shardsmith.config import ImageConfig
        from shardsmith.packing.imaging import convert

        convert(path.read_bytes(), ImageConfig(size=size))


def child(method: str, source: Path, size: int, reps: int, workers: int) -> dict:
    """Run one method ``reps`` times over the corpus; seconds per image (median) and memory."""
    files = files_of(source)
    per_image, extra = [], {}
    peak_tree = 0
    warm_up(method, files[0], size)
    if method == "naive":
        for _ in range(reps):
            started = time.perf_counter()
            out_bytes = [len(naive(path, size)) for path in files]
            per_image.append((time.perf_counter() - started) / len(files))
        extra["bytes_per_image"] = statistics.mean(out_bytes)
    elif method == "floor":
        runs: dict[str, list[float]] = {}
        for _ in range(reps):
            totals: dict[str, float] = {}
            for path in files:
                for name, seconds in decode_floors(path, size).items():
                    totals[name] = totals.get(name, 0.0) + seconds
            for name, seconds in totals.items():
                runs.setdefault(name, []).append(seconds / len(files))
        decoders = {name: statistics.median(values) for name, values in runs.items()}
        best = min(decoders, key=decoders.get)
        per_image = runs[best]
        extra["decoders_ms"] = {name: round(v * 1000, 1) for name, v in decoders.items()}
        extra["fastest"] = best
    else:  # pack1, packN, packN_unhashed
        from shardsmith import load_config, pack

        # Only a multi-process run needs the process-tree sampler (a thread of its own).
        sampler = TreeRss() if workers > 1 else contextlib.nullcontext()
        with tempfile.TemporaryDirectory() as scratch, sampler as tree:
            for rep in range(reps):
                config = load_config(None, {
                    "source.path": str(source), "output.path": f"{scratch}/out{rep}",
                    "image.size": size, "run.workers": workers, "run.quiet": True,
                    "source.labels": "none",
                    "output.near_hashes": not method.endswith("_unhashed"),
                })
                started = time.perf_counter()
                result = pack(config)
                per_image.append((time.perf_counter() - started) / len(files))
            totals = result.manifest.totals
            extra["bytes_per_image"] = totals.bytes_out / max(1, totals.packed)
        peak_tree = tree.peak if tree is not None else 0
    return {
        "seconds_per_image": statistics.median(per_image),
        "runs": per_image,
        "peak_rss_mb": round(max(own_peak_rss(), peak_tree) / 2**20, 1),
        **extra,
    }


# ----------------------------------------------------------------------------- quality


def psnr(a, b) -> float:
    import numpy as np

    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def reference(data: bytes, out_size: tuple[int, int]):
    """Slow reference: full decode at full precision, float area resample, RGB uint8-scale."""
    import cv2
    import numpy as np
    from PIL import Image

    if data[:2] == b"\xff\xd8":
        full = np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).astype(np.float32)
    else:
        full = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
        scale = 255.0 / 65535.0 if full.dtype == np.uint16 else 1.0
        full = full.astype(np.float32) * scale
        full = full[..., ::-1] if full.ndim == 3 else np.repeat(full[..., None], 3, axis=2)
    return cv2.resize(np.ascontiguousarray(full), out_size, interpolation=cv2.INTER_AREA)


def quality(source: Path, size: int, samples: int = 2) -> dict:
    """PSNR of the fast path against the reference, before and after JPEG encoding."""
    import numpy as np
    from PIL import Image

    from shardsmith.config import ImageConfig
    from shardsmith.packing.imaging import convert, decode

    config = ImageConfig(size=size)
    before, after, naive_after = [], [], []
    for path in files_of(source)[:samples]:
        data = path.read_bytes()
        pixels, _ = decode(data, config)
        ref = reference(data, pixels.shape[1::-1])
        pixels3 = pixels if pixels.ndim == 3 else np.repeat(pixels[..., None], 3, axis=2)
        before.append(psnr(pixels3, ref))
        encoded = np.asarray(Image.open(io.BytesIO(convert(data, config).jpeg)).convert("RGB"))
        after.append(psnr(encoded, ref))
        baseline = np.asarray(Image.open(io.BytesIO(naive(path, size))).convert("RGB"))
        naive_after.append(psnr(baseline, reference(data, baseline.shape[1::-1])))
    return {
        "psnr_fast_vs_reference_db": round(min(before), 1),
        "psnr_encoded_vs_reference_db": round(min(after), 1),
        "psnr_naive_encoded_vs_reference_db": round(min(naive_after), 1),
    }


def digest_costs(source: Path, reps: int = 5) -> dict[str, float]:
    """Milliseconds per original to fingerprint its bytes for change detection: XXH3-128 of
    every byte (``content``), the size and first and last 64 KiB (``edges``), and sha256 of
    every byte for comparison (medians of ``reps``, bytes already in memory)."""
    import hashlib

    from shardsmith.dataset.records import content_digest, edges_digest

    methods = {"content (XXH3-128)": content_digest, "edges (64 KiB x 2)": edges_digest,
               "sha256 (not used)": lambda data: hashlib.sha256(data).hexdigest()}
    blobs = [path.read_bytes() for path in files_of(source)]
    costs = {}
    for name, method in methods.items():
        runs = []
        for _ in range(reps):
            started = time.perf_counter()
            for data in blobs:
                method(data)
            runs.append((time.perf_counter() - started) / len(blobs))
        costs[name] = round(statistics.median(runs) * 1000, 2)
    return costs


def profile_one(path: Path, size: int, reps: int = 5) -> dict[str, float]:
    """Milliseconds per stage of the fast path for one original (medians of ``reps``)."""
    import numpy as np

    from shardsmith import decoders
    from shardsmith.config import ImageConfig
    from shardsmith.packing import imaging

    config = ImageConfig(size=size)
    stages: dict[str, list[float]] = {}

    def lap(name: str, started: float) -> float:
        now = time.perf_counter()
        stages.setdefault(name, []).append((now - started) * 1000)
        return now

    for _ in range(reps):
        started = time.perf_counter()
        data = path.read_bytes()
        started = lap("read file (page cache)", started)
        image = decoders.open_header(data)
        width, height = image.size
        geometry = imaging.plan_geometry(width, height, config)
        decoders.orientation(image)
        started = lap("header + orientation + plan", started)
        pixels, bgr = decoders.decode_pixels(data, image, *geometry.size)
        started = lap(f"decode (to {pixels.shape[1]}x{pixels.shape[0]})", started)
        pixels, _ = imaging.resize(pixels, geometry, width, height, config.background)
        pixels = imaging.to_output_color(pixels, bgr, config)
        started = lap("resize + colour", started)
        imaging.encode_jpeg(np.ascontiguousarray(pixels), config)
        lap("encode JPEG", started)
    return {name: round(statistics.median(values), 1) for name, values in stages.items()}


# ----------------------------------------------------------------------------- driver


def measure(method: str, source: Path, size: int, reps: int, workers: int) -> dict:
    """One child process for one pass of ``method`` (``reps`` passes inside the child)."""
    command = [sys.executable, __file__, "--child", method, str(source), str(size), str(reps),
               str(workers)]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def measure_interleaved(methods: dict[str, int], source: Path, size: int, reps: int) -> dict:
    """Run the methods in turn, one pass each, ``reps`` rounds (A B C A B C ...).

    Shared machines drift: interleaving exposes every method to the same noise, so the
    per-round ratios are trustworthy even when absolute times wander.
    """
    rounds: dict[str, list[dict]] = {method: [] for method in methods}
    for _ in range(reps):
        for method, workers in methods.items():
            rounds[method].append(measure(method, source, size, 1, workers))
    merged = {}
    for method, results in rounds.items():
        merged[method] = dict(results[-1])
        merged[method]["runs"] = [r["seconds_per_image"] for r in results]
        merged[method]["seconds_per_image"] = statistics.median(merged[method]["runs"])
        merged[method]["peak_rss_mb"] = max(r["peak_rss_mb"] for r in results)
        if "decoders_ms" in results[0]:
            merged[method]["decoders_ms"] = {
                name: round(statistics.median(r["decoders_ms"][name] for r in results), 1)
                for name in results[0]["decoders_ms"]
            }
    return merged


def paired_ratio(case: dict, numerator: str, denominator: str) -> float:
    """Median over rounds of the per-round speed ratio (denominator time / numerator time)."""
    return statistics.median(
        slow / fast
        for slow, fast in zip(case[denominator]["runs"], case[numerator]["runs"], strict=True)
    )


def library_versions() -> dict:
    import cv2
    import numpy
    import PIL
    import simplejpeg
    import tifffile
    from PIL import features

    return {
        "python": platform.python_version(),
        "pillow": PIL.__version__,
        "pillow_libjpeg_turbo": features.version("libjpeg_turbo"),
        "opencv": cv2.__version__,
        "opencv_jpeg": next((line.split(":", 1)[1].strip() for line in
                             cv2.getBuildInformation().splitlines()
                             if line.strip().startswith("JPEG:")), "?"),
        "simplejpeg": simplejpeg.__version__,
        "tifffile": tifffile.__version__,
        "numpy": numpy.__version__,
        "cores": os.cpu_count(),
    }


def main() -> None:
    arguments = parser(__doc__, "pack", cache=True)
    arguments.add_argument("--jpegs", type=int, default=8, help="JPEG originals per measurement")
    arguments.add_argument("--others", type=int, default=4, help="TIFF/PNG/BMP originals each")
    arguments.add_argument("--e2e-jpegs", type=int, default=96,
                           help="JPEG originals for the all-cores end-to-end run")
    arguments.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = arguments.parse_args()
    if args.child:
        method, source, size, reps, workers = args.child
        print(json.dumps(child(method, Path(source), int(size), int(reps), int(workers))))
        return

    cores = os.cpu_count() or 1
    cases = [("jpeg", 512, args.jpegs), ("jpeg", 1024, args.jpegs),
             ("tiff16", 512, args.others), ("png", 512, args.others), ("bmp", 512, args.others)]
    cases = [case for case in cases if case[2] > 0]  # --others 0: JPEG only
    rows, results = [], {"libraries": library_versions(), "cases": []}
    for kind, size, count in cases:
        # A corpus of exactly `count` files: the first `count` of the cached ones.
        full = ensure_corpus(args.cache, kind, count)
        source = args.cache / "subsets" / f"{kind}-{count}"
        link_subset(full, source, count)
        case = {"kind": kind, "size": size, "images": count}
        case.update(measure_interleaved({"naive": 1, "floor": 1, "pack1": 1}, source, size,
                                        args.reps))
        case["quality"] = quality(source, size)
        case["digest_ms"] = digest_costs(source)
        results["cases"].append(case)
        rows.append(case)
        print_case(case)

    e2e_source = args.cache / "subsets" / f"jpeg-{args.e2e_jpegs}"
    link_subset(ensure_corpus(args.cache, "jpeg", args.e2e_jpegs), e2e_source, args.e2e_jpegs)
    e2e = measure_interleaved({"pack1": 1, "packN": cores, "packN_unhashed": cores}, e2e_source,
                              512, args.reps)
    results["end_to_end"] = {"images": args.e2e_jpegs, "cores": cores, **e2e}

    print_table(rows, results["end_to_end"])
    jpeg_original = files_of(args.cache / "subsets" / f"jpeg-{args.jpegs}")[0]
    results["profile_jpeg_512"] = profile_one(jpeg_original, 512)
    print(f"\nwhere the milliseconds go, one {CORPUS_KINDS['jpeg'][1]}x{CORPUS_KINDS['jpeg'][2]} "
          "JPEG -> 512 px:")
    for name, milliseconds in results["profile_jpeg_512"].items():
        print(f"  {name:<36}{milliseconds:>8.1f} ms")
    results["targets"] = check_targets(rows, results["end_to_end"])
    print(f"\nlibraries: {json.dumps(results['libraries'])}")
    write_report(args.json, results)


def print_case(case: dict) -> None:
    print(f"measured {case['kind']} @ {case['size']}px: " + ", ".join(
        f"{m} {case[m]['seconds_per_image'] * 1000:.0f} ms" for m in ("naive", "floor", "pack1")),
        file=sys.stderr)


def print_table(rows: list[dict], e2e: dict) -> None:
    header = (f"{'case':<16}{'method':<8}{'ms/img':>9}{'img/s/core':>12}{'peak RSS':>10}"
              f"{'out B/img':>11}{'PSNR dB':>9}")
    print(header)
    print("-" * len(header))
    for case in rows:
        label = f"{case['kind']} {case['size']}px"
        q = case["quality"]
        for method in ("naive", "floor", "pack1"):
            m = case[method]
            seconds = m["seconds_per_image"]
            out = f"{m['bytes_per_image']:,.0f}" if "bytes_per_image" in m else "-"
            quality_db = {"naive": q["psnr_naive_encoded_vs_reference_db"],
                          "pack1": q["psnr_encoded_vs_reference_db"]}.get(method, "-")
            print(f"{label:<16}{method:<8}{seconds * 1000:>9.0f}{1 / seconds:>12.2f}"
                  f"{m['peak_rss_mb']:>8.0f}MB{out:>11}{quality_db!s:>9}")
        floor = case["floor"]
        print(f"{'':<16}decoders: " + ", ".join(f"{k} {v} ms" for k, v in
                                                 floor["decoders_ms"].items())
              + f"; fast path before encoding {q['psnr_fast_vs_reference_db']} dB")
        versus_naive = paired_ratio(case, "pack1", "naive")
        share_of_floor = paired_ratio(case, "pack1", "floor")
        print(f"{'':<16}ratios (paired medians): pack1 is {versus_naive:.2f}x the naive loop, "
              f"at {share_of_floor:.0%} of the decode floor")
    print("\nchange detection, ms per original to fingerprint its bytes (share of pack1):")
    for case in rows:
        if case["size"] != 512:
            continue
        pack_ms = case["pack1"]["seconds_per_image"] * 1000
        print(f"  {case['kind']:<8}" + "   ".join(
            f"{name} {ms:.2f} ms ({ms / pack_ms:.1%})" for name, ms in case["digest_ms"].items()))
    p1, pn = e2e["pack1"], e2e["packN"]
    print(f"\nend to end, {e2e['images']} JPEG originals -> 512px shards:")
    print(f"  pack --workers 1       {1 / p1['seconds_per_image']:6.2f} images/s  "
          f"peak RSS {p1['peak_rss_mb']:.0f} MB")
    print(f"  pack --workers {e2e['cores']:<2}      {1 / pn['seconds_per_image']:6.2f} images/s  "
          f"peak RSS (process tree) {pn['peak_rss_mb']:.0f} MB  "
          f"scaling {paired_ratio(e2e, 'packN', 'pack1'):.2f}x")
    unhashed = e2e["packN_unhashed"]
    print(f"  ... near_hashes: false {1 / unhashed['seconds_per_image']:6.2f} images/s  "
          f"the hashes cost {_hash_cost(e2e):.1%} (paired median)")


def _hash_cost(e2e: dict) -> float:
    """What the near-duplicate hashes add to a pack's time: paired median of the rounds."""
    return 1 / paired_ratio(e2e, "packN", "packN_unhashed") - 1


def check_targets(rows: list[dict], e2e: dict) -> list[dict]:
    def case(kind, size):
        return next((r for r in rows if r["kind"] == kind and r["size"] == size), None)

    def speedup(c, method, baseline):
        return paired_ratio(c, method, baseline)

    checks = []

    def check(name, value, target, unit="x"):
        checks.append({"target": name, "value": round(value, 3), "needed": target,
                       "met": bool(value >= target)})
        print(f"  {'ok  ' if value >= target else 'MISS'} {name}: {value:.2f}{unit} "
              f"(target >= {target}{unit})")

    print("\ntargets:")
    j512, j1024 = case("jpeg", 512), case("jpeg", 1024)
    check("jpeg 512px: pack1 vs naive", speedup(j512, "pack1", "naive"), 5)
    check("jpeg 512px: pack1 share of decode floor", speedup(j512, "pack1", "floor"), 0.9)
    check("jpeg 1024px: pack1 vs naive", speedup(j1024, "pack1", "naive"), 4)
    t, p, b = case("tiff16", 512), case("png", 512), case("bmp", 512)
    if t and p and b:  # measured unless --others 0
        check("16-bit tiff: pack1 vs naive", speedup(t, "pack1", "naive"), 3)
        check("bmp: pack1 vs naive", speedup(b, "pack1", "naive"), 2.5)
        check("png: pack1 share of decode floor", speedup(p, "pack1", "floor"), 0.85)
    for c in rows:
        check(f"{c['kind']} {c['size']}px: fast path PSNR before encoding",
              c["quality"]["psnr_fast_vs_reference_db"], 40, " dB")
    cores = e2e["cores"]
    needed = 1.8 if cores == 2 else 0.75 * cores
    check(f"{cores} workers vs 1, end to end", paired_ratio(e2e, "packN", "pack1"), needed)
    if cores == 2:
        check("pack --workers 2 end to end", 1 / e2e["packN"]["seconds_per_image"], 5.5,
              " img/s")
    cost = _hash_cost(e2e)
    checks.append({"target": "near-duplicate hashes cost <= 3%", "value": round(cost, 4),
                   "needed": 0.03, "met": bool(cost <= 0.03)})
    print(f"  {'ok  ' if cost <= 0.03 else 'MISS'} near-duplicate hashes: {cost:+.1%} of the "
          "pack's time (target <= 3%)")
    tree_peak = e2e["packN"]["peak_rss_mb"]
    checks.append({"target": "process tree peak RSS < 1500 MB", "value": tree_peak,
                   "needed": 1500, "met": bool(tree_peak < 1500)})
    print(f"  {'ok  ' if tree_peak < 1500 else 'MISS'} process tree peak RSS: "
          f"{tree_peak:.0f} MB (target < 1500 MB)")
    return checks


if __name__ == "__main__":
    main()
