"""Damaged and forged datasets for the hostile-input tests of the readers, verify and the side
commands: shards rebuilt with edited members (their index and the manifest following, so that
only the content is wrong), and annotated datasets that mix images with and without objects."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import defects
import images

REPO = Path(__file__).resolve().parents[1]
COCO = {"source.annotations.coco": "annotations/instances.json"}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def small_dataset(root: Path, fmt: str = "webdataset", count: int = 6,
                  same_content: bool = False) -> Path:
    """``count`` small JPEGs in classes a and b, packed to 32 px, 3 samples a shard, half
    train, half val; ``same_content``: every image the same pixels (equal shard sizes)."""
    source = root / "source"
    for number in range(count):
        images.write(source / "ab"[number % 2] / f"{number}.jpg",
                     images.jpeg(96, 64, 0 if same_content else number))
    return images.pack_small(source, root / fmt, fmt, 32, "train=0.5,val=0.5")


def mixed_annotated(root: Path, fmt: str) -> Path:
    """A COCO-annotated dataset of three images with objects and one without, at 64 px
    (center crop, so batches work), in ``fmt``."""
    source = root / "source"
    if not source.exists():
        relpaths = [f"parts/p{number}.jpg" for number in range(3)]
        for number, relpath in enumerate(relpaths):
            images.write(source / relpath, defects.original(1, seed=number))
        defects.write_annotations(source, relpaths, "coco")
        images.write(source / "parts" / "clean.jpg", images.jpeg(300, 200))  # no objects
    output = root / fmt
    defects.pack_with(source, output, COCO, **{"output.format": fmt, "image.size": 64,
                                               "image.resize": "center_crop",
                                               "output.shard_samples": 2})
    return output


def write_manifest(dataset: Path, manifest: dict) -> None:
    (dataset / "manifest.json").write_text(json.dumps(manifest, indent=1))


def rebuild_shard(dataset: Path, name: str,
                  edit: Callable[[str, dict[str, bytes]], dict[str, bytes]]) -> None:
    """Rewrite the WebDataset shard ``name`` with each sample's members passed through
    ``edit(key, {extension: bytes})``; its index and the manifest's sizes and digests follow."""
    from shardsmith.dataset.formats import Placed, index_bytes
    from shardsmith.dataset.formats.webdataset import WebDatasetFormat, _record

    fmt = WebDatasetFormat()
    samples = defects.members(dataset)
    manifest = images.manifest_of(dataset)
    shard = next(entry for entry in manifest["shards"] if entry["name"] == name)
    keys = [record.key for _, record in fmt.records(dataset / name, shard["bytes"])]
    data, placed = b"", []
    for key in keys:
        record = _record(key, edit(key, dict(samples[key])))
        placed.append(Placed(len(data), len(record.data), key, record.members))
        data += record.data
    data += fmt.trailer(len(data))
    index = index_bytes(fmt, placed)
    (dataset / name).write_bytes(data)
    (dataset / shard["index"]["name"]).write_bytes(index)
    shard.update(bytes=len(data), sha256=sha256(data))
    shard["index"].update(bytes=len(index), sha256=sha256(index))
    write_manifest(dataset, manifest)


def python(script: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """``script`` in a fresh interpreter (a crash or a hang cannot take the test run with it);
    past ``timeout`` the test fails as a hang."""
    try:
        return subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"hung for {timeout} s") from None


def cli(*args: object, timeout: float = 180) -> subprocess.CompletedProcess:
    """The ``shardsmith`` command in a fresh process."""
    program = "import sys\nfrom shardsmith.cli import main\n" \
              "main(sys.argv[1:], prog_name='shardsmith')\n"
    try:
        return subprocess.run([sys.executable, "-c", program, *map(str, args)], cwd=REPO,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"shardsmith {args[0]} hung for {timeout} s") from None


def one_error_line(process: subprocess.CompletedProcess, code: int = 2) -> str:
    """The command failed with ``code``, one ``shardsmith: error:`` line on stderr."""
    assert process.returncode == code, (process.returncode, process.stdout, process.stderr)
    assert "Traceback" not in process.stderr, process.stderr
    lines = process.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardsmith: error:"), process.stderr
    return lines[0]


def rebuild_tfrecord_shard(dataset: Path, name: str,
                           edit: Callable[[object], bool]) -> bool:
    """Rewrite the TFRecord shard ``name`` with each record's ``tf.train.Example`` passed to
    ``edit`` (which changes it in place and says whether it did); its index and the manifest's
    sizes and digests follow.  Whether any record was edited."""
    import tensorflow as tf

    from shardsmith.dataset.formats import Placed, index_bytes
    from shardsmith.dataset.formats.tfrecord import TFRecordFormat, frame_record, iter_records

    manifest = images.manifest_of(dataset)
    shard = next(entry for entry in manifest["shards"] if entry["name"] == name)
    data, placed, edited = b"", [], False
    for _, payload in iter_records(dataset / name, shard["bytes"]):
        example = tf.train.Example.FromString(payload)
        if not edited and edit(example):
            edited, payload = True, example.SerializeToString()
        record = frame_record(payload)
        placed.append(Placed(len(data), len(record), "", ()))
        data += record
    index = index_bytes(TFRecordFormat(), placed)
    (dataset / name).write_bytes(data)
    (dataset / shard["index"]["name"]).write_bytes(index)
    shard.update(bytes=len(data), sha256=sha256(data))
    shard["index"].update(bytes=len(index), sha256=sha256(index))
    write_manifest(dataset, manifest)
    return edited


def classified(root: Path, names: tuple[str, str] | None = None) -> Path:
    """A dataset of two image classes packed from split folders; with ``names``, its
    manifest renames them (unsigned: the manifest is not hashed by anything it names)."""
    source = root / "source"
    for name in ("a1", "b1"):
        images.write(source / "train" / name / f"{name}.jpg", images.jpeg())
    dataset = root / "dataset"
    defects.pack_with(source, dataset, {"splits.folder": True, "splits": "train=1.0"})
    if names is not None:
        manifest = json.loads((dataset / "manifest.json").read_text())
        manifest["classes"] = list(names)
        (dataset / "manifest.json").write_text(json.dumps(manifest))
    return dataset
