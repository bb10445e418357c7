"""A sample's objects read back from either shard format: ``ShardFormat.metadata`` and
``mask_png`` give the same thing for WebDataset and TFRecord, and refuse malformed records
with a reason."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from shardsmith.dataset.formats import Record, shard_format
from shardsmith.dataset.formats.metadata import rle_string
from shardsmith.dataset.formats.tfrecord import (
    ByteStrings,
    Floats,
    Ints,
    encode_example,
    feature_lists,
    frame_record,
)
from shardsmith.errors import ShardFormatError

import defects
import images

SPLITS = {"splits": "train=0.5,val=0.5"}
TILED = {"image.tiles.size": 128, "image.tiles.overlap": 16,
         "image.tiles.background_fraction": 0.5}


def annotated_source(source: Path) -> dict:
    """Three originals with a polygon (dent), an RLE (scratch) and a box-only object (a
    ``stain`` with no segmentation), and one original without objects; returns the overrides."""
    relpaths = [f"parts/p{number}.jpg" for number in range(3)]
    for number, relpath in enumerate(relpaths):
        images.write(source / relpath, defects.original(1 + number, seed=number))
    images.write(source / "parts" / "clean.jpg", images.jpeg(300, 200))
    overrides = defects.write_annotations(source, relpaths, "coco")
    document_path = source / "annotations" / "instances.json"
    document = json.loads(document_path.read_text())
    document["categories"].append({"id": 11, "name": "stain"})
    for image in document["images"]:
        document["annotations"].append({"id": 100 + image["id"], "image_id": image["id"],
                                        "category_id": 11, "iscrowd": 0,
                                        "bbox": [20.5, 30.25, 60, 40]})
    document_path.write_text(json.dumps(document))
    return overrides


def samples(output: Path) -> dict[str, tuple[dict, bytes | None]]:
    """key -> (metadata, class mask PNG) of every sample, by the dataset's own format."""
    manifest = images.manifest_of(output)
    fmt = shard_format(manifest["format"])
    found = {}
    for shard in manifest["shards"]:
        for _, record in fmt.records(output / shard["name"], shard["bytes"]):
            found[record.key] = (fmt.metadata(record), fmt.mask_png(record))
    return found


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> dict[tuple[str, bool], dict[str, tuple[dict, bytes | None]]]:
    """The corpus packed in both formats, whole images and tiles."""
    root = tmp_path_factory.mktemp("corpus")
    overrides = annotated_source(root / "source")
    found = {}
    for fmt in ("webdataset", "tfrecord"):
        for tiled in (False, True):
            output = root / f"{fmt}-{tiled}"
            defects.pack_with(root / "source", output, overrides, **SPLITS,
                              **{"output.format": fmt, "image.size": 128},
                              **(TILED if tiled else {}))
            found[fmt, tiled] = samples(output)
    return found


@pytest.mark.parametrize("tiled", [False, True], ids=["images", "tiles"])
@pytest.mark.slow
def test_both_formats_give_the_same_objects_of_every_sample(packed, tiled):
    webdataset, tfrecord = packed["webdataset", tiled], packed["tfrecord", tiled]
    assert sorted(webdataset) == sorted(tfrecord) and len(webdataset) >= 4
    kinds = set()
    for key, (expected, expected_mask) in webdataset.items():
        meta, mask = tfrecord[key]
        for name in ("path", "label", "class", "width", "height", "channels", "labels",
                     "label_names", "rle", "mask"):
            assert meta.get(name) == expected.get(name), (key, name)
        assert np.allclose(meta["boxes"], expected["boxes"], atol=1e-3, rtol=0) \
            if expected["boxes"] else meta["boxes"] == []
        assert meta["polygons"] == [[] for _ in expected["labels"]]
        assert mask == expected_mask and (mask is not None) == ("mask" in expected)
        assert ("tile" in meta) == tiled == ("tile" in expected)
        if tiled:
            shared = {name: expected["tile"][name] for name in meta["tile"]}
            assert meta["tile"] == shared and "original" in expected["tile"]
        for rle, rings in zip(expected["rle"], expected["polygons"], strict=True):
            kinds.add("box only" if rle is None else "polygon" if rings else "rle")
        kinds.add("objects" if expected["labels"] else "no objects")
    assert kinds == {"box only", "polygon", "rle", "objects", "no objects"}


def test_tfrecord_rle_is_pycocotools_compressed_string_of_the_instance_mask(packed):
    from pycocotools import mask as coco_mask

    for key, (meta, _) in packed["tfrecord", False].items():
        for rle in meta["rle"]:
            if rle is None:
                continue
            height, width = rle["size"]
            binary = defects.rle_decode_counts(rle["counts"], height, width)
            encoded = coco_mask.encode(np.asfortranarray(binary.astype(np.uint8)))
            assert rle_string(rle["counts"], height, width) == encoded["counts"], key


def test_tensorflow_parses_the_rle_feature(tmp_path):
    tf = pytest.importorskip("tensorflow", reason="TensorFlow parses the records")
    source = tmp_path / "source"
    overrides = annotated_source(source)
    output = tmp_path / "records"
    defects.pack_with(source, output, overrides, **{"output.format": "tfrecord",
                                                    "image.size": 128})
    ours = samples(output)
    spec = {"image/object/rle": tf.io.VarLenFeature(tf.string),
            "image/key": tf.io.FixedLenFeature([], tf.string)}
    seen = 0
    for shard in images.manifest_of(output)["shards"]:
        for serialized in tf.data.TFRecordDataset(str(output / shard["name"])):
            example = tf.io.parse_single_example(serialized, spec)
            key = example["image/key"].numpy().decode()
            strings = tf.sparse.to_dense(example["image/object/rle"]).numpy().tolist()
            rles = ours[key][0]["rle"]
            height, width = ours[key][0]["height"], ours[key][0]["width"]
            assert strings == [b"" if rle is None else rle_string(rle["counts"], height, width)
                               for rle in rles]
            seen += 1
    assert seen == len(ours)


# --- records written by hand: an older release, and malformed ones ---------------------------

def tfrecord(**changes) -> Record:
    """A framed TFRecord of a 4x2 sample with two objects (an RLE and a box only), with
    ``changes`` to its features (None removes one)."""
    features = {
        "image/encoded": b"jpeg", "image/format": b"jpeg", "image/class/label": 0,
        "image/class/text": b"ok", "image/height": 2, "image/width": 4, "image/channels": 3,
        "image/filename": b"ok/a.jpg", "image/key": b"ok_a",
        "image/object/bbox/xmin": Floats([0.0, 0.25]), "image/object/bbox/ymin": Floats([0, 0]),
        "image/object/bbox/xmax": Floats([0.5, 1.0]), "image/object/bbox/ymax": Floats([1, 1]),
        "image/object/class/label": Ints([1, 2]),
        "image/object/class/text": ByteStrings([b"scratch", b"dent"]),
        "image/object/rle": ByteStrings([rle_string([0, 4, 4], 2, 4), b""]),
    }
    for name, value in changes.items():
        name = "image/" + name.replace("__", "/")
        if value is None:
            features.pop(name)
        else:
            features[name] = value
    return Record("ok_a", frame_record(encode_example(features)))


def webdataset(meta: object) -> Record:
    payload = meta if isinstance(meta, bytes) else json.dumps(meta).encode()
    from shardsmith.dataset.formats.webdataset import _record

    return _record("ok_a", {"jpg": b"jpeg", "cls": b"0", "json": payload})


GOOD = {"path": "ok/a.jpg", "label": 0, "class": "ok", "width": 4, "height": 2, "channels": 3,
        "boxes": [[0, 0, 2, 2], [1, 0, 4, 2]], "labels": [1, 2],
        "label_names": ["scratch", "dent"], "polygons": [[[0, 0, 2, 0, 2, 2]], []],
        "rle": [{"size": [2, 4], "counts": [0, 4, 4]}, None]}


def test_a_hand_written_record_reads_the_same_in_both_formats():
    tf_meta = shard_format("tfrecord").metadata(tfrecord())
    wds_meta = shard_format("webdataset").metadata(webdataset(GOOD))
    assert tf_meta == {**GOOD, "polygons": [[], []]}
    assert wds_meta == GOOD
    assert shard_format("tfrecord").mask_png(tfrecord()) is None
    assert shard_format("webdataset").mask_png(webdataset(GOOD)) is None


def test_a_tfrecord_of_an_older_release_has_no_rle_key():
    meta = shard_format("tfrecord").metadata(tfrecord(object__rle=None))
    assert "rle" not in meta and meta["labels"] == [1, 2]


@pytest.mark.parametrize(("changes", "reason"), [
    ({"object__rle": ByteStrings([b"1", b""])}, "add up to 1, not 2 x 4 = 8"),
    ({"object__rle": ByteStrings([b"\xff\xfe", b""])}, "does not decode"),
    ({"object__rle": ByteStrings([b"0P", b""])}, "ends inside a number"),
    ({"object__rle": ByteStrings([b""])}, "image/object/rle holds 1 values for 2 objects"),
    ({"object__rle": Ints([1, 2])}, "image/object/rle holds other values than bytes"),
    ({"object__class__label": Ints([1, 0])}, "object class id 0 is not from 1"),
    ({"object__class__text": ByteStrings([b"\xff", b"dent"])}, "not UTF-8"),
    ({"width": None}, "the record has no image/width"),
    ({"width": Ints([4, 4])}, "image/width is not one int"),
    ({"width": 70_000}, "says 70000x2 pixels"),
    ({"tile__row": 0}, "the record has no image/tile/column"),
], ids=lambda value: value if isinstance(value, str) else None)
def test_a_malformed_tfrecord_is_refused_with_a_reason(changes, reason):
    with pytest.raises(ShardFormatError, match="sample ok_a") as raised:
        shard_format("tfrecord").metadata(tfrecord(**changes))
    assert reason in str(raised.value)


def test_a_float_list_cut_inside_a_float_is_malformed():
    from shardsmith.dataset.formats.tfrecord import _field

    floats = _field(2, _field(1, b"123"))  # Feature.float_list{packed value}: 3 bytes
    payload = _field(1, _field(1, _field(1, b"image/object/bbox/xmin") + _field(2, floats)))
    with pytest.raises(ShardFormatError, match="a float list of 3 bytes"):
        feature_lists(payload)


HUGE = 1 << 40


@pytest.mark.parametrize(("meta", "reason"), [
    (b"{not json", "does not parse"),
    (b"[" * 100_000, "does not parse"),
    ([1, 2], "is not a JSON object"),
    ({**GOOD, "width": "4"}, "width is not an int"),
    ({**GOOD, "label": True}, "label is not an int"),
    ({**GOOD, "boxes": [[0, 0, 2]] * 2}, "is not 4 finite numbers"),
    ({**GOOD, "boxes": [[0, 0, 2, "x"]] * 2}, "is not 4 finite numbers"),
    ({**GOOD, "labels": [1]}, "labels is not a list of one entry per box (2)"),
    ({**GOOD, "labels": [1, 1.0]}, "object class id 1.0"),
    ({**GOOD, "label_names": [1, 2]}, "label_names holds other values than strings"),
    ({**GOOD, "polygons": [[[0, 0, 2]], []]}, "flat x, y rings"),
    ({**GOOD, "rle": [{"size": [2, 4], "counts": [0, 4, 3]}, None]}, "add up to 7"),
    ({**GOOD, "rle": [{"size": [2, 4], "counts": [HUGE, -HUGE + 8]}, None]},
     "RLE counts must not be negative"),
    ({**GOOD, "rle": [{"size": [2, 4], "counts": [0, "4", 4]}, None]}, "whole numbers"),
    ({**GOOD, "rle": [{"size": [2, 4], "counts": "1"}, None]}, "add up to 1"),
    ({**GOOD, "rle": [{"size": [2, 4], "counts": "\x00"}, None]}, "with the character"),
    ({**GOOD, "rle": [{"size": [HUGE, HUGE], "counts": [HUGE * HUGE]}, None]},
     "not over this 4x2 sample"),
    ({**GOOD, "width": HUGE, "height": HUGE,
      "rle": [{"size": [HUGE, HUGE], "counts": [HUGE * HUGE]}, None]}, "not a JPEG's size"),
    ({**GOOD, "tile": [0, 0]}, "tile is not a dict"),
    ({**GOOD, "objects_cut": {"label": 1}}, "objects_cut is not a list"),
    ({**GOOD, "objects_cut": [{"label": 0, "label_name": "a", "box": [0, 0, 1, 1]}]},
     "class id 0 is not from 1"),
    ({**GOOD, "objects_cut": [{"label": 1, "label_name": "a", "box": [0, 0, 1]}]},
     "cut box [0, 0, 1] is not 4 finite numbers"),
    ({**GOOD, "objects_cut": [{"label": 1, "label_name": "a", "box": [0, 0, 1, 1],
                               "rle": {"size": [2, 4], "counts": [0, 4, 3]}}]}, "add up to 7"),
], ids=lambda value: value if isinstance(value, str) else None)
def test_malformed_webdataset_metadata_is_refused_with_a_reason(meta, reason):
    with pytest.raises(ShardFormatError, match="sample ok_a") as raised:
        shard_format("webdataset").metadata(webdataset(meta))
    assert reason in str(raised.value)
