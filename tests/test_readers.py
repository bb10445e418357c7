"""Training readers: PyTorch (per-sample and batch mode, DDP, resume), DALI, tf.data."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from machine import worker_counts
from torchdata.stateful_dataloader import StatefulDataLoader

from shardsmith.errors import ConfigError, CorruptSampleError
from shardsmith.readers.torch import dataset

import images

CLASSES = 12  # labels of two digits too


def packed(root: Path, fmt: str = "webdataset", resize: str = "center_crop",
           count: int = 23, shard_samples: int = 4) -> Path:
    """``count`` distinct originals in 12 classes, packed to 32 px in small shards."""
    source = root / "source"
    for number in range(count):
        folder = f"c{number % CLASSES:02d}"
        data = images.gray_png(90, 60, number) if number == 7 else \
            images.jpeg(120 + 4 * (number % 5), 80, number)
        images.write(source / folder / f"{number:02d}.{'png' if number == 7 else 'jpg'}", data)
    from shardsmith import load_config, pack

    output = root / f"{fmt}-{resize}"
    pack(load_config(None, {"source.path": str(source), "output.path": str(output),
                            "output.format": fmt, "output.shard_samples": shard_samples,
                            "image.size": 32, "image.resize": resize,
                            "splits": "train=0.8,val=0.2", "run.quiet": True,
                            "run.workers": 1}))
    return output


def samples(output: Path, split: str | None = "train") -> list[dict]:
    return [s for s in images.samples_of(output) if split is None or s["split"] == split]


def jpeg_ids(output: Path, split: str | None = "train") -> dict[str, int]:
    """sha1 of every packed JPEG of the split -> its label (what the readers must return)."""
    from shardsmith.dataset.formats import shard_format
    from shardsmith.dataset.manifest import read_manifest

    manifest = read_manifest(output)
    fmt = shard_format(manifest.format)
    wanted = {s["key"]: s["label"] for s in samples(output, split)}
    found = {}
    for shard in manifest.shards:
        for _, record in fmt.records(output / shard.name, shard.bytes):
            if record.key in wanted:
                found[hashlib.sha1(fmt.jpeg(record)).hexdigest()] = wanted[record.key]
    assert len(found) == len(wanted)
    return found


def sha1(tensor: torch.Tensor) -> str:
    return hashlib.sha1(tensor.numpy().tobytes()).hexdigest()


@pytest.fixture(scope="module")
def crops(tmp_path_factory) -> Path:
    return packed(tmp_path_factory.mktemp("crops"))


@pytest.fixture(scope="module")
def fitted(tmp_path_factory) -> Path:
    return packed(tmp_path_factory.mktemp("fitted"), resize="fit")


# --- per-sample mode --------------------------------------------------------------------


def test_per_sample_mode_yields_chw_uint8_tensors_and_every_label(fitted):
    data = dataset(fitted, split=None, shuffle=False)
    items = list(data)
    assert len(items) == len(data) == 23
    for image, label in items:
        assert image.dtype == torch.uint8 and image.ndim == 3 and image.shape[0] == 3
        assert max(image.shape[1:]) == 32
        assert isinstance(label, int) and 0 <= label < CLASSES
    assert sorted(label for _, label in items) == sorted(s["label"] for s in samples(fitted, None))
    assert data.classes == [f"c{n:02d}" for n in range(CLASSES)]


@pytest.mark.parametrize("workers", worker_counts(0, 2, 3))
def test_per_sample_mode_reads_each_sample_once_with_any_worker_count(crops, workers):
    data = dataset(crops, split="train", transform=lambda image: image.float().sum())
    loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=workers)
    sums = [round(float(value), 1) for value, _ in loader]
    assert len(sums) == len(data) == len(samples(crops))
    assert len(set(sums)) == len(sums)  # distinct images: no sample twice


# --- batch mode and the exact partition --------------------------------------------------


@pytest.mark.parametrize("workers", worker_counts(0, 1, 2, 3))
def test_batch_mode_yields_len_batches_in_the_same_order_for_any_worker_count(crops, workers):
    data = dataset(crops, split="train", batch_size=3, seed=4)
    data.set_epoch(0)
    reference = [sha1(images) for images, _ in data]
    data.set_epoch(0)
    loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=workers)
    batches = list(loader)
    assert len(batches) == len(loader) == len(data) == -(-len(samples(crops)) // 3)
    assert [sha1(images) for images, _ in batches] == reference
    images, labels = batches[0]
    assert images.shape == (3, 3, 32, 32) and images.dtype == torch.uint8
    assert images.is_contiguous(memory_format=torch.channels_last)
    assert labels.dtype == torch.int64


def test_batch_mode_images_and_labels_are_the_packed_ones(crops):
    from shardsmith.dataset.formats import shard_format
    from shardsmith.dataset.manifest import read_manifest

    manifest = read_manifest(crops)
    fmt = shard_format("webdataset")
    expected = {}
    for shard in manifest.shards:
        for _, record in fmt.records(crops / shard.name, shard.bytes):
            import simplejpeg

            pixels = simplejpeg.decode_jpeg(fmt.jpeg(record), colorspace="RGB")
            expected[hashlib.sha1(pixels.tobytes()).hexdigest()] = record.key
    labels = {s["key"]: s["label"] for s in samples(crops, None)}
    seen = 0
    for batch, batch_labels in dataset(crops, split=None, batch_size=4):
        for image, label in zip(batch, batch_labels, strict=True):
            key = expected[hashlib.sha1(image.permute(1, 2, 0).numpy().tobytes()).hexdigest()]
            assert labels[key] == int(label)
            seen += 1
    assert seen == 23


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_shard_loader_gives_the_datasets_batches_through_reused_shared_buffers(crops, workers):
    from shardsmith.readers.torch import ShardLoader

    data = dataset(crops, split="train", batch_size=3, seed=2)
    data.set_epoch(5)
    expected = [(batch.clone(), labels) for batch, labels in data]
    loader = ShardLoader(data, num_workers=workers)
    got = [(batch.clone(), labels) for batch, labels in loader]  # a batch is valid until
    assert len(got) == len(loader) == len(expected)               # the next is taken
    for (batch, labels), (want_batch, want_labels) in zip(got, expected, strict=True):
        assert torch.equal(batch, want_batch) and torch.equal(labels, want_labels)
    assert batch.is_contiguous(memory_format=torch.channels_last)
    data.set_epoch(6)
    assert [sha1(batch) for batch, _ in loader] != [sha1(batch) for batch, _ in got]


def test_shard_loader_needs_batch_mode(crops):
    from shardsmith.readers.torch import ShardLoader

    with pytest.raises(ConfigError, match="batch_size="):
        ShardLoader(dataset(crops, split="train"))


def test_epochs_differ_and_reach_persistent_workers(crops):
    data = dataset(crops, split="train", batch_size=3)
    loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=2,
                                         persistent_workers=True)
    orders = []
    for epoch in range(3):
        data.set_epoch(epoch)
        orders.append([sha1(images) for images, _ in loader])
    assert orders[0] != orders[1] != orders[2] and orders[0] != orders[2]
    assert sorted(orders[0]) != sorted(orders[1])  # batches are regrouped, not just reordered
    data.set_epoch(1)
    assert [sha1(images) for images, _ in loader] == orders[1]  # a function of the epoch


def test_without_set_epoch_each_iteration_advances_the_epoch(crops):
    data = dataset(crops, split="train", batch_size=3)
    loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=2)
    first, second = ([sha1(images) for images, _ in loader] for _ in range(2))
    assert first != second
    fresh = dataset(crops, split="train", batch_size=3)
    fresh.set_epoch(1)
    assert [sha1(images) for images, _ in fresh] == second


def test_mixed_image_sizes_in_batch_mode_name_the_option(fitted):
    with pytest.raises(ConfigError, match="--resize center_crop, pad or stretch"):
        dataset(fitted, split="train", batch_size=4)


def test_evaluation_mode_pads_nothing_and_says_what_each_rank_holds(crops):
    total = len(samples(crops))
    held = [dataset(crops, split="train", rank=rank, world_size=3, pad=False).rank_samples()
            for rank in range(3)]
    assert sum(held) == total and max(held) - min(held) <= 1
    padded = [len(dataset(crops, split="train", rank=rank, world_size=3)) for rank in range(3)]
    assert len(set(padded)) == 1 and sum(padded) - total < 3


def _ddp_rank(rank: int, world: int, path: str, init: str, result: str,
              counts: list[int]) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    report = {}
    for workers in counts:
        data = dataset(path, split="train", batch_size=2, decode=False, seed=9)
        data.set_epoch(1)
        # Forked, as the workers of torchrun's ranks are on Linux: mp.spawn makes its ranks'
        # default start method spawn, a fresh interpreter importing torch for each worker (70 s
        # of the run's CPU).  Workers that are spawned: the test after this one.
        loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=workers,
                                             multiprocessing_context="fork" if workers else None)
        ids, batches = [], 0
        for jpegs, labels in loader:
            batches += 1
            ids += [[hashlib.sha1(bytes(jpeg.numpy())).hexdigest(), int(label)]
                    for jpeg, label in zip(jpegs, labels, strict=True)]
        counts = [None] * world
        dist.all_gather_object(counts, (batches, len(loader)))
        everything = [None] * world
        dist.all_gather_object(everything, ids)
        report[workers] = {"counts": counts, "ids": everything}
    if rank == 0:
        Path(result).write_text(json.dumps(report))
    dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_real_process_groups_get_equal_batches_and_every_sample_once(crops, tmp_path, world):
    """gloo ranks × 0-3 DataLoader workers (as many as the cores), 5 shards for up to 16
    readers (8 on 2 cores: still more readers than shards)."""
    result = tmp_path / "result.json"
    mp.spawn(_ddp_rank, args=(world, str(crops), f"file://{tmp_path / 'init'}", str(result),
                              worker_counts(0, 1, 2, 3)),
             nprocs=world, join=True)
    expected = jpeg_ids(crops)
    for workers, report in json.loads(result.read_text()).items():
        batches = {count for count, _ in report["counts"]}
        lengths = {length for _, length in report["counts"]}
        assert batches == lengths and len(batches) == 1, (workers, report["counts"])
        read = [tuple(pair) for rank_ids in report["ids"] for pair in rank_ids]
        assert {jpeg for jpeg, _ in read} == set(expected)  # every sample
        assert len(read) - len(expected) <= world - 1  # at most world - 1 pads
        assert all(expected[jpeg] == label for jpeg, label in read)


@pytest.mark.slow
def test_spawned_workers_get_equal_batches_and_every_sample_once(crops):
    """Workers started by spawn (macOS's and Windows' default): each has the dataset pickled."""
    data = dataset(crops, split="train", batch_size=2, decode=False, seed=9)
    data.set_epoch(1)
    loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=2,
                                         multiprocessing_context="spawn")
    batches = list(loader)
    read = [(hashlib.sha1(bytes(jpeg.numpy())).hexdigest(), int(label))
            for jpegs, labels in batches for jpeg, label in zip(jpegs, labels, strict=True)]
    assert len(batches) == len(loader)
    assert sorted(read) == sorted(jpeg_ids(crops).items())  # every sample once


# --- resume ------------------------------------------------------------------------------


def _ids(batch) -> list[str]:
    jpegs, _ = batch
    return [hashlib.sha1(bytes(jpeg.numpy())).hexdigest() for jpeg in jpegs]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.slow
def test_stateful_dataloader_resumes_mid_epoch_in_a_new_process(crops, tmp_path, workers):
    def loader():
        data = dataset(crops, split="train", batch_size=2, decode=False, seed=3)
        return StatefulDataLoader(data, batch_size=None, num_workers=workers)

    whole = [_ids(batch) for batch in loader()]
    first = loader()
    iterator = iter(first)
    head = [_ids(next(iterator)) for _ in range(3)]
    state = tmp_path / "state.pt"
    torch.save(first.state_dict(), state)
    code = (
        "import json, sys, torch\n"
        "sys.path.insert(0, 'tests')\n"
        "from test_readers import _ids, dataset, StatefulDataLoader\n"
        f"data = dataset({str(crops)!r}, split='train', batch_size=2, decode=False, seed=3)\n"
        f"loader = StatefulDataLoader(data, batch_size=None, num_workers={workers})\n"
        f"loader.load_state_dict(torch.load({str(state)!r}, weights_only=False))\n"
        "print(json.dumps([_ids(batch) for batch in loader]))\n"
    )
    rest = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).parents[1]).stdout
    assert head + json.loads(rest.splitlines()[-1]) == whole


def _resumed_batches_equal_the_rest_of_the_epoch(path: Path) -> None:
    data = dataset(path, split="train", batch_size=2, decode=False, seed=3)
    data.set_epoch(2)
    whole = [_ids(batch) for batch in data]
    resumed = dataset(path, split="train", batch_size=2, decode=False, seed=3)
    resumed.load_state_dict({"epoch": 2, "start": 4})
    loader = torch.utils.data.DataLoader(resumed, batch_size=None, num_workers=2)
    assert [_ids(batch) for batch in loader] == whole[4:]


def test_a_plain_loader_resumes_from_epoch_and_batch_position(crops):
    _resumed_batches_equal_the_rest_of_the_epoch(crops)


# --- damage ------------------------------------------------------------------------------


@pytest.fixture
def damaged(tmp_path) -> tuple[Path, str]:
    """A dataset whose first shard has one JPEG overwritten with junk (the manifest's sha256
    fixed up so that only decoding can tell)."""
    from shardsmith.dataset.formats.webdataset import iter_members

    output = packed(tmp_path)
    manifest = images.manifest_of(output)
    shard = manifest["shards"][0]
    key, members = next(iter(iter_members(output / shard["name"])))
    jpeg = next(m for m in members if m.extension == "jpg")
    with open(output / shard["name"], "r+b") as handle:
        handle.seek(jpeg.data)
        handle.write(b"\0" * jpeg.size)
    shard["sha256"] = hashlib.sha256((output / shard["name"]).read_bytes()).hexdigest()
    (output / "manifest.json").write_text(json.dumps(manifest))
    return output, f"{shard['name']}: sample {key}"


def test_a_corrupt_sample_is_replaced_in_its_batch_and_named_in_a_warning(damaged, caplog):
    output, where = damaged
    data = dataset(output, split=None, batch_size=4, shuffle=False)
    with caplog.at_level(logging.WARNING):
        batches = list(data)
    assert len(batches) == len(data) and sum(len(labels) for _, labels in batches) == 23
    assert any(where in record.getMessage() and "1 corrupt" in record.getMessage()
               for record in caplog.records)


def test_a_corrupt_sample_can_raise_instead(damaged):
    output, where = damaged
    with pytest.raises(CorruptSampleError, match=where):
        list(dataset(output, split=None, batch_size=4, shuffle=False, on_corrupt="raise"))
    with pytest.raises(CorruptSampleError, match=where):
        list(dataset(output, split=None, shuffle=False, on_corrupt="raise"))


def test_a_dataset_without_indexes_is_read_from_its_tar_headers(tmp_path, caplog):
    output = packed(tmp_path)
    manifest = images.manifest_of(output)
    for shard in manifest["shards"]:
        (output / shard.pop("index")["name"]).unlink()
    (output / "manifest.json").write_text(json.dumps(manifest))
    with caplog.at_level(logging.WARNING):
        data = dataset(output, split=None, batch_size=5, decode=False, shuffle=False)
    assert "no index" in caplog.text
    assert sorted(i for batch in data for i in _ids(batch)) == sorted(jpeg_ids(output, None))


def test_decode_false_gives_jpeg_bytes_for_gpu_decoding(crops):
    jpegs, labels = next(iter(dataset(crops, split="train", batch_size=4, decode=False)))
    assert len(jpegs) == 4 and all(j.dtype == torch.uint8 and j.ndim == 1 for j in jpegs)
    assert bytes(jpegs[0][:2].numpy()) == b"\xff\xd8"
    assert labels.shape == (4,)


# --- TFRecord shards: the same plan, the same samples -------------------------------------


@pytest.fixture(scope="module")
def both_formats(tmp_path_factory) -> dict[str, Path]:
    """One tree packed as WebDataset and as TFRecord (the same keys in the same shards)."""
    root = tmp_path_factory.mktemp("both")
    return {fmt: packed(root, fmt) for fmt in ("webdataset", "tfrecord")}


def _decoded(batches) -> list[tuple[str, int]]:
    return [(sha1(image), int(label)) for images, labels in batches
            for image, label in zip(images, labels, strict=True)]


def test_torch_reads_tfrecord_shards_as_it_reads_the_same_tree_as_webdataset(both_formats):
    read = {fmt: dataset(path, split="train", batch_size=3, seed=5)
            for fmt, path in both_formats.items()}
    for epoch in (0, 1):
        for data in read.values():
            data.set_epoch(epoch)
        found = {fmt: _decoded(data) for fmt, data in read.items()}
        assert found["tfrecord"] == found["webdataset"]
        assert sorted(label for _, label in found["tfrecord"]) == \
            sorted(s["label"] for s in samples(both_formats["tfrecord"]))
    singles = {fmt: [(sha1(image), label) for image, label in dataset(path, seed=5)]
               for fmt, path in both_formats.items()}
    assert singles["tfrecord"] == singles["webdataset"]


def test_torch_on_tfrecord_gives_every_rank_equal_batches_and_every_sample(both_formats):
    shares = {fmt: [_decoded(dataset(path, split="train", batch_size=2, seed=1, rank=rank,
                                     world_size=2)) for rank in (0, 1)]
              for fmt, path in both_formats.items()}
    assert shares["tfrecord"] == shares["webdataset"]
    first, second = shares["tfrecord"]
    assert len(first) == len(second)
    assert {image for image, _ in first + second} == set(jpeg_pixels(both_formats["tfrecord"]))


def jpeg_pixels(output: Path) -> list[str]:
    """sha1 of every decoded train image, as the reader decodes them in evaluation mode."""
    return [sha1(image) for image, _ in dataset(output, split="train", shuffle=False)]


def test_torch_on_tfrecord_resumes_from_epoch_and_batch_position(both_formats):
    _resumed_batches_equal_the_rest_of_the_epoch(both_formats["tfrecord"])


def test_torch_on_tfrecord_weighs_its_draws_as_on_webdataset(both_formats):
    drawn = {fmt: _decoded(dataset(path, split="train", batch_size=4, seed=2, draws=12,
                                   weights="c03=10,*=1"))
             for fmt, path in both_formats.items()}
    assert drawn["tfrecord"] == drawn["webdataset"] and len(drawn["tfrecord"]) == 12


def test_a_damaged_tfrecord_record_is_a_corrupt_sample_named_by_shard_and_key(tmp_path):
    output = packed(tmp_path, "tfrecord")
    shard = next(s for s in images.manifest_of(output)["shards"] if s["split"] == "train")
    path = output / shard["name"]
    data = bytearray(path.read_bytes())
    data[300] ^= 0xFF  # inside the first record's JPEG: its key still reads, its CRC fails
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptSampleError, match=f"{shard['name']}: sample .*bad data CRC"):
        list(dataset(output, split="train", shuffle=False, on_corrupt="raise"))


# --- indexes and shard lists -------------------------------------------------------------


@pytest.mark.slow
def test_tar_indexes_equal_what_dalis_wds2idx_writes(crops, tmp_path):
    pytest.importorskip("nvidia.dali", reason="wds2idx comes with NVIDIA DALI (the dali extra)")
    tool = Path(sys.executable).parent / "wds2idx"
    for shard in images.manifest_of(crops)["shards"]:
        theirs = tmp_path / shard["index"]["name"]
        subprocess.run([str(tool), str(crops / shard["name"]), str(theirs)], check=True,
                       capture_output=True)
        assert theirs.read_bytes() == (crops / shard["index"]["name"]).read_bytes()


def test_wids_reads_the_shard_list_json(crops, tmp_path):
    import wids

    staged = tmp_path / "staged"
    shutil.copytree(crops, staged)  # the list's names are relative to where it lies
    listed = wids.ShardListDataset(str(staged / "train-shards.json"),
                                   localname=lambda url: url, transformations=[])
    assert len(listed) == len(samples(crops))
    keys = {listed[i]["__key__"] for i in range(len(listed))}
    assert keys == {s["key"] for s in samples(crops)}
    listed_names = (staged / "train-shards.txt").read_text().split()
    assert listed_names == [s["name"] for s in images.manifest_of(crops)["shards"]
                            if s["split"] == "train"]


# --- DALI (CPU here; the same pipeline decodes on the GPU with device="gpu") -------------


@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord"])
def test_dali_reads_an_exact_epoch_with_the_right_labels_on_every_rank(tmp_path, fmt):
    pytest.importorskip("nvidia.dali", reason="needs NVIDIA DALI (the dali extra)")
    from shardsmith.readers.dali import loader

    output = packed(tmp_path, fmt)
    expected = jpeg_ids(output)
    for world in (1, 3):
        read, counts = [], set()
        for rank in range(world):
            batches = loader(output, split="train", batch_size=4, device="cpu", rank=rank,
                             world_size=world, num_threads=1)
            got = [(images.numpy(), labels.numpy()) for images, labels in batches]
            counts.add(len(got))
            for pixels, labels in got:
                assert pixels.shape[1:] == (32, 32, 3)
                read += [(hashlib.sha1(p.tobytes()).hexdigest(), int(label))
                         for p, label in zip(pixels, labels, strict=True)]
        assert len(counts) == 1  # every rank the same number of batches
        by_image = dict(read)
        assert len(by_image) == len(expected)  # every sample, pads are repeats
        assert sorted(by_image.values()) == sorted(expected.values())


# --- tf.data -------------------------------------------------------------------------------


@pytest.mark.slow
def test_tf_reader_yields_hwc_uint8_int64_labels_and_the_classes(tmp_path):
    tf = pytest.importorskip("tensorflow", reason="needs TensorFlow (the tf extra)")

    from shardsmith.readers.tf import classes
    from shardsmith.readers.tf import dataset as tf_dataset

    output = packed(tmp_path, "tfrecord", resize="fit")
    everything = list(tf_dataset(output, split=None, shuffle=True, seed=1, channels=3))
    assert len(everything) == 23
    for image, label in everything:
        assert image.dtype == tf.uint8 and image.shape[-1] == 3 and max(image.shape[:2]) == 32
        assert label.dtype == tf.int64
    assert sorted(int(label) for _, label in everything) == sorted(
        s["label"] for s in samples(output, None))
    assert classes(output) == [f"c{n:02d}" for n in range(CLASSES)]
    first = [int(label) for _, label in tf_dataset(output, split="val", shuffle=False)]
    assert first == [int(label) for _, label in tf_dataset(output, split="val", shuffle=False)]


@pytest.mark.parametrize("parts", [2, 3, 9])  # fewer and more parts than shard files
@pytest.mark.slow
def test_tf_reader_parts_read_every_sample_exactly_once(tmp_path, parts):
    pytest.importorskip("tensorflow", reason="needs TensorFlow (the tf extra)")
    from shardsmith.readers.tf import dataset as tf_dataset

    output = packed(tmp_path, "tfrecord")
    read = []
    for index in range(parts):
        for image, _ in tf_dataset(output, split="train", num_shards=parts, index=index):
            read.append(hashlib.sha1(np.asarray(image).tobytes()).hexdigest())
    assert len(read) == len(set(read)) == len(samples(output))


@pytest.mark.slow
def test_packing_never_imports_torch_tensorflow_or_dali(tmp_path):
    """All are installed for the tests; the pack driver and its workers must not pay for them."""
    source = tmp_path / "source"
    for number in range(4):
        images.write(source / "a" / f"{number}.jpg", images.jpeg(100, 80, number))
    code = (
        "import sys\n"
        "from shardsmith import load_config, pack\n"
        f"pack(load_config(None, {{'source.path': {str(source)!r}, "
        f"'output.path': {str(tmp_path / 'out')!r}, 'run.quiet': True, 'run.workers': 2}}))\n"
        "print(sorted(m for m in ('torch', 'tensorflow', 'webdataset', 'nvidia.dali') "
        "if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, env=dict(os.environ))
    assert result.stdout.strip() == "[]"
