"""A box no pack writes (inverted, empty, outside its sample, smaller than an export writes) is
refused by every consumer, as export refuses it: `verify --decode`, the torch reader's targets
(and so the Ultralytics dataset and the contact sheet, which build theirs the same way), and
the tf.data reader's.  One
geometry check holds them all (``metadata.box_problem``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hostile_data import cli, mixed_annotated, rebuild_shard, rebuild_tfrecord_shard

from shardsmith.dataset.formats.metadata import box_problem

import images


def inverted(box: list[float], width: int, height: int) -> list[float]:
    x0, y0, x1, y1 = box
    return [x1, y0, x0, y1]


def empty(box: list[float], width: int, height: int) -> list[float]:
    x0, y0, _, y1 = box
    return [x0, y0, x0, y1]


def outside(box: list[float], width: int, height: int) -> list[float]:
    x0, y0, _, y1 = box
    return [x0, y0, width + 40, y1]


@pytest.fixture(scope="module")
def annotated(tmp_path_factory) -> Path:
    return mixed_annotated(tmp_path_factory.mktemp("geometry"), "webdataset")


def forged(dataset: Path, copy: Path, lie) -> str:
    """A copy of ``dataset`` whose first sample with a box has that box rewritten by ``lie``,
    its shard, index and manifest re-signed; returns the sample's key."""
    import shutil

    shutil.copytree(dataset, copy)
    forged_key = []

    def edit(key: str, members: dict[str, bytes]) -> dict[str, bytes]:
        metadata = json.loads(members["json"])
        if not forged_key and metadata.get("boxes"):
            box = metadata["boxes"][0]
            metadata["boxes"][0] = lie(box, metadata["width"], metadata["height"])
            members["json"] = json.dumps(metadata).encode()
            forged_key.append(key)
        return members

    for shard in images.manifest_of(copy)["shards"]:
        if not forged_key:
            rebuild_shard(copy, shard["name"], edit)
    assert forged_key
    return forged_key[0]


@pytest.mark.parametrize("lie", [inverted, empty, outside])
@pytest.mark.slow
def test_verify_decode_names_a_sample_whose_box_is_no_box(annotated, tmp_path, lie):
    key = forged(annotated, tmp_path / "forged", lie)
    process = cli("verify", tmp_path / "forged", "--decode", "--quiet")
    assert process.returncode != 0, process.stdout
    assert f"sample {key}" in process.stdout + process.stderr
    assert "is not x0 < x1, y0 < y1 inside" in process.stdout + process.stderr


@pytest.mark.parametrize("lie", [inverted, empty, outside])
def test_the_torch_reader_never_serves_a_box_that_is_no_box(annotated, tmp_path, lie):
    pytest.importorskip("torch")
    from shardsmith.errors import CorruptSampleError
    from shardsmith.readers.torch import dataset

    key = forged(annotated, tmp_path / "forged", lie)
    with pytest.raises(CorruptSampleError, match=key):
        list(dataset(tmp_path / "forged", targets=True, shuffle=False, on_corrupt="raise"))


def test_a_box_one_step_of_a_record_wide_is_a_box():
    # 102.401 - 102.4 is 0.00099999999999 in floats: still the 1/1000 px a record keeps
    assert box_problem([102.4, 10.0, 102.401, 20.0], 256, 256) is None


@pytest.mark.parametrize(("box", "width"), [
    ([10.0, 10.0, 10.0000001, 20.0], 256),  # 0.000 px in COCO, 0.000000 in YOLO
    ([10.0, 10.0, 10.03, 20.0], 65_535),  # 0.000000 of 65,535 px in YOLO
    ([10.0, 10.0, 10.02, 10.02], 256)])  # a COCO area of 0.000 px^2
def test_a_box_an_export_writes_as_nothing_is_no_box(box, width):
    problem = box_problem(box, width, 256)
    assert problem is not None and "smaller than an export writes" in problem


def test_a_box_an_export_still_writes_is_a_box_in_the_widest_sample():
    assert box_problem([10.0, 10.0, 10.07, 20.0], 65_535, 256) is None


def forged_tfrecord(dataset: Path, copy: Path, lie) -> str:
    """A copy of the TFRecord ``dataset`` whose first object box is rewritten by ``lie``
    (its shard, index and manifest re-signed); returns the record's key."""
    import shutil

    shutil.copytree(dataset, copy)
    keys = []

    def edit(example) -> bool:
        feature = example.features.feature
        edges = [feature[f"image/object/bbox/{edge}"].float_list.value
                 for edge in ("xmin", "ymin", "xmax", "ymax")]
        if not edges[0]:
            return False
        width = feature["image/width"].int64_list.value[0]
        height = feature["image/height"].int64_list.value[0]
        box = [edges[0][0] * width, edges[1][0] * height, edges[2][0] * width,
               edges[3][0] * height]
        x0, y0, x1, y1 = lie(box, width, height)
        for values, value in zip(edges, (x0 / width, y0 / height, x1 / width, y1 / height),
                                 strict=True):
            values[0] = value
        keys.append(feature["image/key"].bytes_list.value[0].decode())
        return True

    for shard in images.manifest_of(copy)["shards"]:
        if rebuild_tfrecord_shard(copy, shard["name"], edit):
            return keys[0]
    raise AssertionError("no record with an object")


@pytest.mark.parametrize("lie", [inverted, empty, outside])
def test_the_tf_reader_never_serves_a_box_that_is_no_box(tmp_path, caplog, lie):
    pytest.importorskip("tensorflow")
    from shardsmith.readers.tf import dataset

    key = forged_tfrecord(mixed_annotated(tmp_path, "tfrecord"), tmp_path / "forged", lie)
    served = list(dataset(tmp_path / "forged", targets=True, shuffle=False))
    assert served and f"sample {key}: corrupt sample skipped" in caplog.text
    for element in served:  # the corrupt one replaced, as every corrupt sample is
        for top, left, bottom, right in element["boxes"].numpy():
            assert 0 <= left < right <= 1 and 0 <= top < bottom <= 1
