"""The readers that tests/test_cut_defects.py leaves: tf.data leaves a tile whose defect was cut
below ``min_visible`` out of its epoch, as the torch reader does; the Ultralytics reader's
segment mode asks the export's rule and never trains on a box as if it were a mask.

The corpus is test_cut_defects.py's: five 256 px tiles of one original, a crack (a mask) in
tile 0 poking 10 px into tile 1, a scratch (a YOLO box only) in tile 2 poking 22 px into
tile 3, tile 4 clean, both defects painted red.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_cut_defects import CUT_CONFIG, TILE, as_an_earlier_release, cut_tree, red

import images
from defects import pack_with

# The cut parts lie at a tile's left edge: tile 1 shows red in columns 0-9, tile 3 in 0-21;
# tiles 0 and 2 have none there (their defects start at columns 40 and 48).
CUT_EDGE = 30


def tf_corpus(tmp_path, **more):
    cut_tree(tmp_path / "source")
    pack_with(tmp_path / "source", tmp_path / "records", CUT_CONFIG,
              **{"output.format": "tfrecord", **more})
    return tmp_path / "records"


def tf_images(data) -> list[np.ndarray]:
    return [np.asarray((element["image"] if isinstance(element, dict) else element[0]).numpy())
            for element in data]


def shows_a_cut_part(pixels: np.ndarray) -> bool:
    return bool(red(pixels)[:, :CUT_EDGE].any())


@pytest.fixture
def tf():
    return pytest.importorskip("tensorflow", reason="the tf.data reader needs TensorFlow")


@pytest.mark.parametrize("targets", [False, True])
def test_the_tf_reader_leaves_out_the_tiles_with_a_cut_defect_and_says_so(tf, tmp_path, caplog,
                                                                         targets):
    from shardsmith.readers.tf import dataset

    data = dataset(tf_corpus(tmp_path), shuffle=False, targets=targets)
    assert "2 samples left out: a defect cut below min_visible" in caplog.text
    assert int(tf.data.experimental.cardinality(data)) == 3
    found = tf_images(data)
    assert len(found) == 3
    assert not any(shows_a_cut_part(pixels) for pixels in found)
    assert sum(not red(pixels).any() for pixels in found) == 1  # tile 4, the clean one


@pytest.mark.parametrize("shard_samples", [2, None])  # parts by shard file, parts by record
def test_tf_parts_read_every_kept_tile_once_and_no_cut_one(tf, tmp_path, shard_samples):
    from shardsmith.readers.tf import dataset

    records = tf_corpus(tmp_path, **{"output.shard_samples": shard_samples})
    assert len(images.manifest_of(records)["shards"]) == (3 if shard_samples else 1)
    parts = [dataset(records, shuffle=False, num_shards=2, index=index) for index in (0, 1)]
    found = [tf_images(part) for part in parts]
    assert [int(tf.data.experimental.cardinality(part)) for part in parts] == \
        [len(part) for part in found]
    tiles = [pixels for part in found for pixels in part]
    assert len(tiles) == 3
    assert not any(shows_a_cut_part(pixels) for pixels in tiles)
    assert len({pixels.tobytes() for pixels in tiles}) == 3  # each kept tile once


def test_tf_keep_cut_reads_them_with_the_cut_objects_as_ignore_boxes(tf, tmp_path, caplog):
    from shardsmith.readers.tf import dataset

    data = dataset(tf_corpus(tmp_path), shuffle=False, targets=True, keep_cut=True)
    assert "left out" not in caplog.text
    elements = list(data)
    assert len(elements) == 5 == int(tf.data.experimental.cardinality(data))
    ignored = sorted((element["ignore_classes"].numpy().tolist(),
                      np.round(element["ignore_boxes"].numpy() * TILE, 3).tolist())
                     for element in elements if len(element["ignore_classes"]))
    # ymin, xmin, ymax, xmax as ``boxes`` has them: the crack's tip, the scratch's end
    assert ignored == [([1], [[100.0, 0.0, 110.0, 10.0]]), ([2], [[60.0, 0.0, 120.0, 22.0]])]
    masks = [element["mask"].numpy() for element in elements
             if shows_a_cut_part(element["image"].numpy())]
    assert len(masks) == 2 and any((mask[100:110, :10] == 255).all() for mask in masks)


def test_tf_reads_an_earlier_releases_dataset_as_the_torch_reader_does(tf, tmp_path, caplog):
    from shardsmith.readers.tf import dataset

    records = tf_corpus(tmp_path)
    as_an_earlier_release(records)  # only objects_dropped counts say which tiles were cut
    data = dataset(records, shuffle=False)
    assert "2 samples left out" in caplog.text
    found = tf_images(data)
    assert len(found) == 3 and not any(shows_a_cut_part(pixels) for pixels in found)


# --- the Ultralytics reader's segment mode (its dataset asks readers.segments) --------------

def segment_check(output, boxes_as_polygons: bool = False) -> str:
    """What ``ShardYOLODataset(task="segment")`` asks of the samples it reads."""
    from shardsmith.readers import select_shards
    from shardsmith.readers.cut import without_cut
    from shardsmith.readers.plan import load_table
    from shardsmith.readers.segments import check_segments

    manifest, selected = select_shards(output, "train", "webdataset")
    table = without_cut(output, manifest, load_table(output, [shard for _, shard in selected]))
    return check_segments(output, manifest, table, boxes_as_polygons)


@pytest.fixture
def shards(tmp_path):
    cut_tree(tmp_path / "source")
    pack_with(tmp_path / "source", tmp_path / "shards", CUT_CONFIG)
    return tmp_path / "shards"


def test_ultralytics_segment_is_refused_where_objects_have_a_box_only(shards):
    from shardsmith.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        segment_check(shards)
    said = str(refused.value)
    assert "task=segment: 1 of 2 objects have a box only (scratch 1)" in said
    assert "boxes_as_polygons" in said and "\n" not in said


def test_ultralytics_segment_takes_boxes_as_polygons_only_when_asked(shards, caplog):
    note = segment_check(shards, boxes_as_polygons=True)
    assert "1 of 2 objects have a box only (scratch 1), written as rectangles" in note
    assert note in caplog.text


def test_ultralytics_segment_where_every_object_has_pixels(tmp_path):
    cut_tree(tmp_path / "source")
    (tmp_path / "source" / "good" / "a.txt").unlink()  # the crack's mask alone
    pack_with(tmp_path / "source", tmp_path / "shards", CUT_CONFIG)
    assert segment_check(tmp_path / "shards") == \
        "segment, as asked: every object has a polygon or mask"


def test_ultralytics_segment_over_an_earlier_releases_index_says_it_cannot_tell(shards,
                                                                               caplog):
    as_an_earlier_release(shards, "objects_box_only")
    note = segment_check(shards)
    assert "the index lines of 2 samples with objects, written by an earlier release, do not " \
           "record which objects have pixels" in note
    assert "WARNING" in caplog.text and note in caplog.text


def test_dali_leaves_the_cut_samples_of_tfrecord_shards_out_unless_keep_cut(tmp_path, caplog):
    pytest.importorskip("nvidia.dali", reason="needs NVIDIA DALI (the dali extra)")
    pytest.importorskip("torch", reason="DALI's iterator gives torch tensors (the torch extra)")
    from shardsmith.readers.dali import loader

    records = tf_corpus(tmp_path)
    left = [images.numpy() for images, _ in loader(records, batch_size=1, device="cpu",
                                                   shuffle=False, num_threads=1)]
    assert "2 samples left out" in caplog.text
    assert len(left) == 3 and not any(shows_a_cut_part(pixels[0]) for pixels in left)
    kept = loader(records, batch_size=1, device="cpu", shuffle=False, keep_cut=True,
                  num_threads=1)
    assert sum(len(labels) for _, labels in kept) == 5  # every tile, the cut ones too
