#!/usr/bin/env python3
"""Driver memory per file on big trees, for `make bench`: pack, an increment of +1%, and the
no-op rerun, on a tree of N tiny JPEGs against the same on 1,000 files (the base).

    scripts/bench_scale.py [--files N] [--keep]

The tree is 3 classes of folders of 3,000 files (16x16 JPEGs, distinct contents), made once in
.cache/bench/.  Each run is a fresh process that packs in-process with 2 workers at --size 32
and reports its own peak RSS (the driver only: workers are separate processes).  Prints time
and peak RSS per run, bytes per file above the base, and the projection to 10 million files.
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
TARGET_BYTES_PER_FILE = 300

RUN = """
import json, resource, sys, time
from shardsmith import load_config, pack
started = time.perf_counter()
result = pack(load_config(None, {"source.path": sys.argv[1], "output.path": sys.argv[2],
                                 "image.size": 32, "run.workers": 2, "run.quiet": True}))
print(json.dumps({"seconds": time.perf_counter() - started,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
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


def main() -> None:
    arguments = parser(__doc__, "scale", reps=None)
    arguments.add_argument("--files", type=int, default=1_000_000)
    options = arguments.parse_args()
    cache, build = CACHE, BUILD / "scale"
    shutil.rmtree(build, ignore_errors=True)
    rows = {}
    for files in (1000, options.files):
        source = ensure_tree(cache / f"scale-{files}", files)
        output = build / f"out-{files}"
        print(f"{files:,} files: pack ...", file=sys.stderr, flush=True)
        rows[(files, "pack")] = run(source, output)
        print(f"{files:,} files: no-op rerun ...", file=sys.stderr, flush=True)
        rows[(files, "no-op rerun")] = run(source, output)
        extra = max(1, files // 100)
        make_tree(source, extra, start=files)
        print(f"{files:,} files: increment of +{extra:,} ...", file=sys.stderr, flush=True)
        rows[(files, "increment +1%")] = run(source, output)
        for path in source.rglob("img*.jpg"):  # back to the cached tree
            if int(path.stem[3:]) >= files:
                path.unlink()
    print(f"\n{'files':>10}  {'run':<15}{'seconds':>9}{'peak RSS MB':>13}{'B/file above base':>19}")
    report = []
    for (files, kind), row in rows.items():
        base = rows[(1000, kind)]["peak_mb"]
        per_file = (row["peak_mb"] - base) * 2**20 / (files - 1000) if files > 1000 else 0.0
        print(f"{files:>10,}  {kind:<15}{row['seconds']:>9.1f}{row['peak_mb']:>13.0f}"
              + (f"{per_file:>19.0f}" if files > 1000 else f"{'(base)':>19}"))
        report.append(dict(row, files=files, run=kind, bytes_per_file=per_file))
    big = options.files
    print("\nprojection to 10,000,000 files (base + bytes/file x files):")
    for kind in ("pack", "increment +1%", "no-op rerun"):
        base = rows[(1000, kind)]["peak_mb"]
        per_file = (rows[(big, kind)]["peak_mb"] - base) * 2**20 / (big - 1000)
        verdict = "met" if per_file <= TARGET_BYTES_PER_FILE else "NOT met"
        print(f"  {kind:<15} {base + per_file * 1e7 / 2**20:>8,.0f} MB   ({per_file:.0f} B/file; "
              f"target {TARGET_BYTES_PER_FILE}: {verdict})")
    write_report(options.json, report)


if __name__ == "__main__":
    main()
