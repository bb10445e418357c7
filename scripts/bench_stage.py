#!/usr/bin/env python3
"""Benchmark of `shardsmith stage` against `cp -r` of the same shard directory, same run.

    scripts/bench_stage.py [--shards N] [--shard-mb MB] [--reps R] [--json FILE]

The dataset is a manifest over N shard files of random bytes (staging never looks inside a
shard, only at sizes and hashes, so content does not change the cost).  Rounds interleave:
`cp -r`, `cp -r` + `sync` (stage fsyncs every file, plain cp does not), a fresh
`shardsmith stage`, a no-op re-stage of the unchanged dataset, and a stage stopped by Ctrl-C
while its copies are under way (seconds from the signal to the exit).  Medians of --reps rounds.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from benchkit import parser, scratch_root, write_report  # noqa: E402


def make_dataset(root: Path, shards: int, shard_bytes: int) -> int:
    """Write the shards and a manifest listing them; returns the total bytes."""
    root.mkdir(parents=True)
    block = os.urandom(4 * 2**20)
    entries = []
    for number in range(shards):
        name = f"train-{number:06d}.tar"
        digest = hashlib.sha256()
        with open(root / name, "wb") as handle:
            for index in range(shard_bytes // len(block)):
                chunk = number.to_bytes(4, "big") + index.to_bytes(4, "big") + block[8:]
                handle.write(chunk)
                digest.update(chunk)
        entries.append({"name": name, "split": "train", "samples": 1,
                        "bytes": shard_bytes // len(block) * len(block),
                        "sha256": digest.hexdigest()})
    (root / "samples.jsonl").write_bytes(b"")
    manifest = {
        "schema_version": 1, "format": "webdataset", "fingerprint": "bench", "classes": [],
        "totals": {"seen": shards, "packed": shards, "rejected": 0, "excluded": 0,
                   "bytes_in": 0, "bytes_out": sum(entry["bytes"] for entry in entries)},
        "rejects": [], "shards": entries, "splits": {"train": {}},
        "samples_index": {"name": "samples.jsonl", "samples": 0, "bytes": 0,
                          "sha256": hashlib.sha256(b"").hexdigest()},
    }
    (root / "manifest.json").write_text(json.dumps(manifest))
    return sum(entry["bytes"] for entry in entries)


def interrupted(command: list[str], target: Path) -> float:
    """Seconds from Ctrl-C (SIGINT to the process group, as a terminal sends it) to the exit of
    a stage whose copies are under way (temporaries present); ``nan`` when it ended first."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    deadline = time.perf_counter() + 30
    while process.poll() is None and time.perf_counter() < deadline and not (
            target.is_dir() and any(target.glob(".*.tmp"))):
        time.sleep(0.002)
    if process.poll() is not None:
        return float("nan")
    os.killpg(process.pid, signal.SIGINT)
    started = time.perf_counter()
    process.wait(timeout=60)
    return time.perf_counter() - started


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    arguments = parser(__doc__, "stage")
    arguments.add_argument("--shards", type=int, default=12)
    arguments.add_argument("--shard-mb", type=int, default=128)
    args = arguments.parse_args()

    shardsmith = [sys.executable, "-m", "shardsmith.cli"]
    with tempfile.TemporaryDirectory(dir=scratch_root()) as scratch:
        scratch = Path(scratch)
        total = make_dataset(scratch / "dataset", args.shards, args.shard_mb * 2**20)
        runs: dict[str, list[float]] = {"cp -r": [], "cp -r + sync": [], "stage": [],
                                         "re-stage (no-op)": []}
        stops: list[float] = []  # Ctrl-C to exit, copies under way
        for _ in range(args.reps):
            for name in ("cp -r", "cp -r + sync", "stage"):
                target = scratch / "copy"
                shutil.rmtree(target, ignore_errors=True)
                subprocess.run(["sync"], check=True)
                if name == "stage":
                    seconds = timed([*shardsmith, "stage", str(scratch / "dataset"), "--to",
                                     str(target), "--quiet"])
                else:
                    seconds = timed(["cp", "-r", str(scratch / "dataset"), str(target)])
                    if name.endswith("sync"):
                        seconds += timed(["sync"])
                runs[name].append(seconds)
            runs["re-stage (no-op)"].append(timed(
                [*shardsmith, "stage", str(scratch / "dataset"), "--to", str(scratch / "copy"),
                 "--quiet"]))
            target = scratch / "interrupted"
            shutil.rmtree(target, ignore_errors=True)
            stops.append(interrupted([*shardsmith, "stage", str(scratch / "dataset"), "--to",
                                      str(target), "--quiet"], target))

    medians = {name: statistics.median(values) for name, values in runs.items()}
    print(f"staging {args.shards} shards x {args.shard_mb} MB = {total / 1e9:.2f} GB, "
          f"median of {args.reps} rounds")
    print(f"{'method':<20}{'seconds':>10}{'MB/s':>10}")
    for name, seconds in medians.items():
        rate = f"{total / seconds / 1e6:,.0f}" if name != "re-stage (no-op)" else "-"
        print(f"{name:<20}{seconds:>10.2f}{rate:>10}")
    ratio = medians["cp -r"] / medians["stage"]
    ratio_sync = medians["cp -r + sync"] / medians["stage"]
    print(f"stage throughput vs cp -r: {ratio:.2f}x; vs cp -r + sync: {ratio_sync:.2f}x; "
          f"no-op re-stage {medians['re-stage (no-op)']:.2f}s")
    stop = statistics.median(stops)
    print(f"Ctrl-C during a stage: exit {stop:.2f} s after the signal (median; target 1 s: "
          f"{'met' if stop <= 1.0 else 'NOT met'})")
    write_report(args.json, {"bytes": total, "runs": runs, "medians": medians,
                             "stage_vs_cp": ratio, "stage_vs_cp_sync": ratio_sync,
                             "ctrl_c_seconds": stops})


if __name__ == "__main__":
    main()
