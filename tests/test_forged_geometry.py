"""A box no pack writes (inverted, empty, outside its sample) is refused by every consumer, as
export refuses it: `verify --decode`, the torch reader's targets (and so the Ultralytics
dataset and the contact sheet, which build theirs the same way).  One geometry check holds
them all (``metadata.box_problem``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hostile_data import cli, mixed_annotated, rebuild_shard

import images


def inverted(box: list[float], width: int, height: int) -> list[float]:
    x0, y0, x1, y1 = box
    return [x1, y0, x0, y1]


def empty(box: list[float], width: int, height: int) -> list[float]:
    x0, y0, _, y1 = box
    return [x0, y0, x0, y1]


def outside(box: list[float], width: int, height: int) -> list[float]:
    x0, y0, _, y1 = box
    return [x0, y0, width + 40, y1]


@pytest.fixture(scope="module")
def annotated(tmp_path_factory) -> Path:
    return mixed_annotated(tmp_path_factory.mktemp("geometry"), "webdataset")


def forged(dataset: Path, copy: Path, lie) -> str:
    """A copy of ``dataset`` whose first sample with a box has that box rewritten by ``lie``,
    its shard, index and manifest re-signed; returns the sample's key."""
    import shutil

    shutil.copytree(dataset, copy)
    forged_key = []

    def edit(key: str, members: dict[str, bytes]) -> dict[str, bytes]:
        metadata = json.loads(members["json"])
        if not forged_key and metadata.get("boxes"):
            box = metadata["boxes"][0]
            metadata["boxes"][0] = lie(box, metadata["width"], metadata["height"])
            members["json"] = json.dumps(metadata).encode()
            forged_key.append(key)
        return members

    for shard in images.manifest_of(copy)["shards"]:
        if not forged_key:
            rebuild_shard(copy, shard["name"], edit)
    assert forged_key
    return forged_key[0]


@pytest.mark.parametrize("lie", [inverted, empty, outside])
@pytest.mark.slow
def test_verify_decode_names_a_sample_whose_box_is_no_box(annotated, tmp_path, lie):
    key = forged(annotated, tmp_path / "forged", lie)
    process = cli("verify", tmp_path / "forged", "--decode", "--quiet")
    assert process.returncode != 0, process.stdout
    assert f"sample {key}" in process.stdout + process.stderr
    assert "is not x0 < x1, y0 < y1 inside" in process.stdout + process.stderr


@pytest.mark.parametrize("lie", [inverted, empty, outside])
def test_the_torch_reader_never_serves_a_box_that_is_no_box(annotated, tmp_path, lie):
    pytest.importorskip("torch")
    from shardsmith.errors import CorruptSampleError
    from shardsmith.readers.torch import dataset

    key = forged(annotated, tmp_path / "forged", lie)
    with pytest.raises(CorruptSampleError, match=key):
        list(dataset(tmp_path / "forged", targets=True, shuffle=False, on_corrupt="raise"))
