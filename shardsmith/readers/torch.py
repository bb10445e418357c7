"""PyTorch reader: an ``IterableDataset`` over a packed or staged dataset's WebDataset shards.

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
shards.  Reads go by offset (from the per-tar index) straight into a preallocated batch array:
no tar parsing, no per-sample tensor, no collate.

Per-sample mode (no ``batch_size``; the DataLoader batches, ``transform`` per image) gives every
rank the same number of samples; with workers, the DataLoader's own last partial batch per
worker can make batch counts differ, which is why DDP training should use batch mode.

A corrupt sample is named (shard and key) and, by default, replaced by another sample of the
same batch, so batch counts stay equal; ``on_corrupt="raise"`` raises ``CorruptSampleError``.

Detection (``targets=True``, a dataset packed with box or mask annotations): each image comes
with torchvision's target dict instead of its label: ``boxes`` float N×4 (x0, y0, x1, y1 in
the sample's pixels), ``labels`` int64 N (object class ids from 1, ``object_classes[id - 1]``)
and, when the dataset has masks, ``masks`` uint8 N×H×W::

    data = dataset(path, split="train", targets=True)
    loader = DataLoader(data, batch_size=8, collate_fn=detection_collate, num_workers=4)
    for images, targets in loader:
        losses = model([image.float() / 255 for image in images], targets)
"""

from __future__ import annotations

import json
import logging
import multiprocessing
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

from ..errors import ConfigError, CorruptSampleError, ShardFormatError
from ..formats.webdataset import parse_label
from . import equal_image_size, largest_image_size, select_shards
from .plan import (
    DEFAULT_BLOCK,
    ShardFiles,
    batch_count,
    check_shards,
    epoch_order,
    load_table,
    rank_share,
)
from .ring import BatchRing, RingBatch, ShardLoader
from .sample_jpeg import SampleJpegError, check_header, decode_sample
from .targets import detection_target

__all__ = ["ShardDataset", "ShardLoader", "dataset", "detection_collate", "distributed_rank"]

log = logging.getLogger(__name__)

MAX_WORKERS = 256


class ShardDataset(IterableDataset):
    """The samples of one split (or all) of a dataset; ``len()`` is this rank's epoch length:
    batches in batch mode, samples otherwise."""

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
    ):
        super().__init__()
        if channels not in (1, 3):
            raise ConfigError(f"channels: expected 1 or 3, got {channels!r}")
        if on_corrupt not in ("replace", "raise"):
            raise ConfigError(f"on_corrupt: expected 'replace' or 'raise', got {on_corrupt!r}")
        if batch_size is not None and batch_size < 1:
            raise ConfigError(f"batch_size: expected a positive number, got {batch_size!r}")
        directory = Path(path)
        self.manifest, selected = select_shards(directory, split, "webdataset")
        self.shards = selected
        self.classes: list[str] = list(self.manifest.classes)
        self.table = load_table(directory, [shard for _, shard in selected])
        check_shards(self.table)  # a shard swapped for another is refused now, not served
        self.shuffle, self.seed, self.block = shuffle, seed, block
        self.batch_size, self.drop_last, self.pad = batch_size, drop_last, pad
        self.transform, self.batch_transform = transform, batch_transform
        self.decode, self.channels, self.on_corrupt = decode, channels, on_corrupt
        self.targets = targets
        self.object_classes: list[str] = list(self.manifest.object_classes or ())
        self.with_masks = bool(len(self.table) and (self.table.mask_offset >= 0).any())
        if targets and self.manifest.object_classes is None:
            raise ConfigError(f"{directory} has no box or mask annotations (packed without "
                              "source.annotations): targets=True needs them")
        rank, world_size = distributed_rank(rank, world_size)
        self.rank, self.world_size = rank, world_size
        self.image_size = equal_image_size(directory, self.manifest, split) \
            if batch_size is not None and decode else None
        # No sample's JPEG header may say more than the largest size the sample index records
        # (a 16x16 JPEG whose header says 65500x65500 would allocate 12 GB when decoded).
        self.largest = self.image_size or (largest_image_size(directory, self.manifest, split)
                                           if decode or targets else None)
        # Shared with the workers (also persistent ones): [0] the epoch set_epoch gave (-1:
        # never), [1 + w] how many epochs worker w began without one.
        self._epochs = multiprocessing.RawArray("q", [-1] + [0] * MAX_WORKERS)
        self._resume: dict[str, int] | None = None
        self._ring: BatchRing | None = None  # set on the copy a ShardLoader reads
        self._state: dict[str, int] = {"epoch": 0, "start": 0, "done": 0}
        self._files = ShardFiles(self.table)

    # --- epochs and their partition ------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Call before each epoch (every epoch, or never: then each one advances by itself).
        Reaches persistent workers too."""
        self._epochs[0] = epoch

    def rank_samples(self, epoch: int = 0) -> int:
        """How many samples this rank reads in an epoch (with ``pad=False``, shares differ)."""
        return len(self._share(epoch))

    def __len__(self) -> int:
        samples = self.rank_samples()
        if self.batch_size is None:
            return samples
        return batch_count(samples, self.batch_size, self.drop_last)

    def _share(self, epoch: int) -> np.ndarray:
        order = epoch_order(self.table, self.seed, epoch, self.shuffle, self.block)
        return rank_share(order, self.rank, self.world_size, self.pad, self.drop_last)

    def _begin(self, worker: int) -> tuple[int, int, int]:
        """(epoch, start, done) of the iteration about to run in ``worker``."""
        if self._epochs[0] >= 0:
            epoch = self._epochs[0]
        else:
            epoch = self._epochs[1 + worker]
            self._epochs[1 + worker] = epoch + 1
        resume = self._resume
        if resume is not None and resume["epoch"] == epoch:  # only the epoch it belongs to
            return epoch, resume["start"], resume["done"]
        return epoch, 0, 0

    # --- resumable position (torchdata's StatefulDataLoader calls these in each worker) ----

    def state_dict(self) -> dict[str, int]:
        """Where this iterator stands: epoch, start position, items yielded since."""
        return dict(self._state)

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume from ``state_dict()``, or from ``{"epoch": e, "start": k}``: the k-th batch
        (batch mode; the k-th sample otherwise) of epoch e, for every worker."""
        self._resume = {key: int(state.get(key, 0)) for key in ("epoch", "start", "done")}
        for worker in range(MAX_WORKERS):  # without set_epoch, epochs go on from this one
            self._epochs[1 + worker] = self._resume["epoch"]

    # --- iteration -----------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        epoch, start, done = self._begin(worker)
        share = self._share(epoch)
        self._state = {"epoch": epoch, "start": start, "done": done}
        corrupt: list[str] = []
        try:
            if self.batch_size is None:
                yield from self._samples(share, worker, workers, start, done, corrupt)
            else:
                yield from self._batches(share, worker, workers, start, done, corrupt)
        finally:
            if corrupt:
                log.warning("epoch %d: %d corrupt samples replaced (%s%s)", epoch, len(corrupt),
                            ", ".join(corrupt[:5]), ", ..." if len(corrupt) > 5 else "")

    def _batches(self, share: np.ndarray, worker: int, workers: int, start: int, done: int,
                 corrupt: list[str]) -> Iterator[Any]:
        size = self.batch_size
        mine = range(start + worker, batch_count(len(share), size, self.drop_last), workers)
        for count, batch in enumerate(mine[done:], done + 1):
            indices = share[batch * size : (batch + 1) * size]
            result = self._read_batch(indices, corrupt, worker) if self.decode else \
                self._raw_batch(indices)
            self._state["done"] = count
            yield result

    def _samples(self, share: np.ndarray, worker: int, workers: int, start: int, done: int,
                 corrupt: list[str]) -> Iterator[Any]:
        rest = share[start:]
        mine = rest[worker * len(rest) // workers : (worker + 1) * len(rest) // workers]
        last_good = None
        for count, index in enumerate(mine[done:], done + 1):
            try:
                item = self._read_sample(int(index))
                last_good = index
            except CorruptSampleError as exc:
                self._corrupt(exc, corrupt)
                item = self._replacement(mine, index, last_good)
            self._state["done"] = count
            yield item

    def _replacement(self, mine: np.ndarray, index: int, last_good: int | None) -> Any:
        """Another sample for a corrupt one: the last good one, else the next that decodes."""
        candidates = [last_good] if last_good is not None else []
        candidates += [int(i) for i in mine if i != index]
        for candidate in candidates:
            try:
                return self._read_sample(candidate)
            except CorruptSampleError:
                continue
        raise CorruptSampleError("no sample of this worker's share decodes")

    def _corrupt(self, exc: CorruptSampleError, corrupt: list[str]) -> None:
        if self.on_corrupt == "raise":
            raise exc
        corrupt.append(str(exc))

    # --- reading -------------------------------------------------------------------------

    def _read(self, index: int) -> tuple[memoryview, int]:
        """The JPEG bytes and label of sample ``index``: one read covering both members."""
        table = self.table
        shard, offset = int(table.shard[index]), int(table.image_offset[index])
        label_at = int(table.label_offset[index]) - offset
        span = label_at + int(table.label_size[index])
        try:
            data = memoryview(self._files.read(shard, offset, span))
            label = self._label(data[label_at:span])
        except (OSError, ShardFormatError, ValueError) as exc:
            raise self._named(index, f"unreadable ({exc})") from None
        return data[: int(table.image_size[index])], label

    def _label(self, data: memoryview) -> int:
        """The label of a ``.cls`` member: a class index (or -1, unlabelled); anything else
        would index past a model's outputs, so it is a corrupt sample."""
        label = parse_label(data)
        if not -1 <= label < len(self.classes):
            raise ShardFormatError(f"label {label} is not one of the "
                                   f"{len(self.classes)} classes")
        return label

    def _read_meta(self, index: int) -> tuple[memoryview, int, Any]:
        """The JPEG bytes, label and metadata (``KEY.json``) of sample ``index``: one read."""
        table = self.table
        shard, offset = int(table.shard[index]), int(table.image_offset[index])
        label_at, meta_at = (int(table.label_offset[index]) - offset,
                             int(table.meta_offset[index]) - offset)
        if meta_at < 0:
            raise self._named(index, "has no .json")
        span = meta_at + int(table.meta_size[index])
        try:
            data = memoryview(self._files.read(shard, offset, span))
            label = self._label(data[label_at : label_at + int(table.label_size[index])])
            meta = json.loads(bytes(data[meta_at:span]))
        except (OSError, ShardFormatError, ValueError, RecursionError) as exc:
            raise self._named(index, f"unreadable ({exc})") from None
        return data[: int(table.image_size[index])], label, meta

    def _target(self, index: int, meta: Any, height: int, width: int) -> dict[str, Any]:
        try:
            target = detection_target(meta, height, width, self.with_masks,
                                      len(self.object_classes))
        except ValueError as exc:
            raise self._named(index, f"bad annotations ({exc})") from None
        return {key: torch.from_numpy(value) for key, value in target.items()}

    def _where(self, index: int) -> str:
        """``SHARD: sample KEY`` for messages."""
        table = self.table
        shard = int(table.shard[index])
        name = self._files.member_name(shard, int(table.image_offset[index]))
        return f"{Path(table.paths[shard]).name}: sample {name.rsplit('.', 1)[0]}"

    def _named(self, index: int, problem: str) -> CorruptSampleError:
        return CorruptSampleError(f"{self._where(index)}: {problem}")

    def _read_sample(self, index: int) -> tuple[Any, Any]:
        if self.targets:
            jpeg, _, meta = self._read_meta(index)
        else:
            jpeg, label = self._read(index)
        if self.targets and not self.decode:
            height, width = self._jpeg_shape(index, jpeg)
            return (torch.frombuffer(bytearray(jpeg), dtype=torch.uint8),
                    self._target(index, meta, height, width))
        if not self.decode:
            return torch.frombuffer(bytearray(jpeg), dtype=torch.uint8), label
        try:
            pixels = decode_sample(jpeg, "RGB" if self.channels == 3 else "GRAY",
                                   bound=self.largest)
        except SampleJpegError as exc:
            raise self._named(index, str(exc)) from None
        image = torch.from_numpy(pixels).permute(2, 0, 1)
        if self.targets:
            label = self._target(index, meta, pixels.shape[0], pixels.shape[1])
        if self.transform is not None:
            image = self.transform(image)
        return image, label

    def _jpeg_shape(self, index: int, jpeg: memoryview) -> tuple[int, int]:
        try:
            return check_header(jpeg, bound=self.largest)[:2]
        except SampleJpegError as exc:
            raise self._named(index, str(exc)) from None

    def _read_batch(self, indices: np.ndarray, corrupt: list[str], worker: int = 0) -> Any:
        height, width = self.image_size
        ring = self._ring
        if ring is not None:
            ring_slot = ring.acquire(worker)
            images = ring.view(ring_slot)[: len(indices)]
        else:
            images = np.empty((len(indices), height, width, self.channels), np.uint8)
        labels = np.empty(len(indices), np.int64)
        targets: list[Any] = [None] * len(indices)
        colorspace = "RGB" if self.channels == 3 else "GRAY"
        bad = []
        for slot, index in enumerate(indices):
            try:
                if self.targets:
                    jpeg, labels[slot], meta = self._read_meta(int(index))
                    targets[slot] = self._target(int(index), meta, height, width)
                else:
                    jpeg, labels[slot] = self._read(int(index))
                try:  # the batch's size, which every record of the selection has
                    decode_sample(jpeg, colorspace, expect=(height, width),
                                  buffer=images[slot])
                except SampleJpegError as exc:
                    raise self._named(int(index), str(exc)) from None
            except CorruptSampleError as exc:
                self._corrupt(exc, corrupt)
                bad.append(slot)
        if bad:
            good = [slot for slot in range(len(indices)) if slot not in set(bad)]
            if not good:
                raise CorruptSampleError(f"every sample of a batch is corrupt: {corrupt[-1]}")
            for number, slot in enumerate(bad):
                other = good[number % len(good)]
                images[slot], labels[slot], targets[slot] = images[other], labels[other], \
                    targets[other]
        second = targets if self.targets else torch.from_numpy(labels)
        if ring is not None:
            return RingBatch(ring_slot, len(indices)), second
        # N×H×W×C memory seen as N×C×H×W: PyTorch's channels_last, no copy.
        batch = torch.from_numpy(images).permute(0, 3, 1, 2)
        if self.batch_transform is not None:
            batch = self.batch_transform(batch)
        return batch, second

    def _raw_batch(self, indices: np.ndarray) -> tuple[list[torch.Tensor], Any]:
        """JPEG bytes, for decoding on the GPU (``torchvision.io.decode_jpeg(device="cuda")``)."""
        if self.targets:
            samples = [self._read_sample(int(index)) for index in indices]
            return [jpeg for jpeg, _ in samples], [target for _, target in samples]
        jpegs, labels = [], np.empty(len(indices), np.int64)
        for slot, index in enumerate(indices):
            jpeg, labels[slot] = self._read(int(index))
            jpegs.append(torch.frombuffer(bytearray(jpeg), dtype=torch.uint8))
        return jpegs, torch.from_numpy(labels)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_files"] = ShardFiles(self.table)  # each process opens its own
        return state


def distributed_rank(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """(rank, world size): as given, else torch.distributed's, else a single process."""
    if rank is None or world_size is None:
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        rank = torch.distributed.get_rank() if distributed else 0
        world_size = torch.distributed.get_world_size() if distributed else 1
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
    (True: torchvision's detection targets instead of labels, see ``detection_collate``).
    """
    return ShardDataset(path, split, shuffle, **options)
