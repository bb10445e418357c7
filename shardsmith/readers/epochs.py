"""Which samples (or batches) a rank and a worker read in each epoch, and where an iteration
starts: the epoch ``set_epoch`` gave (or the next one), and a resume position.

Framework-free; the torch reader and the DALI reader both iterate through an ``EpochPlan``, so
they read the same samples for the same (seed, epoch, rank, world size), in the same order
(docs/design.md, invariant 9).  With ``weights.WeightedDraws`` an epoch's order is its draws
instead of every sample once; shares, batches, workers and resume are cut from it alike.  The
epoch counters live in memory shared with the processes forked from this one (DataLoader
workers, DALI's Python workers), so ``set_epoch`` reaches persistent workers.
"""

from __future__ import annotations

import math
import multiprocessing
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError
from .plan import DEFAULT_BLOCK, SampleTable, batch_count, epoch_order, rank_share
from .weights import WeightedDraws

MAX_WORKERS = 256
# Epoch counters live in shared int64 memory: an epoch from this on could wrap (2**64 + 3 was
# stored as 3), so it is refused.  Seeds have no bound: they are used whole.
MAX_EPOCH = 1 << 62
# Ranks beyond any cluster; a world this large made the padded order of one rank a 10**9-long
# array (8 GB) before.
MAX_WORLD_SIZE = 1 << 20


class ResumeError(ConfigError, ValueError):
    """A resume state that is no position of this plan's epochs (not a mapping, a negative
    number, a start or a count past the epoch): a ValueError naming the field."""


class ArgumentError(ConfigError, ValueError):
    """A reader's argument out of its domain (a rank without a world size, a float rank, an
    epoch past the shared counter): a ValueError naming it."""


@dataclass(frozen=True)
class EpochSettings:
    """How epochs are cut: the order's seed, shuffle and block; this rank's part; batches."""

    seed: int = 0
    shuffle: bool = True
    block: int = DEFAULT_BLOCK
    rank: int = 0
    world_size: int = 1
    pad: bool = True
    drop_last: bool = False
    batch_size: int | None = None

    def __post_init__(self) -> None:
        for name in ("seed", "rank", "world_size"):
            whole_number(name, getattr(self, name))
        if not 1 <= self.world_size <= MAX_WORLD_SIZE:
            raise ArgumentError(f"world_size: expected 1 to {MAX_WORLD_SIZE:,} processes, "
                                f"got {self.world_size:,}")
        if self.batch_size is not None and self.batch_size < 1:
            raise ConfigError(f"batch_size: expected a positive number, got "
                              f"{self.batch_size!r}")
        if not 0 <= self.rank < self.world_size:
            raise ConfigError(f"rank {self.rank} is not in a world of {self.world_size}")
        if self.block < 1:
            raise ConfigError(f"block: expected a positive number, got {self.block!r}")


class EpochPlan:
    """The epochs of one rank over ``table``: its share of each epoch's order, cut into
    batches (batch mode) or samples, and each worker's part of it.  With ``draws`` (weighted
    mode) each epoch's order is its weighted draws, not every sample once."""

    def __init__(self, table: SampleTable, settings: EpochSettings,
                 draws: WeightedDraws | None = None):
        if draws is not None and not settings.shuffle:
            raise ConfigError("weights= draws samples at random: shuffle=False does not "
                              "apply to it")
        self.table, self.settings, self.draws = table, settings, draws
        # [0] the epoch set_epoch gave (-1: never), [1 + w] the next epoch of worker w
        # without one.
        self._epochs = multiprocessing.RawArray("q", [-1] + [0] * MAX_WORKERS)
        self._resume: dict[str, int] | None = None

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration reads, in every process forked from this one.
        ArgumentError (a ValueError) for an epoch that is not a whole number below
        ``MAX_EPOCH`` (2**62)."""
        whole_number("epoch", epoch)
        if not 0 <= epoch < MAX_EPOCH:
            raise ArgumentError(f"epoch: expected a whole number from 0 to 2**62 - 1, got "
                                f"{epoch}")
        self._epochs[0] = int(epoch)

    def share(self, epoch: int) -> np.ndarray:
        """This rank's sample numbers in ``epoch``, in order."""
        settings = self.settings
        if self.draws is not None:
            order = self.draws.order(settings.seed, epoch)
        else:
            order = epoch_order(self.table, settings.seed, epoch, settings.shuffle,
                                settings.block)
        return rank_share(order, settings.rank, settings.world_size, settings.pad,
                          settings.drop_last)

    def batches(self, samples: int) -> int:
        """How many batches a share of ``samples`` makes."""
        return batch_count(samples, self.settings.batch_size, self.settings.drop_last)

    def begin(self, worker: int = 0) -> tuple[int, int, int]:
        """(epoch, start, done) of the iteration about to run in ``worker``: the epoch
        ``set_epoch`` gave, else the worker's next; the resume position in the epoch it
        belongs to, else the start."""
        if self._epochs[0] >= 0:
            epoch = self._epochs[0]
        else:
            epoch = self._epochs[1 + worker]
            self._epochs[1 + worker] = epoch + 1
        resume = self._resume
        if resume is not None and resume["epoch"] == epoch:
            return epoch, resume["start"], resume["done"]
        return epoch, 0, 0

    def share_size(self) -> int:
        """How many samples this rank's share of an epoch holds (the same in every epoch;
        with ``pad=False`` shares differ by one), without drawing an epoch's order."""
        settings = self.settings
        count = self.draws.draws if self.draws is not None else len(self.table)
        rank, world = settings.rank, settings.world_size
        if settings.drop_last:
            return count // world
        if not settings.pad:
            return (rank + 1) * count // world - rank * count // world
        return math.ceil(count / world)

    def resume(self, state: Mapping[str, int]) -> None:
        """Continue from ``state`` (``epoch``, ``start``, ``done``); without ``set_epoch``
        epochs go on from that one.  ResumeError (a ValueError) for a state that is not a
        position of these epochs: ``start`` plus ``done`` past the epoch's batches (samples
        without a batch size) would read an empty epoch, not resume one."""
        if not isinstance(state, Mapping):
            raise ResumeError(f"resume state: expected a mapping like {{'epoch': 0, 'start': "
                              f"0}}, got {type(state).__name__}")
        position = {key: _whole(state, key) for key in ("epoch", "start", "done")}
        samples = self.share_size()
        positions = samples if self.settings.batch_size is None else self.batches(samples)
        unit = "samples" if self.settings.batch_size is None else "batches"
        if position["start"] > positions:
            raise ResumeError(f"resume state: start {position['start']:,} is past the end of "
                              f"the epoch ({positions:,} {unit} in this rank's share)")
        if position["start"] + position["done"] > positions:
            raise ResumeError(f"resume state: done {position['done']:,} from start "
                              f"{position['start']:,} is past the end of the epoch "
                              f"({positions:,} {unit} in this rank's share)")
        self._resume = position
        for worker in range(MAX_WORKERS):
            self._epochs[1 + worker] = self._resume["epoch"]

    def worker_batches(self, share: np.ndarray, worker: int, workers: int, start: int,
                       done: int) -> range:
        """The batch numbers ``worker`` of ``workers`` makes, from batch ``start`` of the
        share, less the ``done`` it already gave: batch ``i`` goes to worker ``i % workers``,
        which a DataLoader collects round-robin, so batches come in order."""
        mine = range(start + worker, self.batches(len(share)), workers)
        return mine[done:]

    def batch(self, share: np.ndarray, number: int) -> np.ndarray:
        """The sample numbers of batch ``number`` of ``share``."""
        size = self.settings.batch_size
        return share[number * size : (number + 1) * size]

    def worker_samples(self, share: np.ndarray, worker: int, workers: int, start: int,
                       loader_batch: int | None = None) -> np.ndarray:
        """The samples ``worker`` of ``workers`` reads, from sample ``start`` of the share.

        With ``loader_batch`` (the batch size of the DataLoader that batches them), the rest
        of the share is cut into batches of that size and batch ``i`` goes to worker
        ``i % workers``: only the last batch is partial, so the DataLoader makes exactly
        ``ceil(samples / loader_batch)`` batches, in the same order for any ``workers``.
        Without it, one contiguous part each (every worker ends on its own partial batch).
        """
        rest = share[start:]
        if loader_batch is not None and workers > 1:
            return rest[(np.arange(len(rest)) // loader_batch) % workers == worker]
        return rest[worker * len(rest) // workers : (worker + 1) * len(rest) // workers]


def whole_number(name: str, value: object) -> None:
    """ArgumentError (a ValueError) unless ``value`` is a whole number (an int, not a bool or
    a float: rank 1.0 or world_size 2.0 is a mistake to name, not to round)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ArgumentError(f"{name}: expected a whole number, got {value!r}")


def _whole(state: dict[str, int], key: str) -> int:
    value = state.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int | np.integer) \
            or not 0 <= value < 1 << 62:  # the shared counters are int64
        raise ResumeError(f"resume state: {key} must be a whole number from 0 to 2**62, "
                          f"got {value!r}")
    return int(value)
