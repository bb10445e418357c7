#!/usr/bin/env python3
"""The memory a pack's processes take before any image counts, for ``pack --dry-run``.

    scripts/measure_baselines.py [--runs 3] [--workers 2]

Packs a tree of 6 tiny JPEGs (so decoding adds nothing measurable) with the real command and
2 workers (or 1: the driver then converts in-process, with the image libraries), reading the
RSS of its process tree from /proc every 20 ms, and prints the peak of each kind of process:
the driver, a loky worker (interpreter, loky, the image libraries and the pack's modules), and
loky's helper processes (the resource tracker).  The constants in
``shardsmith/probe/memory.py`` are the largest of these over the runs.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import simplejpeg

REPO = Path(__file__).resolve().parents[1]


def rss_bytes(pid: int) -> int:
    """VmRSS of ``pid``, 0 once it has gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(child) for child in (task / "children").read_text().split()]
    except (FileNotFoundError, ProcessLookupError):
        pass
    return found


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (FileNotFoundError, ProcessLookupError):
        return ""


def one_run(root: Path, workers: int) -> dict[str, int]:
    source, output = root / "source", root / "out"
    for number in range(6):
        pixels = np.full((48, 64, 3), number * 40, np.uint8)
        folder = source / "ab"[number % 2]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{number}.jpg").write_bytes(simplejpeg.encode_jpeg(pixels, quality=90))
    process = subprocess.Popen([sys.executable, "-m", "shardsmith", "pack", str(source),
                                str(output), "--size", "32", "--workers", str(workers), "--quiet"],
                               cwd=REPO, stdout=subprocess.DEVNULL)
    peaks = {"driver": 0, "worker": 0, "helper": 0, "helpers": 0}
    while process.poll() is None:
        peaks["driver"] = max(peaks["driver"], rss_bytes(process.pid))
        stack, helpers = children(process.pid), 0
        while stack:
            pid = stack.pop()
            stack += children(pid)
            kind = "helper" if "resource_tracker" in command_line(pid) else "worker"
            helpers += kind == "helper"
            peaks[kind] = max(peaks[kind], rss_bytes(pid))
        peaks["helpers"] = max(peaks["helpers"], helpers)
        time.sleep(0.02)
    assert process.returncode == 0, process.returncode
    return peaks


def describe(peaks: dict[str, int]) -> str:
    return (f"driver {peaks['driver'] / 2**20:.1f} MiB, worker {peaks['worker'] / 2**20:.1f} "
            f"MiB, helper {peaks['helper'] / 2**20:.1f} MiB ({peaks['helpers']} at most)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2,
                        help="1: the driver converts in-process (no worker processes)")
    arguments = parser.parse_args()
    runs, workers = arguments.runs, arguments.workers
    largest = {"driver": 0, "worker": 0, "helper": 0, "helpers": 0}
    for number in range(runs):
        with tempfile.TemporaryDirectory() as root:
            peaks = one_run(Path(root), workers)
        print(f"run {number + 1}: {describe(peaks)}")
        largest = {kind: max(largest[kind], peaks[kind]) for kind in largest}
    print(f"largest: {describe(largest)}")


if __name__ == "__main__":
    main()
