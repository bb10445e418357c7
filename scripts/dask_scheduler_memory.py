"""The Dask scheduler's memory over a pack of many tiny originals, with the tasks it holds.

    python scripts/dask_scheduler_memory.py 20000 50000 200000     # originals per pack

For each count: a tree of that many 16x16 PNGs (hard links to 16 distinct files, 1,000 to a
folder: the scan takes hard links as files of their own), a fresh ``dask scheduler`` and
``dask worker --nworkers 2 --nthreads 1`` in processes of their own, then ``shardsmith pack
--backend dask``.  While the pack runs, the resident memory of the scheduler and of the pack
(the driver) is sampled every 0.25 s, and the number of tasks the scheduler holds every 0.5 s
(a client asking the scheduler).  Tiny originals are the scheduler's worst case: the most
tasks per second and per byte.  Needs the dask extra and psutil.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil
from PIL import Image

REPO = Path(__file__).resolve().parent.parent
MiB = 1 << 20
DISTINCT = 16


def make_tree(root: Path, count: int) -> None:
    """``count`` 16x16 PNGs under ``root``, two classes, 1,000 to a folder."""
    rng = np.random.default_rng(0)
    firsts = []
    for number in range(DISTINCT):
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 255, (16, 16, 3), np.uint8)).save(buffer, "PNG")
        path = root / "distinct" / f"{number:02d}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(buffer.getvalue())
        firsts.append(path)
    for number in range(count - DISTINCT):
        folder = root / f"c{number % 2}" / f"{number // 2000:04d}"
        if number % 2000 < 2:
            folder.mkdir(parents=True, exist_ok=True)
        os.link(firsts[number % DISTINCT], folder / f"{number:07d}.png")


class Sampler(threading.Thread):
    """Peak resident memory of some processes, and of the tasks the scheduler holds."""

    def __init__(self, processes: dict[str, psutil.Process], address: str):
        super().__init__(daemon=True)
        self.processes, self.address = processes, address
        self.peak = {name: 0 for name in processes}
        self.tasks_peak = 0
        self.done = threading.Event()

    def run(self) -> None:
        from distributed import Client

        with Client(self.address, timeout=30) as client:
            ticks = 0
            while not self.done.wait(0.25):
                for name, process in self.processes.items():
                    try:
                        self.peak[name] = max(self.peak[name], process.memory_info().rss)
                    except psutil.NoSuchProcess:
                        pass
                ticks += 1
                if ticks % 2 == 0:
                    held = client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks))
                    self.tasks_peak = max(self.tasks_peak, held)


def measure(count: int, work: Path) -> dict:
    source, output = work / f"tree-{count}", work / f"out-{count}"
    started = time.monotonic()
    make_tree(source, count)
    tree_seconds = time.monotonic() - started
    dask = str(Path(sys.executable).parent / "dask")
    scheduler_file = work / f"scheduler-{count}.json"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    scheduler = subprocess.Popen([dask, "scheduler", "--port", "0", "--dashboard-address",
                                  ":0", "--scheduler-file", str(scheduler_file)], **quiet)
    workers = None
    try:
        while not scheduler_file.exists() or not scheduler_file.stat().st_size:
            time.sleep(0.1)
        address = json.loads(scheduler_file.read_text())["address"]
        workers = subprocess.Popen([dask, "worker", address, "--nworkers", "2", "--nthreads",
                                    "1", "--no-dashboard"], **quiet)
        from distributed import Client

        with Client(address, timeout=30) as client:
            client.wait_for_workers(2, timeout=60)
        baseline = psutil.Process(scheduler.pid).memory_info().rss
        env = dict(os.environ, PYTHONPATH=str(REPO))
        started = time.monotonic()
        pack = subprocess.Popen([sys.executable, "-m", "shardsmith", "pack", str(source),
                                 str(output), "--backend", "dask", "--scheduler", address,
                                 "--size", "16", "--quiet"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        sampler = Sampler({"scheduler": psutil.Process(scheduler.pid),
                           "driver": psutil.Process(pack.pid)}, address)
        sampler.start()
        stdout, stderr = pack.communicate()
        seconds = time.monotonic() - started
        sampler.done.set()
        sampler.join()
        after = psutil.Process(scheduler.pid).memory_info().rss
        if pack.returncode != 0:
            raise SystemExit(f"pack of {count} failed ({pack.returncode}): {stderr.strip()}")
    finally:
        for process in (workers, scheduler):
            if process is not None:
                process.terminate()
                process.wait(30)
    return {"files": count, "tree_s": tree_seconds, "pack_s": seconds,
            "baseline": baseline, "peak": sampler.peak["scheduler"], "after": after,
            "driver_peak": sampler.peak["driver"], "tasks_peak": sampler.tasks_peak,
            "summary": stdout.strip().splitlines()[0] if stdout.strip() else ""}


def main(counts: list[int]) -> None:
    print(f"{'files':>8} {'pack s':>7} {'scheduler MiB: idle':>20} {'peak':>6} {'+peak':>6} "
          f"{'after':>6} {'tasks held':>10} {'driver peak MiB':>16}")
    with tempfile.TemporaryDirectory(prefix="dask-memory-") as folder:
        for count in counts:
            row = measure(count, Path(folder))
            print(f"{row['files']:>8,} {row['pack_s']:>7.0f} {row['baseline'] / MiB:>20.1f} "
                  f"{row['peak'] / MiB:>6.1f} {(row['peak'] - row['baseline']) / MiB:>6.1f} "
                  f"{row['after'] / MiB:>6.1f} {row['tasks_peak']:>10} "
                  f"{row['driver_peak'] / MiB:>16.1f}", flush=True)


if __name__ == "__main__":
    main([int(argument) for argument in sys.argv[1:]] or [20_000])
