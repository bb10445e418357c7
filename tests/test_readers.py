"""Training readers: PyTorch over WebDataset shards, tf.data over TFRecord shards."""

from __future__ import annotations

from pathlib import Path

import pytest

import images


def packed(tmp_path: Path, fmt: str) -> Path:
    source = tmp_path / "source"
    for number in range(20):
        folder = "abc"[number % 3]
        data = images.gray_png(90, 60, number) if number == 7 else images.jpeg(120, 80, number)
        images.write(source / folder / f"{number:02d}.{'png' if number == 7 else 'jpg'}", data)
    return images.pack_small(source, tmp_path / fmt, fmt, 48, "train=0.75,val=0.25")


def index_of(output: Path) -> dict[str, dict]:
    return {sample["key"]: sample for sample in images.samples_of(output)}


@pytest.fixture(scope="module")
def torch_dataset(tmp_path_factory):
    return packed(tmp_path_factory.mktemp("torch"), "webdataset")


def test_torch_reader_yields_chw_uint8_tensors_and_labels(torch_dataset):
    import torch

    from shardsmith.readers.torch import dataset

    data = dataset(torch_dataset, split=None, shuffle=False)
    samples = list(data)
    assert len(samples) == len(data) == 20
    for image, label in samples:
        assert image.dtype == torch.uint8 and image.ndim == 3 and image.shape[0] == 3
        assert max(image.shape[1:]) == 48
        assert isinstance(label, int) and 0 <= label < 3
    assert sorted(label for _, label in samples) == sorted(
        s["label"] for s in index_of(torch_dataset).values())


@pytest.mark.parametrize("workers", [0, 2, 3])
def test_torch_loader_with_workers_reads_each_sample_exactly_once(torch_dataset, workers):
    import torch

    from shardsmith.readers.torch import dataset

    data = dataset(torch_dataset, split="train", shuffle=True, shuffle_buffer=4,
                   transform=lambda image: image.float().sum())
    loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=workers)
    seen = [(round(float(value), 1), label) for value, label in loader]
    expected_count = sum(1 for s in index_of(torch_dataset).values() if s["split"] == "train")
    assert len(seen) == len(data) == expected_count
    assert len(set(seen)) == len(seen)  # no duplicates (pixel sums are distinct here)


def test_torch_reader_splits_by_rank_without_overlap(torch_dataset):
    from shardsmith.readers.torch import dataset

    ranks = [dataset(torch_dataset, shuffle=True, seed=3, rank=rank, world_size=2)
             for rank in (0, 1)]
    sums = [{float(image.float().sum()) for image, _ in rank} for rank in ranks]
    assert not sums[0] & sums[1]
    assert len(sums[0]) + len(sums[1]) == 20
    assert len(ranks[0]) + len(ranks[1]) == 20


def test_torch_reader_order_changes_with_the_epoch(torch_dataset):
    from shardsmith.readers.torch import dataset

    data = dataset(torch_dataset, shuffle=True, seed=1)
    first = [float(image.float().sum()) for image, _ in data]
    data.set_epoch(1)
    second = [float(image.float().sum()) for image, _ in data]
    assert sorted(first) == sorted(second) and first != second


def test_torch_reader_refuses_tfrecord_datasets(tmp_path):
    from shardsmith.errors import ConfigError
    from shardsmith.readers.torch import dataset

    with pytest.raises(ConfigError, match="use shardsmith.readers.tf"):
        dataset(packed(tmp_path, "tfrecord"))


def test_tf_reader_yields_hwc_uint8_and_int64_labels(tmp_path):
    import tensorflow as tf

    from shardsmith.readers.tf import dataset

    output = packed(tmp_path, "tfrecord")
    index = index_of(output)
    everything = list(dataset(output, split=None, shuffle=True, seed=1, channels=3))
    assert len(everything) == 20
    for image, label in everything:
        assert image.dtype == tf.uint8 and image.shape[-1] == 3 and max(image.shape[:2]) == 48
        assert label.dtype == tf.int64
    assert sorted(int(label) for _, label in everything) == sorted(
        s["label"] for s in index.values())
    val = list(dataset(output, split="val", shuffle=False))
    assert len(val) == sum(1 for s in index.values() if s["split"] == "val")
    batched = next(iter(dataset(output, split="train").padded_batch(4)))
    assert batched[0].shape[0] == 4


def test_packing_never_imports_torch_or_tensorflow(tmp_path):
    """Both are installed for the tests; the pack driver and its workers must not pay for them."""
    import subprocess
    import sys

    source = tmp_path / "source"
    for number in range(4):
        images.write(source / "a" / f"{number}.jpg", images.jpeg(100, 80, number))
    code = (
        "import sys\n"
        "from shardsmith import load_config, pack\n"
        f"pack(load_config(None, {{'source.path': {str(source)!r}, "
        f"'output.path': {str(tmp_path / 'out')!r}, 'run.quiet': True, 'run.workers': 2}}))\n"
        "print(sorted(m for m in ('torch', 'tensorflow', 'webdataset') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"
