#!/usr/bin/env python3
"""Benchmark of `shardsmith probe`'s prediction, and of the scan behind a slow NAS mount.

    scripts/bench_nas.py [--images N] [--reps R] [--slow-images N] [--bandwidth-mbps B]
                         [--tree-files N] [--tree-folders N] [--mount-threads N]
                         [--nightly-attr-timeouts 1,0]
                         [--parts local,writer,slow,nightly]
                         [--json FILE]

local    On the cached 8000x6000 JPEG corpus of bench_pack.py, `shardsmith probe` predicts the
         time of `shardsmith pack` (all cores, default settings), then the pack runs in a fresh
         process on a fresh output, every original dropped from the page cache first (cold, as
         the probe assumes).  Rounds interleave probe and pack; medians and the per-round ratio
         predicted / measured (target: within ±25%).
writer   The single writer's samples/s and MB/s per shard format (tar, TFRecord), in-process
         on samples converted from the corpus: the limit no worker count lifts.
slow     The same through scripts/slowfs.py (1 ms per metadata operation, read bandwidth
         capped so that the reads bind): the probe must say read-bound and predict within
         ±25%.  The mount's counters give the metadata round trips and bytes read per packed
         file.
nightly  20,000 tiny originals in 200 folders, packed once, then the no-op nightly rerun
         through a mount with 1 ms per operation, with attributes cached 1 s (a default NFS
         mount) and with none (as the tests mount it): a serial scan (one thread: the walk
         before the parallel scan) against today's parallel scan (target: 5x faster), the two
         scans alone, the mount's own CPU per request, and round trips per packed file for a
         fresh pack of 1,000 of them.  The mount gets as many threads as the scan has
         requests in flight (--mount-threads): it runs on this machine's cores, and a
         Python mount with idle threads to spare spends twice the CPU per request.
The slow parts need FUSE; without it they are skipped with the reason.  Results go to
build/bench/nas.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from benchkit import (  # noqa: E402
    REPO,
    ensure_corpus,
    files_of,
    link_subset,
    parser,
    scratch_root,
    write_report,
)
from slowfs import fuse_available, slow_mount  # noqa: E402

sys.path.insert(0, str(REPO))  # in-process measurements use this checkout, like the CLI runs
from shardsmith.packing.scan import SCAN_THREADS  # noqa: E402

TOLERANCE = 0.25
NIGHTLY_TARGET = 5.0
MOUNT_ATTR_TIMEOUT = 1.0  # nightly: attributes cached 1 s, like a default NFS mount


def shardsmith(*args: str) -> tuple[float, str]:
    """Run the CLI in a fresh process, as a user or cron does; (wall seconds, stdout)."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "shardsmith.cli", *args], cwd=REPO,
                          check=True, capture_output=True, text=True)
    return time.perf_counter() - started, done.stdout


def probe(source: Path, *args: str) -> dict:
    """`shardsmith probe --json` in a fresh process."""
    return json.loads(shardsmith("probe", str(source), "--json", "--quiet", *args)[1])


def drop_tree(root: Path) -> None:
    """Every file under ``root`` out of the page cache: the next pack reads from storage."""
    for directory, _, names in os.walk(root):
        for name in names:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def timed_pack(source: Path, output: Path, *args: str) -> tuple[float, dict]:
    shutil.rmtree(output, ignore_errors=True)
    seconds, _ = shardsmith("pack", str(source), str(output), "--quiet", *args)
    return seconds, json.loads((output / "manifest.json").read_text())


def prediction_rounds(source: Path, scratch: Path, reps: int, probe_args: list[str],
                      before_pack=None) -> dict:
    """Probe, then pack, ``reps`` times; the paired ratio predicted / measured per round."""
    rounds = []
    for number in range(reps):
        report = probe(source, *probe_args)
        if before_pack is not None:
            before_pack()
        else:
            drop_tree(source)
        seconds, manifest = timed_pack(source, scratch / "out")
        predicted = report["prediction"]["seconds"]
        rounds.append({"predicted_seconds": predicted, "measured_seconds": round(seconds, 3),
                       "pack_internal_seconds": manifest["run"]["seconds"],
                       "ratio": round(predicted / seconds, 3),
                       "binding": report["prediction"]["binding"],
                       "bytes_out": manifest["totals"]["bytes_out"],
                       "predicted_bytes_out": report["prediction"]["output_bytes"],
                       "report": report})
        print(f"  round {number + 1}: predicted {predicted:.1f} s "
              f"({report['prediction']['binding']}), measured {seconds:.1f} s, ratio "
              f"{predicted / seconds:.2f}", file=sys.stderr)
    ratio = statistics.median(r["ratio"] for r in rounds)
    writers = [r["report"]["writer"] for r in rounds]
    return {
        "writer_mb_per_second": statistics.median(w["mb_per_second"] for w in writers),
        "writer_samples_per_second": statistics.median(w["samples_per_second"] for w in writers),
        "rounds": rounds,
        "predicted_seconds": statistics.median(r["predicted_seconds"] for r in rounds),
        "measured_seconds": statistics.median(r["measured_seconds"] for r in rounds),
        "ratio": ratio,
        "within_tolerance": abs(ratio - 1) <= TOLERANCE,
        "bindings": sorted({r["binding"] for r in rounds}),
    }


def print_prediction(title: str, result: dict) -> None:
    last = result["rounds"][-1]
    print(f"\n{title}")
    print(f"  {'round':>7}{'predicted':>11}{'measured':>10}{'(pack)':>9}{'ratio':>8}  binds")
    for number, r in enumerate(result["rounds"], 1):
        print(f"  {number:>7}{r['predicted_seconds']:>10.1f}s{r['measured_seconds']:>9.1f}s"
              f"{r['pack_internal_seconds']:>8.1f}s{r['ratio']:>8.2f}  {r['binding']}")
    print(f"  median ratio predicted / measured: {result['ratio']:.2f} (measured: the "
          "command's wall time; (pack): the time `pack` reports itself)")
    print(f"  output bytes predicted {last['predicted_bytes_out'] / 1e6:.1f} MB, written "
          f"{last['bytes_out'] / 1e6:.1f} MB")
    print(f"  single writer (probe): {result['writer_mb_per_second']:,.0f} MB/s, "
          f"{result['writer_samples_per_second']:,.0f} samples/s (medians)")
    mark = "ok  " if result["within_tolerance"] else "MISS"
    print(f"  {mark} predicted pack time within ±{TOLERANCE:.0%} of the measured one")


# ----------------------------------------------------------------------------- parts


def part_local(args: argparse.Namespace, scratch: Path) -> dict:
    source = args.cache / "subsets" / f"jpeg-{args.images}"
    link_subset(ensure_corpus(args.cache, "jpeg", args.images), source, args.images)
    print(f"local: probe vs pack, {args.images} JPEG originals, {args.reps} rounds",
          file=sys.stderr)
    result = prediction_rounds(source, scratch, args.reps, [])
    _, table = shardsmith("probe", str(source), "--quiet", "--gpu-demand", "4600")
    result["table"] = table
    print("\nprobe of the benchmark corpus (a separate run):\n" + table)
    print_prediction(f"local: {args.images} JPEG originals -> 512 px, all cores", result)
    return result


def part_slow(args: argparse.Namespace, scratch: Path) -> dict:
    source = args.cache / "subsets" / f"jpeg-{args.slow_images}"
    link_subset(ensure_corpus(args.cache, "jpeg", args.slow_images), source, args.slow_images)
    bandwidth = args.bandwidth_mbps * 1e6
    print(f"slow: probe vs pack through slowfs, 1 ms per operation, {args.bandwidth_mbps:g} "
          f"MB/s, {args.slow_images} originals, {args.reps} rounds", file=sys.stderr)
    with slow_mount(source, scratch / "mnt", latency=0.001, bandwidth=bandwidth) as fs:
        result = prediction_rounds(fs.mountpoint, scratch, args.reps, ["--sample", "8"],
                                   before_pack=fs.reset)
        ops = fs.stats()  # the last pack's, since the reset before it
    bytes_in = sum(p.stat().st_size for p in files_of(source))
    result["ops_per_packed_file"] = per_file(ops, args.slow_images)
    result["read_bytes_per_source_byte"] = round(ops["read_bytes"] / bytes_in, 3)
    print_prediction(f"slow mount: 1 ms per operation, reads capped at "
                     f"{args.bandwidth_mbps:g} MB/s", result)
    print(f"  per packed file: {format_ops(result['ops_per_packed_file'])}; bytes read / "
          f"source bytes {result['read_bytes_per_source_byte']:.2f}")
    return result


def per_file(ops: dict, files: int) -> dict:
    return {name: round(count / files, 2) for name, count in ops.items()
            if count and name not in ("read_bytes",)}


def format_ops(ops: dict) -> str:
    return ", ".join(f"{name} {count:g}" for name, count in ops.items())


def part_writer(args: argparse.Namespace, scratch: Path) -> dict:
    """The single writer's limit per shard format, on samples converted from the corpus."""
    from shardsmith.config import load_config
    from shardsmith.dataset.records import Sample
    from shardsmith.packing.imaging import convert
    from shardsmith.packing.plan import sample_key
    from shardsmith.probe.compute import measure_writer

    source = args.cache / "subsets" / f"jpeg-{args.images}"
    link_subset(ensure_corpus(args.cache, "jpeg", args.images), source, args.images)
    config = load_config(None, {})
    samples = []
    for path in files_of(source)[:16]:
        data = path.read_bytes()
        encoded = convert(data, config.image)
        samples.append(Sample(sample_key(path.name), path.name, "train", 0, source_size=len(data),
                              source_mtime_ns=0, source_digest="", **encoded._asdict()))
    rows: dict[str, list] = {"webdataset": [], "tfrecord": []}
    for _ in range(max(5, args.reps)):
        for fmt in rows:
            job = load_config(None, {"output.format": fmt})
            rows[fmt].append(measure_writer(samples, job, ("a",), directory=str(scratch)))
    result = {}
    print(f"\nsingle writer (framing, sha256, fsync per shard), {len(samples)} samples of "
          f"~{statistics.mean(len(s.jpeg) for s in samples) / 1e3:.0f} kB cycled, medians of "
          f"{len(rows['webdataset'])}:")
    for fmt, runs in rows.items():
        result[fmt] = {"mb_per_second": statistics.median(r.mb_per_second for r in runs),
                       "samples_per_second": statistics.median(r.samples_per_second
                                                               for r in runs)}
        print(f"  {fmt:<12}{result[fmt]['mb_per_second']:>8,.0f} MB/s"
              f"{result[fmt]['samples_per_second']:>10,.0f} samples/s")
    return result


def make_tiny_tree(root: Path, files: int, folders: int) -> None:
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), (90, 120, 150)).save(buffer, "JPEG", quality=90)
    data = buffer.getvalue()
    for number in range(files):
        folder = root / f"part{number % folders:03d}"
        if number < folders:
            folder.mkdir(parents=True)
        (folder / f"{number:06d}.jpg").write_bytes(data)


def serial_noop(source: Path, output: Path) -> float:
    """The no-op rerun with the scan on one thread (a child process; see --child-serial)."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--child-serial", str(source),
                           str(output)], cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0 or "up to date" not in done.stdout:
        raise SystemExit(f"the serial no-op rerun failed: {done.stdout}{done.stderr}")
    return seconds


def child_serial(source: str, output: str) -> None:
    import functools

    from shardsmith.cli import main
    from shardsmith.packing import pipeline, scan

    if getattr(pipeline, "scan", None) is not scan.scan:
        raise SystemExit("shardsmith.packing.pipeline no longer calls scan.scan: update this "
                         "benchmark")
    pipeline.scan = functools.partial(scan.scan, threads=1)
    main(["pack", source, output, "--quiet", "--size", "64"])


def timed_scan(root: Path, threads: int) -> float:
    from shardsmith.config import load_config
    from shardsmith.packing.scan import scan

    started = time.perf_counter()
    found = scan(root, load_config(None, {}).source, threads=threads)
    seconds = time.perf_counter() - started
    assert found.files, "the scan found nothing"
    return seconds


NIGHTLY_MOUNTS = {  # attr_timeout: what the setting stands for
    1.0: "attributes cached 1 s, like a default NFS mount",
    0.0: "no attribute cache, as the tests mount it (NFS noac)",
}


def nightly_rounds(tree: Path, output: Path, mountpoint: Path, attr_timeout: float,
                   reps: int, mount_threads: int) -> dict:
    """``reps`` rounds of the no-op rerun through one mount, serial then parallel, and the
    two scans alone; with the mount's CPU per request of the parallel rerun."""
    rows: dict[str, list[float]] = {"noop_serial": [], "noop_parallel": [],
                                    "scan_serial": [], "scan_parallel": []}
    ops_noop: dict = {}
    mount_cpu: list[float] = []
    with slow_mount(tree, mountpoint, latency=0.001, attr_timeout=attr_timeout,
                    max_threads=mount_threads) as fs:
        mounted = fs.mountpoint
        for _ in range(reps):
            rows["noop_serial"].append(serial_noop(mounted, output))
            fs.reset()
            cpu_before = fs.cpu_seconds()
            wall, out = shardsmith("pack", str(mounted), str(output), "--quiet", "--size", "64")
            mount_cpu.append(fs.cpu_seconds() - cpu_before)
            ops_noop = fs.stats()
            if "up to date" not in out:
                raise SystemExit(f"the rerun through the mount was not a no-op: {out}")
            rows["noop_parallel"].append(wall)
            rows["scan_serial"].append(timed_scan(mounted, 1))
            rows["scan_parallel"].append(timed_scan(mounted, SCAN_THREADS))
            print("  round: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in rows.items()),
                  file=sys.stderr)
    medians = {name: statistics.median(values) for name, values in rows.items()}
    requests = sum(count for name, count in ops_noop.items() if name != "read_bytes")
    return {
        "attr_timeout": attr_timeout, "rounds": rows, "medians": medians,
        "noop_speedup": medians["noop_serial"] / medians["noop_parallel"],
        "scan_speedup": medians["scan_serial"] / medians["scan_parallel"],
        "noop_ops": ops_noop,
        "mount_cpu_us_per_request": 1e6 * statistics.median(mount_cpu) / max(1, requests),
    }


def part_nightly(args: argparse.Namespace, scratch: Path) -> dict:
    tree, output = scratch / "tiny", scratch / "tiny-out"
    settings = [float(value) for value in args.nightly_attr_timeouts.split(",")]
    print(f"nightly: {args.tree_files:,} files in {args.tree_folders} folders, no-op rerun "
          f"through a mount with 1 ms per operation and {args.mount_threads} threads, "
          f"{args.reps} rounds per setting", file=sys.stderr)
    make_tiny_tree(tree, args.tree_files, args.tree_folders)
    seconds, _ = shardsmith("pack", str(tree), str(output), "--quiet", "--size", "64")
    local_noop, _ = shardsmith("pack", str(tree), str(output), "--quiet", "--size", "64")
    mounts = {}
    for attr_timeout in settings:
        print(f"  mount: {NIGHTLY_MOUNTS.get(attr_timeout, f'attr_timeout={attr_timeout:g}')}",
              file=sys.stderr)
        mounts[attr_timeout] = nightly_rounds(tree, output, scratch / "mnt", attr_timeout,
                                              args.reps, args.mount_threads)
        mounts[attr_timeout]["noop_ops_per_file"] = per_file(
            mounts[attr_timeout].pop("noop_ops"), args.tree_files)
    # Round trips of a fresh pack of ~1,000 of the files, through a mount of their own.
    fresh = scratch / "tiny-1000"
    folders = max(1, 1000 * args.tree_folders // args.tree_files)
    for folder in sorted(tree.iterdir())[:folders]:
        shutil.copytree(folder, fresh / folder.name)
    count = sum(1 for _ in fresh.rglob("*.jpg"))
    with slow_mount(fresh, scratch / "mnt2", latency=0.001, attr_timeout=MOUNT_ATTR_TIMEOUT,
                    max_threads=args.mount_threads) as fs:
        fs.reset()
        fresh_seconds, _ = timed_pack(fs.mountpoint, scratch / "fresh-out", "--size", "64")
        ops_pack = fs.stats()
    result = {
        "files": args.tree_files, "folders": args.tree_folders,
        "mount_threads": args.mount_threads, "scan_threads": SCAN_THREADS,
        "first_pack_local_seconds": round(seconds, 2), "noop_local_seconds": round(local_noop, 2),
        "mounts": {f"attr_timeout={key:g}": value for key, value in mounts.items()},
        "fresh_pack": {"files": count, "seconds": round(fresh_seconds, 2),
                       "ops_per_packed_file": per_file(ops_pack, count)},
    }
    print(f"\nnightly no-op rerun, {args.tree_files:,} files in {args.tree_folders} folders, "
          f"1 ms per operation, {SCAN_THREADS} scan threads, {args.mount_threads} mount "
          f"threads, medians of {args.reps}:")
    for attr_timeout, mount in mounts.items():
        medians = mount["medians"]
        print(f"  {NIGHTLY_MOUNTS.get(attr_timeout, f'attr_timeout={attr_timeout:g}')}:")
        print(f"    {'':<28}{'serial':>10}{'parallel':>10}{'speedup':>9}")
        print(f"    {'no-op rerun (whole pack)':<28}{medians['noop_serial']:>9.1f}s"
              f"{medians['noop_parallel']:>9.1f}s{mount['noop_speedup']:>8.1f}x")
        print(f"    {'scan alone':<28}{medians['scan_serial']:>9.1f}s"
              f"{medians['scan_parallel']:>9.1f}s{mount['scan_speedup']:>8.1f}x")
        print(f"    round trips of the no-op per file: {format_ops(mount['noop_ops_per_file'])};"
              f" the mount's CPU: {mount['mount_cpu_us_per_request']:.0f} us a request")
        mark = "ok  " if mount["noop_speedup"] >= NIGHTLY_TARGET else "MISS"
        print(f"    {mark} no-op rerun parallel vs serial: {mount['noop_speedup']:.1f}x "
              f"(target >= {NIGHTLY_TARGET:g}x)")
    print(f"  the same no-op on local disk: {local_noop:.1f} s")
    print(f"  round trips of a fresh pack per file ({count:,} files, "
          f"{fresh_seconds:.1f} s): {format_ops(result['fresh_pack']['ops_per_packed_file'])}")
    return result


def main() -> None:
    arguments = parser(__doc__, "nas", cache=True)
    arguments.add_argument("--images", type=int, default=96)
    arguments.add_argument("--slow-images", type=int, default=32)
    arguments.add_argument("--bandwidth-mbps", type=float, default=25.0)
    arguments.add_argument("--tree-files", type=int, default=20_000)
    arguments.add_argument("--tree-folders", type=int, default=200)
    arguments.add_argument("--parts", default="local,writer,slow,nightly")
    arguments.add_argument("--nightly-attr-timeouts", default="1,0",
                           help="nightly: the mount settings, attr_timeout in seconds "
                                "(default: %(default)s)")
    arguments.add_argument("--mount-threads", type=int, default=SCAN_THREADS,
                           help="nightly: the mount's threads (default: %(default)s, one per "
                                "request the scan has in flight)")
    arguments.add_argument("--child-serial", nargs=2, help=argparse.SUPPRESS)
    args = arguments.parse_args()
    if args.child_serial:
        child_serial(*args.child_serial)
        return

    parts = set(args.parts.split(","))
    results: dict = {"cores": os.cpu_count()}
    reason = fuse_available()
    with tempfile.TemporaryDirectory(dir=scratch_root(), prefix="bench-nas-") as scratch:
        scratch = Path(scratch)
        if "local" in parts:
            results["local"] = part_local(args, scratch / "local")
        if "writer" in parts:
            (scratch / "writer").mkdir()
            results["writer"] = part_writer(args, scratch / "writer")
        for name, run in (("slow", part_slow), ("nightly", part_nightly)):
            if name not in parts:
                continue
            if reason is not None:
                print(f"\n{name}: skipped: {reason}")
                results[name] = {"skipped": reason}
                continue
            (scratch / name).mkdir(parents=True)
            results[name] = run(args, scratch / name)
    for part in ("local", "slow"):
        for item in results.get(part, {}).get("rounds", []):
            item["report"] = {key: item["report"][key]
                              for key in ("prediction", "reads", "image_path", "writer")}
    print()
    write_report(args.json, results)


if __name__ == "__main__":
    main()
