#!/usr/bin/env python3
"""Each trainer's own code checks ``shardsmith export``, then trains on it: CPU, no network.

    make consumers                                  # builds build/consumers-venv, runs this
    build/consumers-venv/bin/python scripts/check_consumers.py [--work DIR] [--quick]

Runs in a venv of its own (``scripts/consumers_venv.sh``: torch 2.14.1, torchvision 0.29.1,
ultralytics 8.4.190, anomalib 2.7.0, pycocotools, shardsmith editable), because torchvision
does not load beside the test extras' CPU torch and Ultralytics' ``opencv-python`` clashes
with our headless OpenCV.

1. Makes a tiny learnable corpus: 128x128 grey parts, a bright ``scratch`` (a box with a
   rectangle polygon) and a dark ``dent`` (a disc, an RLE mask) drawn in; class folders
   ``defect`` and ``good`` (no objects); one COCO file.  Packs it as WebDataset and TFRecord,
   and once more without annotations (image labels only).
2. Exports every layout with the real CLI (``shardsmith export``) and checks each with the
   consumer's own code against the manifest's sample index: Ultralytics' ``check_det_dataset``
   and its label cache (``YOLODataset``: images, and instances per class), its
   ``check_cls_dataset`` and torchvision's ``ImageFolder`` for the classify layout;
   ``pycocotools.COCO`` (annotation counts, areas) and ``COCOeval`` of the ground truth against
   itself (AP 1.0, boxes and masks); anomalib's ``Folder`` and ``MVTecAD`` datamodules (normal
   and abnormal counts, one non-empty mask per abnormal image).
3. Packs a tiled tree whose defects are painted red and cross tile borders (a crack with a
   mask, a scratch with a box only, some cut below ``min_visible``), exports every layout and
   asks each trainer's own loader for its normal samples: Ultralytics' label cache (images with
   no label row), pycocotools (images with no annotation) and anomalib's ``Folder``
   datamodule (label 0).  None of them may show a red pixel.
4. Trains on the CPU: YOLO detect and segment from a model yaml (no weights), an anomalib
   Ganomaly, and torchvision's ``fasterrcnn_mobilenet_v3_large_fpn(weights=None,
   weights_backbone=None)`` straight from ``shardsmith.readers.torch``.  The detection losses
   (box and class) must fall from the first epoch to the last.

Nothing may use the network: ``YOLO_OFFLINE=1`` and ``HF_HUB_OFFLINE=1`` are set before any
import, Ultralytics' settings live in the run's folder with a local TrueType font where its
``check_font`` looks (it fetches Arial.ttf otherwise), and an audit hook refuses every
internet socket connect and name lookup and counts them: any is a failure.

Prints a table and writes ``WORK/report.json`` (default ``build/consumers``); exits 1 when a
check fails or a loss does not fall.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SIZE = 128  # pixels: small enough for a CPU run, large enough for YOLO's stride-32 heads
CLASSES = ("scratch", "dent")
NORMAL = "good"


# --- no network -----------------------------------------------------------------------------

BLOCKED: list[str] = []


def _refuse_network(event: str, args: tuple) -> None:
    """An audit hook: every internet connect or name lookup is recorded and refused."""
    if event == "socket.connect":
        sock, address = args
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            BLOCKED.append(f"connect {address}")
            raise ConnectionRefusedError(f"check_consumers: no network ({address})")
    elif event == "socket.getaddrinfo":
        BLOCKED.append(f"getaddrinfo {args[0]}")
        raise socket.gaierror(f"check_consumers: no network ({args[0]})")


def go_offline(work: Path) -> None:
    """Before any consumer is imported: offline switches, a settings folder of the run's own
    with a local font where Ultralytics looks for Arial, and the audit hook."""
    os.environ["YOLO_OFFLINE"] = "1"
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ["YOLO_VERBOSE"] = "False"
    os.environ["MPLCONFIGDIR"] = str(work / "matplotlib")
    os.environ["YOLO_CONFIG_DIR"] = str(work / "yolo-config")
    os.environ["TORCH_HOME"] = str(work / "torch-home")  # an empty cache: no weights to find
    fonts = work / "yolo-config" / "Ultralytics"
    fonts.mkdir(parents=True, exist_ok=True)
    import matplotlib

    dejavu = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"
    # checks.check_font looks in USER_CONFIG_DIR first, then downloads from the assets URL.
    for name in ("Arial.ttf", "Arial.Unicode.ttf"):
        shutil.copyfile(dejavu, fonts / name)
    sys.addaudithook(_refuse_network)


# --- the corpus -----------------------------------------------------------------------------

def make_corpus(source: Path, defects: int, normals: int, seed: int = 0) -> None:
    """Grey 128x128 parts: ``defect/`` ones with a bright scratch and/or a dark dent drawn in,
    ``good/`` ones without; ``instances.json`` describes them (polygon boxes, RLE discs)."""
    import numpy as np
    from PIL import Image
    from pycocotools import mask as coco_mask

    rng = np.random.default_rng(seed)
    document: dict[str, list] = {
        "images": [], "annotations": [],
        "categories": [{"id": 1 + k, "name": name} for k, name in enumerate(CLASSES)]}
    ys, xs = np.mgrid[0:SIZE, 0:SIZE]
    for number in range(defects + normals):
        grey = np.full((SIZE, SIZE), 128, np.int16) + rng.integers(-6, 7, (SIZE, SIZE))
        folder = "defect" if number < defects else NORMAL
        relpath = f"{folder}/part{number:03d}.jpg"
        image_id = number + 1
        document["images"].append({"id": image_id, "file_name": relpath, "width": SIZE,
                                   "height": SIZE})
        if folder == "defect":
            # The scratch on the left half, the dent on the right: never overlapping.
            kinds = (("scratch", "dent"), ("scratch",), ("dent",))[number % 3]
            if "scratch" in kinds:
                w, h = int(rng.integers(16, 40)), int(rng.integers(10, 30))
                x, y = int(rng.integers(4, SIZE // 2 - w)), int(rng.integers(4, SIZE - 4 - h))
                grey[y:y + h, x:x + w] = 245
                document["annotations"].append({
                    "id": len(document["annotations"]) + 1, "image_id": image_id,
                    "category_id": 1, "iscrowd": 0, "bbox": [x, y, w, h], "area": w * h,
                    "segmentation": [[x, y, x + w, y, x + w, y + h, x, y + h]]})
            if "dent" in kinds:
                radius = int(rng.integers(8, 16))
                cx = int(rng.integers(SIZE // 2 + radius + 2, SIZE - radius - 2))
                cy = int(rng.integers(radius + 2, SIZE - radius - 2))
                disc = ((xs - cx) ** 2 + (ys - cy) ** 2) <= radius ** 2
                grey[disc] = 12
                rle = coco_mask.encode(np.asfortranarray(disc.astype(np.uint8)))
                x0, y0, w, h = (float(v) for v in coco_mask.toBbox(rle))
                document["annotations"].append({
                    "id": len(document["annotations"]) + 1, "image_id": image_id,
                    "category_id": 2, "iscrowd": 0, "bbox": [x0, y0, w, h],
                    "area": int(disc.sum()),
                    "segmentation": {"size": rle["size"], "counts": rle["counts"].decode()}})
        (source / folder).mkdir(parents=True, exist_ok=True)
        rgb = np.repeat(np.clip(grey, 0, 255).astype(np.uint8)[:, :, None], 3, axis=2)
        Image.fromarray(rgb).save(source / relpath, quality=95)
    (source / "instances.json").write_text(json.dumps(document))


def pack_corpus(source: Path, output: Path, fmt: str, annotated: bool = True) -> None:
    """Pack the corpus with shardsmith's API: 75/25 train/val, no resizing."""
    from shardsmith import load_config, pack

    overrides: dict[str, Any] = {
        "source.path": str(source), "output.path": str(output), "output.format": fmt,
        "image.size": SIZE, "image.quality": 95, "splits.train": 0.75, "splits.val": 0.25,
        "run.quiet": True}
    if annotated:
        overrides["source.annotations.coco"] = "instances.json"
    pack(load_config(None, overrides))


# --- what the manifest says -----------------------------------------------------------------

def manifest_truth(dataset: Path, normal: str = NORMAL) -> dict[str, Any]:
    """Per split, from the manifest's sample index: images, objects per object class id,
    abnormal images (objects, or an image class that is not the normal one)."""
    from shardsmith.dataset.manifest import iter_sample_index, read_manifest

    manifest = read_manifest(dataset)
    splits: dict[str, dict[str, Any]] = {}
    for record in iter_sample_index(dataset, manifest):
        split = splits.setdefault(record.split, {"images": 0, "objects": Counter(),
                                                 "abnormal": 0, "with_objects": 0,
                                                 "classes": Counter()})
        counts = list(record.objects or [])
        image_class = manifest.classes[record.label] if record.label >= 0 else ""
        split["images"] += 1
        split["classes"][image_class] += 1
        split["with_objects"] += any(counts)
        split["abnormal"] += bool(any(counts) or image_class != normal)
        for index, count in enumerate(counts):
            split["objects"][index + 1] += count
    return {"object_classes": list(manifest.object_classes or []),
            "classes": list(manifest.classes), "version": manifest.version, "splits": splits}


# --- the consumers' own checks --------------------------------------------------------------

class CheckFailed(AssertionError):
    """A consumer read an export differently from what the manifest says."""


def expect(what: str, got: object, wanted: object) -> None:
    if got != wanted:
        raise CheckFailed(f"{what}: {got!r}, the manifest says {wanted!r}")


def check_yolo(export: Path, truth: dict[str, Any], task: str, work: Path) -> dict[str, Any]:
    """Ultralytics' dataset check, then its label cache per split, built as its trainer builds
    it (``build_yolo_dataset`` in val mode: ``verify_image_label`` on every image)."""
    from ultralytics.cfg import get_cfg
    from ultralytics.data.build import build_yolo_dataset
    from ultralytics.data.utils import check_det_dataset

    data = check_det_dataset(str(export / "data.yaml"))
    names = truth["object_classes"]
    expect("data.yaml names", [data["names"][k] for k in sorted(data["names"])], names)
    expect("data.yaml path", Path(data["path"]).resolve(), export.resolve())
    cfg = get_cfg(overrides={"task": task, "imgsz": SIZE, "data": str(export / "data.yaml"),
                             "project": str(work), "plots": False})
    found: dict[str, Any] = {}
    for split, facts in sorted(truth["splits"].items()):
        dataset = build_yolo_dataset(cfg, str(export / "images" / split), 8, data, mode="val")
        instances = Counter()
        for label in dataset.labels:
            instances.update(int(c) + 1 for c in label["cls"].reshape(-1))
            if task == "segment":
                expect(f"{split}: segments of {label['im_file']}", len(label["segments"]),
                       len(label["cls"]))
        expect(f"{split}: images in the label cache", len(dataset.labels), facts["images"])
        expect(f"{split}: instances per class", dict(instances),
               {k: v for k, v in facts["objects"].items() if v})
        found[split] = {"images": len(dataset.labels), "instances": sum(instances.values())}
    return found


def check_shard_reader(packs: dict[str, Path], work: Path) -> dict[str, Any]:
    """shardsmith's own Ultralytics dataset read straight from the shards of both formats:
    the same data dict, and per split the same labels and pixels for every sample."""
    import numpy as np
    from ultralytics.cfg import get_cfg

    from shardsmith.readers.ultralytics import shard_data, shard_yolo_dataset

    datas = {fmt: shard_data(dataset) for fmt, dataset in packs.items()}
    wds, tfr = ({**data, "path": None} for data in datas.values())
    expect("shard_data of the TFRecord pack", tfr, wds)
    cfg = get_cfg(overrides={"task": "segment", "imgsz": SIZE, "project": str(work),
                             "plots": False})
    found: dict[str, Any] = {}
    for split in ("train", "val"):
        seen = {}
        for fmt, dataset in packs.items():
            loaded = shard_yolo_dataset(cfg, dataset, split, 8, datas[fmt], mode="val")
            seen[fmt] = {Path(label["im_file"]).name: (
                label["cls"].tobytes(), np.round(label["bboxes"], 4).tobytes(),
                len(label["segments"]), loaded.load_image(i)[0].tobytes())
                for i, label in enumerate(loaded.labels)}
        expect(f"{split}: labels and pixels read from the TFRecord shards",
               seen["tfrecord"], seen["webdataset"])
        found[split] = len(seen["webdataset"])
    return found


def check_yolo_classify(export: Path, truth: dict[str, Any]) -> dict[str, Any]:
    """Ultralytics' classification check and torchvision's ImageFolder on ``SPLIT/CLASS/``."""
    from torchvision.datasets import ImageFolder
    from ultralytics.data.utils import check_cls_dataset

    data = check_cls_dataset(str(export))
    used = sorted(c for c in truth["classes"]
                  if any(s["classes"][c] for s in truth["splits"].values()))
    expect("classify names", sorted(data["names"].values()), used)
    found = {}
    for split, facts in sorted(truth["splits"].items()):
        folder = ImageFolder(str(export / split))
        counts = Counter(folder.classes[target] for _, target in folder.samples)
        expect(f"{split}: ImageFolder images per class", dict(counts),
               {c: n for c, n in facts["classes"].items() if n})
        found[split] = {"images": len(folder.samples)}
    return found


def check_coco(export: Path, truth: dict[str, Any]) -> dict[str, Any]:
    """pycocotools loads each split's file; counts and areas; COCOeval of the ground truth
    against itself (every annotation a detection of score 1) is AP 1.0, boxes and masks."""
    import contextlib
    import io

    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    found = {}
    for split, facts in sorted(truth["splits"].items()):
        with contextlib.redirect_stdout(io.StringIO()):  # COCO() and COCOeval print progress
            ground = COCO(str(export / "annotations" / f"instances_{split}.json"))
        categories = [ground.cats[k]["name"] for k in sorted(ground.cats)]
        expect(f"{split}: categories in id order", categories, truth["object_classes"])
        expect(f"{split}: images", len(ground.imgs), facts["images"])
        for image in ground.imgs.values():
            if not (export / "images" / split / image["file_name"]).is_file():
                raise CheckFailed(f"{split}: {image['file_name']} is not in images/{split}")
        per_class = Counter(a["category_id"] for a in ground.anns.values())
        expect(f"{split}: annotations per category", dict(per_class),
               {k: v for k, v in facts["objects"].items() if v})
        for annotation in ground.anns.values():
            if not annotation["area"] > 0 or annotation["iscrowd"] != 0:
                raise CheckFailed(f"{split}: annotation {annotation['id']}: area "
                                  f"{annotation['area']}, iscrowd {annotation['iscrowd']}")
            mask_area = float(ground.annToMask(annotation).sum())
            if abs(mask_area - annotation["area"]) > 0.05 * annotation["area"] + 2:
                raise CheckFailed(f"{split}: annotation {annotation['id']}: area "
                                  f"{annotation['area']}, its mask has {mask_area:.0f} pixels")
        scores = {}
        for kind in ("bbox", "segm"):
            detections = [{**a, "score": 1.0} for a in ground.anns.values()]
            with contextlib.redirect_stdout(io.StringIO()):
                result = ground.loadRes(detections) if detections else None
                if result is None:
                    continue
                evaluation = COCOeval(ground, result, kind)
                evaluation.evaluate()
                evaluation.accumulate()
                evaluation.summarize()
            scores[kind] = round(float(evaluation.stats[0]), 4)
            if scores[kind] != 1.0:
                raise CheckFailed(f"{split}: COCOeval {kind} AP of the ground truth against "
                                  f"itself is {scores[kind]}, not 1.0")
        found[split] = {"images": len(ground.imgs), "annotations": len(ground.anns),
                        **{f"AP_{k}": v for k, v in scores.items()}}
    return found


def _anomalib_masks(samples: Any, where: str) -> tuple[int, int]:
    """Every abnormal sample has a mask file, 0/255, with marked pixels; normal ones none."""
    import numpy as np
    from PIL import Image

    abnormal = marked = 0
    for row in samples.itertuples():
        if row.label_index == 1:
            abnormal += 1
            pixels = np.asarray(Image.open(row.mask_path))
            if not set(np.unique(pixels).tolist()) <= {0, 255}:
                raise CheckFailed(f"{where}: {row.mask_path} holds values other than 0 and 255")
            marked += bool((pixels == 255).any())
        elif row.mask_path:
            raise CheckFailed(f"{where}: normal image {row.image_path} has a mask")
    return abnormal, marked


def check_anomalib(export: Path, truth: dict[str, Any], layout: str) -> dict[str, Any]:
    """anomalib's own datamodule on the export (``Folder`` or ``MVTecAD``), set up as its
    Engine sets it up: normal and abnormal counts, and one marked 0/255 mask per abnormal
    image with objects."""
    from anomalib.data import Folder

    if layout == "folder":
        module = Folder(name="export", root=export, normal_dir="normal",
                        abnormal_dir="abnormal", normal_test_dir="normal_test",
                        mask_dir="mask", num_workers=0, seed=0)
    else:
        # anomalib's MVTecAD class finds PNG files only (IMG_EXTENSIONS of
        # anomalib/data/datasets/image/mvtecad.py, with no option), and the export's images
        # are the shards' JPEGs: the MVTec tree is read with Folder, one folder per defect.
        defects = sorted(p.name for p in (export / "test").iterdir() if p.name != NORMAL)
        module = Folder(name="export", root=export, normal_dir=f"train/{NORMAL}",
                        normal_test_dir=f"test/{NORMAL}",
                        abnormal_dir=[f"test/{d}" for d in defects],
                        mask_dir=[f"ground_truth/{d}" for d in defects], num_workers=0, seed=0)
    module.setup()
    samples = [module.train_data.samples]
    samples += [module.test_data.samples] + ([module.val_data.samples]
                                           if module.val_data is not None else [])
    import pandas

    everything = pandas.concat(samples).drop_duplicates("image_path")
    splits = truth["splits"].values()
    wanted_abnormal = sum(s["abnormal"] for s in splits)
    wanted_normal = sum(s["images"] - s["abnormal"] for s in splits)
    wanted_train = truth["splits"].get("train", {}).get("images", 0) - \
        truth["splits"].get("train", {}).get("abnormal", 0)
    abnormal, marked = _anomalib_masks(everything, f"anomalib {layout}")
    expect(f"anomalib {layout}: abnormal images", abnormal, wanted_abnormal)
    expect(f"anomalib {layout}: normal images",
           int((everything.label_index == 0).sum()), wanted_normal)
    expect(f"anomalib {layout}: normal training images (its train split)",
           len(module.train_data.samples), wanted_train)
    with_objects = sum(s["with_objects"] for s in splits)
    if marked < with_objects:
        raise CheckFailed(f"anomalib {layout}: {marked} masks mark pixels, but "
                          f"{with_objects} images have objects")
    return {"train": len(module.train_data.samples), "abnormal": abnormal,
            "masks_marked": marked, "task": str(module.train_data.task)}


# --- defects cut at a tile's border ---------------------------------------------------------

TILE = 128
RED = (220, 20, 20)
CUT_SETTINGS = {"source.annotations.masks": "beside", "source.annotations.mask_suffix": "_mask",
                "source.annotations.mask_values": "index", "source.annotations.files": "yolo",
                "source.annotations.classes": ["crack", "scratch"],
                "source.annotations.merge_iou": 0, "image.tiles.size": TILE,
                "image.tiles.overlap": 16, "image.tiles.keep": "annotated",
                "image.tiles.background_fraction": 1.0}


def make_tiled_corpus(source: Path, originals: int, seed: int = 1) -> None:
    """Grey 512x256 originals cut into 128 px tiles: a red crack (a class mask; horizontal or
    diagonal) and a red scratch (a YOLO box only), each crossing a tile border at a random
    depth, so some tiles hold a sliver below ``min_visible``; every third original is clean."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    width, height = 4 * TILE, 2 * TILE
    ys, xs = np.mgrid[0:height, 0:width]
    folder = source / NORMAL  # one image class: whether a tile is normal is its objects
    folder.mkdir(parents=True, exist_ok=True)
    for number in range(originals):
        pixels = np.full((height, width, 3), 128, np.int16) + rng.integers(-4, 5,
                                                                           (height, width, 1))
        crack = np.zeros((height, width), np.uint8)
        rows = []
        if number % 3 != 2:
            border = TILE * int(rng.integers(1, 4))
            reach = int(rng.integers(4, 40))  # how far it pokes past the border
            y = int(rng.integers(20, height - 20))
            if number % 2:  # a diagonal band: non-convex in the tile it is cut into
                band = (abs((ys - y) - 0.3 * (xs - border)) < 3) & (xs > border - 90) \
                    & (xs < border + reach)
            else:
                band = (abs(ys - y) < 4) & (xs > border - 100) & (xs < border + reach)
            crack[band] = 1
            pixels[band] = RED
            x0 = TILE * int(rng.integers(1, 4)) - int(rng.integers(60, 100))
            x1 = x0 + int(rng.integers(64, 140))
            y0 = int(rng.integers(10, height - 40))
            y1 = y0 + int(rng.integers(8, 30))
            pixels[y0:y1, x0:x1] = RED
            rows.append(f"1 {(x0 + x1) / 2 / width} {(y0 + y1) / 2 / height} "
                        f"{(x1 - x0) / width} {(y1 - y0) / height}")
        stem = folder / f"part{number:03d}"
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(f"{stem}.png")
        Image.fromarray(crack).save(f"{stem}_mask.png")
        stem.with_suffix(".txt").write_text("".join(row + "\n" for row in rows))


def pack_tiled(source: Path, output: Path, fmt: str) -> None:
    from shardsmith import load_config, pack

    pack(load_config(None, {"source.path": str(source), "output.path": str(output),
                            "output.format": fmt, "image.quality": 95,
                            "splits.train": 0.75, "splits.val": 0.25, "run.quiet": True,
                            **CUT_SETTINGS}))


def _red_pixels(path: Path | str) -> int:
    import numpy as np
    from PIL import Image

    pixels = np.asarray(Image.open(path).convert("RGB")).astype(np.int16)
    return int(((pixels[:, :, 0] > 150) & (pixels[:, :, 1] < 90)).sum())


def _no_red(where: str, paths: list[Any]) -> int:
    for path in paths:
        if _red_pixels(path):
            raise CheckFailed(f"{where}: normal image {path} shows a defect "
                              f"({_red_pixels(path)} red pixels)")
    return len(paths)


def check_normals_clean(dataset: Path, work: Path, tag: str) -> dict[str, Any]:
    """Every layout's normal samples, as each trainer's own loader lists them, hold no red."""
    import contextlib
    import io

    from anomalib.data import Folder
    from pycocotools.coco import COCO
    from ultralytics.cfg import get_cfg
    from ultralytics.data.build import build_yolo_dataset
    from ultralytics.data.utils import check_det_dataset

    found: dict[str, Any] = {}
    yolo = export(dataset, work / "exports" / f"cut-yolo-{tag}", "--layout", "yolo")
    data = check_det_dataset(str(yolo / "data.yaml"))
    cfg = get_cfg(overrides={"task": "detect", "imgsz": TILE, "data": str(yolo / "data.yaml"),
                             "project": str(work), "plots": False})
    backgrounds = []
    for split in ("train", "val"):
        labels = build_yolo_dataset(cfg, str(yolo / "images" / split), 8, data,
                                    mode="val").labels
        backgrounds += [label["im_file"] for label in labels if not len(label["cls"])]
    found["yolo_backgrounds"] = _no_red("yolo", backgrounds)
    coco = export(dataset, work / "exports" / f"cut-coco-{tag}", "--layout", "coco")
    unannotated = []
    for split in ("train", "val"):
        with contextlib.redirect_stdout(io.StringIO()):
            ground = COCO(str(coco / "annotations" / f"instances_{split}.json"))
        unannotated += [coco / "images" / split / image["file_name"]
                        for image_id, image in ground.imgs.items()
                        if not ground.getAnnIds(imgIds=[image_id])]
    found["coco_unannotated"] = _no_red("coco", unannotated)
    folder = export(dataset, work / "exports" / f"cut-anomalib-{tag}", "--layout", "anomalib")
    module = Folder(name="cut", root=folder, normal_dir="normal", abnormal_dir="abnormal",
                    normal_test_dir="normal_test", mask_dir="mask", num_workers=0, seed=0)
    module.setup()
    rows = [row for data in (module.train_data, module.val_data, module.test_data)
            if data is not None for row in data.samples.itertuples()]
    normals = sorted({row.image_path for row in rows if row.label_index == 0})
    found["anomalib_normals"] = _no_red("anomalib", normals)
    found["anomalib_abnormal"] = len({row.image_path for row in rows if row.label_index == 1})
    # one predicate: what anomalib calls normal is what YOLO and COCO export as background
    expect("anomalib normals against yolo backgrounds", len(normals), len(backgrounds))
    if not all(found.values()):
        raise CheckFailed(f"the tiled corpus gave an empty kind of sample: {found}")
    return found


# --- training -------------------------------------------------------------------------------

def falls(first: float, last: float) -> bool:
    return last < first


def train_yolo(export: Path, task: str, epochs: int, work: Path) -> dict[str, Any]:
    """YOLO11n from its model yaml (no weights) on the export's data.yaml, on the CPU; the
    per-epoch training losses from its results.csv."""
    import csv

    from ultralytics import YOLO

    model = YOLO("yolo11n-seg.yaml" if task == "segment" else "yolo11n.yaml", task=task)
    model.train(data=str(export / "data.yaml"), epochs=epochs, imgsz=SIZE, batch=16,
                workers=0, device="cpu", pretrained=False, amp=False, plots=False,
                project=str(work / "runs"), name=f"yolo-{task}", exist_ok=True, seed=0,
                deterministic=True, verbose=False,
                # 4 batches an epoch: one warm-up epoch, not three; no mosaic, which at 128
                # pixels shrinks a defect to a few pixels (the box loss rose over 5 epochs
                # with both, and fell with neither)
                warmup_epochs=1, mosaic=0.0)
    with open(Path(model.trainer.save_dir) / "results.csv", newline="") as handle:
        rows = [{key.strip(): float(value) for key, value in row.items()}
                for row in csv.DictReader(handle)]
    losses = {name: [round(row[f"train/{name}"], 4) for row in rows]
              for name in ("box_loss", "cls_loss", "seg_loss") if f"train/{name}" in rows[0]}
    metric = "metrics/mAP50(M)" if task == "segment" else "metrics/mAP50(B)"
    return {"epochs": len(rows), "losses": losses,
            "mAP50": round(rows[-1].get(metric, float("nan")), 4),
            "falls": {name: falls(values[0], values[-1]) for name, values in losses.items()
                      if name in ("box_loss", "cls_loss")}}


def train_anomalib(export: Path, epochs: int, work: Path) -> dict[str, Any]:
    """Ganomaly (built from scratch: it has no backbone to download) on the Folder layout, on
    the CPU; its generator and discriminator losses per epoch and its test metrics."""
    from anomalib.data import Folder
    from anomalib.engine import Engine
    from anomalib.models import Ganomaly
    from lightning.pytorch.callbacks import Callback

    class EpochLosses(Callback):
        def __init__(self) -> None:
            self.epochs: list[dict[str, float]] = []

        def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
            self.epochs.append({key: round(float(value), 4)
                                for key, value in trainer.callback_metrics.items()
                                if key.endswith("_loss")})

    batch = 8
    module = Folder(name="export", root=export, normal_dir="normal", abnormal_dir="abnormal",
                    normal_test_dir="normal_test", mask_dir="mask", train_batch_size=batch,
                    eval_batch_size=batch, num_workers=0, seed=0)
    model = Ganomaly(batch_size=batch, n_features=16, latent_vec_size=32, visualizer=False,
                     pre_processor=Ganomaly.configure_pre_processor(image_size=(64, 64)))
    recorder = EpochLosses()
    engine = Engine(max_epochs=epochs, accelerator="cpu", devices=1, logger=False,
                    default_root_dir=str(work / "anomalib"), callbacks=[recorder],
                    enable_progress_bar=False, enable_model_summary=False)
    engine.fit(model=model, datamodule=module)
    metrics = engine.test(model=model, datamodule=module, verbose=False)
    losses = {key: [epoch.get(key) for epoch in recorder.epochs]
              for key in (recorder.epochs[0] if recorder.epochs else {})}
    return {"epochs": len(recorder.epochs), "losses": losses,
            "metrics": {key: round(float(value), 4) for key, value in metrics[0].items()}}


def train_torchvision(dataset_dir: Path, epochs: int, min_size: int = SIZE) -> dict[str, Any]:
    """Faster R-CNN (MobileNetV3 FPN, no weights) straight from shardsmith's torch reader;
    the mean of each loss per epoch."""
    import torch
    from torchvision.models import detection

    from shardsmith.readers.torch import SampleLoader, dataset, detection_collate

    torch.manual_seed(0)
    data = dataset(dataset_dir, split="train", targets=True, seed=0)
    loader = SampleLoader(data, batch_size=8, collate_fn=detection_collate, num_workers=0)
    # Fewer sampled anchors and proposals than the defaults (256 / 2000 / 512), made for
    # 800-pixel COCO images: a 128-pixel image holds two objects, and the box head's 512 RoIs
    # an image took two thirds of a CPU step (profiled: roi_align backward and the 1024-wide
    # MLP).
    model = detection.fasterrcnn_mobilenet_v3_large_fpn(
        weights=None, weights_backbone=None, num_classes=len(data.object_classes) + 1,
        min_size=min_size, max_size=min_size, rpn_batch_size_per_image=64,
        rpn_pre_nms_top_n_train=300, rpn_post_nms_top_n_train=100,
        box_batch_size_per_image=64)
    model.train()
    optimiser = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9, weight_decay=1e-4)
    history: dict[str, list[float]] = {}
    for epoch in range(epochs):
        data.set_epoch(epoch)
        sums: Counter = Counter()
        batches = 0
        for images, targets in loader:
            losses = model([image.float() / 255 for image in images],
                           [{"boxes": t["boxes"], "labels": t["labels"]} for t in targets])
            total = sum(losses.values())
            optimiser.zero_grad()
            total.backward()
            optimiser.step()
            sums.update({key: value.item() for key, value in losses.items()})
            sums["total"] += total.item()
            batches += 1
        for key, value in sums.items():
            history.setdefault(key, []).append(round(value / batches, 4))
    return {"epochs": epochs, "losses": history,
            "falls": {key: falls(history[key][0], history[key][-1])
                      for key in ("loss_classifier", "loss_objectness", "total")}}


# --- the run --------------------------------------------------------------------------------

def export(dataset: Path, destination: Path, *options: str) -> Path:
    """``shardsmith export`` through the real CLI; the folder its ``current`` link names."""
    environment = {**os.environ,
                   "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO),
                                                               os.environ.get("PYTHONPATH"))))}
    subprocess.run([sys.executable, "-m", "shardsmith", "export", str(dataset),
                    str(destination), "--quiet", *options], check=True, env=environment)
    return destination / "current"


class Run:
    """The rows of the report: one per check or training, with its numbers and seconds."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def step(self, consumer: str, what: str, action: Callable[[], dict[str, Any]],
             must_fall: bool = False) -> None:
        started = time.perf_counter()
        try:
            numbers = action()
            ok = not must_fall or all(numbers.get("falls", {}).values())
            error = "" if ok else "a loss did not fall from the first epoch to the last"
        except Exception as exc:  # noqa: BLE001 - any error of a consumer fails its step,
            # which is reported with it, and the other steps still run
            numbers, ok, error = {}, False, f"{type(exc).__name__}: {exc}"
        self.rows.append({"consumer": consumer, "what": what, "ok": ok, "error": error,
                          "seconds": round(time.perf_counter() - started, 1), **numbers})

    def table(self) -> str:
        lines = [f"{'consumer':<12} {'what':<38} {'ok':<4} {'s':>6}  numbers"]
        for row in self.rows:
            numbers = {k: v for k, v in row.items()
                       if k not in ("consumer", "what", "ok", "error", "seconds")}
            shown = row["error"] or _brief(numbers)
            lines.append(f"{row['consumer']:<12} {row['what']:<38} "
                         f"{'yes' if row['ok'] else 'NO':<4} {row['seconds']:>6}  {shown}")
        return "\n".join(lines)


def _brief(numbers: dict[str, Any]) -> str:
    """Losses as first -> last; everything else as it is."""
    parts = []
    for key, value in numbers.items():
        if key == "losses":
            parts += [f"{name} {values[0]} -> {values[-1]}" for name, values in value.items()
                      if values]
        elif key != "falls":
            parts.append(f"{key} {value}")
    return "; ".join(parts)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, default=REPO / "build" / "consumers",
                        help="the run's folder (emptied first)")
    parser.add_argument("--quick", action="store_true",
                        help="the checks and one epoch of each training (no loss checks)")
    args = parser.parse_args()
    work = args.work.resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    go_offline(work)
    started = time.perf_counter()
    run = Run()

    source = work / "source"
    make_corpus(source, defects=48, normals=32)
    packs = {"webdataset": work / "wds", "tfrecord": work / "tfrecord"}
    for fmt, output in packs.items():
        pack_corpus(source, output, fmt)
    pack_corpus(source, work / "labels-only", "webdataset", annotated=False)
    truth = manifest_truth(packs["webdataset"])
    exports: dict[str, Path] = {}

    for fmt, dataset in packs.items():
        tag = "wds" if fmt == "webdataset" else "tfr"
        for task in ("detect", "segment"):
            def exported(task: str = task, dataset: Path = dataset, tag: str = tag) -> dict:
                exports[f"yolo-{task}-{tag}"] = export(
                    dataset, work / "exports" / f"yolo-{task}-{tag}", "--layout", "yolo",
                    "--task", task)
                return check_yolo(exports[f"yolo-{task}-{tag}"], truth, task, work)
            run.step("ultralytics", f"{fmt}: yolo {task} labels", exported)

        def coco(dataset: Path = dataset, tag: str = tag) -> dict:
            return check_coco(export(dataset, work / "exports" / f"coco-{tag}",
                                     "--layout", "coco"), truth)
        run.step("pycocotools", f"{fmt}: coco + COCOeval", coco)
        for layout in ("folder", "mvtec"):
            def anomalib(layout: str = layout, dataset: Path = dataset, tag: str = tag) -> dict:
                exports[f"anomalib-{layout}-{tag}"] = export(
                    dataset, work / "exports" / f"anomalib-{layout}-{tag}",
                    "--layout", "anomalib", "--anomalib-layout", layout)
                return check_anomalib(exports[f"anomalib-{layout}-{tag}"], truth, layout)
            run.step("anomalib", f"{fmt}: {layout} datamodule", anomalib)
    run.step("ultralytics", "shardsmith's dataset reads both formats alike",
             lambda: check_shard_reader(packs, work))
    make_tiled_corpus(work / "tiled-source", originals=18)
    for fmt in ("webdataset", "tfrecord"):
        tag = "wds" if fmt == "webdataset" else "tfr"
        tiled = work / f"tiled-{tag}"
        pack_tiled(work / "tiled-source", tiled, fmt)
        run.step("all three", f"{fmt}: tiles cut, no defect in normals",
                 lambda tiled=tiled, tag=tag: check_normals_clean(tiled, work, tag))
    run.step("ultralytics", "labels only: classify + ImageFolder", lambda: check_yolo_classify(
        export(work / "labels-only", work / "exports" / "classify", "--layout", "yolo"),
        manifest_truth(work / "labels-only")))

    yolo_epochs, anomalib_epochs, torch_epochs = (1, 1, 1) if args.quick else (20, 3, 5)
    for task in ("detect", "segment"):
        if f"yolo-{task}-wds" in exports:
            run.step("ultralytics", f"train yolo11n {task}, {yolo_epochs} epochs",
                     lambda task=task: train_yolo(exports[f"yolo-{task}-wds"], task,
                                                  yolo_epochs, work),
                     must_fall=not args.quick)
    if "anomalib-folder-wds" in exports:
        run.step("anomalib", f"train Ganomaly, {anomalib_epochs} epochs",
                 lambda: train_anomalib(exports["anomalib-folder-wds"], anomalib_epochs, work))
    run.step("torchvision", f"train Faster R-CNN, {torch_epochs} epochs (reader)",
             lambda: train_torchvision(packs["webdataset"], torch_epochs),
             must_fall=not args.quick)

    seconds = round(time.perf_counter() - started, 1)
    network = sorted(set(BLOCKED))
    failed = [row for row in run.rows if not row["ok"]]
    report = {"seconds": seconds, "network_attempts": network, "steps": run.rows,
              "ok": not failed and not network}
    (work / "report.json").write_text(json.dumps(report, indent=1) + "\n")
    print(run.table())
    print(f"network attempts refused: {len(network)}"
          + (f" ({', '.join(network[:5])})" if network else ""))
    print(f"{len(run.rows) - len(failed)} of {len(run.rows)} steps passed in {seconds} s; "
          f"report: {work / 'report.json'}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
