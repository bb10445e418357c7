"""A dataset directory's integrity: shardsmith removes only what it wrote, publishes only numbers
its own model accepts, reads what the dataset names through the door, and keeps the derived
files (shard lists) what the manifest implies, also when a pack has nothing else to do.

Every case runs the real command in a fresh process with a timeout: a FIFO that is waited on
fails the test instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from hostile_helpers import PACK_ARGS, run
from hostile_helpers import one_stderr_line as one_error_line

import images
from images import manifest_of

FOREIGN = b"someone else's notes\n"


def originals(source: Path, count: int = 6) -> Path:
    for number in range(count):
        images.write(source / "ab"[number % 2] / f"{number}.jpg", images.jpeg(96, 64, number))
    return source


def pack(source: Path, output: Path) -> subprocess.CompletedProcess:
    return run("pack", source, output, *PACK_ARGS)


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """A finished dataset of six small JPEGs, packed as PACK_ARGS say."""
    source = originals(tmp_path / "source")
    return images.pack_small(source, tmp_path / "dataset", "webdataset", 32, "train=0.5,val=0.5")


def add_originals(dataset: Path) -> None:
    """New originals in both classes: the next pack is an increment with new shards."""
    source = dataset.parent / "source"
    for number in range(6, 12):
        images.write(source / "ab"[number % 2] / f"{number}.jpg", images.jpeg(96, 64, number))


def user_folder(path: Path) -> Path:
    """A folder of the user's at ``path``, with a file in it."""
    path.mkdir()
    (path / "keep.txt").write_bytes(FOREIGN)
    return path


def derived_now(dataset: Path) -> dict[str, bytes]:
    """What the derived files of the dataset's manifest must hold."""
    from shardsmith.dataset.manifest import derived_contents, read_manifest

    return derived_contents(read_manifest(dataset))


def edit_manifest(dataset: Path, change) -> None:
    manifest = manifest_of(dataset)
    change(manifest)
    (dataset / "manifest.json").write_text(json.dumps(manifest, indent=1))


# ---------------------------------------------------------- never delete what we did not write

@pytest.mark.parametrize("name", [".keep.tmp", "train-000000.tar", "train-shards.txt",
                                  "samples-v1.jsonl"])
@pytest.mark.slow
def test_a_users_folder_under_one_of_our_names_in_a_fresh_output_is_never_removed(
        tmp_path, name):
    source = originals(tmp_path / "source")
    output = tmp_path / "output"
    output.mkdir()
    folder = user_folder(output / name)
    line = one_error_line(pack(source, output), 2)
    assert name in line
    assert (folder / "keep.txt").read_bytes() == FOREIGN


@pytest.mark.parametrize("name", ["train-000000.tar", ".keep.tmp"])
@pytest.mark.slow
def test_overwrite_never_removes_a_users_folder_under_one_of_our_names(dataset, name):
    folder = user_folder(dataset / name) if name.startswith(".") else None
    if folder is None:
        (dataset / name).unlink()
        folder = user_folder(dataset / name)
    line = one_error_line(run("pack", dataset.parent / "source", dataset, *PACK_ARGS,
                              "--overwrite"), 2)
    assert name in line
    assert (folder / "keep.txt").read_bytes() == FOREIGN


def test_a_folder_named_like_a_temporary_is_left_alone_by_an_increment(dataset):
    folder = user_folder(dataset / ".train-000000.tar.12345.tmp")
    add_originals(dataset)
    result = pack(dataset.parent / "source", dataset)
    assert result.returncode == 0, result.stderr
    assert manifest_of(dataset)["version"] == 2
    assert (folder / "keep.txt").read_bytes() == FOREIGN


@pytest.mark.parametrize("where", ["the next shards", "the next sample index", "a shard list"])
@pytest.mark.slow
def test_a_folder_where_an_increment_writes_is_one_line_and_the_old_version_stays(
        dataset, where):
    numbers = manifest_of(dataset)["next_shard_numbers"]
    if where == "the next shards":
        names = [f"{split}-{number:06d}.tar" for split, number in numbers.items()]
    elif where == "the next sample index":
        names = ["samples-v2.jsonl"]
    else:
        (dataset / "train-shards.txt").unlink()
        names = ["train-shards.txt"]
    folders = [user_folder(dataset / name) for name in names]
    add_originals(dataset)
    line = one_error_line(pack(dataset.parent / "source", dataset), 2)
    assert any(name in line for name in names) and "folder" in line
    assert all((folder / "keep.txt").read_bytes() == FOREIGN for folder in folders)
    assert manifest_of(dataset)["version"] == 1


# ------------------------------------------------------------- every number bounded on reading

NUMBER_DAMAGE = {
    "a next shard number past six digits": ("next_shard_numbers", "train", 10**9),
    "a negative next shard number": ("next_shard_numbers", "train", -1),
    "a next shard number that is true": ("next_shard_numbers", "train", True),
    "a count of samples past 2**53": ("shards", 0, "samples", 2**60),
    "a negative split total": ("splits", "train", "samples", -1),
    "a negative packed total": ("totals", "packed", -1),
    "bytes out past 2**53": ("totals", "bytes_out", 2**53),
    "a version past nine digits": ("version", 10**12),
    "a negative count in the history": ("history", 0, "added", -5),
    "a sample index with a negative count": ("samples_index", "samples", -1),
}


def damage_number(manifest: dict, path: tuple) -> None:
    *keys, last, value = path
    node = manifest
    for key in keys:
        node = node[key]
    node[last] = value


@pytest.mark.parametrize("damage", NUMBER_DAMAGE, ids=list(NUMBER_DAMAGE))
@pytest.mark.parametrize("command", ["verify", "pack"])
@pytest.mark.slow
def test_a_number_our_writer_never_produces_is_refused_in_one_line(dataset, damage, command):
    edit_manifest(dataset, lambda manifest: damage_number(manifest, NUMBER_DAMAGE[damage]))
    if command == "pack":
        add_originals(dataset)
        result = pack(dataset.parent / "source", dataset)
    else:
        result = run("verify", dataset, "--quiet")
    line = one_error_line(result, 2)
    assert "manifest.json" in line
    assert not [name for name in os.listdir(dataset) if name.endswith("1000000000.tar")]


# ------------------------------------------------ derived files: what the manifest implies

@pytest.mark.parametrize("name", ["train-shards.txt", "train-shards.json"])
@pytest.mark.parametrize("kind", ["edited", "a link to a file outside", "a FIFO"])
@pytest.mark.slow
def test_an_up_to_date_pack_makes_a_tampered_shard_list_what_the_manifest_implies(
        dataset, tmp_path, name, kind):
    expected = (dataset / name).read_bytes()
    (dataset / name).unlink()
    outside = tmp_path / "elsewhere.txt"
    outside.write_bytes(FOREIGN)
    if kind == "edited":
        (dataset / name).write_bytes(expected.replace(b"train-000000", b"train-000077"))
    elif kind == "a FIFO":
        os.mkfifo(dataset / name)
    else:
        (dataset / name).symlink_to(outside)
    result = pack(dataset.parent / "source", dataset)
    assert result.returncode == 0, result.stderr
    assert "up to date" in result.stdout
    assert stat.S_ISREG((dataset / name).lstat().st_mode)
    assert (dataset / name).read_bytes() == expected
    assert outside.read_bytes() == FOREIGN


def test_a_fifo_in_place_of_a_shard_list_does_not_hang_an_increments_commit(dataset):
    (dataset / "val-shards.txt").unlink()
    os.mkfifo(dataset / "val-shards.txt")
    add_originals(dataset)
    result = pack(dataset.parent / "source", dataset)
    assert result.returncode == 0, result.stderr
    assert manifest_of(dataset)["version"] == 2
    for name, content in derived_now(dataset).items():
        assert (dataset / name).read_bytes() == content, name


# ------------------------------------------------------- what the dataset names, through the door

@pytest.mark.slow
def test_a_shard_swapped_for_a_link_to_a_copy_outside_is_repaired_not_followed(
        dataset, tmp_path):
    shard = manifest_of(dataset)["shards"][0]["name"]
    copy, content = tmp_path / "copy.tar", (dataset / shard).read_bytes()
    copy.write_bytes(content)
    (dataset / shard).unlink()
    (dataset / shard).symlink_to(copy)
    result = pack(dataset.parent / "source", dataset)
    assert result.returncode == 0, result.stderr
    assert "up to date" not in result.stdout
    assert not (dataset / shard).is_symlink()
    assert run("verify", dataset, "--quiet").returncode == 0
    assert copy.read_bytes() == content


def test_a_sample_index_that_is_a_fifo_is_one_line_not_a_hang(dataset):
    name = manifest_of(dataset)["samples_index"]["name"]
    (dataset / name).unlink()
    os.mkfifo(dataset / name)
    add_originals(dataset)
    line = one_error_line(pack(dataset.parent / "source", dataset), 2)
    assert name in line


def test_a_manifest_that_is_a_fifo_is_one_line_not_a_hang(dataset):
    (dataset / "manifest.json").unlink()
    os.mkfifo(dataset / "manifest.json")
    line = one_error_line(run("verify", dataset, "--quiet"), 2)
    assert "manifest.json" in line
