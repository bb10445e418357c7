"""NVIDIA DALI reader: decode on the GPU (nvJPEG, and the hardware JPEG decoder where the GPU
has one) or on the CPU, straight from the shards and their per-shard indexes.

    from shardsmith.readers.dali import loader          # pip install 'shardsmith[dali]'
    batches = loader("/nvme/shards/line3", split="train", batch_size=256, device="gpu")
    for epoch in range(epochs):
        for images, labels in batches: ...   # torch uint8 N×H×W×C on the GPU, int64 labels

WebDataset shards are read with ``fn.readers.webdataset`` and the ``wds2idx`` indexes the pack
writes (no "Index file not provided" scan of every tar); TFRecord shards with
``fn.readers.tfrecord`` and their ``.idx``.  Under ``torch.distributed`` each rank reads one
shard of the samples (``shard_id``/``num_shards``), padded so every rank yields the same
number of batches (the last batch filled with repeats, as DALI's ``FILL`` policy does).
Shuffling is DALI's own: a buffer shuffle whose order changes every epoch.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

try:
    import nvidia.dali.fn as fn
    import nvidia.dali.tfrecord as tfrec
    import nvidia.dali.types as types
    from nvidia.dali import pipeline_def
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "shardsmith.readers.dali needs NVIDIA DALI: pip install 'shardsmith[dali]' "
        "(nvidia-dali-cuda120)"
    ) from exc

import numpy as np
import torch

from ..errors import ConfigError
from . import equal_image_size, select_shards
from .torch import distributed_rank

READER = "shardsmith"


class DaliLoader:
    """Batches of (images, labels) over a dataset, one epoch per iteration; ``len()`` batches."""

    def __init__(self, path: str | Path, split: str | None = None, batch_size: int = 64,
                 device: str = "gpu", shuffle: bool = True, seed: int = 0,
                 rank: int | None = None, world_size: int | None = None, num_threads: int = 4,
                 device_id: int | None = None, shuffle_buffer: int = 4096):
        if device not in ("gpu", "cpu"):
            raise ConfigError(f"device: expected 'gpu' or 'cpu', got {device!r}")
        directory = Path(path)
        manifest, selected = select_shards(directory, split, None)
        self.classes = list(manifest.classes)
        self.format = manifest.format
        if manifest.format == "webdataset" and any(s.index is None for _, s in selected):
            raise ConfigError(f"{directory}: shards without an index (an older pack): run "
                              "`shardsmith pack` (or stage a packed copy) to add them")
        rank, world_size = distributed_rank(rank, world_size)
        self.height, self.width = equal_image_size(directory, manifest, split)
        if device == "gpu" and device_id is None:
            device_id = torch.cuda.current_device() if torch.cuda.is_available() else 0
        paths = [str(directory / shard.name) for _, shard in selected]
        indexes = [str(directory / shard.index.name) for _, shard in selected]
        pipe = _pipeline(
            manifest.format, paths, indexes, device, shuffle, rank, world_size,
            shuffle_buffer, batch_size=batch_size, num_threads=num_threads,
            device_id=device_id if device == "gpu" else None, seed=seed,
            prefetch_queue_depth=2,
        )
        pipe.build()
        self._iterator = DALIGenericIterator(
            [pipe], ["images", "labels"], reader_name=READER,
            last_batch_policy=LastBatchPolicy.FILL, auto_reset=True)
        self._batches = len(self._iterator)

    def __len__(self) -> int:
        return self._batches

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for (outputs,) in self._iterator:
            yield outputs["images"], _labels(outputs["labels"], self.format)


def _labels(raw: torch.Tensor, fmt: str) -> torch.Tensor:
    """Labels as int64: TFRecords carry them as int64; tars as ASCII digits (``KEY.cls``),
    padded with zeros to the longest in the batch."""
    if fmt == "tfrecord":
        return raw.reshape(-1).to(torch.int64)
    digits = raw.cpu().numpy().reshape(len(raw), -1).astype(np.int64)
    present = digits > 0
    values = np.where(present, digits - ord("0"), 0)
    lengths = present.sum(axis=1)
    powers = 10 ** np.maximum(lengths[:, None] - 1 - np.arange(digits.shape[1]), 0)
    return torch.from_numpy((values * powers * present).sum(axis=1))


@pipeline_def(enable_conditionals=False)
def _pipeline(fmt: str, paths: list[str], indexes: list[str], device: str, shuffle: bool,
              shard_id: int, num_shards: int, shuffle_buffer: int) -> Any:
    common = dict(shard_id=shard_id, num_shards=num_shards, random_shuffle=shuffle,
                  initial_fill=shuffle_buffer, pad_last_batch=True, stick_to_shard=True,
                  name=READER)
    if fmt == "webdataset":
        jpegs, labels = fn.readers.webdataset(
            paths=paths, index_paths=indexes, ext=["jpg", "cls"],
            missing_component_behavior="error", **common)
        labels = fn.pad(labels, fill_value=0)  # ASCII digits, dense for the batch
    else:
        features = fn.readers.tfrecord(
            path=paths, index_path=indexes,
            features={"image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
                      "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1)},
            **common)
        jpegs, labels = features["image/encoded"], features["image/class/label"]
    images = fn.decoders.image(jpegs, device="mixed" if device == "gpu" else "cpu",
                               output_type=types.RGB)
    return images, labels


def loader(path: str | Path, split: str | None = None, **options: Any) -> DaliLoader:
    """A DALI loader over a packed or staged dataset; see ``DaliLoader`` for the options."""
    return DaliLoader(path, split, **options)
