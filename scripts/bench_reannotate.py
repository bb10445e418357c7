#!/usr/bin/env python3
"""Benchmark of re-annotating a dataset of older annotation rules: JPEG bytes copied against
every annotated original decoded again (the path before copying).

    scripts/bench_reannotate.py [--originals 20] [--width 2400] [--height 1800] [--reps 3]
                                [--tiles 256]

Makes ``--originals`` JPEGs (q95) with a YOLO box each, packs them once (pad to 512, one
worker, in-process), then, --reps rounds, interleaved: the dataset marked as of annotation
rules 1 is packed again (a) as shipped, copying JPEG bytes, and (b) with the copy turned off
(every re-annotated original decoded).  Prints the median wall seconds of each and the ratio;
on a shared machine the numbers follow the neighbours' load.  ``--tiles SIZE`` cuts each
original into SIZE px tiles (overlap SIZE/8, ``keep: annotated``, ``background_fraction: 1.0``)
instead, and prints the cost a tile.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's shardsmith, also where another is installed


def make_tree(source: Path, count: int, width: int, height: int) -> None:
    import numpy as np
    import simplejpeg

    rng = np.random.default_rng(0)
    for number in range(count):
        pixels = rng.integers(0, 255, (height // 8, width // 8, 3), np.uint8)
        pixels = np.repeat(np.repeat(pixels, 8, axis=0), 8, axis=1)
        path = source / "parts" / f"p{number:03d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(simplejpeg.encode_jpeg(pixels, quality=95))
        path.with_suffix(".txt").write_text("0 0.5 0.5 0.2 0.1\n")


def pack_once(source: Path, output: Path, tiles: int = 0) -> float:
    from shardsmith import load_config, pack

    layout = ({"image.tiles.size": tiles, "image.tiles.overlap": tiles // 8,
               "image.tiles.keep": "annotated", "image.tiles.background_fraction": 1.0}
              if tiles else {"image.size": 512, "image.resize": "pad"})
    config = load_config(None, {"source.path": str(source), "output.path": str(output),
                                "run.quiet": True, "run.workers": 1, **layout,
                                "source.annotations.files": "yolo",
                                "source.annotations.classes": ["scratch"]})
    started = time.perf_counter()
    pack(config)
    return time.perf_counter() - started


def older(dataset: Path, into: Path) -> Path:
    shutil.rmtree(into, ignore_errors=True)
    shutil.copytree(dataset, into)
    path = into / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest.pop("annotation_rules", None)
    path.write_text(json.dumps(manifest))
    return into


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--originals", type=int, default=20)
    options.add_argument("--width", type=int, default=2400)
    options.add_argument("--height", type=int, default=1800)
    options.add_argument("--reps", type=int, default=3)
    options.add_argument("--tiles", type=int, default=0)
    args = options.parse_args()

    from shardsmith.packing import annotated, rederive

    copying = rederive.rederive

    def decoding(item, root, config, vocabulary):
        return annotated.process_annotated(item, root, config, vocabulary)

    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        make_tree(base / "source", args.originals, args.width, args.height)
        pack_once(base / "source", base / "v1", args.tiles)
        samples = json.loads((base / "v1" / "manifest.json").read_text())["totals"]["packed"]
        times: dict[str, list[float]] = {"copied": [], "decoded": []}
        for _ in range(args.reps):
            for name, entry in (("copied", copying), ("decoded", decoding)):
                rederive.rederive = entry
                times[name].append(pack_once(base / "source", older(base / "v1",
                                                                    base / name), args.tiles))
        rederive.rederive = copying
    copied, decoded = statistics.median(times["copied"]), statistics.median(times["decoded"])
    print(f"re-annotating {args.originals} originals of {args.width}x{args.height}, "
          f"median of {args.reps}, wall seconds, one worker")
    print(f"  JPEG bytes copied   {copied:8.3f} s")
    print(f"  decoded again       {decoded:8.3f} s")
    print(f"  copying is {decoded / copied:.1f}x faster")
    if args.tiles:
        print(f"  {samples} tiles of {args.tiles} px: {copied / samples * 1e3:.2f} ms a tile "
              f"copied ({copied / samples * 1e6 / 3600:.1f} h a million tiles, one worker), "
              f"{decoded / samples * 1e3:.2f} ms decoded")


if __name__ == "__main__":
    main()
