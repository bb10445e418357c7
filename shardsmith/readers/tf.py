"""tf.data reader: an unbatched ``tf.data.Dataset`` of (uint8 HWC, int64 label) over TFRecords.

    from shardsmith.readers.tf import dataset
    data = dataset("/nvme/shards/line3", split="train").batch(256).prefetch(tf.data.AUTOTUNE)

Shard files are shuffled each epoch and read with a parallel interleave; records are
shuffled in a buffer, parsed and decoded with ``tf.io.decode_jpeg`` in parallel.
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

from . import select_shards

FEATURES = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/class/label": tf.io.FixedLenFeature([], tf.int64),
}


def dataset(
    path: str | Path,
    split: str | None = None,
    shuffle: bool = True,
    shuffle_buffer: int = 2000,
    seed: int | None = None,
    channels: int = 0,
    cycle_length: int | None = None,
    **unused: Any,
) -> tf.data.Dataset:
    """Unbatched (uint8 HWC image, int64 label) pairs; ``split=None`` reads every split.

    ``channels``: 0 keeps what was packed, 1 or 3 converts.  Set ``seed`` for a repeatable
    order; ``shuffle=False`` reads shards and records in manifest order (deterministic).
    """
    if unused:
        raise TypeError(f"unknown options: {', '.join(sorted(unused))}")
    _, shards = select_shards(path, split, "tfrecord")
    files = tf.data.Dataset.from_tensor_slices([path for path, _ in shards])
    if shuffle:
        files = files.shuffle(len(shards), seed=seed, reshuffle_each_iteration=True)
    records = files.interleave(
        tf.data.TFRecordDataset,
        cycle_length=cycle_length or min(len(shards), 8) or 1,
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=not shuffle,
    )
    if shuffle and shuffle_buffer > 1:
        records = records.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)

    def parse(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        example = tf.io.parse_single_example(record, FEATURES)
        image = tf.io.decode_jpeg(example["image/encoded"], channels=channels)
        return image, example["image/class/label"]

    decoded = records.map(parse, num_parallel_calls=tf.data.AUTOTUNE,
                          deterministic=not shuffle)
    return decoded.prefetch(tf.data.AUTOTUNE)
