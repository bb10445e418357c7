#!/usr/bin/env python3
"""Driver memory per file on big trees, for `make bench`: pack, an increment of +1%, and the
no-op rerun, on trees of N tiny JPEGs against the same on 1,000 files (the base).

    scripts/bench_scale.py [--files 20000,200000,1000000]

The trees are 3 classes of folders of 3,000 files (16x16 JPEGs, distinct contents), made once
in .cache/bench/.  Each run is a fresh process that packs in-process with 2 workers at --size
32 and reports its own peak RSS (the driver only: workers are separate processes).  Prints, for
every N, the time and peak RSS of each run, (peak(N) - peak(1k)) / (N - 1k) in bytes per file
with PASS or MISS against the target of 300 B, and the projection to 10 million files.

The peak is the process's own high-water mark (``VmHWM``), not ``ru_maxrss``: after a
``vfork`` and ``exec`` (how ``subprocess`` starts a child) ``ru_maxrss`` is at least the
parent's peak, so a benchmark process that once held a big tree listing lifted every later
child's number.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import simplejpeg

sys.path.insert(0, str(Path(__file__).parent))
from benchkit import BUILD, CACHE, REPO, parser, write_report  # noqa: E402

PER_FOLDER = 3000
BASE_FILES = 1000
TARGET_BYTES_PER_FILE = 300
RUNS = ("pack", "no-op rerun", "increment +1%")

RUN = """
import json, resource, sys, time
from shardsmith import load_config, pack
started = time.perf_counter()
result = pack(load_config(None, {"source.path": sys.argv[1], "output.path": sys.argv[2],
                                 "image.size": 32, "run.workers": 2, "run.quiet": True}))
seconds = time.perf_counter() - started
peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    with open("/proc/self/status") as status:
        peak_kb = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
except (OSError, StopIteration):
    pass  # not Linux: ru_maxrss, which may include the parent's peak
print(json.dumps({"seconds": seconds, "peak_mb": peak_kb / 1024,
                  "up_to_date": result.up_to_date, "packed": result.manifest.totals.packed}))
"""


def make_tree(root: Path, files: int, start: int = 0) -> None:
    """``files`` distinct 16x16 JPEGs, numbered from ``start``, 3,000 to a folder."""
    rng = np.random.default_rng(start)
    base = rng.integers(0, 256, (16, 16, 3), np.uint8)
    for number in range(start, start + files):
        folder = root / "abc"[number % 3] / f"lot{number // (3 * PER_FOLDER):05d}"
        if number % (3 * PER_FOLDER) < 3:
            folder.mkdir(parents=True, exist_ok=True)
        pixels = base.copy()
        pixels[0, :4] = np.frombuffer(number.to_bytes(12, "big"), np.uint8).reshape(4, 3)
        (folder / f"img{number:08d}.jpg").write_bytes(
            simplejpeg.encode_jpeg(pixels, quality=90, colorsubsampling="444"))


def remove_increment(root: Path, files: int, extra: int) -> None:
    """Back to the cached tree: the increment's files, found by number (no walk of the tree,
    whose listing would grow this process)."""
    for number in range(files, files + extra):
        folder = root / "abc"[number % 3] / f"lot{number // (3 * PER_FOLDER):05d}"
        (folder / f"img{number:08d}.jpg").unlink(missing_ok=True)


def run(source: Path, output: Path) -> dict:
    result = subprocess.run([sys.executable, "-c", RUN, str(source), str(output)], check=True,
                            capture_output=True, text=True, cwd=REPO)
    return json.loads(result.stdout.strip().splitlines()[-1])


def ensure_tree(root: Path, files: int) -> Path:
    marker = root / ".complete"
    if not marker.exists():
        shutil.rmtree(root, ignore_errors=True)
        started = time.perf_counter()
        print(f"making {files:,} files in {root} ...", file=sys.stderr, flush=True)
        make_tree(root, files)
        marker.write_text(str(files))
        print(f"  {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return root


def measure(files: int, build: Path) -> dict[str, dict]:
    """The three runs on a tree of ``files``: pack, no-op rerun, increment of +1%."""
    source = ensure_tree(CACHE / f"scale-{files}", files)
    output = build / f"out-{files}"
    rows = {}
    print(f"{files:,} files: pack ...", file=sys.stderr, flush=True)
    rows["pack"] = run(source, output)
    print(f"{files:,} files: no-op rerun ...", file=sys.stderr, flush=True)
    rows["no-op rerun"] = run(source, output)
    extra = max(1, files // 100)
    make_tree(source, extra, start=files)
    try:
        print(f"{files:,} files: increment of +{extra:,} ...", file=sys.stderr, flush=True)
        rows["increment +1%"] = run(source, output)
    finally:
        remove_increment(source, files, extra)
    shutil.rmtree(output, ignore_errors=True)  # 1M files of output: ~1 GB of disk
    return rows


def per_file(row: dict, base: dict, files: int) -> float:
    """(peak(N) - peak(1k)) / (N - 1k), in bytes."""
    return (row["peak_mb"] - base["peak_mb"]) * 2**20 / (files - BASE_FILES)


def main() -> None:
    arguments = parser(__doc__, "scale", reps=None)
    arguments.add_argument("--files", default="20000,200000,1000000",
                           help="tree sizes, comma-separated (default: %(default)s)")
    options = arguments.parse_args()
    sizes = sorted({int(size) for size in options.files.split(",")})
    if not sizes or min(sizes) <= BASE_FILES:
        arguments.error(f"--files: sizes above the base of {BASE_FILES:,} files")
    build = BUILD / "scale"
    shutil.rmtree(build, ignore_errors=True)
    measured = {files: measure(files, build) for files in (BASE_FILES, *sizes)}
    base = measured[BASE_FILES]

    print(f"\n{'files':>10}  {'run':<15}{'seconds':>9}{'peak RSS MB':>13}"
          f"{'B/file above 1k':>17}  target {TARGET_BYTES_PER_FILE} B")
    report, misses = [], 0
    for files, rows in measured.items():
        for kind in RUNS:
            row = rows[kind]
            line = f"{files:>10,}  {kind:<15}{row['seconds']:>9.1f}{row['peak_mb']:>13.1f}"
            entry = dict(row, files=files, run=kind)
            if files == BASE_FILES:
                line += f"{'(base)':>17}"
            else:
                entry["bytes_per_file"] = round(per_file(row, base[kind], files), 1)
                entry["pass"] = entry["bytes_per_file"] <= TARGET_BYTES_PER_FILE
                misses += not entry["pass"]
                line += f"{entry['bytes_per_file']:>17.0f}  {'PASS' if entry['pass'] else 'MISS'}"
            print(line)
            report.append(entry)
    big = sizes[-1]
    print(f"\nprojection to 10,000,000 files from {big:,} (base + bytes/file x files):")
    for kind in RUNS:
        slope = per_file(measured[big][kind], base[kind], big)
        print(f"  {kind:<15} {base[kind]['peak_mb'] + slope * 1e7 / 2**20:>8,.0f} MB "
              f"({slope:.0f} B/file)")
    print(f"\n{'all PASS' if not misses else f'{misses} MISS'}: (peak(N) - peak(1k)) / (N - 1k)"
          f" <= {TARGET_BYTES_PER_FILE} B for N = {', '.join(f'{n:,}' for n in sizes)}")
    write_report(options.json, {"target_bytes_per_file": TARGET_BYTES_PER_FILE,
                                "sizes": sizes, "runs": report})


if __name__ == "__main__":
    main()
