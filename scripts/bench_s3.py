#!/usr/bin/env python3
"""Benchmark of `shardsmith stage` from an s3:// dataset against a local stage of the same
dataset, same run.

    scripts/bench_s3.py [--shards N] [--shard-mb MB] [--workers W] [--reps R] [--quick]

The bench starts its own S3 server on 127.0.0.1 (``moto_server``, as the tests do, stopped at
the end) and uploads a dataset of N random shards (bench_stage.py's: staging never looks inside
a shard).  Rounds interleave: a stage of the local folder (the baseline) and a stage from the
bucket straight from the server (throughput); then, of a second dataset of many small shards
(--small-shards of 256 KiB: a request each, so latency, not bandwidth, sets the time), two
stages through the tests' fault proxy (tests/s3server.py) with 5 ms added to every request,
with 1 worker and with W, so that the parallelism of the downloads shows.  Medians of --reps
rounds; ratios against the local stage and of 1 worker against W.  ``pack`` from and to a
bucket is not measured here yet.
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

from shardsmith.ops.stage import stage  # noqa: E402

DELAY = 0.005  # seconds added to every request through the proxy (the 5 ms)
BUCKET = "bench"


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


def timed_stage(source: str | Path, target: Path, workers: int,
                endpoint: str | None = None) -> float:
    shutil.rmtree(target, ignore_errors=True)
    options = {"endpoint_url": endpoint} if endpoint else None
    started = time.perf_counter()
    stage(source, target, workers=workers, quiet=True, storage_options=options)
    return time.perf_counter() - started


def main() -> None:
    arguments = parser(__doc__, "s3")
    arguments.add_argument("--shards", type=int, default=16)
    arguments.add_argument("--shard-mb", type=int, default=32)
    arguments.add_argument("--small-shards", type=int, default=96)
    arguments.add_argument("--workers", type=int, default=8)
    arguments.add_argument("--quick", action="store_true",
                           help="4 shards of 8 MB, one round: a check that it runs")
    args = arguments.parse_args()
    if args.quick:
        args.shards, args.shard_mb, args.small_shards, args.reps = 4, 8, 16, 1

    for name in [name for name in os.environ if name.startswith("AWS_")]:
        del os.environ[name]  # the bench's own server and dummy credentials, nothing else
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench-secret",
                      AWS_DEFAULT_REGION="us-east-1")
    process, endpoint = start_server()
    proxy = start_proxy(endpoint)
    try:
        import s3fs

        with tempfile.TemporaryDirectory(dir=scratch_root()) as scratch:
            scratch = Path(scratch)
            total = make_dataset(scratch / "dataset", args.shards, args.shard_mb * 2**20)
            small = make_small(scratch / "small", args.small_shards)
            client = s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True)
            client.mkdir(BUCKET)
            for name in ("dataset", "small"):
                client.put(str(scratch / name) + "/", f"{BUCKET}/{name}/", recursive=True)
            url, small_url = f"s3://{BUCKET}/dataset", f"s3://{BUCKET}/small"
            rows = {"local stage": (scratch / "dataset", args.workers, None),
                    "s3 stage": (url, args.workers, endpoint),
                    "small, s3 +5 ms, 1 worker": (small_url, 1, proxy.url),
                    f"small, s3 +5 ms, {args.workers} workers": (small_url, args.workers,
                                                                 proxy.url)}
            runs: dict[str, list[float]] = {name: [] for name in rows}
            requests: dict[str, int] = {}
            for _ in range(args.reps):
                for name, (source, workers, through) in rows.items():
                    seen = len(proxy.requests)
                    runs[name].append(timed_stage(source, scratch / "copy", workers, through))
                    if through == proxy.url:
                        requests[name] = len(proxy.requests) - seen
    finally:
        proxy.server.shutdown()
        proxy.server.server_close()
        process.terminate()
        process.wait(timeout=10)

    medians = {name: statistics.median(values) for name, values in runs.items()}
    print(f"staging {args.shards} shards x {args.shard_mb} MB = {total / 1e9:.2f} GB, "
          f"median of {args.reps} rounds, against moto_server on 127.0.0.1")
    print(f"small: {args.small_shards} shards x 256 KiB = {small / 1e6:.1f} MB")
    print(f"{'method':<32}{'seconds':>10}{'MB/s':>10}{'requests':>10}")
    for name, seconds in medians.items():
        size = small if name.startswith("small") else total
        print(f"{name:<32}{seconds:>10.2f}{size / seconds / 1e6:>10,.0f}"
              f"{requests.get(name, '-'):>10}")
    parallel = f"small, s3 +5 ms, {args.workers} workers"
    ratios = {"s3_vs_local": medians["s3 stage"] / medians["local stage"],
              "delayed_1_vs_n_workers": medians["small, s3 +5 ms, 1 worker"]
              / medians[parallel]}
    print(f"s3 stage takes {ratios['s3_vs_local']:.2f}x the local stage; through +5 ms per "
          f"request, {args.workers} workers are {ratios['delayed_1_vs_n_workers']:.2f}x as "
          "fast as 1")
    write_report(args.json, {"bytes": total, "shards": args.shards, "workers": args.workers,
                             "delay_s": DELAY, "runs": runs, "medians": medians,
                             "requests": requests, **ratios})


if __name__ == "__main__":
    main()
