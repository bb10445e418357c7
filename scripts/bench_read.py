#!/usr/bin/env python3
"""Reading benchmark for `make bench`: originals vs shards, same images, same run.

Packs the cached 8000x6000 JPEG corpus of bench_pack.py (224 px centre crops, as a
classification model reads them) as WebDataset and TFRecord shards once, then runs
`shardsmith bench-read` on them: (a) a naive loader over the originals, (b) the torch reader,
(c) the tf.data reader, with the ratios (b)/(a), (c)/(a).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_pack import REPO, ensure_corpus, link_subset  # noqa: E402

IMAGES = 32


def main() -> None:
    cache = REPO / ".cache" / "bench"
    source = cache / "subsets" / f"jpeg-{IMAGES}"
    link_subset(ensure_corpus(cache, "jpeg", IMAGES), source, IMAGES)
    shardsmith = [sys.executable, "-m", "shardsmith.cli"]
    outputs = {}
    for fmt in ("webdataset", "tfrecord"):
        outputs[fmt] = REPO / "build" / "bench" / f"read-{fmt}"
        subprocess.run([*shardsmith, "pack", str(source), str(outputs[fmt]), "--format", fmt,
                        "--size", "224", "--resize", "center_crop", "--shard-samples", "8",
                        "--quiet"], check=True, stdout=subprocess.DEVNULL)
    quiet_tf = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    subprocess.run([*shardsmith, "bench-read", str(outputs["webdataset"]), "--source",
                    str(source), "--tfrecords", str(outputs["tfrecord"]), "--seconds", "20",
                    "--json", str(REPO / "build" / "bench" / "read.json")], check=True,
                   env=quiet_tf)


if __name__ == "__main__":
    main()
