#!/usr/bin/env python3
"""Ultralytics YOLO trained straight from shards (``shardsmith.readers.ultralytics``), checked
against Ultralytics' own loader of the same samples written as files.

    python scripts/check_ultralytics_reader.py [--work DIR] [--epochs 12] [--imgsz 96]

Runs in the consumers' venv (``make consumers``: torch, torchvision, ultralytics, opencv-python
and shardsmith ``-e .``), on the CPU, with no network: ``YOLO_OFFLINE=1`` is set before
Ultralytics is imported, its settings live in the work folder, and matplotlib's DejaVu Sans is
placed where Ultralytics' font check looks for Arial.ttf (it downloads the font otherwise).

1. draws a tiny learnable corpus (a bright "scratch" box and a dark "dent" octagon at random
   places, some images without either) with labelme annotations, and packs it (WebDataset);
2. writes the same samples as a YOLO folder by hand: ``images/SPLIT/KEY.jpg`` (the shard's
   JPEG bytes) and ``labels/SPLIT/KEY.txt`` from the drawn coordinates (not from the shards'
   metadata), and ``data.yaml``;
3. checks, split by split, that ``ShardYOLODataset`` gives Ultralytics what its own
   ``YOLODataset`` gives from the files: the same samples in the same order, the same labels
   (classes, boxes, shapes) and, item by item with the same random seed, the same tensors out
   of Ultralytics' augmentation (mosaic and all, for train) and the same collated batch;
4. trains ``yolo11n.yaml`` from scratch through ``ShardDetectionTrainer`` and, with the same
   seed, through Ultralytics' own trainer on the files; checks that the box and class losses
   fall, and prints both runs' losses and mAP50 (the curves differ: Ultralytics' file listing
   draws from ``random`` for its read-speed check, so the runs draw different mosaics).

Prints one JSON line; exits 1 when a check fails.  Without ``--work`` it works in a temporary
folder, removed at the end.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WIDTH, HEIGHT = 160, 120


def make_tree(source: Path, count: int, seed: int = 0) -> dict[str, list[tuple[str, tuple]]]:
    """Originals WIDTHxHEIGHT, each with a labelme file; returns, per original's relpath, its
    objects as (class name, (x0, y0, x1, y1) in pixels)."""
    rng = np.random.default_rng(seed)
    truth: dict[str, list[tuple[str, tuple]]] = {}
    (source / "parts").mkdir(parents=True, exist_ok=True)
    for number in range(count):
        grey = np.full((HEIGHT, WIDTH), 128, np.int16) + rng.integers(-4, 5, (HEIGHT, WIDTH))
        shapes, objects = [], []
        if number % 6 != 5:  # every sixth image is a background image
            w, h = int(rng.integers(24, 48)), int(rng.integers(12, 30))
            x, y = int(rng.integers(0, WIDTH - w)), int(rng.integers(0, HEIGHT - h))
            grey[y : y + h, x : x + w] = 250
            shapes.append({"label": "scratch", "shape_type": "rectangle",
                           "points": [[x, y], [x + w, y + h]]})
            objects.append(("scratch", (x, y, x + w, y + h)))
        if number % 3 != 2:
            side = int(rng.integers(20, 36))
            cx = int(rng.integers(side, WIDTH - side))
            cy = int(rng.integers(side, HEIGHT - side))
            cut = side // 3
            half = side // 2
            ring = [(cx - half + cut, cy - half), (cx + half - cut, cy - half),
                    (cx + half, cy - half + cut), (cx + half, cy + half - cut),
                    (cx + half - cut, cy + half), (cx - half + cut, cy + half),
                    (cx - half, cy + half - cut), (cx - half, cy - half + cut)]
            ys, xs = np.mgrid[0:HEIGHT, 0:WIDTH] + 0.5
            inside = np.ones((HEIGHT, WIDTH), bool)
            for (ax, ay), (bx, by) in zip(ring, ring[1:] + ring[:1], strict=True):
                inside &= (bx - ax) * (ys - ay) - (by - ay) * (xs - ax) >= 0
            grey[inside] = 8
            shapes.append({"label": "dent", "shape_type": "polygon",
                           "points": [list(point) for point in ring]})
            objects.append(("dent", (cx - half, cy - half, cx + half, cy + half)))
        relpath = f"parts/p{number:03d}.jpg"
        rgb = np.repeat(np.clip(grey, 0, 255).astype(np.uint8)[:, :, None], 3, axis=2)
        Image.fromarray(rgb).save(source / relpath, quality=95)
        (source / relpath).with_suffix(".json").write_text(json.dumps({
            "version": "5.4.1", "imagePath": Path(relpath).name, "imageData": None,
            "imageWidth": WIDTH, "imageHeight": HEIGHT, "shapes": shapes}))
        truth[relpath] = objects
    return truth


def write_yolo_folder(shards: Path, folder: Path, truth: dict) -> dict[str, int]:
    """The packed samples as a YOLO folder, labels from ``truth`` (class numbers in the
    manifest's object class order, as ``data.yaml`` names them); samples per split."""
    from shardsmith.dataset.manifest import iter_sample_index, read_manifest
    from shardsmith.insight.picks import read_packed

    manifest = read_manifest(shards)
    records = list(iter_sample_index(shards, manifest))
    jpegs = read_packed(shards, manifest, records)
    names = list(manifest.object_classes)
    counts: dict[str, int] = {}
    for record in records:
        assert (record.width, record.height) == (WIDTH, HEIGHT), "packed with a resize"
        images, labels = folder / "images" / record.split, folder / "labels" / record.split
        images.mkdir(parents=True, exist_ok=True)
        labels.mkdir(parents=True, exist_ok=True)
        (images / f"{record.key}.jpg").write_bytes(jpegs[record.key])
        lines = [f"{names.index(name)} {(x0 + x1) / 2 / WIDTH:.6f} {(y0 + y1) / 2 / HEIGHT:.6f} "
                 f"{(x1 - x0) / WIDTH:.6f} {(y1 - y0) / HEIGHT:.6f}"
                 for name, (x0, y0, x1, y1) in truth[record.path]]
        (labels / f"{record.key}.txt").write_text("".join(line + "\n" for line in lines))
        counts[record.split] = counts.get(record.split, 0) + 1
    val = "val" if "val" in counts else "train"
    (folder / "data.yaml").write_text(
        f"path: {folder.resolve()}\ntrain: images/train\nval: images/{val}\nnames:\n"
        + "".join(f"  {number}: {name}\n" for number, name in enumerate(names)))
    return counts


def compare_datasets(shards: Path, folder: Path, imgsz: int) -> dict:
    """Ultralytics' YOLODataset over the files against ShardYOLODataset over the shards."""
    import torch
    from ultralytics.cfg import get_cfg
    from ultralytics.data import build_yolo_dataset
    from ultralytics.data.utils import check_det_dataset

    from shardsmith.readers.ultralytics import shard_data, shard_yolo_dataset

    cfg = get_cfg(overrides={"imgsz": imgsz, "task": "detect", "data": str(folder / "data.yaml")})
    files_data = check_det_dataset(cfg.data)
    ours_data = shard_data(shards)
    report: dict = {}
    for mode, split in (("train", "train"), ("val", "val")):
        theirs = build_yolo_dataset(cfg, files_data[split], 8, files_data, mode=mode,
                                    rect=mode == "val", stride=32)
        ours = shard_yolo_dataset(cfg, shards, ours_data[split], 8, ours_data, mode=mode,
                                  rect=mode == "val", stride=32)
        stems = [Path(name).stem for name in ours.im_files]
        assert stems == [Path(name).stem for name in theirs.im_files], f"{split}: samples differ"
        for mine, its in zip(ours.labels, theirs.labels, strict=True):
            assert mine["cls"].tolist() == its["cls"].tolist(), f"{split}: classes differ"
            assert np.allclose(mine["bboxes"], its["bboxes"], atol=1e-6), f"{split}: boxes differ"
            assert tuple(mine.get("shape", ())) == tuple(its.get("shape", ())), "shapes differ"
        # Ultralytics' transforms draw from random and numpy's generator: the same seed, the
        # same draws, so equal inputs give equal items (mosaic partners and all).
        items = []
        for dataset in (ours, theirs):
            random.seed(0)
            np.random.seed(0)
            items.append([dataset[i] for i in range(len(dataset))])
        for mine, its in zip(*items, strict=True):
            assert torch.equal(mine["img"], its["img"]), f"{split}: images differ"
            assert torch.allclose(mine["bboxes"], its["bboxes"], atol=1e-5), \
                f"{split}: augmented boxes differ"
            assert torch.equal(mine["cls"], its["cls"]), f"{split}: augmented classes differ"
        batch = [ours.collate_fn(items[0][:8]), theirs.collate_fn(items[1][:8])]
        for key in ("img", "cls", "batch_idx"):
            assert torch.equal(batch[0][key], batch[1][key]), f"{split}: batch {key} differs"
        if mode == "val":  # worker processes (fork) give the batches one process gives
            loaders = [torch.utils.data.DataLoader(ours, batch_size=4, num_workers=workers,
                                                   collate_fn=ours.collate_fn)
                       for workers in (0, 2)]
            for alone, forked in zip(*loaders, strict=True):
                assert torch.equal(alone["img"], forked["img"]), "workers change the images"
                assert torch.equal(alone["bboxes"], forked["bboxes"]), "workers change boxes"
        report[split] = {"samples": len(ours),
                         "instances": int(sum(len(label["cls"]) for label in ours.labels)),
                         "background": int(sum(not len(label["cls"]) for label in ours.labels))}
    return report


def train(model_yaml: str, data: str, trainer, project: Path, name: str, epochs: int,
          imgsz: int) -> list[dict[str, float]]:
    """One training run; its results.csv as a list of rows."""
    from ultralytics import YOLO

    YOLO(model_yaml).train(
        trainer=trainer, data=data, epochs=epochs, imgsz=imgsz, batch=8, pretrained=False,
        amp=False, plots=False, device="cpu", workers=0, seed=0, deterministic=True,
        project=str(project), name=name, exist_ok=True, verbose=False, val=True)
    with open(project / name / "results.csv", newline="") as handle:
        return [{key.strip(): float(value) for key, value in row.items()}
                for row in csv.DictReader(handle)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--count", type=int, default=96)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--imgsz", type=int, default=128)
    parser.add_argument("--no-train", action="store_true", help="the dataset checks only")
    args = parser.parse_args()
    if args.work:  # kept: the runs' results.csv and weights are there to look at
        return check(args.work.resolve(), args)
    with tempfile.TemporaryDirectory(prefix="shardsmith-ultra-") as work:
        return check(Path(work).resolve(), args)


def check(work: Path, args: argparse.Namespace) -> int:
    """The checks and the two trainings in ``work``; prints the JSON line, returns the exit
    code."""
    config_dir = work / "ultralytics-config"
    config_dir.mkdir(parents=True, exist_ok=True)
    os.environ.update(YOLO_OFFLINE="1", HF_HUB_OFFLINE="1", YOLO_CONFIG_DIR=str(config_dir))
    import matplotlib

    fonts = config_dir / "Ultralytics"  # Ultralytics' USER_CONFIG_DIR under YOLO_CONFIG_DIR
    fonts.mkdir(exist_ok=True)
    shutil.copy(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf",
                fonts / "Arial.ttf")

    from shardsmith import load_config, pack
    from shardsmith.readers.ultralytics import ShardDetectionTrainer

    source, shards, folder = work / "source", work / "shards", work / "yolo"
    for old in (source, shards, folder, work / "runs"):
        shutil.rmtree(old, ignore_errors=True)
    truth = make_tree(source, args.count)
    pack(load_config(None, {"source.path": str(source), "output.path": str(shards),
                            "source.annotations.files": "labelme", "image.size": WIDTH,
                            "splits": {"train": 0.75, "val": 0.25}, "run.quiet": True}))
    counts = write_yolo_folder(shards, folder, truth)
    result: dict = {"work": str(args.work) if args.work else None, "samples": counts}
    failed = False
    try:
        result["datasets_equal"] = compare_datasets(shards, folder, args.imgsz)
    except AssertionError as exc:
        result["datasets_equal"], failed = f"no: {exc}", True

    if args.no_train:
        print(json.dumps(result))
        return 1 if failed else 0
    runs = work / "runs"
    ours = train("yolo11n.yaml", str(shards), ShardDetectionTrainer, runs, "shards",
                 args.epochs, args.imgsz)
    theirs = train("yolo11n.yaml", str(folder / "data.yaml"), None, runs, "files",
                   args.epochs, args.imgsz)
    for name, rows in (("shards", ours), ("files", theirs)):
        for column in ("train/box_loss", "train/cls_loss", "metrics/mAP50(B)"):
            result[f"{column.split('/')[1]}_{name}"] = [round(row[column], 3) for row in rows]
    box, cls = result["box_loss_shards"], result["cls_loss_shards"]
    # From scratch the box loss first rises: the task-aligned assigner matches more anchors
    # as the model starts to localise; it then falls (5.9 -> 1.7 over 30 epochs measured).
    result["box_loss_falls"] = box[-1] < 0.6 * max(box)
    result["cls_loss_falls"] = cls[-1] < 0.5 * cls[0]
    failed |= not (result["box_loss_falls"] and result["cls_loss_falls"])
    print(json.dumps(result))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
