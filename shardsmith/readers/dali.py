"""NVIDIA DALI reader: decode on the GPU (nvJPEG, and the hardware JPEG decoder where the GPU
has one) or on the CPU, with the same epochs as the torch reader.

    from shardsmith.readers.dali import loader          # pip install 'shardsmith[dali]'
    batches = loader("/nvme/shards/line3", split="train", batch_size=256, device="gpu")
    for epoch in range(epochs):
        batches.set_epoch(epoch)
        for images, labels in batches: ...   # torch uint8 N×H×W×C on the GPU, int64 labels

DALI takes the samples of our plan, on either shard format (docs/design.md, invariant 9).  An
``fn.external_source`` in batch mode is fed each batch's JPEG bytes and labels by our reader
(``epochs.EpochPlan`` over ``plan.epoch_order`` and ``plan.rank_share``, read by offset through
``samples.SampleReader``, each JPEG header checked), and ``fn.decoders.image`` decodes them
(``device="mixed"`` on a GPU, ``"cpu"`` otherwise).  So, for the same (seed, epoch, rank, world
size), an epoch holds the same samples in the same batches as the torch reader's batch mode,
every rank the same number of batches, ``set_epoch`` and mid-epoch resume
(``state_dict``/``load_state_dict``) as there; with ``weights=`` (and ``draws=``) the torch
reader's weighted epochs.  ``py_workers=N`` reads in N forked Python
processes (DALI's parallel external source): worth it when reading, not decoding, is what
waits.  A sample that fails our checks is replaced by another of its batch, counted in one
warning per epoch; one whose header passes but whose data does not decode stops DALI's decoder
with its error.  DALI's own readers (``fn.readers.webdataset`` and ``tfrecord``) read only
for ``own_reader``, what ``bench-read`` compares the plan with.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

try:
    import nvidia.dali.fn as fn
    import nvidia.dali.types as types
    from nvidia.dali import pipeline_def
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "shardsmith.readers.dali needs NVIDIA DALI: pip install 'shardsmith[dali]' "
        "(nvidia-dali-cuda120)"
    ) from exc

import copyreg
import logging
import multiprocessing
import os

import numpy as np
import torch

from ..dataset.formats import shard_format
from ..errors import ConfigError
from . import equal_image_size, select_shards
from .batches import checked_jpegs
from .cut import without_cut
from .epochs import EpochPlan, EpochSettings
from .plan import DEFAULT_BLOCK, check_shards, load_table
from .samples import Corruptions, SampleReader
from .torch import distributed_rank
from .weights import WeightSpec, reader_draws

log = logging.getLogger(__name__)

READER = "shardsmith"
EPOCH, START, STOP = range(3)  # the feed's shared position


class PlanFeed:
    """What DALI's external source calls for batch ``info.iteration`` of an epoch: the JPEG
    bytes and labels of that batch of our plan, each header checked.

    The epoch and its first batch live in memory shared with DALI's forked Python workers,
    written by the loader before DALI asks for an epoch's first batch; ``STOP`` ends an epoch
    early (a loop that broke off), so the batches DALI read ahead are few.
    """

    def __init__(self, reader: SampleReader, plan: EpochPlan, image_size: tuple[int, int]):
        self.reader, self.plan, self.image_size = reader, plan, image_size
        self.position = multiprocessing.RawArray("q", 3)
        self._epoch: int | None = None
        self._share = np.empty(0, np.int64)
        self._corruptions = Corruptions("replace")

    def __call__(self, info: Any) -> tuple[list[np.ndarray], np.ndarray]:
        epoch, start, stop = (int(self.position[at]) for at in (EPOCH, START, STOP))
        if epoch != self._epoch:
            self._epoch, self._share = epoch, self.plan.share(epoch)
        number = start + info.iteration
        if stop or number >= self.plan.batches(len(self._share)):
            self._corruptions.warn(epoch)
            self._corruptions = Corruptions("replace")
            if multiprocessing.parent_process() is not None:
                # A DALI worker sends this StopIteration back pickled, and DALI unpickles
                # only its own globals; tblib (installed by dask.multiprocessing and
                # dask.distributed) registers every exception's pickling to its own
                # function, which DALI refuses.  Undone in the worker only: the training
                # process keeps its own pickling as it set it.
                copyreg.dispatch_table.pop(StopIteration, None)
            raise StopIteration
        indices = self.plan.batch(self._share, number)
        jpegs, labels = checked_jpegs(self.reader, indices, self._corruptions, self.image_size)
        return [np.frombuffer(jpeg, np.uint8) for jpeg in jpegs], labels


class DaliLoader:
    """Batches of (images, labels) over a dataset, one epoch per iteration; ``len()`` batches.

    The epochs are the torch reader's, on either shard format (``set_epoch``, ``state_dict``,
    ``load_state_dict``, ``drop_last``, ``block``, ``weights`` and ``draws`` as there; samples
    with a defect cut below min_visible left out unless ``keep_cut``: ``readers.cut``).
    ``shuffle_buffer`` is accepted and unused: DALI's own TFRecord reader, which took it,
    no longer reads for the loader.
    """

    def __init__(self, path: str | Path, split: str | None = None, batch_size: int = 64,
                 device: str = "gpu", shuffle: bool = True, seed: int = 0,
                 rank: int | None = None, world_size: int | None = None, num_threads: int = 4,
                 device_id: int | None = None, shuffle_buffer: int = 4096,
                 drop_last: bool = False, block: int = DEFAULT_BLOCK, py_workers: int = 0,
                 weights: WeightSpec | None = None, draws: int | None = None,
                 keep_cut: bool = False):
        if device not in ("gpu", "cpu"):
            raise ConfigError(f"device: expected 'gpu' or 'cpu', got {device!r}")
        if isinstance(py_workers, bool) or not isinstance(py_workers, int) or py_workers < 0:
            raise ConfigError(f"py_workers: expected a whole number >= 0, got {py_workers!r}")
        directory = Path(path)
        manifest, selected = select_shards(directory, split, None)
        self.classes = list(manifest.classes)
        rank, world_size = distributed_rank(rank, world_size)
        settings = EpochSettings(seed, shuffle, block, rank, world_size, True, drop_last,
                                 batch_size)
        self.height, self.width = equal_image_size(directory, manifest, split)
        if device == "gpu" and device_id is None:
            device_id = _device_id(py_workers)
        table = load_table(directory, [shard for _, shard in selected], manifest)
        check_shards(table)  # a shard swapped for another is refused now, not served
        table = without_cut(directory, manifest, table, keep_cut)
        self.plan = EpochPlan(table, settings,
                              reader_draws(directory, manifest, table, weights, draws))
        reader = SampleReader(table, len(self.classes), largest=(self.height, self.width))
        self.feed = PlanFeed(reader, self.plan, (self.height, self.width))
        pipe = _planned(self.feed, device, py_workers > 0, batch_size=batch_size,
                        num_threads=num_threads, device_id=device_id if device == "gpu"
                        else None, seed=seed, prefetch_queue_depth=2,
                        py_num_workers=max(1, py_workers), py_start_method="fork")
        self._iterator = DALIGenericIterator([pipe], ["images", "labels"],
                                             prepare_first_batch=False)
        self._batches = self.plan.batches(len(self.plan.share(0)))
        self._started = self._open = False
        self._state = {"epoch": 0, "start": 0, "done": 0}

    def __len__(self) -> int:
        return self._batches

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration reads (without it, each iteration advances the epoch
        by itself)."""
        self.plan.set_epoch(epoch)

    def state_dict(self) -> dict[str, int]:
        """Where the iteration stands: epoch, first batch, batches given since."""
        return dict(self._state)

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume from ``state_dict()`` or ``{"epoch": e, "start": k}``: batch k of epoch e."""
        self.plan.resume(state)  # checked: whole numbers, a position of the epoch
        if "done" in state:  # what was given counts as read
            self.plan.resume({"epoch": state.get("epoch", 0),
                              "start": state.get("start", 0) + state["done"]})

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self._open:  # a loop broke off: end that epoch before the next begins
            self.feed.position[STOP] = 1
            for _ in self._iterator:
                pass
        epoch, start, _ = self.plan.begin()
        position = self.feed.position
        position[EPOCH], position[START], position[STOP] = epoch, start, 0
        if self._started:
            self._iterator.reset()  # DALI asks for the first batches now
        self._started = self._open = True
        self._state = {"epoch": epoch, "start": start, "done": 0}
        for (outputs,) in self._iterator:
            self._state["done"] += 1
            yield outputs["images"], outputs["labels"].reshape(-1).to(torch.int64)
        self._open = False


def own_reader(path: str | Path, split: str | None = None, batch_size: int = 64,
               device: str = "cpu", num_threads: int = 1) -> _Epochs:
    """Batches (images, raw labels) of one epoch of the selection through DALI's own reader
    (``fn.readers.webdataset`` or ``tfrecord``), shuffled its way: what ``bench-read``
    compares the plan's external source with."""
    directory = Path(path)
    manifest, selected = select_shards(directory, split, None)
    if any(shard.index is None for _, shard in selected):
        raise ConfigError(f"{directory}: shards without an index (an older pack): run "
                          "`shardsmith pack` (or stage a packed copy) to add them")
    pipe = _pipeline(manifest.format, [str(directory / shard.name) for _, shard in selected],
                     [str(directory / shard.index.name) for _, shard in selected], device,
                     batch_size=batch_size, num_threads=num_threads,
                     device_id=None if device == "cpu" else 0, seed=0, prefetch_queue_depth=2)
    pipe.build()
    return _Epochs(DALIGenericIterator([pipe], ["images", "labels"], reader_name=READER,
                                       last_batch_policy=LastBatchPolicy.FILL, auto_reset=True))


class _Epochs:
    """(images, raw labels) of each batch of a DALI iterator, one epoch per iteration."""

    def __init__(self, iterator: Any):
        self.iterator = iterator

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for (outputs,) in self.iterator:
            yield outputs["images"], outputs["labels"]


def _device_id(py_workers: int) -> int:
    """The GPU this process uses.  DALI forks its Python workers, which CUDA forbids once
    started here: with workers, CUDA is not started to ask (``LOCAL_RANK``, as torchrun sets
    it, or 0)."""
    if py_workers and not torch.cuda.is_initialized():
        local = os.environ.get("LOCAL_RANK", "0")
        return int(local) if local.isdigit() else 0
    return torch.cuda.current_device() if torch.cuda.is_available() else 0


@pipeline_def(enable_conditionals=False)
def _planned(feed: PlanFeed, device: str, parallel: bool) -> Any:
    jpegs, labels = fn.external_source(source=feed, num_outputs=2, batch=True,
                                       batch_info=True, parallel=parallel,
                                       dtype=[types.UINT8, types.INT64], ndim=[1, 0])
    images = fn.decoders.image(jpegs, device="mixed" if device == "gpu" else "cpu",
                               output_type=types.RGB)
    return images, labels


@pipeline_def(enable_conditionals=False)
def _pipeline(fmt: str, paths: list[str], indexes: list[str], device: str) -> Any:
    """DALI's own reader of the shards (``own_reader``), shuffled its way."""
    jpegs, labels = shard_format(fmt).dali_samples(
        paths, indexes, random_shuffle=True, initial_fill=4096, pad_last_batch=True,
        stick_to_shard=True, name=READER)
    images = fn.decoders.image(jpegs, device="mixed" if device == "gpu" else "cpu",
                               output_type=types.RGB)
    return images, labels


def loader(path: str | Path, split: str | None = None, **options: Any) -> DaliLoader:
    """A DALI loader over a packed or staged dataset; see ``DaliLoader`` for the options."""
    return DaliLoader(path, split, **options)
