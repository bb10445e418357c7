"""The length a reader announces is the number of items an epoch gives: ``len(loader)`` for
PyTorch in every mode, ``tf.data.experimental.cardinality`` for tf.data, checked by iterating
real loaders over small packed datasets."""

from __future__ import annotations

import hashlib
import math
import warnings
from pathlib import Path

import pytest
from machine import MOST_WORKERS, worker_counts

import defects
import images

CLASSES = 5
COUNT = 23  # 18 or so in train: not a multiple of any batch size used here


def _pack(root: Path, fmt: str, count: int = COUNT) -> Path:
    source, output = root / "source", root / fmt
    for number in range(count):
        images.write(source / f"c{number % CLASSES}" / f"{number:02d}.jpg",
                     images.jpeg(60 + 2 * (number % 7), 48, number))
    from shardsmith import load_config, pack

    pack(load_config(None, {"source.path": str(source), "output.path": str(output),
                            "output.format": fmt, "output.shard_samples": 4,
                            "image.size": 32, "image.resize": "center_crop",
                            "splits": "train=0.8,val=0.2", "run.quiet": True,
                            "run.workers": 1}))
    return output


@pytest.fixture(scope="module")
def tars(tmp_path_factory) -> Path:
    return _pack(tmp_path_factory.mktemp("tars"), "webdataset")


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> Path:
    return _pack(tmp_path_factory.mktemp("records"), "tfrecord")


@pytest.fixture(scope="module")
def annotated(tmp_path_factory) -> Path:
    """Five originals with a YOLO box and polygon each, and two without objects."""
    root = tmp_path_factory.mktemp("annotated")
    source = root / "source"
    relpaths = [f"parts/p{number}.jpg" for number in range(5)]
    for number, relpath in enumerate(relpaths):
        images.write(source / relpath, defects.original(seed=number))
    overrides = defects.write_annotations(source, relpaths, "yolo")
    for number in range(2):
        images.write(source / "parts" / f"clean{number}.jpg", images.jpeg(200, 150, number))
    defects.pack_with(source, root / "out", overrides, **{"image.size": 64,
                                                          "image.resize": "center_crop"})
    return root / "out"


@pytest.fixture
def torch():
    return pytest.importorskip("torch", reason="needs PyTorch (the torch extra)")


def train_samples(path: Path) -> int:
    return sum(1 for sample in images.samples_of(path) if sample["split"] == "train")


def digest(tensor) -> str:
    return hashlib.sha1(tensor.numpy().tobytes()).hexdigest()


# --- PyTorch -------------------------------------------------------------------------------


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("workers", worker_counts(0, 1, 2, 3))
@pytest.mark.slow
def test_batch_mode_len_is_the_batches_that_come_out(tars, torch, workers, drop_last):
    from shardsmith.readers.torch import ShardLoader, dataset

    data = dataset(tars, split="train", batch_size=4, drop_last=drop_last)
    plain = torch.utils.data.DataLoader(data, batch_size=None, num_workers=workers)
    samples = train_samples(tars)
    expected = samples // 4 if drop_last else math.ceil(samples / 4)
    assert len(plain) == sum(1 for _ in plain) == expected
    ring = ShardLoader(data, num_workers=workers)
    assert len(ring) == sum(1 for _ in ring) == expected


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("workers", worker_counts(0, 1, 2, 3))
@pytest.mark.slow
def test_per_sample_mode_len_is_the_batches_that_come_out(tars, torch, workers, drop_last):
    from shardsmith.readers.torch import SampleLoader, dataset

    data = dataset(tars, split="train")
    loader = SampleLoader(data, batch_size=4, num_workers=workers, drop_last=drop_last)
    batches = [labels for _, labels in loader]
    samples = train_samples(tars)
    assert len(loader) == len(batches) == (samples // 4 if drop_last else math.ceil(samples / 4))
    assert all(len(labels) == 4 for labels in batches[:-1])
    assert sum(len(labels) for labels in batches) == (len(batches) * 4 if drop_last
                                                      else samples)


@pytest.mark.slow
def test_two_workers_no_longer_end_on_two_partial_batches(tars, torch):
    """The report: per-sample mode, 2 workers, ``len(loader)`` one short of what came out
    (a plain DataLoader batches each worker's half on its own: 17 samples in halves of 8 and
    9 make 2 + 2 batches of 6, where ``len`` says 3)."""
    from shardsmith.readers.torch import SampleLoader, dataset

    samples, size = train_samples(tars), 6
    halves = (samples // 2, samples - samples // 2)
    assert sum(math.ceil(half / size) for half in halves) > math.ceil(samples / size)
    plain = torch.utils.data.DataLoader(dataset(tars, split="train"), batch_size=size,
                                        num_workers=2)
    assert sum(1 for _ in plain) == len(plain) + 1  # why SampleLoader exists
    loader = SampleLoader(dataset(tars, split="train"), batch_size=size, num_workers=2)
    assert len(loader) == sum(1 for _ in loader) == math.ceil(samples / size)


@pytest.mark.parametrize("workers", [0, 1])
@pytest.mark.slow
def test_a_plain_dataloader_with_at_most_one_worker_is_exact_too(tars, torch, workers):
    from shardsmith.readers.torch import dataset

    loader = torch.utils.data.DataLoader(dataset(tars, split="train"),
                                         batch_size=4, num_workers=workers)
    assert len(loader) == sum(1 for _ in loader) == math.ceil(train_samples(tars) / 4)


@pytest.mark.slow
def test_sample_loader_batches_come_in_one_order_for_any_worker_count(tars, torch):
    from shardsmith.readers.torch import SampleLoader, dataset

    data = dataset(tars, split="train", seed=7, transform=lambda image: image.float().sum())
    orders = []
    for workers in worker_counts(0, 2, 3):
        data.set_epoch(1)
        loader = SampleLoader(data, batch_size=4, num_workers=workers)
        orders.append([[round(float(value), 1) for value in sums] for sums, _ in loader])
    assert all(order == orders[0] for order in orders[1:])
    flat = [value for batch in orders[0] for value in batch]
    assert len(flat) == len(set(flat)) == train_samples(tars)  # every sample once
    data.set_epoch(2)
    assert [[round(float(value), 1) for value in sums]
            for sums, _ in SampleLoader(data, batch_size=4, num_workers=2)] != orders[0]


@pytest.mark.parametrize("pad", [True, False])
@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.slow
def test_every_rank_yields_its_len_in_both_modes(tars, torch, world, pad):
    from shardsmith.readers.torch import SampleLoader, dataset

    batch_counts, sample_counts = [], []
    for rank in range(world):
        options = {"split": "train", "rank": rank, "world_size": world, "pad": pad}
        batched = torch.utils.data.DataLoader(dataset(tars, batch_size=3, **options),
                                              batch_size=None, num_workers=2)
        per_sample = SampleLoader(dataset(tars, **options), batch_size=3,
                                  num_workers=2)
        assert len(batched) == sum(1 for _ in batched)
        assert len(per_sample) == sum(1 for _ in per_sample) == len(batched)
        batch_counts.append(len(batched))
        sample_counts.append(sum(len(labels) for _, labels in per_sample))
    if pad:
        assert len(set(batch_counts)) == 1 and len(set(sample_counts)) == 1
    else:
        assert sum(sample_counts) == train_samples(tars)


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.slow
def test_a_ranks_drop_last_is_counted_in_its_len(tars, torch, drop_last):
    from shardsmith.readers.torch import SampleLoader, dataset

    for rank in range(3):
        data = dataset(tars, split="train", rank=rank, world_size=3,
                       drop_last=drop_last)
        loader = SampleLoader(data, batch_size=2, num_workers=min(3, MOST_WORKERS),
                              drop_last=drop_last)
        assert len(loader) == sum(1 for _ in loader)


@pytest.mark.parametrize("workers", worker_counts(0, 2, 3))
@pytest.mark.slow
def test_detection_targets_have_exact_lengths_too(annotated, torch, workers):
    from shardsmith.readers.torch import SampleLoader, dataset, detection_collate

    data = dataset(annotated, targets=True)
    loader = SampleLoader(data, batch_size=3, num_workers=workers, collate_fn=detection_collate)
    batches = list(loader)
    assert len(loader) == len(batches) == math.ceil(7 / 3)
    assert sum(len(targets) for _, targets in batches) == 7
    batched = torch.utils.data.DataLoader(dataset(annotated, targets=True, batch_size=2),
                                          batch_size=None, num_workers=workers)
    assert len(batched) == sum(1 for _ in batched) == math.ceil(7 / 2)


def test_sample_loader_needs_per_sample_mode_and_a_batch_size(tars, torch):
    from shardsmith.errors import ConfigError
    from shardsmith.readers.torch import SampleLoader, dataset

    with pytest.raises(ConfigError, match="without batch_size="):
        SampleLoader(dataset(tars, split="train", batch_size=4), batch_size=4)
    for wrong in (0, -1, True, "4", None):
        with pytest.raises(ConfigError, match="batch_size: expected a positive number"):
            SampleLoader(dataset(tars, split="train"), batch_size=wrong)


# --- tf.data -------------------------------------------------------------------------------


@pytest.fixture
def tf():
    return pytest.importorskip("tensorflow", reason="needs TensorFlow (the tf extra)")


def cardinality(tf, data) -> int:
    return int(tf.data.experimental.cardinality(data))


@pytest.mark.slow
def test_tf_cardinality_is_the_samples_and_the_batches_of_an_epoch(records, tf):
    from shardsmith.readers.tf import dataset

    samples = train_samples(records)
    data = dataset(records, split="train", seed=1)
    assert cardinality(tf, data) == sum(1 for _ in data) == samples
    for drop in (False, True):
        batches = data.batch(4, drop_remainder=drop)
        expected = samples // 4 if drop else math.ceil(samples / 4)
        assert cardinality(tf, batches) == sum(1 for _ in batches) == expected
    everything = dataset(records, split=None, shuffle=False)
    assert cardinality(tf, everything) == sum(1 for _ in everything) == COUNT


@pytest.mark.parametrize("parts", [2, 3, 9])  # fewer and more parts than shard files
@pytest.mark.slow
def test_tf_cardinality_of_each_part_is_what_it_reads(records, tf, parts):
    from shardsmith.readers.tf import dataset

    total = 0
    for index in range(parts):
        part = dataset(records, split="train", num_shards=parts, index=index)
        read = sum(1 for _ in part)
        assert cardinality(tf, part) == read
        total += read
    assert total == train_samples(records)


def test_tf_cardinality_with_targets(annotated, tmp_path, tf):
    from shardsmith.readers.tf import dataset

    source = Path(images.manifest_of(annotated)["source"])
    output = tmp_path / "records"
    overrides = {"source.annotations.files": "yolo",
                 "source.annotations.classes": list(defects.CLASSES)}
    defects.pack_with(source, output, overrides, **{"output.format": "tfrecord",
                                                    "image.size": 64,
                                                    "image.resize": "center_crop"})
    data = dataset(output, targets=True)
    assert cardinality(tf, data) == sum(1 for _ in data) == 7


def test_a_corrupt_record_is_replaced_so_the_epoch_stays_whole(records, tmp_path, tf, caplog):
    import shutil

    from shardsmith.readers.tf import dataset

    copy = tmp_path / "copy"
    shutil.copytree(records, copy)
    shard = next(entry["name"] for entry in images.manifest_of(copy)["shards"]
                 if entry["split"] == "train")
    data = bytearray((copy / shard).read_bytes())
    data[40] ^= 0xFF  # inside the first record's payload: its data CRC fails
    (copy / shard).write_bytes(bytes(data))
    read = dataset(copy, split="train", shuffle=False)
    with caplog.at_level("WARNING"):
        assert cardinality(tf, read) == sum(1 for _ in read) == train_samples(records)
    # once, though the refill pass meets it again
    assert caplog.text.count("corrupt sample skipped") == 1, caplog.text


@pytest.mark.slow
def test_keras_fit_does_not_run_out_of_data(records, tf):
    from shardsmith.readers.tf import dataset

    keras = tf.keras
    data = dataset(records, split="train", channels=3, seed=0).map(
        lambda image, label: (tf.image.resize(image, (32, 32)), label)).batch(4)
    model = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Rescaling(1 / 255),
                              keras.layers.GlobalAveragePooling2D(),
                              keras.layers.Dense(CLASSES)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = model.fit(data, epochs=2, verbose=0)
    assert not [str(w.message) for w in caught if "ran out of data" in str(w.message)]
    assert len(history.history["loss"]) == 2
