#!/usr/bin/env python3
"""The memory ``pack --dry-run`` predicts against what the pack's process tree takes.

    scripts/check_dry_run_memory.py [--work DIR] [--count 12] [--only demo,tiled,...]

For each job below, runs the dry run (``--report``: its predicted and worst-case totals), then
the real pack as a subprocess, summing the RSS of its whole process tree (driver, loky workers,
loky's helpers) from /proc every 20 ms, and prints one table: the predicted peak, the worst
case, the measured peak and measured / predicted (the prediction is meant to be within 2x).

    demo     the ``make demo`` tree (40 originals of 2400x1800 in JPEG, PNG and 16-bit TIFF,
             3 broken) with configs/demo.yaml
    tiled    ``--count`` 3000x2000 (6 MP) JPEGs with YOLO boxes and index masks, cut into
             1024 px tiles with 128 px overlap, 2 workers
    png16    ``--count`` 3000x2000 16-bit RGB PNGs at 512 px, 2 workers (the largest decode
             of the three: 36 MB of pixels, twice)
    inproc   the demo tree with 1 worker (the driver converts in-process)

Linux only (/proc).  About 2 minutes on 2 busy cores.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np
from measure_baselines import children, rss_bytes

REPO = Path(__file__).resolve().parents[1]
MIB = 2**20
WIDTH, HEIGHT = 3000, 2000
CLASSES = ("crack", "fissure", "scratch")


def tree_rss(pid: int) -> int:
    """The RSS of ``pid`` and all its descendants together."""
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        stack += children(current)
        total += rss_bytes(current)
    return total


def measured_peak(args: list[str]) -> tuple[int, float]:
    """Run ``shardsmith pack ARGS``, sampling its process tree every 20 ms: the largest sum
    of RSS seen, and the seconds it ran."""
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "shardsmith", "pack", *args, "--quiet"],
                               cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while process.poll() is None:
        peak = max(peak, tree_rss(process.pid))
        time.sleep(0.02)
    stderr = process.communicate()[1].decode()
    if process.returncode not in (0, 3):  # 3: the demo's broken files, the dataset is written
        sys.exit(f"pack failed ({process.returncode}): {stderr}")
    return peak, time.monotonic() - started


def predicted(args: list[str], report: Path) -> tuple[int, int]:
    """The dry run's predicted and worst-case totals for the pack of ``args``."""
    done = subprocess.run([sys.executable, "-m", "shardsmith", "pack", *args, "--dry-run",
                           "--quiet", "--report", str(report)], cwd=REPO, capture_output=True,
                          text=True)
    if done.returncode not in (0, 3):
        sys.exit(f"dry run failed ({done.returncode}): {done.stderr}")
    found = json.loads(report.read_text())["dry_run"]
    return found["memory_predicted"]["total_bytes"], found["memory"]["total_bytes"]


def texture(seed: int, depth: int = 8) -> np.ndarray:
    """A grey-brown gradient with a little noise: compresses like a camera image."""
    rng = np.random.default_rng(seed)
    ys, xs = np.mgrid[0:HEIGHT, 0:WIDTH]
    top = 255 if depth == 8 else 65535
    base = (xs / WIDTH * 0.5 + ys / HEIGHT * 0.3 + 0.1) * top
    noise = rng.normal(0, top * 0.01, (HEIGHT, WIDTH))
    grey = np.clip(base + noise, 0, top)
    rgb = np.stack([grey, grey * 0.9, grey * 0.8], axis=2)
    return rgb.astype(np.uint8 if depth == 8 else np.uint16)


def demo_tree(root: Path) -> Path:
    if not root.exists():
        subprocess.run([sys.executable, str(REPO / "scripts" / "make_sample_tree.py"), str(root),
                        "--count", "40", "--width", "2400", "--height", "1800", "--bad", "3",
                        "--seed", "1"], check=True, stdout=subprocess.DEVNULL)
    return root


def tiled_tree(root: Path, count: int) -> Path:
    """6 MP JPEGs, each with a crack (index mask 1 and a YOLO box), a fissure (mask 2) and a
    scratch (YOLO box only)."""
    if root.exists():
        return root
    root.mkdir(parents=True)
    for number in range(count):
        pixels = texture(number)
        index = np.zeros((HEIGHT, WIDTH), np.uint8)
        x0 = 200 + number * 97 % 2000
        index[300:1700, x0 : x0 + 24] = 1  # a crack crossing tile borders
        cv2.line(index, (100, 1900), (2900, 150 + number * 31 % 900), 2, 9)
        pixels[index == 1] = 20
        pixels[index == 2] = 40
        sx, sy = 1500 + number * 53 % 1000, 1200
        pixels[sy : sy + 60, sx : sx + 400] = 240
        stem = root / f"img_{number:04d}"
        cv2.imwrite(f"{stem}.jpg", pixels[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, 92])
        cv2.imwrite(f"{stem}_mask.png", index)
        boxes = [(0, x0, 300, x0 + 24, 1700), (2, sx, sy, sx + 400, sy + 60)]
        Path(f"{stem}.txt").write_text("".join(
            f"{cls} {(a + c) / 2 / WIDTH:.6f} {(b + d) / 2 / HEIGHT:.6f} "
            f"{(c - a) / WIDTH:.6f} {(d - b) / HEIGHT:.6f}\n" for cls, a, b, c, d in boxes))
    return root


def tiled_config(path: Path) -> Path:
    path.write_text(
        "source:\n  labels: none\n  annotations:\n    files: yolo\n    masks: beside\n"
        "    mask_suffix: _mask\n"
        f"    mask_values: index\n    classes: [{', '.join(CLASSES)}]\n"
        "image:\n  tiles:\n    size: 1024\n    overlap: 128\n")
    return path


def png16_tree(root: Path, count: int) -> Path:
    if root.exists():
        return root
    root.mkdir(parents=True)
    for number in range(count):
        cv2.imwrite(str(root / f"img_{number:04d}.png"), texture(number, 16)[:, :, ::-1],
                    [cv2.IMWRITE_PNG_COMPRESSION, 1])
    return root


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, help="where to build the trees (kept; default: "
                        "a temporary folder)")
    parser.add_argument("--count", type=int, default=12, help="originals of the tiled and "
                        "png16 trees")
    parser.add_argument("--only", default="demo,tiled,png16,inproc",
                        help="the jobs to run, comma-separated")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        work = options.work or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        demo = str(REPO / "configs" / "demo.yaml")
        jobs = {
            "demo": lambda: [str(demo_tree(work / "demo")), "--config", demo],
            "tiled": lambda: [str(tiled_tree(work / "tiled", options.count)), "--config",
                              str(tiled_config(work / "tiled.yaml")), "--workers", "2"],
            "png16": lambda: [str(png16_tree(work / "png16", options.count)), "--labels",
                              "none", "--size", "512", "--workers", "2"],
            "inproc": lambda: [str(demo_tree(work / "demo")), "--config", demo,
                               "--workers", "1"],
        }
        print(f"{'job':<8}{'predicted':>12}{'worst case':>13}{'measured':>12}"
              f"{'measured/predicted':>20}{'pack s':>8}")
        for name in options.only.split(","):
            source_args = jobs[name]()
            output = work / f"out-{name}"
            shutil.rmtree(output, ignore_errors=True)  # a fresh pack: every original decoded
            args = [source_args[0], str(output), *source_args[1:]]
            guess, worst = predicted(args, work / f"{name}.json")
            peak, seconds = measured_peak(args)
            print(f"{name:<8}{guess / MIB:>9,.0f} MiB{worst / MIB:>10,.0f} MiB"
                  f"{peak / MIB:>9,.0f} MiB{peak / guess:>20.2f}{seconds:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
