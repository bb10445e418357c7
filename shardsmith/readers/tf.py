"""tf.data reader: an unbatched ``tf.data.Dataset`` of (uint8 HWC, int64 label) over TFRecords.

    from shardsmith.readers.tf import classes, dataset
    data = dataset("/nvme/shards/line3", split="train").batch(256).prefetch(tf.data.AUTOTUNE)

    # tf.distribute: one pipeline per input worker, each sample read by exactly one of them
    strategy.distribute_datasets_from_function(
        lambda context: dataset(path, split="train", input_context=context).batch(64))

Shard files are shuffled each epoch and read with a parallel interleave; records are
shuffled in a buffer, parsed and decoded with ``tf.io.decode_jpeg`` in parallel.  With
``shuffle=False`` (or ``deterministic=True``) the order is the manifest's, the same each run.

With ``targets=True`` (a dataset packed with box or mask annotations) each element is a dict:
``image`` (uint8 HWC), ``label``, ``boxes`` (float32 N×4, ``ymin, xmin, ymax, xmax`` normalised
to 0..1 as the Object Detection API and ``tf.image.draw_bounding_boxes`` have them),
``classes`` (int64 N, ids from 1, as in ``label_map.pbtxt``), ``class_names`` (string N) and,
when the dataset has masks, ``mask`` (uint8 H×W, the class mask: 0 background, k a class id).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

try:
    import tensorflow as tf
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "shardsmith.readers.tf needs TensorFlow: pip install 'shardsmith[tf]'"
    ) from exc

from ..errors import ConfigError
from . import select_shards

FEATURES = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/class/label": tf.io.FixedLenFeature([], tf.int64),
}


TARGET_FEATURES = {
    **FEATURES,
    **{f"image/object/bbox/{edge}": tf.io.VarLenFeature(tf.float32)
       for edge in ("xmin", "ymin", "xmax", "ymax")},
    "image/object/class/label": tf.io.VarLenFeature(tf.int64),
    "image/object/class/text": tf.io.VarLenFeature(tf.string),
    "image/segmentation/class/encoded": tf.io.FixedLenFeature([], tf.string, default_value=""),
}


def _has_masks(manifest: Any) -> bool:
    from ..census import packed_config

    return packed_config(manifest).source.annotations.has_masks


def object_classes(path: str | Path) -> list[str]:
    """The object classes of a dataset: class id ``k`` is ``object_classes(path)[k - 1]``."""
    manifest, _ = select_shards(path, None, "tfrecord")
    return list(manifest.object_classes or ())


def classes(path: str | Path) -> list[str]:
    """The class names of a dataset; a label is an index into this list."""
    manifest, _ = select_shards(path, None, "tfrecord")
    return list(manifest.classes)


def dataset(
    path: str | Path,
    split: str | None = None,
    shuffle: bool = True,
    shuffle_buffer: int = 2000,
    seed: int | None = None,
    channels: int = 0,
    cycle_length: int | None = None,
    num_shards: int = 1,
    index: int = 0,
    input_context: Any = None,
    deterministic: bool = False,
    targets: bool = False,
) -> tf.data.Dataset:
    """Unbatched (uint8 HWC image, int64 label) pairs; ``split=None`` reads every split.

    ``channels``: 0 keeps what was packed, 1 or 3 converts.  ``num_shards``/``index`` (or a
    ``tf.distribute.InputContext``) give this pipeline its part: whole shard files when there
    are at least as many files as parts, single records otherwise, so that every sample is read
    by exactly one pipeline.  ``seed`` makes the shuffled order repeatable; ``deterministic``
    keeps parallel reads in order.
    """
    if input_context is not None:
        num_shards, index = input_context.num_input_pipelines, input_context.input_pipeline_id
    if not 0 <= index < num_shards:
        raise ConfigError(f"index {index} is not one of {num_shards} parts")
    manifest, shards = select_shards(path, split, "tfrecord")
    if targets and manifest.object_classes is None:
        raise ConfigError(f"{path} has no box or mask annotations (packed without "
                          "source.annotations): targets=True needs them")
    with_mask = targets and _has_masks(manifest)
    paths = [file for file, _ in shards]
    by_file = len(paths) >= num_shards
    files = tf.data.Dataset.from_tensor_slices(paths)
    if num_shards > 1 and by_file:
        files = files.shard(num_shards, index)
    if shuffle and (by_file or num_shards == 1):  # parts by record need one file order
        files = files.shuffle(len(paths), seed=seed, reshuffle_each_iteration=True)
    ordered = deterministic or not shuffle or not by_file
    records = files.interleave(
        tf.data.TFRecordDataset,
        cycle_length=cycle_length or min(len(paths), 8) or 1,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=ordered,
    )
    if num_shards > 1 and not by_file:
        records = records.shard(num_shards, index)
    if shuffle and shuffle_buffer > 1:
        records = records.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)

    def parse(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        example = tf.io.parse_single_example(record, FEATURES)
        image = tf.io.decode_jpeg(example["image/encoded"], channels=channels)
        return image, example["image/class/label"]

    def parse_targets(record: tf.Tensor) -> dict[str, tf.Tensor]:
        example = tf.io.parse_single_example(record, TARGET_FEATURES)
        dense = {key: tf.sparse.to_dense(value) for key, value in example.items()
                 if isinstance(value, tf.SparseTensor)}
        found = {
            "image": tf.io.decode_jpeg(example["image/encoded"], channels=channels),
            "label": example["image/class/label"],
            "boxes": tf.stack([dense[f"image/object/bbox/{edge}"]
                               for edge in ("ymin", "xmin", "ymax", "xmax")], axis=-1),
            "classes": dense["image/object/class/label"],
            "class_names": dense["image/object/class/text"],
        }
        if with_mask:
            found["mask"] = tf.io.decode_png(example["image/segmentation/class/encoded"],
                                             channels=1)[:, :, 0]
        return found

    decoded = records.map(parse_targets if targets else parse,
                          num_parallel_calls=tf.data.AUTOTUNE, deterministic=ordered)
    return decoded.prefetch(tf.data.AUTOTUNE)
