"""A dataset directory agrees with itself, or every command says it does not (docs/design.md,
invariant 7): the sample index has the sha256 its manifest records whenever it is read in full
(a same-size edit, a label changed, included), the manifest's facts are the ones its settings
give, a manifest holds each key once, and ``pack --dry-run`` refuses what the pack refuses, in
the same line with the same exit code.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hostile_helpers import PACK_ARGS, cli, one_error_line, packed, write_manifest

import images
from images import manifest_of

DAMAGED_INDEX = "the sample index is damaged: its sha256 is not the one the manifest records"
INDEX_REFUSAL = "is missing or damaged, so the samples cannot be told apart; pass --overwrite"


def dataset_bytes(dataset: Path) -> dict[str, bytes]:
    """Every file of the dataset as it is on disk (a refusal changes none of them)."""
    return {path.name: path.read_bytes() for path in sorted(dataset.iterdir()) if path.is_file()}


def relabel_first_sample(dataset: Path) -> None:
    """``sed -i '0,/"label":0/s//"label":1/'`` on the sample index: the same size, a valid
    label, only its digest tells."""
    index = dataset / manifest_of(dataset)["samples_index"]["name"]
    data = index.read_bytes()
    assert b'"label":0' in data
    index.write_bytes(data.replace(b'"label":0', b'"label":1', 1))


def command_line(name: str, tmp_path: Path, dataset: Path) -> list[object]:
    return {"inspect": ["inspect", dataset],
            "sheet": ["sheet", dataset, "-o", tmp_path / "sheet.png"],
            "verify": ["verify", dataset],
            "log": ["log", dataset],
            "stage": ["stage", dataset, "--to", tmp_path / "nvme", "--quiet"],
            "pack": ["pack", tmp_path / "source", dataset, *PACK_ARGS],
            "dry run": ["pack", tmp_path / "source", dataset, *PACK_ARGS, "--dry-run"],
            }[name]


# ------------------------------------------------------------------ the sample index's digest


@pytest.mark.parametrize("command_name", ["inspect", "sheet"])
def test_a_same_size_edit_of_the_sample_index_is_one_line_and_exit_2(tmp_path, command_name):
    dataset = packed(tmp_path)
    relabel_first_sample(dataset)
    line = one_error_line(cli(*command_line(command_name, tmp_path, dataset)), 2)
    assert DAMAGED_INDEX in line
    assert not (tmp_path / "sheet.png").exists()


def test_verify_names_a_same_size_edit_of_the_sample_index(tmp_path):
    dataset = packed(tmp_path)
    relabel_first_sample(dataset)
    result = cli("verify", dataset)
    assert result.exit_code == 1 and DAMAGED_INDEX in result.output


def test_a_pack_with_nothing_to_do_refuses_a_damaged_sample_index_and_leaves_it(tmp_path):
    dataset = packed(tmp_path)
    relabel_first_sample(dataset)
    before = dataset_bytes(dataset)
    line = one_error_line(cli(*command_line("pack", tmp_path, dataset)), 2)
    assert INDEX_REFUSAL in line
    assert dataset_bytes(dataset) == before


def test_a_pack_that_adds_a_source_refuses_a_damaged_sample_index_and_writes_nothing(tmp_path):
    dataset = packed(tmp_path)
    relabel_first_sample(dataset)
    images.write(tmp_path / "source" / "a" / "new.jpg", images.jpeg(96, 64, 99))
    before = dataset_bytes(dataset)
    line = one_error_line(cli(*command_line("pack", tmp_path, dataset)), 2)
    assert DAMAGED_INDEX in line
    assert dataset_bytes(dataset) == before


# ------------------------------------------------------------------ facts and settings agree


def _fact(name: str, value: object) -> Callable[[dict], None]:
    return lambda manifest: manifest.update({name: value})


def _setting_size(manifest: dict) -> None:
    manifest["config"]["image"]["size"] = 64


DISAGREEING = {
    "image_size": (_fact("image_size", 64),
                   "image_size 64 disagrees with its settings (image.size 32)"),
    "image_resize": (_fact("image_resize", "center_crop"),
                     "image_resize center_crop disagrees with its settings (image.resize fit)"),
    "has_masks": (_fact("has_masks", True), "has_masks true disagrees with its settings "
                                            "(source.annotations: has_masks false)"),
    "image.size": (_setting_size, "image_size 32 disagrees with its settings (image.size 64)"),
}
COMMANDS = ["inspect", "sheet", "verify", "log", "stage", "pack", "dry run"]


@pytest.mark.parametrize("command_name", COMMANDS)
@pytest.mark.parametrize("edited", list(DISAGREEING))
def test_a_fact_that_disagrees_with_the_settings_is_one_line_naming_both(tmp_path, edited,
                                                                         command_name):
    dataset = packed(tmp_path)
    change, message = DISAGREEING[edited]
    manifest = manifest_of(dataset)
    change(manifest)
    write_manifest(dataset, manifest)
    before = dataset_bytes(dataset)
    line = one_error_line(cli(*command_line(command_name, tmp_path, dataset)), 2)
    assert f"{message}: the manifest is damaged" in line
    assert dataset_bytes(dataset) == before
    assert not (tmp_path / "nvme" / "manifest.json").exists()


def test_a_manifest_without_facts_still_gets_them_from_its_settings(tmp_path):
    dataset = packed(tmp_path)
    manifest = manifest_of(dataset)
    for fact in ("image_size", "image_resize", "has_masks"):
        del manifest[fact]
    write_manifest(dataset, manifest)
    assert cli("inspect", dataset).exit_code == 0


# ------------------------------------------------------------------ one value per key, no BOM


def _key_twice(data: bytes) -> bytes:
    assert b'"image_size": 32' in data
    return data.replace(b'"image_size": 32', b'"image_size": 32, "image_size": 64', 1)


def _byte_order_mark(data: bytes) -> bytes:
    return b"\xef\xbb\xbf" + data


UNREADABLE = {
    "a key twice": (_key_twice, "not valid JSON: the key 'image_size' appears twice in one "
                                "object"),
    "a byte-order mark": (_byte_order_mark, "not valid JSON: starts with a byte-order mark"),
}


@pytest.mark.parametrize("command_name", COMMANDS)
@pytest.mark.parametrize("damage", list(UNREADABLE))
def test_a_manifest_with_a_key_twice_or_a_byte_order_mark_is_one_line(tmp_path, damage,
                                                                      command_name):
    dataset = packed(tmp_path)
    change, message = UNREADABLE[damage]
    path = dataset / "manifest.json"
    path.write_bytes(change(path.read_bytes()))
    line = one_error_line(cli(*command_line(command_name, tmp_path, dataset)), 2)
    assert message in line


# ------------------------------------------------------------------ the dry run is the pack's


def _index_missing(dataset: Path) -> None:
    (dataset / manifest_of(dataset)["samples_index"]["name"]).unlink()


def _manifest_not_json(dataset: Path) -> None:
    (dataset / "manifest.json").write_text("{")


def _other_settings(dataset: Path) -> None:
    manifest = manifest_of(dataset)
    manifest["fingerprint"] = "0" * 64
    write_manifest(dataset, manifest)


REFUSED = {
    "sample index edited": relabel_first_sample,
    "sample index missing": _index_missing,
    "manifest not JSON": _manifest_not_json,
    "other settings": _other_settings,
}


@pytest.mark.parametrize("damage", list(REFUSED))
@pytest.mark.parametrize("new_source", [False, True], ids=["unchanged", "a new source"])
def test_a_dry_run_refuses_what_the_pack_refuses_in_the_same_line(tmp_path, damage,
                                                                   new_source):
    dataset = packed(tmp_path)
    REFUSED[damage](dataset)
    if new_source:
        images.write(tmp_path / "source" / "a" / "new.jpg", images.jpeg(96, 64, 99))
    before = dataset_bytes(dataset)
    dry = one_error_line(cli(*command_line("dry run", tmp_path, dataset)), 2)
    assert dataset_bytes(dataset) == before
    assert one_error_line(cli(*command_line("pack", tmp_path, dataset)), 2) == dry


def test_a_dry_run_over_a_sound_dataset_still_says_what_a_pack_would_change(tmp_path):
    dataset = packed(tmp_path)
    images.write(tmp_path / "source" / "a" / "new.jpg", images.jpeg(96, 64, 99))
    result = cli(*command_line("dry run", tmp_path, dataset), "--report",
                 tmp_path / "dry.json")
    assert result.exit_code == 0, result.output
    dry = json.loads((tmp_path / "dry.json").read_text())["dry_run"]
    assert dry["changes"].startswith("1 new, 0 removed, 0 changed")
