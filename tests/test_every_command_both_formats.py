"""Every command that reads a dataset, and every reader, gives the same result on a WebDataset
and a TFRecord pack of the same annotated, tiled, masked tree (the golden corpus, two
versions): the same counts, classes, objects, pixels and exported files, not merely exit 0.
The shard format is one object (``dataset/formats``): nothing above it may tell them apart
except by the format's name and the shards' bytes."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image
from test_golden_dataset import ANNOTATED, HEIGHT, LAYOUTS, WIDTH, cli, export_listing, golden_tree

import images

FORMATS = ("webdataset", "tfrecord")


@pytest.fixture(scope="module")
def packs(tmp_path_factory) -> dict[str, Path]:
    """The golden tree packed in each format into folders of one name (``FORMAT/dataset``),
    then packed again with one more original: version 2."""
    root = tmp_path_factory.mktemp("both-formats")
    golden_tree(root / "source")
    jobs = {}
    for fmt in FORMATS:
        jobs[fmt] = root / f"{fmt}.yaml"
        jobs[fmt].write_text(yaml.safe_dump({
            **ANNOTATED, "source": {**ANNOTATED["source"], "path": str(root / "source")},
            "output": {"path": str(root / fmt / "dataset"), "format": fmt, "shard_samples": 8},
            "splits": {"train": 0.5, "val": 0.5}, "run": {"workers": 1, "quiet": True}}))
        cli("pack", "--config", jobs[fmt])
    images.write(root / "source" / "good" / "e.png", images.png(WIDTH, HEIGHT, 5))
    for fmt in FORMATS:
        cli("pack", "--config", jobs[fmt])
    return {fmt: root / fmt / "dataset" for fmt in FORMATS}


def both(packs: dict[str, Path], *args: object) -> tuple[str, str]:
    """The output of ``shardsmith ARGS`` on each format's dataset (``DATASET`` in ``args``
    is replaced by it, ``OUT`` by a folder of that format's own)."""
    outputs = []
    for fmt in FORMATS:
        out = packs[fmt].parent / "out"
        outputs.append(cli(*[packs[fmt] if arg == "DATASET" else
                             out / arg[4:] if str(arg).startswith("OUT/") else arg
                             for arg in args]))
    return outputs[0], outputs[1]


def test_both_packs_hold_the_same_samples(packs):
    indexes = [[{name: value for name, value in json.loads(line).items() if name != "shard"}
                for line in (packs[fmt] / "samples-v2.jsonl").read_text().splitlines()]
               for fmt in FORMATS]
    assert indexes[0] == indexes[1] and len(indexes[0]) > 40


def test_inspect_differs_in_the_format_and_the_shards_bytes_only(packs):
    documents = [json.loads(text) for text in both(packs, "inspect", "--json", "DATASET")]
    for document, fmt in zip(documents, FORMATS, strict=True):
        assert (document.pop("format"), document.pop("dataset")) == (fmt, str(packs[fmt]))
        document.pop("fingerprint")  # the settings' fingerprint: the format is a setting
        document.pop("last_change")
        for name in ("bytes", "bytes_per_shard"):
            document["shards"].pop(name)
    assert documents[0] == documents[1]
    assert documents[0]["samples"] > 40 and documents[0]["version"] == 2


def test_verify_decodes_both_alike(packs):
    outputs = both(packs, "verify", "--decode", "DATASET")
    counts = [re.search(r"OK: (\d+) shards, (\d+) samples", text).groups() for text in outputs]
    assert counts[0] == counts[1]


def test_log_and_diff_are_the_same(packs):
    for command in (["log"], ["diff"], ["diff", "--json"]):
        first, second = (re.sub(r"\d{4}-\d\d-\d\dT[\d:]+\+00:00", "TIME", text)
                         for text in both(packs, *command, "DATASET"))
        assert first == second, command
    assert json.loads(first)["added"]


def test_stage_copies_the_same_dataset(packs):
    both(packs, "stage", "DATASET", "--to", "OUT/staged", "--quiet")
    counts = [re.search(r"OK: (\d+) shards, (\d+) samples", text).groups()
              for text in both(packs, "verify", "DATASET") + both(packs, "verify", "OUT/staged")]
    assert len(set(counts)) == 1


@pytest.mark.parametrize("layout", LAYOUTS)
def test_an_export_writes_the_same_files(packs, layout):
    both(packs, "export", "DATASET", f"OUT/{layout}", *LAYOUTS[layout], "--quiet")
    listings = [export_listing(packs[fmt].parent / "out" / layout) for fmt in FORMATS]
    # the export record names the dataset's manifest by its digest: all else is equal
    listings = [re.sub(r".*/record\.json .*\n", "", listing) for listing in listings]
    assert listings[0] == listings[1] and listings[0].count("\n") > 10


def test_sheet_draws_the_same_samples(packs):
    summaries = [text.split(": ", 1)[1].rsplit(" (", 1)[0] for text in
                 both(packs, "sheet", "DATASET", "-o", "OUT/sheet.png", "--objects")]
    assert summaries[0] == summaries[1] and "objects drawn" in summaries[0]
    sheets = [np.asarray(Image.open(packs[fmt].parent / "out" / "sheet.png")) for fmt in FORMATS]
    assert sheets[0].shape == sheets[1].shape
    # the title, the headline (the format, the shards' bytes) and the footer (the path) are
    # text lines; a thumbnail that differed would be a band of its height
    rows = np.flatnonzero((sheets[0] != sheets[1]).any(axis=(1, 2)))
    bands = np.split(rows, np.flatnonzero(np.diff(rows) > 1) + 1)
    assert len(bands) <= 3 and all(len(band) < 24 for band in bands)


def test_report_shows_the_same_samples(packs):
    summaries = [text.split(" kB, ", 1)[1].split("; ", 1)[0].rsplit(" (", 1)[0] for text in
                 both(packs, "report", "DATASET", "-o", "OUT/report.html")]
    assert summaries[0] == summaries[1] and "sample" in summaries[0]
    pictures = [re.findall(r"data:image/[a-z]+;base64,[A-Za-z0-9+/=]+",
                           (packs[fmt].parent / "out" / "report.html").read_text())
                for fmt in FORMATS]
    assert pictures[0] == pictures[1] and pictures[0]


def test_bench_read_runs_the_same_readers(packs):
    both(packs, "bench-read", "DATASET", "--seconds", "0.05", "--workers", "1",
         "--json", "OUT/bench.json")
    rows = [json.loads((packs[fmt].parent / "out" / "bench.json").read_text())
            for fmt in FORMATS]
    assert [(row["name"], row["note"]) for row in rows[0]] == \
        [(row["name"], row["note"]) for row in rows[1]]
    assert all(row["samples"] > 0 for row in rows[0] + rows[1] if not row["note"])


def test_the_torch_reader_gives_the_same_images_and_targets(packs):
    pytest.importorskip("torch", reason="the torch reader")
    import torch

    from shardsmith.readers.torch import dataset

    read = [list(dataset(packs[fmt], shuffle=False, targets=True)) for fmt in FORMATS]
    assert len(read[0]) == len(read[1]) > 30
    for (image, target), (other_image, other_target) in zip(*read, strict=True):
        assert torch.equal(image, other_image)
        assert target.keys() == other_target.keys() >= {"boxes", "labels", "masks"}
        assert all(torch.equal(target[name], other_target[name]) for name in target)


def test_a_samples_metadata_alone_is_what_a_read_of_its_row_gives(packs):
    """``SampleReader.metadata`` (what the Ultralytics dataset builds its labels from): the
    same metadata as a read of the whole row, on both formats; of a tar it reads the
    ``KEY.json`` bytes alone, not the image before them."""
    from shardsmith.dataset.manifest import read_manifest
    from shardsmith.readers.plan import load_table
    from shardsmith.readers.samples import SampleReader

    found = {}
    for fmt in FORMATS:
        manifest = read_manifest(packs[fmt])
        table = load_table(packs[fmt], manifest.shards, manifest)
        reader = SampleReader(table, len(manifest.classes), len(manifest.object_classes))
        sizes, read = [], reader.files.read
        reader.files.read = lambda shard, offset, size, sizes=sizes, read=read: \
            sizes.append(size) or read(shard, offset, size)
        found[fmt] = {table.key(i): reader.metadata(i) for i in range(len(table))}
        if fmt == "webdataset":
            assert sizes == [int(size) for size in table.meta_size]
        reader.files.read = read
        assert found[fmt] == {table.key(i): reader.read_meta(i)[2] for i in range(len(table))}
    assert found["webdataset"].keys() == found["tfrecord"].keys() and len(found["tfrecord"]) > 30
    objects = [{key: meta.get("boxes") for key, meta in found[fmt].items()} for fmt in FORMATS]
    assert objects[0] == objects[1]


def test_the_tf_reader_of_the_tfrecords_gives_what_torch_gives_of_the_tars(packs):
    pytest.importorskip("tensorflow", reason="the tf.data reader")
    pytest.importorskip("torch", reason="the torch reader")
    from shardsmith.readers import tf as tf_reader
    from shardsmith.readers.torch import dataset

    tars = [(int(label), image.permute(1, 2, 0).numpy().astype(int))
            for image, label in dataset(packs["webdataset"], shuffle=False)]
    records = [(int(label), image.astype(int)) for image, label in tf_reader.dataset(
        packs["tfrecord"], shuffle=False).as_numpy_iterator()]
    assert len(tars) == len(records) > 30
    # tf.data interleaves the shards and TensorFlow's JPEG decoder rounds its own way: each
    # record is one of the tars' samples, its label the same, its pixels within a few levels
    for label, image in records:
        found = [number for number, (other_label, other) in enumerate(tars)
                 if other_label == label and np.abs(other - image).max() <= 8]
        assert found, label
        tars.pop(found[0])


def test_dali_reads_the_same_batches_by_our_plan_and_its_own_reader(packs):
    pytest.importorskip("nvidia.dali", reason="the DALI reader")
    from shardsmith.readers.dali import loader, own_reader

    def planned(path: Path) -> list:
        return [(pixels.numpy().tobytes(), labels.numpy().tolist()) for pixels, labels in
                loader(path, split="train", batch_size=4, device="cpu", num_threads=1)]

    def own(path: Path) -> set:
        found = set()  # its order is its own shuffle's, a short last batch filled with repeats
        for pixels, labels in own_reader(path, split="train", batch_size=8):
            for image, label in zip(pixels.numpy(), labels.numpy(), strict=True):
                # WebDataset's .cls as ASCII digits (zero-padded), TFRecord's an int64
                label = int(bytes(label).rstrip(b"\0")) if label.dtype == np.uint8 \
                    else int(label[0])
                found.add((hashlib.sha1(image.tobytes()).hexdigest(), label))
        return found

    assert planned(packs["webdataset"]) == planned(packs["tfrecord"])
    tars, records = own(packs["webdataset"]), own(packs["tfrecord"])
    assert tars == records and len(tars) > 30

