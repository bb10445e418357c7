"""A defect team's tree, end to end: what each sample means where the features meet.

The tree: grey 768x256 originals cut into 256 px tiles (``keep: annotated``, every background
tile drawn), with red defects: a ``crack`` (a class mask, diagonal, non-convex in the tile it
crosses into) and a ``scratch`` (a YOLO box only), each crossing a tile border, some by less
than ``min_visible``; originals with no defect; one 16-bit PNG.  Then a nightly change: two
originals added (one with a new class, ``dent``), one removed, one re-annotated.  Every sample
that a layout or reader calls normal must show no red pixel, whatever its records say.
"""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from shardsmith.cli import main

import images

WIDTH, HEIGHT, TILE = 768, 256, 256
RED = (220, 20, 20)
CLASSES = ["crack", "scratch", "dent"]
JOB = {"source": {"labels": "none",
                  "annotations": {"files": "yolo", "masks": "beside", "mask_suffix": "_mask",
                                  "mask_values": "index", "classes": CLASSES,
                                  "merge_iou": 0}},
       "image": {"tiles": {"size": TILE, "overlap": 0, "keep": "annotated",
                           "background_fraction": 1.0}},
       "splits": {"train": 1.0},
       "run": {"workers": 1, "quiet": True}}


def original(source, name: str, crack_reach: int | None, scratch_reach: int | None,
             dent: bool = False, sixteen: bool = False, seed: int = 0) -> None:
    """One original: a diagonal crack crossing x=256 by ``crack_reach`` pixels, a scratch box
    crossing x=512 by ``scratch_reach`` pixels (None: not there), a dent (mask) inside tile 2."""
    rng = np.random.default_rng(seed)
    pixels = np.full((HEIGHT, WIDTH, 3), 128, np.int16) + rng.integers(-3, 4, (HEIGHT, WIDTH, 1))
    mask = np.zeros((HEIGHT, WIDTH), np.uint8)
    ys, xs = np.mgrid[0:HEIGHT, 0:WIDTH]
    if crack_reach is not None:
        band = (abs((ys - 60) - 0.4 * (xs - 100)) < 4) & (xs >= 100) & (xs < TILE + crack_reach)
        mask[band] = 1
    if dent:
        mask[((xs - 640) ** 2 + (ys - 190) ** 2) < 20 ** 2] = 3
    pixels[mask > 0] = RED
    rows = []
    if scratch_reach is not None:
        x0, x1, y0, y1 = 330, 2 * TILE + scratch_reach, 150, 200
        pixels[y0:y1, x0:x1] = RED
        rows.append(f"1 {(x0 + x1) / 2 / WIDTH} {(y0 + y1) / 2 / HEIGHT} {(x1 - x0) / WIDTH} "
                    f"{(y1 - y0) / HEIGHT}\n")
    rgb = np.clip(pixels, 0, 255).astype(np.uint8)
    folder = source / "line1"
    if sixteen:  # the same picture in 16 bits a channel (OpenCV writes BGR)
        ok, data = cv2.imencode(".png", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR).astype(np.uint16)
                                * 257)
        assert ok
        images.write(folder / f"{name}.png", data.tobytes())
    else:
        images.write(folder / f"{name}.png", images.encode(rgb, "PNG"))
    Image.fromarray(mask).save(folder / f"{name}_mask.png")
    (folder / f"{name}.txt").write_text("".join(rows))


def first_tree(source) -> None:
    original(source, "a", crack_reach=8, scratch_reach=12, seed=1)  # both cut below min_visible
    original(source, "b", crack_reach=150, scratch_reach=None, seed=2)  # kept on both sides
    original(source, "c", crack_reach=None, scratch_reach=180, sixteen=True, seed=3)
    original(source, "d", crack_reach=None, scratch_reach=None, seed=4)  # no defect
    original(source, "e", crack_reach=None, scratch_reach=None, seed=5)


def nightly_change(source) -> None:
    original(source, "f", crack_reach=None, scratch_reach=None, dent=True, seed=6)  # new class
    original(source, "g", crack_reach=6, scratch_reach=None, seed=7)
    for suffix in (".png", "_mask.png", ".txt"):
        (source / "line1" / f"e{suffix}").unlink()
    (source / "line1" / "b.txt").write_text("1 0.5 0.1 0.05 0.05\n")  # a scratch added


def cli(*args, code: int = 0) -> str:
    result = CliRunner().invoke(main, [str(arg) for arg in args])
    assert result.exit_code == code, result.output
    return result.output


@pytest.fixture(scope="module", params=["webdataset", "tfrecord"])
def team(request, tmp_path_factory):
    """The tree packed, changed and packed again; a fresh pack of the changed tree beside."""
    root = tmp_path_factory.mktemp(request.param)
    source, job = root / "source", root / "job.yaml"
    job.write_text(json.dumps(JOB | {"output": {"format": request.param}}))
    first_tree(source)
    cli("pack", source, root / "out", "--config", job)
    first = images.manifest_of(root / "out")
    nightly_change(source)
    summary = cli("pack", source, root / "out", "--config", job)
    cli("pack", source, root / "fresh", "--config", job)
    return {"root": root, "out": root / "out", "fresh": root / "fresh", "source": source,
            "first": first, "summary": summary}


def red(path) -> int:
    pixels = cv2.cvtColor(cv2.imread(str(path), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    return int(((pixels[:, :, 0] > 150) & (pixels[:, :, 1] < 90)).sum())


def test_no_normal_sample_of_any_layout_shows_a_defect(team):
    root = team["root"]
    cli("export", team["out"], root / "an", "--layout", "anomalib")
    normal = sorted((root / "an" / "current" / "normal").glob("*.jpg"))
    abnormal = sorted((root / "an" / "current" / "abnormal").glob("*.jpg"))
    assert normal and abnormal
    assert [path.name for path in normal if red(path)] == []
    said = cli("export", team["out"], root / "yolo", "--layout", "yolo")
    assert "left out: a defect cut below min_visible" in said
    assert "auto chose detect" in said  # scratches have a box only: no invented masks
    folder = root / "yolo" / "current"
    backgrounds = [folder / "images" / "train" / f"{label.stem}.jpg"
                   for label in (folder / "labels" / "train").glob("*.txt")
                   if not label.read_text()]
    assert backgrounds and [path.name for path in backgrounds if red(path)] == []
    assert len(backgrounds) == len(normal)  # one predicate of "normal"


def test_the_cut_tiles_are_recorded_and_abnormal(team):
    lines = {line["key"]: line for line in images.samples_of(team["out"])}
    cut = [line for line in lines.values() if line.get("objects_cut")]
    assert {line["path"] for line in cut} == {"line1/a.png", "line1/g.png"}
    assert {item["label"] for line in cut for item in line["objects_cut"]} == {1, 2}


def test_weights_name_a_defect_class_of_a_dataset_without_image_classes(team):
    mix = json.loads(cli("inspect", team["out"], "--weights", "crack=10,*=1", "--json"))
    assert mix["by"] == "object class"


def test_after_the_nightly_change_totals_equal_a_fresh_packs(team):
    after, fresh = images.manifest_of(team["out"]), images.manifest_of(team["fresh"])
    assert {key: value for key, value in after["totals"].items() if key != "bytes_out"} == \
        {key: value for key, value in fresh["totals"].items() if key != "bytes_out"}


def test_every_command_counts_the_change_in_the_same_units(team):
    entry = images.manifest_of(team["out"])["history"][-1]
    originals, samples = entry["originals"], entry["samples"]
    assert (originals["added"], originals["removed"]) == (2, 1)
    assert originals["reannotated"] == 1
    assert samples["added"] >= originals["added"] and samples["removed"] >= 1
    changes = json.loads(cli("diff", team["out"], "--json"))
    assert changes["originals"]["added"] == originals["added"]
    assert changes["originals"]["removed"] == originals["removed"]
    assert changes["samples"]["removed"] == samples["removed"]
    assert f"{originals['added']} added" in team["summary"]


def test_the_report_names_the_object_classes_and_the_new_one(team):
    cli("report", team["out"], "-o", team["root"] / "r.html", "--source", team["source"])
    page = (team["root"] / "r.html").read_text()
    assert "object classes" in page and "dent" in page and "class None" not in page
