"""PyTorch reader: an ``IterableDataset`` of (uint8 CHW tensor, int label) over WebDataset shards.

    from shardsmith.readers.torch import dataset
    data = dataset("/nvme/shards/line3", split="train", shuffle=True)
    loader = torch.utils.data.DataLoader(data, batch_size=256, num_workers=8)
    for epoch in range(epochs):
        data.set_epoch(epoch)
        for images, labels in loader: ...

Shards are shuffled per epoch (seed + epoch), then dealt out round-robin to every
(rank, DataLoader worker) pair, so each sample of the split is read exactly once per epoch
across all ranks and workers; a shuffle buffer mixes samples within each worker.  The tars are
read by the ``webdataset`` library; JPEGs are decoded by libjpeg-turbo (simplejpeg).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

try:
    import torch
    from torch.utils.data import IterableDataset, get_worker_info
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "shardsmith.readers.torch needs PyTorch: pip install 'shardsmith[torch]'"
    ) from exc

from . import select_shards


class ShardDataset(IterableDataset):
    """Samples of the selected shards; ``len()`` is this rank's epoch length."""

    def __init__(
        self,
        path: str | Path,
        split: str | None = None,
        shuffle: bool = True,
        shuffle_buffer: int = 2000,
        seed: int = 0,
        transform: Callable[[torch.Tensor], Any] | None = None,
        rank: int | None = None,
        world_size: int | None = None,
    ):
        super().__init__()
        self.manifest, self.shards = select_shards(path, split, "webdataset")
        self.classes: list[str] = list(self.manifest.classes)
        self.shuffle, self.shuffle_buffer, self.seed = shuffle, shuffle_buffer, seed
        self.transform = transform
        if rank is None or world_size is None:
            distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
            rank = torch.distributed.get_rank() if distributed else 0
            world_size = torch.distributed.get_world_size() if distributed else 1
        self.rank, self.world_size = rank, world_size
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Call before each epoch so shard order and shuffling change from epoch to epoch."""
        self.epoch = epoch

    def _epoch_shards(self) -> list[dict[str, Any]]:
        shards = list(self.shards)
        if self.shuffle:
            random.Random(f"{self.seed}:{self.epoch}").shuffle(shards)
        return shards

    def __len__(self) -> int:
        mine = self._epoch_shards()[self.rank :: self.world_size]
        return sum(shard.samples for _, shard in mine)

    def __iter__(self) -> Iterator[tuple[Any, int]]:
        import webdataset as wds

        worker = get_worker_info()
        workers, worker_id = (worker.num_workers, worker.id) if worker else (1, 0)
        slot, slots = self.rank * workers + worker_id, self.world_size * workers
        urls = [path for path, _ in self._epoch_shards()[slot::slots]]
        if not urls:
            return
        samples = wds.WebDataset(urls, shardshuffle=False, nodesplitter=None,
                                 workersplitter=None, empty_check=False)
        stream = (self._decode(sample) for sample in samples)
        if self.shuffle and self.shuffle_buffer > 1:
            stream = _shuffled(stream, self.shuffle_buffer,
                               random.Random(f"{self.seed}:{self.epoch}:{slot}"))
        yield from stream

    def _decode(self, sample: dict[str, Any]) -> tuple[Any, int]:
        import numpy as np
        import simplejpeg

        jpeg = sample["jpg"]
        colorspace = simplejpeg.decode_jpeg_header(jpeg)[2]
        pixels = simplejpeg.decode_jpeg(jpeg, colorspace="GRAY" if colorspace == "Gray"
                                        else "RGB")
        image = torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1)))
        if self.transform is not None:
            image = self.transform(image)
        return image, int(sample["cls"])


def _shuffled(stream: Iterator, size: int, rng: random.Random) -> Iterator:
    """A shuffle buffer: hold ``size`` items, emit a random one as each new one arrives."""
    buffer: list = []
    for item in stream:
        if len(buffer) < size:
            buffer.append(item)
            continue
        index = rng.randrange(size)
        buffer[index], item = item, buffer[index]
        yield item
    rng.shuffle(buffer)
    yield from buffer


def dataset(path: str | Path, split: str | None = None, shuffle: bool = True,
            **options: Any) -> ShardDataset:
    """An ``IterableDataset`` of (uint8 CHW tensor, int label) over a packed or staged dataset.

    ``split=None`` reads every split.  Options: ``shuffle_buffer``, ``seed``, ``transform``
    (applied to each CHW tensor), ``rank`` and ``world_size`` (default: torch.distributed).
    """
    return ShardDataset(path, split, shuffle, **options)
