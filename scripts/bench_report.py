#!/usr/bin/env python3
"""How long the nightly HTML report takes for a 100-class dataset (the goal: <= 5 s).

    scripts/bench_report.py [--classes N] [--per-class K] [--reps R] [--json FILE]

Packs N classes of K small images each (two versions, so the page has a history and new
samples), with 48 rejects whose originals are then replaced by 4000x3000 JPEGs (fixed on the
NAS, not packed yet): every reject thumbnail the page shows is a real decode of a large
original, the costly case.  Then renders the page R times (``render_report``, in process) and
reports the median seconds, the page size and what it shows.  The dataset is generated once
under build/bench/report-data and kept between runs.
"""

from __future__ import annotations

import io
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).parent))
from benchkit import BUILD, REPO, parser, write_report  # noqa: E402

sys.path.insert(0, str(REPO))
from shardsmith import load_config, pack  # noqa: E402
from shardsmith.dataset.manifest import read_manifest  # noqa: E402
from shardsmith.insight.htmlreport import ReportOptions, render_report  # noqa: E402
from shardsmith.insight.named_source import named_originals  # noqa: E402

REJECTS = 48


def jpeg(width: int, height: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    x = np.linspace(0, 255, width, dtype=np.float32)[None, :, None]
    y = np.linspace(0, 255, height, dtype=np.float32)[:, None, None]
    pixels = np.clip(x * 0.6 + y * 0.3 + rng.normal(0, 4, (height, width, 3)), 0, 255)
    buffer = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8)).save(buffer, "JPEG", quality=90)
    return buffer.getvalue()


def make_dataset(root: Path, classes: int, per_class: int) -> Path:
    """The dataset (made once): two versions, ``REJECTS`` rejects with large originals."""
    source, output = root / "source", root / "out"
    if (output / "manifest.json").exists():
        return output
    small = jpeg(320, 240, 0)
    for number in range(classes):
        for image in range(per_class):
            path = source / f"class_{number:03d}" / f"img{image:03d}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(small if image else jpeg(320, 240, number))
    settings = {"source.path": str(source), "output.path": str(output), "run.quiet": True,
                "image.size": 256, "splits": "train=0.8,val=0.2",
                "run.max_reject_fraction": 1.0}
    pack(load_config(None, settings))
    for number in range(REJECTS):
        (source / f"class_{number % classes:03d}" / f"bad{number:02d}.jpg").write_bytes(
            small[: len(small) // 3])
    pack(load_config(None, settings))
    large = jpeg(4000, 3000, 1)
    for number in range(REJECTS):
        (source / f"class_{number % classes:03d}" / f"bad{number:02d}.jpg").write_bytes(large)
    return output


def main() -> None:
    arguments = parser(__doc__, "report")
    arguments.add_argument("--classes", type=int, default=100)
    arguments.add_argument("--per-class", type=int, default=5)
    options = arguments.parse_args()
    dataset = make_dataset(BUILD / "report-data", options.classes, options.per_class)
    manifest = read_manifest(dataset)
    seconds, report = [], None
    for _ in range(options.reps):
        started = time.perf_counter()
        report = render_report(dataset, manifest, ReportOptions(
            originals=named_originals(str(dataset.parent / "source"))))
        seconds.append(time.perf_counter() - started)
    median = statistics.median(seconds)
    print(f"report of {len(manifest.classes):,} classes, {manifest.totals.packed:,} samples, "
          f"{len(manifest.rejects):,} rejects: {median:.2f} s (median of {options.reps}), "
          f"{len(report.html.encode()) / 1e6:.2f} MB, {report.reject_pictures} reject "
          f"pictures, {report.samples_shown} samples (goal: <= 5 s)")
    write_report(options.json, {"classes": len(manifest.classes),
                                "samples": manifest.totals.packed,
                                "rejects": len(manifest.rejects), "seconds": seconds,
                                "median_seconds": median, "bytes": len(report.html.encode()),
                                "reject_pictures": report.reject_pictures,
                                "samples_shown": report.samples_shown})


if __name__ == "__main__":
    main()
