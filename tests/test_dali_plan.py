"""The DALI reader follows our plan: for the same (seed, epoch, rank, world size) it reads the
torch reader's batches, in order; ranks get equal, disjoint shares; ``set_epoch`` and resume
mid-epoch work as in the torch reader.  Real DALI on the CPU (the GPU path differs only in
``device="mixed"`` for the decoder)."""

from __future__ import annotations

import copyreg
import hashlib
import logging
import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("nvidia.dali", reason="needs NVIDIA DALI (the dali extra)")
pytest.importorskip("torch", reason="DALI's iterator gives torch tensors (the torch extra)")

import simplejpeg  # noqa: E402
from test_readers import packed, samples  # noqa: E402

from shardsmith.errors import ConfigError  # noqa: E402
from shardsmith.readers.dali import loader  # noqa: E402
from shardsmith.readers.plan import load_table  # noqa: E402
from shardsmith.readers.torch import dataset  # noqa: E402

BATCH = 4


@pytest.fixture(scope="module")
def crops(tmp_path_factory) -> Path:
    return packed(tmp_path_factory.mktemp("dali-crops"), count=26)


def dali_batches(output: Path, epoch: int | None = None, **options) -> list[tuple]:
    """(pixels, labels) of each batch of one epoch, as NumPy."""
    options = {"split": "train", "batch_size": BATCH, "device": "cpu", "num_threads": 1,
               "seed": 5, **options}
    batches = loader(output, **options)
    if epoch is not None:
        batches.set_epoch(epoch)
    return [(images.numpy().copy(), labels.numpy().copy()) for images, labels in batches]


def torch_batches(output: Path, epoch: int, **options) -> list[tuple]:
    """(JPEG bytes, labels) of each batch of the torch reader's epoch."""
    data = dataset(output, split="train", batch_size=BATCH, decode=False, seed=5, **options)
    data.set_epoch(epoch)
    return [([bytes(jpeg.numpy()) for jpeg in jpegs], labels.numpy()) for jpegs, labels in data]


def image_ids(batches: list[tuple]) -> list[str]:
    return [hashlib.sha1(pixels.tobytes()).hexdigest()
            for images, _ in batches for pixels in images]


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> Path:
    return packed(tmp_path_factory.mktemp("dali-records"), "tfrecord", count=26)


@pytest.mark.parametrize(("fmt", "epoch"), [("webdataset", 0), ("webdataset", 3),
                                            ("tfrecord", 3)])
def test_an_epoch_holds_the_torch_readers_batches_in_its_order(crops, records, fmt, epoch):
    output = crops if fmt == "webdataset" else records
    ours, theirs = dali_batches(output, epoch), torch_batches(output, epoch)
    assert len(ours) == len(theirs)
    for (images, labels), (jpegs, torch_labels) in zip(ours, theirs, strict=True):
        assert labels.tolist() == torch_labels.tolist()
        for pixels, jpeg in zip(images, jpegs, strict=True):
            expected = simplejpeg.decode_jpeg(jpeg, colorspace="RGB")
            # Two libjpeg-turbo builds may round an IDCT differently; another image differs
            # by tens of levels on average.
            assert np.abs(pixels.astype(int) - expected.astype(int)).mean() < 1.0


def test_on_tfrecord_shards_set_epoch_and_resume_are_the_plans(records):
    whole = dali_batches(records, 2)
    resumed = loader(records, split="train", batch_size=BATCH, device="cpu", num_threads=1,
                     seed=5)
    resumed.load_state_dict({"epoch": 2, "start": 2})
    assert image_ids([(images.numpy(), labels) for images, labels in resumed]) == \
        image_ids(whole[2:])


def test_every_sample_of_the_split_is_read_once_per_epoch(crops):
    ids = image_ids(dali_batches(crops, 0))
    assert len(ids) == len(set(ids)) == len(samples(crops))


def test_ranks_read_disjoint_equal_shares_and_the_same_batch_count(crops):
    world = 3
    shares = [dali_batches(crops, 1, rank=rank, world_size=world, drop_last=True)
              for rank in range(world)]
    counts = {len(image_ids(share)) for share in shares}
    assert counts == {len(samples(crops)) // world // BATCH * BATCH}  # whole batches only
    assert len({len(share) for share in shares}) == 1  # the same number of batches
    every = [image for share in shares for image in image_ids(share)]
    assert len(every) == len(set(every))  # disjoint


def test_padded_ranks_cover_the_split_with_equal_batch_counts(crops):
    world = 4
    shares = [dali_batches(crops, 0, rank=rank, world_size=world) for rank in range(world)]
    assert len({len(share) for share in shares}) == 1
    every = [image for share in shares for image in image_ids(share)]
    assert len(set(every)) == len(samples(crops))
    assert len(every) - len(set(every)) < world  # at most world - 1 repeats


def test_two_runs_read_the_same_order_and_epochs_differ(crops):
    first, again = dali_batches(crops, 2), dali_batches(crops, 2)
    assert image_ids(first) == image_ids(again)
    assert image_ids(dali_batches(crops, 3)) != image_ids(first)


def test_len_is_the_number_of_batches_each_epoch_gives(crops):
    batches = loader(crops, split="train", batch_size=BATCH, device="cpu", num_threads=1)
    assert len(batches) == -(-len(samples(crops)) // BATCH)
    assert [len(list(batches)) for _ in range(2)] == [len(batches)] * 2


def test_without_set_epoch_each_iteration_advances_the_epoch(crops):
    batches = loader(crops, split="train", batch_size=BATCH, device="cpu", num_threads=1,
                     seed=5)
    epochs = [image_ids([(images.numpy(), labels) for images, labels in batches])
              for _ in range(2)]
    assert epochs == [image_ids(dali_batches(crops, 0)), image_ids(dali_batches(crops, 1))]


def test_a_new_loader_resumes_mid_epoch_without_repeating_or_skipping(crops):
    whole = dali_batches(crops, 1)
    batches = loader(crops, split="train", batch_size=BATCH, device="cpu", num_threads=1,
                     seed=5)
    batches.set_epoch(1)
    seen = []
    for images, _ in batches:
        seen.append(images.numpy().copy())
        if len(seen) == 2:
            break
    state = batches.state_dict()
    assert state == {"epoch": 1, "start": 0, "done": 2}
    resumed = loader(crops, split="train", batch_size=BATCH, device="cpu", num_threads=1,
                     seed=5)
    resumed.load_state_dict(state)
    rest = [(images.numpy().copy(), labels) for images, labels in resumed]
    assert image_ids([(images, None) for images in seen]) + image_ids(rest) == \
        image_ids(whole)


def test_a_loop_broken_off_leaves_the_next_epoch_whole(crops):
    batches = loader(crops, split="train", batch_size=BATCH, device="cpu", num_threads=1,
                     seed=5)
    batches.set_epoch(0)
    for _ in batches:
        break
    batches.set_epoch(1)
    again = [(images.numpy().copy(), labels) for images, labels in batches]
    assert image_ids(again) == image_ids(dali_batches(crops, 1))


def test_parallel_python_workers_read_the_same_batches(crops):
    assert image_ids(dali_batches(crops, 1, py_workers=2)) == \
        image_ids(dali_batches(crops, 1))


def test_parallel_workers_end_an_epoch_after_dask_installed_tblib(crops):
    # dask.multiprocessing installs tblib's exception pickling, which DALI's workers' own
    # unpickler refuses: the epoch's end must still reach the loader.
    pickling_support = pytest.importorskip("tblib.pickling_support",
                                           reason="tblib comes with dask")
    saved = dict(copyreg.dispatch_table)
    pickling_support.install()
    try:
        assert image_ids(dali_batches(crops, 1, py_workers=2)) == \
            image_ids(dali_batches(crops, 1))
        assert StopIteration in copyreg.dispatch_table  # the training process keeps its own
    finally:
        copyreg.dispatch_table.clear()
        copyreg.dispatch_table.update(saved)


def test_a_sample_whose_jpeg_is_broken_is_replaced_and_named(tmp_path, caplog):
    output = packed(tmp_path, count=10)
    from shardsmith.dataset.manifest import read_manifest

    manifest = read_manifest(output)
    train = [shard for shard in manifest.shards if shard.split == "train"]
    table = load_table(output, train)
    with open(table.paths[0], "r+b") as shard:  # no SOI marker: the header does not parse
        os.pwrite(shard.fileno(), b"\0" * 16, int(table.image_offset[0]))
    with caplog.at_level(logging.WARNING):
        batches = dali_batches(output, 0, shuffle=False)
    assert sum(len(labels) for _, labels in batches) == len(table)  # the count stays
    assert "corrupt samples replaced" in caplog.text
    assert os.path.basename(table.paths[0]) in caplog.text


@pytest.mark.parametrize("state", [{"epoch": -1}, {"epoch": "1"}, {"start": 2**70},
                                   {"epoch": True}, {"done": 1.5}])
def test_a_malformed_resume_state_is_a_config_error(crops, state):
    batches = loader(crops, split="train", batch_size=BATCH, device="cpu", num_threads=1)
    with pytest.raises(ConfigError, match="resume state"):
        batches.load_state_dict(state)


@pytest.mark.parametrize("workers", [-1, 1.5, True])
def test_py_workers_must_be_a_whole_number(crops, workers):
    with pytest.raises(ConfigError, match="py_workers"):
        loader(crops, split="train", batch_size=BATCH, device="cpu", py_workers=workers)
