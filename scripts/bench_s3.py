#!/usr/bin/env python3
"""Benchmark of `shardsmith pack` and `stage` from and to s3:// against the same work on local
disk, same run.

    scripts/bench_s3.py [--shards N] [--shard-mb MB] [--workers W] [--images N]
                        [--prefixes P] [--pack-workers W] [--reps R] [--quick]

The bench starts its own S3 server on 127.0.0.1 (``moto_server``, as the tests do, stopped at
the end) and uploads a dataset of N random shards (bench_stage.py's: staging never looks inside
a shard).  Rounds interleave: a stage of the local folder (the baseline) and a stage from the
bucket straight from the server (throughput); then, of a second dataset of many small shards
(--small-shards of 256 KiB: a request each, so latency, not bandwidth, sets the time), two
stages through the tests' fault proxy (tests/s3server.py) with 5 ms added to every request,
with 1 worker and with W, so that the parallelism of the downloads shows.

Pack: --images small JPEGs in --prefixes class folders, on local disk and in the bucket.
Rounds interleave a local pack (the baseline), a pack from the bucket and a pack to the bucket,
all with --pack-workers, straight from the server; then, through the proxy with 5 ms a
request: the listing of the bucket (``scan``) with its threads (``scan.SCAN_THREADS``, one per
top-level prefix at once) and with 1 (one prefix at a time); a pack from the bucket with 1
worker and with --pack-workers (the reads: one GET per original); a whole pack from local
disk to a new prefix (its shards go up while it packs, on the journal's one thread, then the
publish sends the rest); and the publish alone (``s3output.publish``) of that pack's spool to
a FRESH prefix, so that every file is sent by it, with ``s3output.UPLOADS`` files at once and
with 1.  (The publish at the end of a pack finds most shards uploaded already: timing it
there would time little.)  Medians of --reps rounds; ratios against the local runs and of 1
against many.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from bench_stage import make_dataset  # noqa: E402
from benchkit import parser, scratch_root, write_report  # noqa: E402
from s3server import FaultProxy, _handler, free_port  # noqa: E402

from shardsmith import load_config, pack  # noqa: E402
from shardsmith.config import SourceConfig  # noqa: E402
from shardsmith.ops.stage import stage  # noqa: E402
from shardsmith.packing import s3output  # noqa: E402
from shardsmith.packing.scan import SCAN_THREADS, scan  # noqa: E402
from shardsmith.storage import locate  # noqa: E402

import images  # noqa: E402

DELAY = 0.005  # seconds added to every request through the proxy (the 5 ms)
BUCKET = "bench"
IMAGE_SIZE = 128  # pack's output side: small, so requests, not decoding, weigh
SHARD_SAMPLES = 8  # many small shards: an upload each, so the upload's parallelism shows


def make_small(root: Path, shards: int, shard_bytes: int = 2**18) -> int:
    """A dataset of ``shards`` random shards of ``shard_bytes`` (bench_stage.make_dataset's
    manifest, whose shards come in 4 MiB blocks); returns the total bytes."""
    make_dataset(root, 0, 0)
    manifest = json.loads((root / "manifest.json").read_text())
    for number in range(shards):
        name = f"train-{number:06d}.tar"
        data = os.urandom(shard_bytes)
        (root / name).write_bytes(data)
        manifest["shards"].append({"name": name, "split": "train", "samples": 1,
                                   "bytes": shard_bytes,
                                   "sha256": hashlib.sha256(data).hexdigest()})
    manifest["totals"].update(seen=shards, packed=shards, bytes_out=shards * shard_bytes)
    (root / "manifest.json").write_text(json.dumps(manifest))
    return shards * shard_bytes


def start_server() -> tuple[subprocess.Popen, str]:
    """``moto_server`` on a free port of 127.0.0.1, answering; its process and URL."""
    script = Path(sys.executable).parent / "moto_server"
    found = str(script) if script.exists() else shutil.which("moto_server")
    if found is None:
        sys.exit("bench_s3: moto_server is not installed (pip install 'moto[server]')")
    port = free_port()
    process = subprocess.Popen([found, "-H", "127.0.0.1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and process.poll() is None:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            connection.request("GET", "/")
            connection.getresponse().read()
            connection.close()
            return process, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    process.kill()
    sys.exit(f"bench_s3: moto_server did not answer on port {port}")


def start_proxy(upstream: str) -> FaultProxy:
    """The tests' fault proxy in front of ``upstream``, every request delayed by DELAY."""
    proxy = FaultProxy(upstream, delay=DELAY)
    proxy.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(proxy))
    proxy.server.daemon_threads = True
    threading.Thread(target=proxy.server.serve_forever, daemon=True).start()
    proxy.every("delay", 1)
    return proxy


def make_originals(root: Path, count: int, prefixes: int) -> int:
    """``count`` 640x480 JPEGs spread over ``prefixes`` class folders; returns the bytes."""
    total = 0
    for number in range(count):
        data = images.jpeg(640, 480, number)
        images.write(root / f"c{number % prefixes:02d}" / f"{number:05d}.jpg", data)
        total += len(data)
    return total


def timed_stage(source: str | Path, target: Path, workers: int,
                endpoint: str | None = None) -> float:
    shutil.rmtree(target, ignore_errors=True)
    if endpoint:  # stage takes a location: the client's options are the location's
        source = locate(str(source), {"endpoint_url": endpoint})
    started = time.perf_counter()
    stage(source, target, workers=workers, quiet=True)
    return time.perf_counter() - started


def timed_publish(spool: Path, url: str, at_once: int, endpoint: str, home: Path) -> float:
    """Seconds of ``s3output.publish`` of the packed ``spool`` to the fresh prefix ``url``
    (a new spool record in ``home``: every file is uploaded), ``at_once`` files at once."""
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    default, s3output.UPLOADS = s3output.UPLOADS, at_once  # read when it publishes
    try:
        started = time.perf_counter()
        s3output.publish(spool, locate(url, {"endpoint_url": endpoint}), home)
        return time.perf_counter() - started
    finally:
        s3output.UPLOADS = default


def timed_pack(source: str | Path, output: str | Path, workers: int,
               endpoint: str | None = None) -> float:
    """Seconds of one pack from ``source`` to a fresh ``output`` (a folder or a new
    prefix), its s3 requests to ``endpoint``."""
    overrides: dict[str, object] = {
        "source.path": str(source), "output.path": str(output), "image.size": IMAGE_SIZE,
        "output.shard_samples": SHARD_SAMPLES, "run.workers": workers, "run.quiet": True}
    if endpoint:
        overrides["storage.endpoint_url"] = endpoint
    config = load_config(None, overrides)
    # A bucket output is reached through the AWS variables alone: pack_to_bucket locates it
    # without the config's ``storage`` options (the workers, which read the source, use them).
    if endpoint and str(output).startswith("s3://"):
        os.environ["AWS_ENDPOINT_URL"] = endpoint
    started = time.perf_counter()
    try:
        pack(config)
    finally:
        os.environ.pop("AWS_ENDPOINT_URL", None)
    return time.perf_counter() - started


def timed_listing(url: str, threads: int, endpoint: str) -> float:
    started = time.perf_counter()
    scan(locate(url, {"endpoint_url": endpoint}), SourceConfig(), threads=threads)
    return time.perf_counter() - started


def main() -> None:
    arguments = parser(__doc__, "s3")
    arguments.add_argument("--shards", type=int, default=16)
    arguments.add_argument("--shard-mb", type=int, default=32)
    arguments.add_argument("--small-shards", type=int, default=96)
    arguments.add_argument("--workers", type=int, default=8)
    arguments.add_argument("--images", type=int, default=256)
    arguments.add_argument("--prefixes", type=int, default=16)
    arguments.add_argument("--pack-workers", type=int, default=4)
    arguments.add_argument("--quick", action="store_true",
                           help="small datasets, one round: a check that it runs")
    args = arguments.parse_args()
    if args.quick:
        args.shards, args.shard_mb, args.small_shards, args.reps = 4, 8, 16, 1
        args.images, args.prefixes, args.pack_workers = 16, 4, 2

    for name in [name for name in os.environ if name.startswith("AWS_")]:
        del os.environ[name]  # the bench's own server and dummy credentials, nothing else
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench-secret",
                      AWS_DEFAULT_REGION="us-east-1")
    process, endpoint = start_server()
    proxy = start_proxy(endpoint)
    at_once = s3output.UPLOADS
    try:
        import s3fs

        with tempfile.TemporaryDirectory(dir=scratch_root()) as scratch:
            scratch = Path(scratch)
            os.environ[s3output.SPOOL_VARIABLE] = str(scratch / "spool")
            total = make_dataset(scratch / "dataset", args.shards, args.shard_mb * 2**20)
            small = make_small(scratch / "small", args.small_shards)
            originals = make_originals(scratch / "originals", args.images, args.prefixes)
            client = s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True)
            client.mkdir(BUCKET)
            for name in ("dataset", "small", "originals"):
                client.put(str(scratch / name) + "/", f"{BUCKET}/{name}/", recursive=True)
            url, small_url = f"s3://{BUCKET}/dataset", f"s3://{BUCKET}/small"
            source_url = f"s3://{BUCKET}/originals"
            many, pack_workers = f"{args.workers} workers", f"{args.pack_workers} workers"
            stages = {"local stage": (scratch / "dataset", args.workers, None),
                      "s3 stage": (url, args.workers, endpoint),
                      "small, s3 +5 ms, 1 worker": (small_url, 1, proxy.url),
                      f"small, s3 +5 ms, {many}": (small_url, args.workers, proxy.url)}
            local_source = scratch / "originals"
            delayed_pack = f"pack to s3 +5 ms, {pack_workers}"
            packs = {  # name: (source, output or None for a new prefix, workers, endpoint)
                "local pack": (local_source, scratch / "out", args.pack_workers, None),
                "pack from s3": (source_url, scratch / "out", args.pack_workers, endpoint),
                "pack to s3": (local_source, None, args.pack_workers, endpoint),
                "pack from s3 +5 ms, 1 worker": (source_url, scratch / "out", 1, proxy.url),
                f"pack from s3 +5 ms, {pack_workers}": (source_url, scratch / "out",
                                                        args.pack_workers, proxy.url),
                delayed_pack: (local_source, None, args.pack_workers, proxy.url),
            }
            publishes = {"publish to a fresh prefix +5 ms, 1 at once": 1,
                         f"publish to a fresh prefix +5 ms, {at_once} at once": at_once}
            listings = {f"listing +5 ms, {SCAN_THREADS} threads": SCAN_THREADS,
                        "listing +5 ms, 1 thread": 1}
            runs: dict[str, list[float]] = {
                name: [] for name in [*stages, *packs, *publishes, *listings]}
            requests: dict[str, int] = {}
            # Untimed: the imports of the image libraries and of s3fs in the worker processes,
            # and their start, would otherwise fall on the first packs of the first round.
            for source in (local_source, source_url):
                timed_pack(source, scratch / "out", args.pack_workers, endpoint)
                shutil.rmtree(scratch / "out")
            for rep in range(args.reps):
                for name, (source, workers, through) in stages.items():
                    seen = len(proxy.requests)
                    runs[name].append(timed_stage(source, scratch / "copy", workers, through))
                    if through == proxy.url:
                        requests[name] = len(proxy.requests) - seen
                for name, threads in listings.items():
                    seen = len(proxy.requests)
                    runs[name].append(timed_listing(source_url, threads, proxy.url))
                    requests[name] = len(proxy.requests) - seen
                packed = {}
                for number, (name, (source, output, workers, through)) in \
                        enumerate(packs.items()):
                    if output is None:
                        output = packed[name] = f"s3://{BUCKET}/packed-{rep}-{number}"
                    else:
                        shutil.rmtree(output, ignore_errors=True)
                    seen = len(proxy.requests)
                    runs[name].append(timed_pack(source, output, workers, through))
                    if through == proxy.url:
                        requests[name] = len(proxy.requests) - seen
                spool = s3output.spool_for(locate(packed[delayed_pack])) / "dataset"
                for number, (name, files) in enumerate(publishes.items()):
                    seen = len(proxy.requests)
                    runs[name].append(timed_publish(
                        spool, f"s3://{BUCKET}/published-{rep}-{number}", files, proxy.url,
                        scratch / "publish-home"))
                    requests[name] = len(proxy.requests) - seen
    finally:
        proxy.server.shutdown()
        proxy.server.server_close()
        process.terminate()
        process.wait(timeout=10)

    medians = {name: statistics.median(values) for name, values in runs.items()}
    print(f"staging {args.shards} shards x {args.shard_mb} MB = {total / 1e9:.2f} GB, "
          f"median of {args.reps} rounds, against moto_server on 127.0.0.1")
    print(f"small: {args.small_shards} shards x 256 KiB = {small / 1e6:.1f} MB; packing "
          f"{args.images} JPEGs of 640x480 ({originals / 1e6:.1f} MB) in {args.prefixes} "
          f"prefixes to {IMAGE_SIZE} px, {SHARD_SAMPLES} a shard")
    print(f"{'method':<46}{'seconds':>10}{'rate':>17}{'requests':>10}")
    for name, seconds in medians.items():
        if name.startswith(("listing", "publish")):
            rate = "-"
        elif "pack" in name:
            rate = f"{args.images / seconds:,.0f} images/s"
        else:
            rate = f"{(small if name.startswith('small') else total) / seconds / 1e6:,.0f} MB/s"
        print(f"{name:<46}{seconds:>10.2f}{rate:>17}{requests.get(name, '-'):>10}")
    ratios = {
        "s3_vs_local": medians["s3 stage"] / medians["local stage"],
        "delayed_1_vs_n_workers": medians["small, s3 +5 ms, 1 worker"]
        / medians[f"small, s3 +5 ms, {many}"],
        "pack_from_s3_vs_local": medians["pack from s3"] / medians["local pack"],
        "pack_to_s3_vs_local": medians["pack to s3"] / medians["local pack"],
        "listing_1_vs_n_threads": medians["listing +5 ms, 1 thread"]
        / medians[f"listing +5 ms, {SCAN_THREADS} threads"],
        "pack_reads_1_vs_n_workers": medians["pack from s3 +5 ms, 1 worker"]
        / medians[f"pack from s3 +5 ms, {pack_workers}"],
        "pack_to_s3_delayed_vs_local": medians[delayed_pack] / medians["local pack"],
        "uploads_1_vs_n": medians["publish to a fresh prefix +5 ms, 1 at once"]
        / medians[f"publish to a fresh prefix +5 ms, {at_once} at once"],
    }
    print(f"s3 stage takes {ratios['s3_vs_local']:.2f}x the local stage; through +5 ms per "
          f"request, {args.workers} workers are {ratios['delayed_1_vs_n_workers']:.2f}x as "
          "fast as 1")
    print(f"pack from s3 takes {ratios['pack_from_s3_vs_local']:.2f}x the local pack, pack to "
          f"s3 {ratios['pack_to_s3_vs_local']:.2f}x; through +5 ms per request, the listing "
          f"with {SCAN_THREADS} threads is {ratios['listing_1_vs_n_threads']:.2f}x as fast as "
          f"with 1, the pack's reads with {args.pack_workers} workers "
          f"{ratios['pack_reads_1_vs_n_workers']:.2f}x as fast as with 1; a pack to s3 "
          f"takes {ratios['pack_to_s3_delayed_vs_local']:.2f}x the local pack, and the "
          f"publish of a packed spool to a fresh prefix with {at_once} files at once is "
          f"{ratios['uploads_1_vs_n']:.2f}x as fast as with 1")
    write_report(args.json, {"bytes": total, "shards": args.shards, "workers": args.workers,
                             "images": args.images, "image_bytes": originals,
                             "prefixes": args.prefixes, "pack_workers": args.pack_workers,
                             "uploads": at_once, "scan_threads": SCAN_THREADS,
                             "delay_s": DELAY, "runs": runs, "medians": medians,
                             "requests": requests, **ratios})


if __name__ == "__main__":
    main()
