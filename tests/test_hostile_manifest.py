"""A malformed ``manifest.json`` (issue 9): every command that reads it says so in one line and
exits 2, and touches nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hostile_helpers import (
    PACK_ARGS,
    cli,
    one_error_line,
    packed,
    write_manifest,
)

from images import manifest_of


def _top_level_list(manifest: dict) -> object:
    return [manifest]


def _shards_a_string(manifest: dict) -> object:
    return dict(manifest, shards="abc")


def _shard_without_bytes(manifest: dict) -> object:
    del manifest["shards"][0]["bytes"]
    return manifest


def _no_samples_index(manifest: dict) -> object:
    del manifest["samples_index"]
    return manifest


def _no_format(manifest: dict) -> object:
    del manifest["format"]
    return manifest


def _shard_listed_twice(manifest: dict) -> object:
    manifest["shards"].append(manifest["shards"][0])
    return manifest


def _unknown_schema(manifest: dict) -> object:
    return dict(manifest, schema_version=99)


def _masks_a_string(manifest: dict) -> object:
    return dict(manifest, has_masks="yes")


def _older_manifest_with_settings_that_do_not_validate(manifest: dict) -> object:
    for fact in ("image_size", "image_resize", "has_masks"):
        del manifest[fact]
    manifest["config"]["image"]["size"] = 10**30
    return manifest


MALFORMED: dict[str, Callable[[dict], object]] = {
    "top-level list": _top_level_list,
    "shards is a string": _shards_a_string,
    "a shard without bytes": _shard_without_bytes,
    "no samples_index": _no_samples_index,
    "no format": _no_format,
    "a shard listed twice": _shard_listed_twice,
    "unknown schema version": _unknown_schema,
    "has_masks a string": _masks_a_string,
    "an older manifest whose settings do not validate":
        _older_manifest_with_settings_that_do_not_validate,
}


@pytest.mark.parametrize("command_name", ["verify", "stage", "pack", "log"])
@pytest.mark.parametrize("damage", list(MALFORMED))
@pytest.mark.slow
def test_a_malformed_manifest_is_one_line_and_exit_2(tmp_path, damage, command_name):
    dataset = packed(tmp_path)
    shards = sorted(p.name for p in dataset.glob("*.tar"))
    write_manifest(dataset, MALFORMED[damage](manifest_of(dataset)))
    args = {"verify": ["verify", dataset], "log": ["log", dataset],
            "stage": ["stage", dataset, "--to", tmp_path / "nvme", "--quiet"],
            "pack": ["pack", tmp_path / "source", dataset, *PACK_ARGS]}[command_name]
    one_error_line(cli(*args), 2)
    assert sorted(p.name for p in dataset.glob("*.tar")) == shards  # nothing removed
    assert not (tmp_path / "nvme" / "manifest.json").exists()
