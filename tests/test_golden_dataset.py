"""An annotated, tiled, masked dataset packs and exports to the golden bytes, in both formats.

The corpus (``golden_tree``) is four small originals: an RGB PNG with a crack (an index mask)
that crosses tile borders, whole in some tiles and cut below ``min_visible`` in others, and a
scratch (a YOLO box); a 16-bit TIFF with a dent (a box); an EXIF-rotated JPEG with a scratch
(stored coordinates); and a PNG without objects.  They are cut into 64 px tiles with 16 px of
overlap, packed as WebDataset and TFRecord, and exported as every layout; a second pack of the
same originals without annotations (image classes only) is exported for YOLO classify.

``tests/golden/dataset/`` pins the sha256 of every file the pack writes (shards, ``.idx``, the
sample index, shard lists, change log, the manifest) and of every file each export writes, and
holds each manifest itself, its timestamps and timings normalised, so that a change shows as a
readable diff.  Byte identity holds for equal library versions (docs/design.md, invariant 1):
the versions the goldens were made with are in ``versions.json`` and pinned by the dev install
(pyproject.toml, extra ``dev``), so these tests run in CI; with other versions they fail, and say
how to regenerate: ``pytest tests/test_golden_dataset.py --update-golden``, then review the diff.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest
import tifffile
import yaml
from click.testing import CliRunner
from PIL import Image

from shardsmith.cli import main

import images

GOLDEN = Path(__file__).parent / "golden" / "dataset"
PYPROJECT = Path(__file__).parent.parent / "pyproject.toml"
# The distributions whose output is part of the golden bytes: the corpus's own encoders and
# random numbers (numpy, Pillow, tifffile), decoding and resizing (OpenCV, Pillow, tifffile),
# the samples' JPEGs (simplejpeg), RLE strings (pycocotools) and JSON (msgspec).
LIBRARIES = ("numpy", "pillow", "opencv-python-headless", "simplejpeg", "tifffile",
             "pycocotools", "msgspec")
FORMATS = ("webdataset", "tfrecord")
WIDTH, HEIGHT, TILE, OVERLAP = 224, 160, 64, 16
CLASSES = ["crack", "dent", "scratch"]
# A fixed mtime for every original: the sample index records it.
MTIME = 1_700_000_000
LAYOUTS = {
    "yolo-detect": ["--layout", "yolo", "--task", "detect"],
    "yolo-segment": ["--layout", "yolo", "--task", "segment", "--boxes-as-polygons"],
    "coco": ["--layout", "coco"],
    "anomalib-folder": ["--layout", "anomalib", "--anomalib-layout", "folder"],
    "anomalib-mvtec": ["--layout", "anomalib", "--anomalib-layout", "mvtec"],
}
ANNOTATED = {"source": {"annotations": {
    "files": "yolo", "masks": "beside", "mask_suffix": "_mask", "mask_values": "index",
    "classes": CLASSES}},
    "image": {"tiles": {"size": TILE, "overlap": OVERLAP, "keep": "annotated",
                        "background_fraction": 0.5}}}
LABELLED = {"image": {"tiles": {"size": TILE, "overlap": OVERLAP}}}


def golden_tree(source: Path) -> None:
    """The four originals (and their annotations), written losslessly or by the pinned
    Pillow, with a fixed mtime."""
    rng = np.random.default_rng(29)
    # a.png: the crack fills rows 60-69, columns 20-99; tile rows start at 0 and 48, so it is
    # cut below min_visible in the first row of tiles and whole across columns in the second.
    crack = np.zeros((HEIGHT, WIDTH), np.uint8)
    crack[60:70, 20:100] = 1
    pixels = images.gradient_rgb(WIDTH, HEIGHT, 1)
    pixels[crack > 0] = (220, 20, 20)
    pixels[10:40, 150:196] = (240, 240, 240)
    images.write(source / "defect" / "a.png", images.encode(pixels, "PNG"))
    Image.fromarray(crack).save(source / "defect" / "a_mask.png")
    (source / "defect" / "a.txt").write_text(yolo_box(2, (150, 10, 196, 40)))
    # b.tif: 16-bit grey, a bright dent.
    grey = rng.integers(20000, 21000, (HEIGHT, WIDTH)).astype(np.uint16)
    grey[100:130, 30:80] = 60000
    buffer = io.BytesIO()
    tifffile.imwrite(buffer, grey)
    images.write(source / "defect" / "b.tif", buffer.getvalue())
    (source / "defect" / "b.txt").write_text(yolo_box(1, (30, 100, 80, 130)))
    # c.jpg: stored 224x160, shown 160x224 (EXIF orientation 6); its box in stored pixels.
    pixels = images.gradient_rgb(WIDTH, HEIGHT, 3)
    pixels[20:50, 120:170] = (10, 10, 10)
    exif = Image.Exif()
    exif[0x0112] = 6
    images.write(source / "defect" / "c.jpg", images.encode(pixels, "JPEG", quality=95,
                                                            exif=exif))
    (source / "defect" / "c.txt").write_text(yolo_box(2, (120, 20, 170, 50)))
    images.write(source / "good" / "d.png", images.png(WIDTH, HEIGHT, 4))
    for path in source.rglob("*"):
        os.utime(path, (MTIME, MTIME))


def yolo_box(class_id: int, box: tuple[int, int, int, int]) -> str:
    x0, y0, x1, y1 = box
    return (f"{class_id} {(x0 + x1) / 2 / WIDTH:.6f} {(y0 + y1) / 2 / HEIGHT:.6f} "
            f"{(x1 - x0) / WIDTH:.6f} {(y1 - y0) / HEIGHT:.6f}\n")


def cli(*args: object) -> str:
    result = CliRunner().invoke(main, [str(arg) for arg in args])
    assert result.exit_code == 0, result.output
    return result.output


def pack(root: Path, fmt: str, settings: dict) -> Path:
    """``shardsmith pack --config JOB`` of the golden tree under ``root`` (one worker)."""
    source, output = root / "source", root / fmt
    if not source.exists():
        golden_tree(source)
    job = {**settings, "source": {**settings.get("source", {}), "path": str(source)},
           "output": {"path": str(output), "format": fmt, "shard_samples": 8},
           "splits": {"train": 0.5, "val": 0.5}, "run": {"workers": 1, "quiet": True}}
    (root / f"{fmt}.yaml").write_text(yaml.safe_dump(job))
    cli("pack", "--config", root / f"{fmt}.yaml")
    return output


@pytest.fixture(scope="module", params=FORMATS)
def annotated(request, tmp_path_factory) -> Path:
    return pack(tmp_path_factory.mktemp("annotated"), request.param, ANNOTATED)


@pytest.fixture(scope="module", params=FORMATS)
def labelled(request, tmp_path_factory) -> Path:
    return pack(tmp_path_factory.mktemp("labelled"), request.param, LABELLED)


# --- normalising and comparing ---------------------------------------------------------------

def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def normalised_manifest(dataset: Path) -> str:
    """The manifest's text with what differs between two equal packs replaced: the creation
    times, the run's timings and the source folder (a temporary path)."""
    text = (dataset / "manifest.json").read_text()
    text = re.sub(r'"created": "[^"]*"', '"created": "TIMESTAMP"', text)
    text = re.sub(r'"(images_per_second|seconds)": [0-9.e+-]+', r'"\1": 0', text)
    return text.replace(json.dumps(str(dataset.parent / "source")), '"SOURCE"')


def dataset_listing(dataset: Path) -> str:
    """``relpath sha256`` of every file of a dataset, the manifest normalised; the empty lock
    in ``.shardsmith/`` is state, not content."""
    lines = []
    for path in sorted(dataset.rglob("*")):
        relpath = path.relative_to(dataset).as_posix()
        if path.is_dir() or relpath == ".shardsmith/lock":
            continue
        data = (normalised_manifest(dataset).encode() if relpath == "manifest.json"
                else path.read_bytes())
        lines.append(f"{relpath} {sha256(data)}")
    return "\n".join(lines) + "\n"


def export_listing(destination: Path) -> str:
    """``relpath sha256`` of every file an export wrote (links as ``-> target``).

    The export record holds each file's inode (the machine's): compared without them.
    ``data.yaml`` names the export's absolute folder (Ultralytics wants one): compared with
    that folder as ``DEST``; the export record lists data.yaml's digest and size: compared with
    those of the normalised data.yaml.  ``.export/lock`` (empty, one export at a time) is state.
    """
    lines = []
    for path in sorted(destination.rglob("*")):
        relpath = path.relative_to(destination).as_posix()
        if path.is_symlink():
            lines.append(f"{relpath} -> {os.readlink(path)}")
            continue
        if path.is_dir() or relpath == ".export/lock":
            continue
        data = path.read_bytes()
        if path.name == "data.yaml":
            data = data.replace(str(path.parent).encode(), b"DEST")
        elif path.name == "record.json":
            data = re.sub(rb'"inode":\d+,', b"", data)
            if (path.parent.parent / "data.yaml").exists():
                data = normalised_record(data, path.parent.parent)
        lines.append(f"{relpath} {sha256(data)}")
    return "\n".join(lines) + "\n"


def normalised_record(data: bytes, version: Path) -> bytes:
    yaml_bytes = (version / "data.yaml").read_bytes()
    found = f'{{"bytes":{len(yaml_bytes)},"path":"data.yaml","sha256":"{sha256(yaml_bytes)}"}}'
    assert found.encode() in data, "the export record's entry for data.yaml changed form"
    normal = yaml_bytes.replace(str(version).encode(), b"DEST")
    return data.replace(found.encode(), (f'{{"bytes":{len(normal)},"path":"data.yaml",'
                                         f'"sha256":"{sha256(normal)}"}}').encode())


def library_versions() -> dict[str, str]:
    return {name: metadata.version(name) for name in LIBRARIES}


def regenerate_hint() -> str:
    return ("regenerate with `pytest tests/test_golden_dataset.py --update-golden`, review the "
            "diff of tests/golden/dataset/ and pin the new versions in pyproject.toml's dev extra")


def matches_golden(request, name: str, text: str) -> None:
    """``text`` equals the golden file ``name``; with --update-golden, becomes it."""
    path = GOLDEN / name
    if request.config.getoption("--update-golden"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        (GOLDEN / "versions.json").write_text(json.dumps(library_versions(), indent=1) + "\n")
    pinned, found = json.loads((GOLDEN / "versions.json").read_text()), library_versions()
    if found != pinned:
        differ = ", ".join(f"{name} {pinned.get(name)} (here {found[name]})" for name in found
                           if found[name] != pinned.get(name))
        pytest.fail(f"the golden bytes were made with {differ}: install the pinned versions "
                    f"(make install-dev), or after a deliberate upgrade {regenerate_hint()}",
                    pytrace=False)
    assert text == path.read_text(), f"{name} changed: {regenerate_hint()}"


# --- the tests -------------------------------------------------------------------------------

def test_the_corpus_holds_whole_cut_rotated_16_bit_and_empty_cases(annotated):
    """What the goldens are said to cover, checked: a crack whole in two neighbouring tiles and
    cut below min_visible in another, tiles of an image without objects, the 16-bit TIFF and
    the EXIF-rotated JPEG packed."""
    lines = images.samples_of(annotated)
    crack = {line["key"][-8:] for line in lines if line["path"] == "defect/a.png"
             and 1 in line["objects"]}
    assert {"r001c000", "r001c001"} <= crack
    assert any(cut["label"] == 1 for line in lines for cut in line.get("objects_cut", []))
    assert any(line["path"] == "good/d.png" and not line["objects"] for line in lines)
    assert {"defect/b.tif", "defect/c.jpg"} <= {line["path"] for line in lines}
    manifest = images.manifest_of(annotated)
    assert manifest["totals"]["rejected"] == 0 and manifest["has_masks"]


def test_an_annotated_tiled_masked_dataset_packs_to_the_golden_bytes(request, annotated):
    matches_golden(request, f"{annotated.name}/dataset.txt", dataset_listing(annotated))


def test_its_manifest_is_the_golden_one_timestamps_aside(request, annotated):
    matches_golden(request, f"{annotated.name}/manifest.json", normalised_manifest(annotated))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_export_layout_writes_the_golden_files(request, annotated, layout, tmp_path):
    cli("export", annotated, tmp_path / layout, *LAYOUTS[layout], "--quiet")
    matches_golden(request, f"{annotated.name}/{layout}.txt", export_listing(tmp_path / layout))


def test_an_image_labelled_tiled_dataset_packs_to_the_golden_bytes(request, labelled):
    matches_golden(request, f"{labelled.name}/labelled.txt", dataset_listing(labelled))


def test_its_manifest_is_the_golden_one_too(request, labelled):
    matches_golden(request, f"{labelled.name}/labelled-manifest.json",
                   normalised_manifest(labelled))


def test_yolo_classify_of_it_writes_the_golden_files(request, labelled, tmp_path):
    cli("export", labelled, tmp_path / "classify", "--layout", "yolo", "--task", "classify",
        "--quiet")
    matches_golden(request, f"{labelled.name}/labelled-yolo-classify.txt",
                   export_listing(tmp_path / "classify"))


def test_the_dev_install_pins_the_versions_the_goldens_were_made_with():
    tomllib = pytest.importorskip("tomllib", reason="Python 3.10 has no tomllib")
    dev = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]["dev"]
    pins = dict(requirement.split("==") for requirement in dev if "==" in requirement)
    assert pins == json.loads((GOLDEN / "versions.json").read_text())
