#!/usr/bin/env python3
"""GPU feed check: does a ResNet-50 on this GPU wait for data, fed from originals vs shards?

    python scripts/gpu_feed_check.py [--images 96] [--seconds 45] [--workers 15] [--gpu-decode]

Makes a small corpus of 8000x6000 JPEG originals (scripts/make_sample_tree.py), packs it
with shardsmith (224 px centre crops, so batches stack), then trains a torchvision ResNet-50
(bf16 autocast, channels_last, batch 256) for --seconds each, fed
  (a) from the originals: DataLoader workers open, decode and resize every original;
  (b) from the shards: shardsmith's ShardLoader (batch mode, workers decode on the CPU);
  (c) with --gpu-decode: the shards' JPEG bytes in batches (``decode=False``), decoded on the
      GPU by torchvision's nvJPEG;
  (d) where NVIDIA DALI is installed: shardsmith.readers.dali, decoding on the GPU ("mixed").
It prints images/s and GPU utilisation (nvidia-smi, sampled every 200 ms) per feed.
Needs a CUDA GPU, torch, torchvision, and shardsmith with its dependencies (simplejpeg,
tifffile, crc32c, xxhash, click, joblib, pyyaml: carry them as wheels where pip cannot reach).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch
import torchvision

REPO = Path(__file__).resolve().parents[1]
BATCH = 256
SIZE = 224
MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255


class GpuSampler:
    """Mean GPU utilisation from nvidia-smi while the context is open."""

    def __init__(self):
        self.samples: list[float] = []
        self._process = None
        self._thread = None

    def __enter__(self):
        self._process = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
             "-lms", "200"], stdout=subprocess.PIPE, text=True)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self):
        for line in self._process.stdout:
            try:
                self.samples.append(float(line.split(",")[0]))
            except ValueError:
                continue

    def __exit__(self, *exc):
        self._process.terminate()
        self._process.wait()

    @property
    def mean(self) -> float:
        return statistics.mean(self.samples) if self.samples else float("nan")


class Originals(torch.utils.data.Dataset):
    """The loader teams use today: full decode of each original, resize, centre crop."""

    def __init__(self, root: Path):
        self.paths = sorted(p for p in root.rglob("*") if p.is_file())

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        from PIL import Image

        with Image.open(self.paths[index]) as image:
            image = image.convert("RGB")
            side = min(image.size)
            left, top = (image.width - side) // 2, (image.height - side) // 2
            image = image.crop((left, top, left + side, top + side)).resize(
                (SIZE, SIZE), Image.BILINEAR)
        pixels = torch.frombuffer(bytearray(image.tobytes()), dtype=torch.uint8)
        return pixels.view(SIZE, SIZE, 3).permute(2, 0, 1), 0


def endless(loader):
    while True:
        yield from loader


def train(feed, seconds: float, decode_on_gpu: bool = False) -> tuple[float, float]:
    """Images/s and mean GPU utilisation of ResNet-50 training steps fed by ``feed``."""
    model = torchvision.models.resnet50(num_classes=10).cuda().to(
        memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    mean, std = MEAN.cuda(), STD.cuda()
    batches = endless(feed)

    def step() -> int:
        images, labels = next(batches)
        if decode_on_gpu:
            images = torch.stack(torchvision.io.decode_jpeg(images, device="cuda"))
        elif images.shape[-1] == 3:  # DALI gives N×H×W×C
            images = images.permute(0, 3, 1, 2)
        images = images.cuda(non_blocking=True).float()
        images = ((images - mean) / std).contiguous(memory_format=torch.channels_last)
        labels = torch.as_tensor(labels).cuda(non_blocking=True) % 10
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return images.shape[0]

    for _ in range(3):  # warm-up: cuDNN autotuning, loader workers starting
        step()
    torch.cuda.synchronize()
    count, started = 0, time.perf_counter()
    with GpuSampler() as gpu:
        while time.perf_counter() - started < seconds:
            count += step()
        torch.cuda.synchronize()
    return count / (time.perf_counter() - started), gpu.mean


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=96)
    parser.add_argument("--seconds", type=float, default=45)
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--gpu-decode", action="store_true")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "feedcheck")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_feed_check: no CUDA GPU here")
    torch.backends.cudnn.benchmark = True

    source, shards = args.work / "originals", args.work / "shards"
    started = time.perf_counter()
    subprocess.run([sys.executable, str(REPO / "scripts" / "make_sample_tree.py"), str(source),
                    "--count", str(args.images), "--width", "8000", "--height", "6000",
                    "--kinds", "jpg", "--classes", "ok,scratch,dent"], check=True)
    subprocess.run([sys.executable, "-m", "shardsmith.cli", "pack", str(source), str(shards),
                    "--size", str(SIZE), "--resize", "center_crop", "--shard-samples", "16",
                    "--quiet", "--overwrite"], check=True, cwd=REPO)
    print(f"corpus and shards ready in {time.perf_counter() - started:.0f}s", flush=True)

    from shardsmith.readers.torch import ShardLoader, dataset

    feeds = {
        "(a) originals": (torch.utils.data.DataLoader(
            Originals(source), shuffle=True, batch_size=BATCH, num_workers=args.workers,
            pin_memory=True, persistent_workers=True), False),
        "(b) shards, CPU decode": (ShardLoader(
            dataset(shards, batch_size=BATCH), num_workers=args.workers), False),
    }
    if args.gpu_decode:
        feeds["(c) shards, GPU decode"] = (torch.utils.data.DataLoader(
            dataset(shards, batch_size=BATCH, decode=False), batch_size=None,
            num_workers=args.workers, persistent_workers=True), True)
    try:
        from shardsmith.readers.dali import loader as dali_loader

        feeds["(d) shards, DALI GPU"] = (dali_loader(shards, batch_size=BATCH, device="gpu",
                                                      num_threads=args.workers), False)
    except ImportError:
        print("(d) skipped: NVIDIA DALI is not installed here", flush=True)
    print(f"{'feed':<26}{'images/s':>10}{'GPU busy':>10}")
    for name, (feed, on_gpu) in feeds.items():
        rate, busy = train(feed, args.seconds, decode_on_gpu=on_gpu)
        print(f"{name:<26}{rate:>10,.0f}{busy:>9.0f}%", flush=True)


if __name__ == "__main__":
    main()
