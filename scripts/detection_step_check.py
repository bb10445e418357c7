#!/usr/bin/env python3
"""One real training step of torchvision detection models on a batch from shardsmith's reader.

    python scripts/detection_step_check.py [--device cuda] [--work DIR]

Needs torch and torchvision that load together (PyPI's torchvision does not load with the
CPU-only torch wheel: ``operator torchvision::nms does not exist``).  A venv of its own with
``pip install torch==2.14.1 torchvision==0.29.1`` and ``pip install -e .`` has them; their
CUDA builds run the check on the CPU too (``--device cpu``).  ``make test`` checks the
reader's targets against torchvision's documented contract in plain torch; this script is the
proof with the real consumer:

1. makes a small tree of originals with drawn defects (EXIF-rotated too) and a COCO file
   (boxes, a polygon and an RLE per image), and packs it with ``image.resize: center_crop``;
2. reads one batch with ``shardsmith.readers.torch.dataset(..., targets=True)``;
3. runs one optimiser step of ``fasterrcnn_mobilenet_v3_large_fpn(weights=None,
   weights_backbone=None)`` and of ``maskrcnn_resnet50_fpn(weights=None,
   weights_backbone=None)`` (masks), and checks that every loss is finite.

No weights are downloaded.  Prints one JSON line per model; exits 1 when a loss is not finite.
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
    parser.add_argument("--device", default="cuda" if _cuda() else "cpu")
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()

    import torch
    import torchvision
    from torchvision.models import detection

    from shardsmith import load_config, pack
    from shardsmith.readers.torch import dataset

    work = args.work or Path(tempfile.mkdtemp(prefix="shardsmith-detection-"))
    source, output = work / "source", work / "shards"
    make_tree(source)
    pack(load_config(None, {"source.path": str(source), "output.path": str(output),
                            "source.annotations.coco": "instances.json", "image.size": 320,
                            "image.resize": "center_crop", "run.quiet": True}))
    data = dataset(output, targets=True, batch_size=4, shuffle=False)
    images, targets = next(iter(data))
    device = torch.device(args.device)
    images = [image.float().div(255).to(device) for image in images]
    targets = [{key: value.to(device) for key, value in target.items()} for target in targets]
    classes = len(data.object_classes) + 1  # and the background
    failed = False
    for name, build, keep in (
            ("fasterrcnn_mobilenet_v3_large_fpn", detection.fasterrcnn_mobilenet_v3_large_fpn,
             ("boxes", "labels")),
            ("maskrcnn_resnet50_fpn", detection.maskrcnn_resnet50_fpn,
             ("boxes", "labels", "masks"))):
        torch.manual_seed(0)
        model = build(weights=None, weights_backbone=None, num_classes=classes).to(device)
        model.train()
        optimiser = torch.optim.SGD(model.parameters(), lr=0.005, momentum=0.9)
        losses = model(images, [{key: target[key] for key in keep} for target in targets])
        total = sum(losses.values())
        optimiser.zero_grad()
        total.backward()
        optimiser.step()
        values = {key: float(value) for key, value in losses.items()}
        finite = all(math.isfinite(value) for value in values.values())
        failed |= not finite
        print(json.dumps({"model": name, "device": str(device), "torch": torch.__version__,
                          "torchvision": torchvision.__version__, "batch": len(images),
                          "objects": [len(target["boxes"]) for target in targets],
                          "losses": values, "finite": finite}))
    return 1 if failed else 0


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


if __name__ == "__main__":
    sys.exit(main())
