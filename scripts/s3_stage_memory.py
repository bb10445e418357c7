"""Peak memory of downloading one large object the way ``stage`` does, from a local moto_server.

    python scripts/s3_stage_memory.py 64 512     # object sizes in MiB

Each size is uploaded, then downloaded by ``atomic.copy_verified`` (as ``stage`` does) in a
fresh process whose peak resident memory (``VmHWM``, which a new process starts afresh) is
read before and after.
Needs ``moto[server]`` and ``s3fs``.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import pathlib, sys, time
from shardsmith.atomic import copy_verified
from shardsmith.door import open_file
from shardsmith.storage import locate

def peak_kib():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM"))

size, digest, target = int(sys.argv[1]), sys.argv[2], pathlib.Path(sys.argv[3])
source = locate("s3://bench") / "big.tar"
source.exists()  # the client and its connection made before the baseline
before, started = peak_kib(), time.monotonic()
with open_file(source, size) as handle:
    assert copy_verified(handle, target, size, digest) == digest
seconds = time.monotonic() - started
print(f"{size >> 20:5d} MiB object: {seconds:6.2f} s ({(size >> 20) / seconds:4.0f} MiB/s), "
      f"peak memory +{(peak_kib() - before) / 1024:.1f} MiB over {before / 1024:.0f} MiB")
"""


def main(sizes: list[int]) -> None:
    server = Path(sys.executable).parent / "moto_server"
    command = str(server) if server.exists() else shutil.which("moto_server")
    if command is None:
        raise SystemExit("moto_server is not installed (pip install 'moto[server]')")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([command, "-H", "127.0.0.1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
                connection.request("GET", "/")
                connection.getresponse().read()
                break
            except OSError:
                time.sleep(0.1)
        env = dict(os.environ, AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}",
                   AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                   AWS_DEFAULT_REGION="us-east-1")
        os.environ.update(env)
        import s3fs

        filesystem = s3fs.S3FileSystem(skip_instance_cache=True)
        filesystem.mkdir("bench")
        for size in sizes:
            data = os.urandom(size << 20)
            filesystem.pipe_file("bench/big.tar", data)
            digest = hashlib.sha256(data).hexdigest()
            del data
            with tempfile.TemporaryDirectory() as folder:
                subprocess.run([sys.executable, "-c", CHILD, str(size << 20), digest,
                                str(Path(folder) / "big.tar")], check=True, env=env)
    finally:
        process.terminate()
        process.wait()


if __name__ == "__main__":
    main([int(size) for size in sys.argv[1:]] or [64, 512])
