"""PyTorch reader: an ``IterableDataset`` over a packed or staged dataset (WebDataset or TFRecord
shards).

    from shardsmith.readers.torch import dataset
    data = dataset("/nvme/shards/line3", split="train", batch_size=256)   # batch mode
    loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=8,
                                         persistent_workers=True, pin_memory=True)
    for epoch in range(epochs):
        data.set_epoch(epoch)
        for images, labels in loader: ...   # uint8 N×C×H×W (channels_last), int64 N

Exact, equal epochs (docs/design.md, invariant 9).  One global order per (seed, epoch)
(``plan.epoch_order``) is cut into one equal share per rank (``plan.rank_share``).  In batch
mode the share is cut into batches and batch ``i`` goes to DataLoader worker ``i % workers``;
the DataLoader collects worker results round-robin, so it yields batches in order, every rank
the same number (``len(loader)``), whatever ``num_workers``, also with more workers than
shards.  Reads go by offset (from the per-shard index) straight into a preallocated batch
array: no per-sample tensor, no collate.

Per-sample mode (no ``batch_size``; the DataLoader batches, ``transform`` per image) gives every
rank the same number of samples.  Batch it with ``SampleLoader(data, batch_size=8,
num_workers=4)``: the share is cut into loader batches and batch ``i`` goes to worker
``i % workers``, so only the last batch is partial and ``len(loader)`` is exact for any
``num_workers`` (a plain DataLoader cannot tell the dataset its batch size: with more than one
worker, each worker ends on its own partial batch and ``len(loader)`` can fall short by up to
``num_workers - 1``).

Weighted mode (``weights="scratch=10,*=1"``, ``draws=N``; ``readers.weights``): an epoch is
``draws`` samples drawn with replacement by class weight, a function of (seed, epoch) only,
cut into ranks, batches and workers like an unweighted epoch (``set_epoch``, resume alike).

A corrupt sample is named (shard and key) and, by default, replaced by another sample of the
same batch, so batch counts stay equal; ``on_corrupt="raise"`` raises ``CorruptSampleError``.

Detection (``targets=True``, a dataset packed with box or mask annotations): each image comes
with torchvision's target dict instead of its label: ``boxes`` float N×4 (x0, y0, x1, y1 in
the sample's pixels), ``labels`` int64 N (object class ids from 1, ``object_classes[id - 1]``)
and, when the dataset has masks, ``masks`` uint8 N×H×W::

    data = dataset(path, split="train", targets=True)
    loader = SampleLoader(data, batch_size=8, collate_fn=detection_collate, num_workers=4)
    for images, targets in loader:
        losses = model([image.float() / 255 for image in images], targets)
"""

from __future__ import annotations

import copy
import logging
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

import numpy as np

from ..errors import ConfigError
from . import equal_image_size, largest_image_size, select_shards
from .batches import COLORSPACES, BatchAssembler, checked_jpegs, each_sample
from .cut import without_cut
from .epochs import ArgumentError, EpochPlan, EpochSettings, whole_number
from .plan import DEFAULT_BLOCK, check_shards, load_table
from .ring import BatchRing, RingBatch, ShardLoader
from .samples import Corruptions, SampleReader
from .weights import WeightSpec, reader_draws

__all__ = ["SampleLoader", "ShardDataset", "ShardLoader", "dataset", "detection_collate",
           "distributed_rank"]

log = logging.getLogger(__name__)


class ShardDataset(IterableDataset):
    """The samples of one split (or all) of a dataset; ``len()`` is this rank's epoch length:
    batches in batch mode, samples otherwise.

    Put together from four parts, each with one job: ``plan`` (``epochs.EpochPlan``: which
    samples this rank and worker read in an epoch, ``set_epoch``, resume), ``reader``
    (``samples.SampleReader``: a sample's bytes, label and metadata from its shard, checked),
    ``assembler`` (``batches.BatchAssembler``: a batch decoded into one array) and the targets
    decoder (``targets.detection_target``, through the reader).
    """

    def __init__(
        self,
        path: str | Path,
        split: str | None = None,
        shuffle: bool = True,
        seed: int = 0,
        batch_size: int | None = None,
        transform: Callable[[torch.Tensor], Any] | None = None,
        batch_transform: Callable[[torch.Tensor], Any] | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        pad: bool = True,
        drop_last: bool = False,
        decode: bool = True,
        channels: int = 3,
        on_corrupt: str = "replace",
        block: int = DEFAULT_BLOCK,
        targets: bool = False,
        weights: WeightSpec | None = None,
        draws: int | None = None,
        keep_cut: bool = False,
    ):
        super().__init__()
        if channels not in COLORSPACES:
            raise ConfigError(f"channels: expected 1 or 3, got {channels!r}")
        Corruptions(on_corrupt)  # checks the value now, not in a worker
        rank, world_size = distributed_rank(rank, world_size)
        settings = EpochSettings(seed, shuffle, block, rank, world_size, pad, drop_last,
                                 batch_size)
        directory = Path(path)
        self.manifest, selected = select_shards(directory, split, None)
        self.shards = selected
        self.classes: list[str] = list(self.manifest.classes)
        self.object_classes: list[str] = list(self.manifest.object_classes or ())
        if targets and self.manifest.object_classes is None:
            raise ConfigError(f"{directory} has no box or mask annotations (packed without "
                              "source.annotations): targets=True needs them")
        self.table = load_table(directory, [shard for _, shard in selected], self.manifest)
        check_shards(self.table)  # a shard swapped for another is refused now, not served
        self.table = without_cut(directory, self.manifest, self.table, keep_cut)
        self.batch_size, self.decode, self.channels = batch_size, decode, channels
        self.transform, self.batch_transform = transform, batch_transform
        self.on_corrupt, self.targets = on_corrupt, targets
        self.image_size = equal_image_size(directory, self.manifest, split) \
            if batch_size is not None and decode else None
        # No sample's JPEG header may say more than the largest size the sample index records
        # (a 16x16 JPEG whose header says 65500x65500 would allocate 12 GB when decoded).
        largest = self.image_size or (largest_image_size(directory, self.manifest, split)
                                      if decode or targets else None)
        self.plan = EpochPlan(self.table, settings,
                              reader_draws(directory, self.manifest, self.table, weights, draws))
        self.reader = SampleReader(self.table, len(self.classes), len(self.object_classes),
                                   largest)
        self.assembler = BatchAssembler(self.reader, self.image_size, channels, targets) \
            if self.image_size is not None else None
        self._ring: BatchRing | None = None  # set on the copy a ShardLoader reads
        self._loader_batch: int | None = None  # set on the copy a SampleLoader reads
        self._state: dict[str, int] = {"epoch": 0, "start": 0, "done": 0}

    @property
    def with_masks(self) -> bool:
        return self.reader.with_masks

    # --- epochs and their partition ------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Call before each epoch (every epoch, or never: then each one advances by itself).
        Reaches persistent workers too."""
        self.plan.set_epoch(epoch)

    def rank_samples(self, epoch: int = 0) -> int:
        """How many samples this rank reads in an epoch (with ``pad=False``, shares differ)."""
        return len(self.plan.share(epoch))

    def __len__(self) -> int:
        samples = self.rank_samples()
        return samples if self.batch_size is None else self.plan.batches(samples)

    # --- resumable position (torchdata's StatefulDataLoader calls these in each worker) ----

    def state_dict(self) -> dict[str, int]:
        """Where this iterator stands: epoch, start position, items yielded since."""
        return dict(self._state)

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume from ``state_dict()``, or from ``{"epoch": e, "start": k}``: the k-th batch
        (batch mode; the k-th sample otherwise) of epoch e, for every worker."""
        self.plan.resume(state)

    # --- iteration -----------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        epoch, start, done = self.plan.begin(worker)
        share = self.plan.share(epoch)
        self._state = {"epoch": epoch, "start": start, "done": done}
        corruptions = Corruptions(self.on_corrupt)
        try:
            if self.batch_size is None:
                mine = self.plan.worker_samples(share, worker, workers, start,
                                                self._loader_batch)
                yield from each_sample(mine, self._sample, corruptions, self._progress, done)
            else:
                yield from self._batches(share, worker, workers, start, done, corruptions)
        finally:
            corruptions.warn(epoch)

    def _progress(self, count: int) -> None:
        self._state["done"] = count

    def _batches(self, share: np.ndarray, worker: int, workers: int, start: int, done: int,
                 corruptions: Corruptions) -> Iterator[Any]:
        for count, number in enumerate(
                self.plan.worker_batches(share, worker, workers, start, done), done + 1):
            indices = self.plan.batch(share, number)
            result = self._decoded_batch(indices, corruptions, worker) if self.decode else \
                self._raw_batch(indices, corruptions)
            self._state["done"] = count
            yield result

    def _sample(self, index: int) -> tuple[Any, Any]:
        """One sample as tensors: the image (CHW, or JPEG bytes) and its label or target."""
        reader = self.reader
        if self.targets:
            jpeg, label, meta = reader.read_meta(index)
        else:
            jpeg, label = reader.read(index)
        if not self.decode:
            if self.targets:
                label = _tensors(reader.target(index, meta, *reader.jpeg_shape(index, jpeg)))
            return torch.frombuffer(bytearray(jpeg), dtype=torch.uint8), label
        pixels = reader.decode(index, jpeg, COLORSPACES[self.channels])
        image = torch.from_numpy(pixels).permute(2, 0, 1)
        if self.targets:
            label = _tensors(reader.target(index, meta, pixels.shape[0], pixels.shape[1]))
        if self.transform is not None:
            image = self.transform(image)
        return image, label

    def _decoded_batch(self, indices: np.ndarray, corruptions: Corruptions,
                       worker: int = 0) -> Any:
        ring = self._ring
        if ring is not None:
            ring_slot = ring.acquire(worker)
            images = ring.view(ring_slot)[: len(indices)]
        else:
            images = self.assembler.empty(len(indices))
        labels, targets = self.assembler.decode(indices, images, corruptions)
        second = [_tensors(target) for target in targets] if self.targets else \
            torch.from_numpy(labels)
        if ring is not None:
            return RingBatch(ring_slot, len(indices)), second
        # N×H×W×C memory seen as N×C×H×W: PyTorch's channels_last, no copy.
        batch = torch.from_numpy(images).permute(0, 3, 1, 2)
        if self.batch_transform is not None:
            batch = self.batch_transform(batch)
        return batch, second

    def _raw_batch(self, indices: np.ndarray,
                   corruptions: Corruptions) -> tuple[list[torch.Tensor], Any]:
        """JPEG bytes, for decoding on the GPU (``torchvision.io.decode_jpeg(device="cuda")``)."""
        if self.targets:
            samples = list(each_sample(indices, self._sample, corruptions))
            return [jpeg for jpeg, _ in samples], [target for _, target in samples]
        jpegs, labels = checked_jpegs(self.reader, indices, corruptions)
        return [torch.frombuffer(bytearray(jpeg), dtype=torch.uint8) for jpeg in jpegs], \
            torch.from_numpy(labels)


class SampleLoader(torch.utils.data.DataLoader):
    """A ``DataLoader`` that batches a per-sample ``ShardDataset`` with ``len(loader)`` exact
    for any ``num_workers``, ``drop_last`` or not.

    A DataLoader batches in each worker, so every worker that ends on a partial batch adds
    one: 18 samples in batches of 4 over 2 workers in two halves of 9 make 3 + 3 batches, not
    the ``ceil(18 / 4) = 5`` that ``len(loader)`` says.  This loader tells its copy of the
    dataset the batch size, and the workers take whole batches in turn (``EpochPlan
    .worker_samples``): only the last batch is partial, and batches come in one order
    whatever the number of workers.  ``set_epoch`` on the dataset reaches it (the copy
    shares the epoch counters).
    """

    def __init__(self, data: ShardDataset, batch_size: int = 1, **options: Any):
        if data.batch_size is not None:
            raise ConfigError("SampleLoader batches samples: give it a dataset without "
                              "batch_size= (for batch mode use ShardLoader or a DataLoader "
                              "with batch_size=None)")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size: expected a positive number, got {batch_size!r}")
        shared = copy.copy(data)  # shares the table and the epoch counters
        shared._loader_batch = batch_size
        super().__init__(shared, batch_size=batch_size, **options)


def _tensors(target: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {key: torch.from_numpy(value) for key, value in target.items()}


def distributed_rank(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """(rank, world size): as given (both, or neither), else torch.distributed's, else a
    single process.  One without the other is refused: rank 1 alone was read as rank 0 of 1,
    a rank reading the whole split."""
    if (rank is None) != (world_size is None):
        raise ArgumentError(f"rank and world_size go together: got only "
                            f"{'rank' if world_size is None else 'world_size'} (leave both "
                            "out for torch.distributed's)")
    if rank is None or world_size is None:
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        rank = torch.distributed.get_rank() if distributed else 0
        world_size = torch.distributed.get_world_size() if distributed else 1
    whole_number("rank", rank)
    whole_number("world_size", world_size)
    if not 0 <= rank < world_size:
        raise ConfigError(f"rank {rank} is not in a world of {world_size}")
    return rank, world_size


def detection_collate(samples: list[tuple[Any, Any]]) -> tuple[list[Any], list[Any]]:
    """``collate_fn`` for per-sample mode with ``targets=True``: a list of images and a list
    of target dicts, as torchvision's detection models take them (images of different sizes
    and targets of different lengths do not stack)."""
    return [image for image, _ in samples], [target for _, target in samples]


def dataset(path: str | Path, split: str | None = None, shuffle: bool = True,
            **options: Any) -> ShardDataset:
    """An ``IterableDataset`` over a packed or staged dataset; see ``ShardDataset``.

    Options: ``batch_size`` (batch mode), ``seed``, ``transform`` / ``batch_transform``,
    ``rank`` / ``world_size`` (default: torch.distributed), ``pad`` (False for evaluation),
    ``drop_last``, ``decode`` (False: JPEG bytes for GPU decoding), ``channels`` (3 or 1),
    ``on_corrupt`` ("replace" or "raise"), ``block`` (samples read together), ``targets``
    (True: torchvision's detection targets instead of labels, see ``detection_collate``),
    ``weights`` (class weights, a SPEC like ``"scratch=10,dent=10,*=1"`` or a mapping: each
    epoch is ``draws`` samples drawn with replacement by weight; see ``readers.weights``),
    ``draws`` (the samples of a weighted epoch; default the selection's size),
    ``keep_cut`` (True: samples with a defect cut below min_visible are read, their cut
    objects in the targets' ``ignore_boxes``/``ignore_labels``; by default they are left out
    of the epoch, and counted in a warning: ``readers.cut``).
    """
    return ShardDataset(path, split, shuffle, **options)
