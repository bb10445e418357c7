"""The readers' arguments are checked whole: a rank without a world size, a float rank or
world size, a world too large to plan, an epoch past the shared 64-bit counter are one
ValueError naming the argument, never a silent wrong partition, a raw TypeError, a
MemoryError or an epoch wrapped to another."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the torch reader needs PyTorch (the torch extra)")

from shardsmith.readers.torch import dataset  # noqa: E402

import images  # noqa: E402


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("arguments")
    for number in range(8):
        images.write(root / "source" / ("a" if number % 2 else "b") / f"{number}.jpg",
                     images.jpeg(40, 32, number))
    return images.pack_small(root / "source", root / "out", "webdataset", 32, "train=1.0")


def test_a_rank_without_a_world_size_is_refused_not_read_as_rank_0_of_1(small):
    with pytest.raises(ValueError, match="rank and world_size go together: got only rank"):
        dataset(small, decode=False, rank=1)
    with pytest.raises(ValueError, match="got only world_size"):
        dataset(small, decode=False, world_size=4)


@pytest.mark.parametrize(("options", "problem"), [
    ({"rank": 1.0, "world_size": 2}, "rank: expected a whole number, got 1.0"),
    ({"rank": 0, "world_size": 2.0}, "world_size: expected a whole number, got 2.0"),
    ({"rank": True, "world_size": 2}, "rank: expected a whole number, got True"),
])
def test_a_rank_or_world_size_that_is_not_a_whole_number_is_one_value_error(small, options,
                                                                             problem):
    with pytest.raises(ValueError, match=problem):
        dataset(small, decode=False, **options)


def test_a_world_of_a_billion_ranks_is_refused_before_any_plan_is_made(small):
    with pytest.raises(ValueError, match="world_size: expected 1 to 1,048,576 processes"):
        dataset(small, decode=False, rank=0, world_size=10**9)


def test_an_epoch_past_the_shared_counter_is_refused_not_wrapped(small):
    data = dataset(small, decode=False)
    with pytest.raises(ValueError, match="epoch: expected a whole number from 0 to 2"):
        data.set_epoch(2**64 + 3)
    with pytest.raises(ValueError, match="epoch: expected a whole number"):
        data.set_epoch(-1)
    with pytest.raises(ValueError, match="epoch: expected a whole number"):
        data.set_epoch(2.0)
    data.set_epoch(2**62 - 1)
    assert data.plan.begin()[0] == 2**62 - 1
