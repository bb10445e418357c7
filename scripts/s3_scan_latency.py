"""How much the threads of an ``s3://`` listing save on a store with latency.

Starts ``moto_server``, puts 640 small objects in 32 prefixes, and lists them through the
test's fault proxy (tests/s3server.py) with every request delayed 50 ms, with 1 and with 16
threads.  Run from the repository root: ``python scripts/s3_scan_latency.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from http.server import ThreadingHTTPServer

sys.path.insert(0, "tests")

import s3fs  # noqa: E402
from s3server import FaultProxy, _handler, _moto_command, free_port  # noqa: E402

from shardsmith.config import SourceConfig  # noqa: E402
from shardsmith.packing.scan import scan  # noqa: E402
from shardsmith.storage import locate  # noqa: E402

PREFIXES, OBJECTS, DELAY = 32, 20, 0.05


def main() -> None:
    port = free_port()
    server = subprocess.Popen(_moto_command(port), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        time.sleep(2)
        endpoint = f"http://127.0.0.1:{port}"
        os.environ.update(AWS_ACCESS_KEY_ID="k", AWS_SECRET_ACCESS_KEY="s",
                          AWS_DEFAULT_REGION="us-east-1")
        fs = s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True)
        fs.mkdir("bench")
        for prefix in range(PREFIXES):
            for number in range(OBJECTS):
                fs.pipe_file(f"bench/src/c{prefix:02d}/{number}.jpg", b"x" * 100)
        proxy = FaultProxy(endpoint, delay=DELAY)
        proxy.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(proxy))
        proxy.server.daemon_threads = True
        threading.Thread(target=proxy.server.serve_forever, daemon=True).start()
        proxy.every("delay", 1)
        os.environ["AWS_ENDPOINT_URL"] = proxy.url
        for threads in (1, 16):
            proxy.requests.clear()
            started = time.perf_counter()
            found = scan(locate("s3://bench/src"), SourceConfig(), threads=threads)
            seconds = time.perf_counter() - started
            print(f"threads={threads}: {len(found.files)} objects in {PREFIXES} prefixes, "
                  f"{len(proxy.requests)} requests, {seconds:.2f} s")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
