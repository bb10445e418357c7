#!/usr/bin/env python3
"""Train a torchvision detection model straight from shardsmith's torch reader: an example.

    python scripts/train_torchvision.py [DATASET] [--split train] [--epochs 3] [--masks]
                                        [--device cuda] [--work DIR]

docs/trainers.md, "Train with torchvision", is this script's loop.  Needs torch and
torchvision that load together (PyPI's torchvision does not load with the CPU-only torch wheel:
``operator torchvision::nms does not exist``): ``scripts/consumers_venv.sh`` makes a venv with
``torch==2.14.1 torchvision==0.29.1`` and shardsmith; their CUDA builds run on the CPU too.

Without DATASET it makes a small tree of originals with drawn defects (EXIF-rotated too) and a
COCO file (boxes, a polygon and an RLE per image), packs it with ``image.resize: center_crop``
and trains on that.  ``fasterrcnn_mobilenet_v3_large_fpn(weights=None, weights_backbone=None)``
on boxes, or with ``--masks`` ``maskrcnn_resnet50_fpn`` on boxes and masks; no weights are
downloaded.  Prints one JSON line per epoch (the mean of each loss); exits 1 when a loss is not
finite.  ``scripts/check_consumers.py`` trains the same way and checks that the losses fall.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def make_tree(source: Path, count: int = 8) -> None:
    """Originals 480x360 with a bright box and a dark polygon drawn in; one COCO file."""
    from pycocotools import mask as coco_mask

    rng = np.random.default_rng(0)
    document = {"images": [], "annotations": [],
                "categories": [{"id": 1, "name": "scratch"}, {"id": 2, "name": "dent"}]}
    for number in range(count):
        grey = np.full((360, 480), 128, np.uint8)
        x, y = int(rng.integers(60, 300)), int(rng.integers(20, 200))
        grey[y : y + 80, x : x + 100] = 250
        spot = np.zeros((360, 480), np.uint8)
        spot[250:320, 150:260] = 1
        grey[spot > 0] = 10
        rle = coco_mask.encode(np.asfortranarray(spot))
        exif = Image.Exif()
        exif[0x0112] = 1 + number % 8
        relpath = f"parts/p{number}.jpg"
        (source / "parts").mkdir(parents=True, exist_ok=True)
        Image.fromarray(grey).convert("RGB").save(source / relpath, quality=95, exif=exif)
        document["images"].append({"id": number, "file_name": relpath, "width": 480,
                                   "height": 360})
        document["annotations"] += [
            {"id": 2 * number, "image_id": number, "category_id": 1,
             "bbox": [x, y, 100, 80],
             "segmentation": [[x, y, x + 100, y, x + 100, y + 80, x, y + 80]]},
            {"id": 2 * number + 1, "image_id": number, "category_id": 2, "iscrowd": 1,
             "bbox": [150, 250, 110, 70],
             "segmentation": {"size": rle["size"], "counts": rle["counts"].decode()}},
        ]
    (source / "instances.json").write_text(json.dumps(document))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", type=Path, nargs="?", help="a packed or staged dataset "
                        "with objects (default: make and pack a small one)")
    parser.add_argument("--split", default="train")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--masks", action="store_true", help="Mask R-CNN on boxes and masks")
    parser.add_argument("--device", default="cuda" if _cuda() else "cpu")
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()

    import torch
    from torchvision.models import detection

    from shardsmith import load_config, pack
    from shardsmith.readers.torch import SampleLoader, dataset, detection_collate

    path = args.dataset
    if path is None:
        work = args.work or Path(tempfile.mkdtemp(prefix="shardsmith-detection-"))
        make_tree(work / "source")
        path = work / "shards"
        pack(load_config(None, {"source.path": str(work / "source"), "output.path": str(path),
                                "source.annotations.coco": "instances.json", "image.size": 320,
                                "image.resize": "center_crop", "run.quiet": True}))
    data = dataset(path, split=args.split, targets=True, seed=0)
    loader = SampleLoader(data, batch_size=4, collate_fn=detection_collate, num_workers=2)
    device = torch.device(args.device)
    build = detection.maskrcnn_resnet50_fpn if args.masks \
        else detection.fasterrcnn_mobilenet_v3_large_fpn
    keep = ("boxes", "labels", "masks") if args.masks else ("boxes", "labels")
    torch.manual_seed(0)
    model = build(weights=None, weights_backbone=None,
                  num_classes=len(data.object_classes) + 1).to(device)  # and the background
    optimiser = torch.optim.SGD(model.parameters(), lr=0.005, momentum=0.9, weight_decay=1e-4)
    model.train()
    for epoch in range(args.epochs):
        data.set_epoch(epoch)
        sums: dict[str, float] = {}
        batches = 0
        for images, targets in loader:
            images = [image.to(device).float() / 255 for image in images]
            targets = [{key: target[key].to(device) for key in keep} for target in targets]
            losses = model(images, targets)
            optimiser.zero_grad()
            sum(losses.values()).backward()
            optimiser.step()
            for key, value in losses.items():
                sums[key] = sums.get(key, 0.0) + value.item()
            batches += 1
        means = {key: round(value / batches, 4) for key, value in sums.items()}
        print(json.dumps({"model": build.__name__, "device": str(device), "epoch": epoch,
                          "batches": batches, "losses": means}))
        if not all(math.isfinite(value) for value in means.values()):
            return 1
    return 0


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


if __name__ == "__main__":
    sys.exit(main())
