"""The parts the readers are built from, on made-up tables (no shard, no framework): the epoch
plan and its partition among workers, the corrupt-sample policy, replacement in a batch and in
a stream of samples."""

from __future__ import annotations

import logging
from itertools import zip_longest

import numpy as np
import pytest

from shardsmith.errors import ConfigError, CorruptSampleError
from shardsmith.readers.batches import each_sample
from shardsmith.readers.epochs import EpochPlan, EpochSettings
from shardsmith.readers.plan import SampleTable
from shardsmith.readers.samples import Corruptions, replacements


def table(shard_sizes: list[int]) -> SampleTable:
    """A table of consecutive samples in shards of the given sizes (offsets made up)."""
    shard = np.repeat(np.arange(len(shard_sizes), dtype=np.int32), shard_sizes)
    column = np.zeros(len(shard), np.int64)
    return SampleTable(tuple(f"s{n}.tar" for n in range(len(shard_sizes))), shard,
                       *([column] * 8))


def plan(**settings) -> EpochPlan:
    return EpochPlan(table([10, 7, 13]), EpochSettings(**settings))


def test_a_worker_gets_every_workers_th_batch_so_a_round_robin_gives_them_in_order():
    epochs = plan(batch_size=4, seed=2)
    share = epochs.share(0)
    workers = [list(epochs.worker_batches(share, worker, 3, 0, 0)) for worker in range(3)]
    collected = [number for turn in zip_longest(*workers) for number in turn
                 if number is not None]
    assert collected == list(range(epochs.batches(len(share))))
    assert [epochs.batch(share, n).tolist() for n in collected[:2]] == \
        [share[:4].tolist(), share[4:8].tolist()]


def test_worker_samples_are_contiguous_parts_of_the_share_from_the_start_position():
    epochs = plan()
    share = epochs.share(1)
    parts = [epochs.worker_samples(share, worker, 4, 5) for worker in range(4)]
    assert np.concatenate(parts).tolist() == share[5:].tolist()


def test_set_epoch_wins_over_the_epoch_each_iteration_advances_by_itself():
    epochs = plan()
    assert [epochs.begin()[0] for _ in range(3)] == [0, 1, 2]
    epochs.set_epoch(7)
    assert [epochs.begin()[0] for _ in range(2)] == [7, 7]


def test_a_resume_position_applies_to_its_epoch_only():
    epochs = plan(batch_size=2)
    epochs.resume({"epoch": 3, "start": 4, "done": 1})
    assert epochs.begin() == (3, 4, 1)
    assert epochs.begin() == (4, 0, 0)


@pytest.mark.parametrize("state", [{"epoch": -2}, {"start": 2**64}, {"done": "3"},
                                   {"epoch": 1.0}, {"epoch": None}])
def test_a_malformed_resume_state_is_a_config_error(state):
    with pytest.raises(ConfigError, match="resume state"):
        plan().resume(state)


@pytest.mark.parametrize("settings", [{"batch_size": 0}, {"rank": 2, "world_size": 2},
                                      {"block": 0}])
def test_settings_that_cannot_cut_an_epoch_are_a_config_error(settings):
    with pytest.raises(ConfigError):
        EpochSettings(**settings)


def test_corrupt_slots_are_replaced_by_good_ones_in_turn():
    assert replacements(5, [1, 3, 4]) == [(1, 0), (3, 2), (4, 0)]
    with pytest.raises(CorruptSampleError):
        replacements(2, [0, 1])


def test_corruptions_raise_or_count_and_warn_once(caplog):
    with pytest.raises(CorruptSampleError):
        Corruptions("raise").add(CorruptSampleError("s.tar: sample a: bad"))
    kept = Corruptions("replace")
    for key in "abcdefg":
        kept.add(CorruptSampleError(f"s.tar: sample {key}: bad"))
    with caplog.at_level(logging.WARNING):
        kept.warn(4)
    assert len(caplog.records) == 1
    assert "epoch 4: 7 corrupt samples replaced" in caplog.text and ", ..." in caplog.text
    with pytest.raises(ConfigError, match="on_corrupt"):
        Corruptions("skip")


def test_a_corrupt_sample_in_a_stream_is_replaced_by_the_last_good_one():
    def item(index: int) -> int:
        if index in (11, 12):
            raise CorruptSampleError(f"sample {index}: bad")
        return index

    corruptions, seen = Corruptions("replace"), []
    given = list(each_sample(np.array([11, 10, 12, 13]), item, corruptions, seen.append))
    assert given == [10, 10, 10, 13]  # the first has no last good one: the next that reads
    assert seen == [1, 2, 3, 4] and len(corruptions.found) == 2


def test_a_stream_resumes_after_the_items_it_already_gave():
    assert list(each_sample(np.arange(5), int, Corruptions("replace"), done=3)) == [3, 4]
