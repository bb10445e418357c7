"""A hostile user's cases for the torch reader (issue 9): an unsafe or corrupt shard is refused or
named (shard and key), never read outside the dataset.
"""

from __future__ import annotations

import logging
import tarfile
from pathlib import Path

import pytest
from hostile_helpers import (
    UNSAFE_MEMBERS,
    packed,
    rewrite_first_sample,
    traversal_dataset,
)

from images import manifest_of


def test_the_torch_reader_refuses_a_traversal_shard_name(tmp_path):
    from shardsmith.errors import ManifestError
    from shardsmith.readers.torch import dataset as torch_dataset

    dataset, _ = traversal_dataset(tmp_path, "../victim/train-000000.tar")
    with pytest.raises(ManifestError, match="manifest.json"):
        torch_dataset(dataset, shuffle=False)


def read_all_naming_problems(dataset: Path, caplog: pytest.LogCaptureFixture) -> str:
    """Read every sample with the torch reader; returns the error it raised, or else what it
    logged (a reader may skip or replace a bad sample, but must say which)."""
    from shardsmith.readers.torch import dataset as torch_dataset

    with caplog.at_level(logging.WARNING):
        try:
            list(torch_dataset(dataset, shuffle=False))
        except Exception as exc:  # noqa: BLE001 - a named error is one of the two outcomes
            return f"{type(exc).__name__}: {exc}"
    return caplog.text


@pytest.mark.parametrize("unsafe", list(UNSAFE_MEMBERS))
def test_the_torch_reader_names_the_shard_of_an_unsafe_tar_member(tmp_path, unsafe, caplog):
    dataset = packed(tmp_path)
    name = rewrite_first_sample(dataset, UNSAFE_MEMBERS[unsafe])
    said = read_all_naming_problems(dataset, caplog)
    assert name in said and "member" in said, said


def test_the_torch_reader_names_the_shard_and_key_of_a_corrupt_jpeg(tmp_path, caplog):
    dataset = packed(tmp_path)
    shard = manifest_of(dataset)["shards"][0]
    with tarfile.open(dataset / shard["name"]) as tar:
        member = next(info for info in tar.getmembers() if info.name.endswith(".jpg"))
        jpeg = tar.extractfile(member).read()
    key = member.name.split(".")[0]
    scan_start = jpeg.index(b"\xff\xda") + 14  # the entropy-coded data after the SOS header
    with open(dataset / shard["name"], "r+b") as handle:  # same size: only the pixels break
        handle.seek(member.offset_data + scan_start)
        handle.write(b"\xff\xd9" * ((len(jpeg) - scan_start) // 2 - 1))
    said = read_all_naming_problems(dataset, caplog)
    assert shard["name"] in said and key in said, said
