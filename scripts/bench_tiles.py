#!/usr/bin/env python3
"""Benchmark of tiling at full resolution, for `make bench`: tiles/s against the decode floor.

    scripts/bench_tiles.py [--originals N] [--tile 1024] [--overlap 128] [--reps R]

On the cached 8000x6000 JPEG corpus of bench_pack.py (q95, ~19 MB each) it measures, one
worker:
  floor      a full-resolution decode of each original (libjpeg-turbo through simplejpeg, the
             decoder the pack uses): nothing that cuts tiles from all the pixels is faster;
             as tiles/s, the grid's tiles per original over the decode time
  +encode    the floor, then every tile cut and encoded as JPEG: what storing them costs
  all        `shardsmith pack` with image.tiles (keep: all): every tile encoded
  annotated  the same with YOLO boxes (8 small defects an original) and keep: annotated with
             background_fraction 0.1: the tiles holding a defect plus a tenth of the rest
Each pack is in-process, end to end (scan, shards, manifest).  The three are interleaved,
round after round, and each figure is the median of --reps rounds of CPU seconds of this
process (one worker runs in-process): on a shared machine wall time follows the neighbours'
load, CPU time much less.  Prints a table and writes the numbers as JSON
(build/bench/tiles.json).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO))  # this checkout's shardsmith, also where another is installed

from benchkit import ensure_corpus, files_of, parser, write_report  # noqa: E402


def floor(originals: list[Path]) -> float:
    """CPU seconds per original of a full-resolution decode."""
    import simplejpeg

    started = time.process_time()
    for path in originals:
        simplejpeg.decode_jpeg(path.read_bytes(), colorspace="RGB")
    return (time.process_time() - started) / len(originals)


def floor_with_encode(originals: list[Path], tile: int, overlap: int) -> float:
    """CPU seconds per original of a full decode, then every tile cut and encoded (JPEG q90,
    4:2:0, as the pack's defaults): the least any tiler that stores JPEG tiles does."""
    import numpy as np
    import simplejpeg

    from shardsmith.tiling import starts

    started = time.process_time()
    for path in originals:
        pixels = simplejpeg.decode_jpeg(path.read_bytes(), colorspace="RGB")
        height, width = pixels.shape[:2]
        for y in starts(height, tile, overlap):
            for x in starts(width, tile, overlap):
                simplejpeg.encode_jpeg(np.ascontiguousarray(pixels[y : y + tile, x : x + tile]),
                                       quality=90, colorsubsampling="420")
    return (time.process_time() - started) / len(originals)


def annotate(source: Path, count: int = 8) -> None:
    """YOLO files with ``count`` small (40x24 px) defects at seeded places, per original."""
    import numpy as np

    rng = np.random.default_rng(3)
    for path in files_of(source):
        lines = [f"0 {x:.6f} {y:.6f} {40 / 8000:.6f} {24 / 6000:.6f}"
                 for x, y in rng.uniform(0.01, 0.99, (count, 2))]
        path.with_suffix(".txt").write_text("\n".join(lines) + "\n")


def pack_tiles(source: Path, tile: int, overlap: int, extra: dict) -> tuple[float, int]:
    """CPU seconds of one pack, and the tiles it packed."""
    from shardsmith import load_config, pack

    output = Path(tempfile.mkdtemp(prefix="shardsmith-bench-tiles-"))
    try:
        started = time.process_time()
        result = pack(load_config(None, {
            "source.path": str(source), "output.path": str(output), "run.workers": 1,
            "run.quiet": True, "image.tiles.size": tile, "image.tiles.overlap": overlap,
            "source.follow_symlinks": True, **extra}))
        return time.process_time() - started, result.manifest.totals.packed
    finally:
        shutil.rmtree(output, ignore_errors=True)


def main() -> None:
    arguments = parser(__doc__, "tiles", cache=True)
    arguments.add_argument("--originals", type=int, default=4)
    arguments.add_argument("--tile", type=int, default=1024)
    arguments.add_argument("--overlap", type=int, default=128)
    args = arguments.parse_args()

    from shardsmith.tiling import starts

    corpus = ensure_corpus(args.cache, "jpeg", args.originals)
    work = Path(tempfile.mkdtemp(prefix="shardsmith-bench-corpus-"))
    try:
        (work / "a" / "a").mkdir(parents=True)
        for path in files_of(corpus)[: args.originals]:
            os.symlink(path, work / "a" / "a" / path.name)
        originals = files_of(work / "a")
        grid = len(starts(8000, args.tile, args.overlap)) * len(starts(6000, args.tile,
                                                                         args.overlap))
        annotated_source = work / "annotated"
        (annotated_source / "a").mkdir(parents=True)
        for path in originals:
            os.symlink(path.resolve(), annotated_source / "a" / path.name)
        annotate(annotated_source)
        everything = {"image.tiles.keep": "all"}
        annotated = {"source.annotations.files": "yolo",
                     "source.annotations.classes": ["defect"]}
        rounds: dict[str, list[float]] = {"floor": [], "encode": [], "all": [],
                                           "annotated": []}
        tiles = {}
        for _ in range(args.reps):  # interleaved: a slow moment hits all three alike
            rounds["floor"].append(floor(originals))
            rounds["encode"].append(floor_with_encode(originals, args.tile, args.overlap))
            seconds, tiles["all"] = pack_tiles(work / "a", args.tile, args.overlap, everything)
            rounds["all"].append(seconds / len(originals))
            seconds, tiles["annotated"] = pack_tiles(annotated_source, args.tile, args.overlap,
                                                     annotated)
            rounds["annotated"].append(seconds / len(originals))
        per = {name: statistics.median(values) for name, values in rounds.items()}
        count = len(originals)
        rows = [{"name": "floor (full decode)", "seconds_per_original": per["floor"],
                 "tiles_per_second": grid / per["floor"]},
                {"name": "decode + encode tiles", "seconds_per_original": per["encode"],
                 "tiles_per_second": grid / per["encode"]},
                {"name": "pack, keep all", "seconds_per_original": per["all"],
                 "tiles_per_second": tiles["all"] / count / per["all"], "tiles": tiles["all"]},
                {"name": "pack, annotated + 10%", "seconds_per_original": per["annotated"],
                 "tiles_per_second": tiles["annotated"] / count / per["annotated"],
                 "tiles": tiles["annotated"]}]
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"tiles of {args.tile} px (overlap {args.overlap}) from {len(originals)} 8000x6000 "
          f"JPEGs, one worker; the grid has {grid} tiles an original")
    print(f"  {'':24} {'CPU s/original':>14} {'tiles/s':>9} {'vs floor':>9}")
    for row in rows:
        ratio = row["tiles_per_second"] / rows[0]["tiles_per_second"]
        print(f"  {row['name']:24} {row['seconds_per_original']:14.3f} "
              f"{row['tiles_per_second']:9.1f} {ratio:9.2f}")
        row["vs_floor"] = round(ratio, 3)
    print("  (tiles/s of the floor: the grid's tiles per decode; a pack also encodes each "
          "kept tile as JPEG)")
    write_report(args.json, {"tile": args.tile, "overlap": args.overlap,
                             "originals": len(originals), "grid": grid, "rows": rows})


if __name__ == "__main__":
    main()
