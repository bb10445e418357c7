"""Round 4 of the hostile pass, over what the defect-semantics and hardening work added: cut
objects (``objects_cut``), the YOLO task from ``objects_box_only``, object-class weights, the
changes format 2, ``report -o -`` and the class-name folding.

Each test here states what should hold, and failed on the code it was written against.
The forged datasets are re-signed (sizes and sha256 fixed up in the manifest), as an attacker
or a buggy tool would leave them; only the field named is wrong.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hostile_data import classified, rebuild_shard
from hostile_helpers import index_bytes, replace_sample_index
from test_cut_defects import CUT_CONFIG, cut_tree, decoded, red

import defects
import images

REPO = Path(__file__).resolve().parents[1]


def shardsmith(*args: object, **options) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "shardsmith", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=180, **options)


@pytest.fixture(scope="module")
def cut_dataset(tmp_path_factory) -> Path:
    """Five 256 px tiles of one original (tests/test_cut_defects.py): tile 0 holds a crack
    (a mask), tile 1 its cut tip, tile 2 a scratch (a box only), tile 3 its cut end, tile 4
    nothing.  Both defects are painted red."""
    root = tmp_path_factory.mktemp("round4")
    cut_tree(root / "source")
    defects.pack_with(root / "source", root / "dataset", CUT_CONFIG)
    return root / "dataset"


def column(key: str) -> int:
    return int(key[-3:])


def copy_of(dataset: Path, where: Path) -> Path:
    shutil.copytree(dataset, where)
    return where


def forge_index(dataset: Path, change) -> None:
    """Rewrite the sample index lines with ``change(line)``; the manifest follows."""
    lines = images.samples_of(dataset)
    for line in lines:
        change(line)
    replace_sample_index(dataset, index_bytes(lines))


def forge_metadata(dataset: Path, change) -> None:
    """Rewrite each sample's KEY.json with ``change(key, metadata)``; shard, shard index and
    manifest follow."""
    def edit(key: str, members: dict[str, bytes]) -> dict[str, bytes]:
        metadata = json.loads(members["json"])
        change(key, metadata)
        members["json"] = json.dumps(metadata).encode()
        return members

    for shard in images.manifest_of(dataset)["shards"]:
        rebuild_shard(dataset, shard["name"], edit)


# --- 1. A cut defect hidden by the sample index ------------------------------------------


def hide_the_cut_of_tile_1(line: dict) -> None:
    if column(line["key"]) == 1:
        line.pop("objects_cut", None)
        line["objects_dropped"] = 0


def test_a_tile_whose_key_json_lists_a_cut_defect_is_never_a_yolo_background_image(
        cut_dataset, tmp_path):
    forged = copy_of(cut_dataset, tmp_path / "forged")
    forge_index(forged, hide_the_cut_of_tile_1)
    result = shardsmith("export", forged, tmp_path / "yolo", "--layout", "yolo", "--quiet")
    folder = tmp_path / "yolo" / "current"
    for label in (folder / "labels" / "train").glob("*.txt"):
        if not label.read_text().strip():
            image = folder / "images" / "train" / f"{label.stem}.jpg"
            assert not red(decoded(image)).any(), (label.stem, result.stderr)


def test_verify_decode_names_an_index_line_that_hides_a_cut_listed_in_key_json(
        cut_dataset, tmp_path):
    forged = copy_of(cut_dataset, tmp_path / "forged")
    forge_index(forged, hide_the_cut_of_tile_1)
    result = shardsmith("verify", forged, "--decode", "--quiet")
    assert result.returncode != 0
    assert "r000c001" in result.stdout + result.stderr


# --- 2. A cut box that is no box ----------------------------------------------------------


def inverted(box: list[float]) -> list[float]:
    x0, y0, x1, y1 = box
    return [x1, y0, x0, y1]


def outside(box: list[float]) -> list[float]:
    x0, y0, _, _ = box
    return [x0, y0, 5000.0, 9000.0]


def forge_cut_box(dataset: Path, lie) -> str:
    """Tile 3's cut scratch gets the box ``lie`` makes of it, in KEY.json; returns its key."""
    keys = []

    def change(key: str, metadata: dict) -> None:
        if metadata.get("objects_cut") and column(key) == 3:
            metadata["objects_cut"][0]["box"] = lie(metadata["objects_cut"][0]["box"])
            keys.append(key)

    forge_metadata(dataset, change)
    assert keys
    return keys[0]


@pytest.mark.parametrize("lie", [inverted, outside])
def test_verify_decode_names_a_cut_box_that_is_no_box(cut_dataset, tmp_path, lie):
    forged = copy_of(cut_dataset, tmp_path / "forged")
    key = forge_cut_box(forged, lie)
    result = shardsmith("verify", forged, "--decode", "--quiet")
    assert result.returncode != 0, result.stdout
    assert key in result.stdout + result.stderr


@pytest.mark.parametrize("lie", [inverted, outside])
def test_the_torch_reader_with_keep_cut_never_serves_an_ignore_box_that_is_no_box(
        cut_dataset, tmp_path, lie):
    pytest.importorskip("torch")
    from shardsmith.errors import CorruptSampleError
    from shardsmith.readers.torch import dataset

    forged = copy_of(cut_dataset, tmp_path / "forged")
    key = forge_cut_box(forged, lie)
    with pytest.raises(CorruptSampleError, match=key):
        list(dataset(forged, targets=True, shuffle=False, keep_cut=True, on_corrupt="raise"))


# --- 3. The YOLO task from an index that says every object has pixels ---------------------


def test_auto_never_writes_a_box_only_object_as_a_polygon_whatever_the_index_says(
        cut_dataset, tmp_path):
    forged = copy_of(cut_dataset, tmp_path / "forged")

    def no_box_only(line: dict) -> None:
        if line.get("objects_box_only"):
            line["objects_box_only"] = []

    forge_index(forged, no_box_only)
    result = shardsmith("export", forged, tmp_path / "yolo", "--layout", "yolo")
    labels = tmp_path / "yolo" / "current" / "labels" / "train"
    scratch_rows = [row.split() for path in labels.glob("*c002.txt")
                    for row in path.read_text().splitlines() if row.startswith("1 ")]
    # exported as detect (5 numbers a row) or refused; never a polygon of the box
    assert all(len(row) == 5 for row in scratch_rows), (scratch_rows, result.stdout)


# --- 4. Weights ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["#", "object:#", "image:#"])
def test_a_class_id_of_thousands_of_digits_in_a_weights_spec_is_one_line(cut_dataset, name):
    result = shardsmith("inspect", cut_dataset, "--weights", f"{name}{'1' * 5000}=1")
    assert result.returncode == 2, result.stderr[-500:]
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardsmith: error: weights:"), lines


def test_inspect_weights_previews_the_epoch_the_reader_draws_without_the_cut_samples(
        cut_dataset):
    pytest.importorskip("torch")
    from shardsmith.readers.torch import dataset

    reader = dataset(cut_dataset, weights="crack=10,*=1", shuffle=True, pad=False)
    result = shardsmith("inspect", cut_dataset, "--weights", "crack=10,*=1", "--json")
    assert result.returncode == 0, result.stderr
    preview = json.loads(result.stdout)
    assert preview["draws"] == reader.rank_samples() == 3
    none = next(row for row in preview["classes"] if row["class"] == "(none)")
    assert none["samples"] == 1  # tile 4; tiles 1 and 3 show a cut defect and are left out


# --- 5. report -o - ----------------------------------------------------------------------


def test_report_to_a_closed_stdout_is_one_line(cut_dataset):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = subprocess.run(
        ["bash", "-c", 'exec "$0" -m shardsmith report "$1" -o - >&-', sys.executable,
         str(cut_dataset)], capture_output=True, text=True, env=env, timeout=120)
    assert "Traceback" not in process.stderr, process.stderr[-1500:]
    assert process.returncode in (1, 2)
    assert process.stderr.strip().splitlines()[-1].startswith("shardsmith: error:")


# --- 6. Class names as folders -------------------------------------------------------------


def test_class_names_that_only_full_case_folding_joins_are_two_folders(tmp_path):
    dataset = classified(tmp_path, ("stra\u00dfe", "strasse"))
    result = shardsmith("export", dataset, tmp_path / "dest", "--layout", "yolo",
                        "--task", "classify", "--quiet")
    assert result.returncode == 0, result.stderr
    assert {path.name for path in (tmp_path / "dest" / "current" / "train").iterdir()} == \
        {"stra\u00dfe", "strasse"}


# --- 7. A re-annotated line of a forged changes file ---------------------------------------


@pytest.fixture(scope="module")
def reannotated(tmp_path_factory) -> Path:
    """Two versions of the cut tree: the second re-annotates the original (a new crack box)."""
    root = tmp_path_factory.mktemp("reannotated")
    cut_tree(root / "source")
    defects.pack_with(root / "source", root / "dataset", CUT_CONFIG)
    (root / "source" / "good" / "a.txt").write_text("1 0.3 0.3 0.1 0.1\n0 0.8 0.5 0.1 0.2\n")
    defects.pack_with(root / "source", root / "dataset", CUT_CONFIG)
    return root / "dataset"


def forge_changes(dataset: Path, change) -> None:
    import hashlib

    manifest = images.manifest_of(dataset)
    entry = manifest["changes"][-1]
    path = dataset / entry["name"]
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    change(lines)
    data = b"".join(json.dumps(line, sort_keys=True, separators=(",", ":")).encode() + b"\n"
                    for line in lines)
    path.write_bytes(data)
    entry.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    (dataset / "manifest.json").write_text(json.dumps(manifest, indent=1))


def test_diff_bounds_a_reannotated_line_naming_thousands_of_unknown_object_classes(
        reannotated, tmp_path):
    forged = copy_of(reannotated, tmp_path / "forged")

    def many_classes(lines: list[dict]) -> None:
        line = next(line for line in lines if line.get("change") == "reannotated")
        line["objects_before"] = {f"c{number}": number for number in range(20_000)}

    forge_changes(forged, many_classes)
    result = shardsmith("diff", forged)
    assert "Traceback" not in result.stderr
    longest = max(map(len, (result.stdout + result.stderr).splitlines()))
    assert result.returncode == 2 or longest <= 2_000, longest


def test_the_forged_fixtures_are_sound_before_forging(cut_dataset, reannotated):
    """The datasets every case above damages verify clean as packed (the cases test the
    forgery, not a broken fixture)."""
    for dataset in (cut_dataset, reannotated):
        result = shardsmith("verify", dataset, "--decode", "--quiet")
        assert result.returncode == 0, result.stdout + result.stderr
    assert np.asarray([column(line["key"]) for line in images.samples_of(cut_dataset)]
                      ).tolist() == [0, 1, 2, 3, 4]


# --- 8. The store's settings: secrets and exit codes ----------------------------------------


def s3_command(*args: str) -> subprocess.CompletedProcess:
    """``shardsmith`` against a bucket that cannot answer (no server is asked: every case
    fails in the client or on a closed port), dummy credentials, short timeouts."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    env.update(PYTHONPATH=str(REPO), AWS_ACCESS_KEY_ID="dummy-key-id",
               AWS_SECRET_ACCESS_KEY="dummy-secret-key", AWS_CONFIG_FILE="/nonexistent",
               AWS_SHARED_CREDENTIALS_FILE="/nonexistent")
    return subprocess.run([sys.executable, "-m", "shardsmith", *args, "--storage",
                           "connect_timeout=0.3", "--storage", "read_timeout=0.3"],
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("password", ["pa/ss-never-printed-1", "p@ss-never-printed-2"],
                         ids=["slash", "at"])
def test_a_password_with_a_slash_or_an_at_in_the_endpoint_url_is_never_printed(password):
    process = s3_command("-vv", "inspect", "s3://bucket-x/ds", "--storage",
                         f"endpoint_url=http://user:{password}@127.0.0.1:1")
    assert process.returncode != 0
    assert "never-printed" not in process.stdout + process.stderr, [
        line[:200] for line in (process.stdout + process.stderr).splitlines()
        if "never-printed" in line][:3]


@pytest.mark.parametrize("setting", ["endpoint_url=file:///etc/passwd", "region=../../etc"],
                         ids=["endpoint", "region"])
def test_a_malformed_store_setting_is_a_configuration_error_exit_2(setting):
    process = s3_command("inspect", "s3://bucket-x/ds", "--storage", setting)
    assert "Traceback" not in process.stderr
    assert process.returncode == 2, process.stderr


# --- 9. Damaged totals -------------------------------------------------------------------


def test_the_next_pack_corrects_damaged_totals_even_when_nothing_changed(cut_dataset,
                                                                         tmp_path):
    forged = copy_of(cut_dataset, tmp_path / "forged")
    manifest = images.manifest_of(forged)
    manifest["totals"].update(bytes_in=9_007_199_254_740_991, packed=123_456)
    (forged / "manifest.json").write_text(json.dumps(manifest, indent=1))
    defects.pack_with(cut_dataset.parent / "source", forged, CUT_CONFIG)
    fresh = images.manifest_of(cut_dataset)["totals"]
    repaired = images.manifest_of(forged)["totals"]
    assert (repaired["bytes_in"], repaired["packed"]) == (fresh["bytes_in"], fresh["packed"])


# --- 10. Boxes below what a record can hold -------------------------------------------------


def test_a_dataset_fresh_from_a_pack_exports_whatever_sliver_of_a_box_its_labels_hold(
        tmp_path):
    images.write(tmp_path / "source" / "good" / "a.jpg", images.jpeg(320, 240, 1))
    (tmp_path / "source" / "good" / "a.txt").write_text(
        "0 0.5 0.5 0.0000001 0.1\n0 0.2 0.2 0.1 0.1\n")
    defects.pack_with(tmp_path / "source", tmp_path / "dataset",
                      {"source.annotations.files": "yolo",
                       "source.annotations.classes": ["scratch"]})
    result = shardsmith("export", tmp_path / "dataset", tmp_path / "yolo", "--layout", "yolo",
                        "--task", "detect", "--quiet")
    assert result.returncode == 0, result.stderr


def test_a_box_narrower_than_the_exports_precision_is_refused_like_an_empty_one(
        cut_dataset, tmp_path):
    forged = copy_of(cut_dataset, tmp_path / "forged")

    def sliver(key: str, metadata: dict) -> None:
        if column(key) == 2:
            metadata["boxes"][0] = [10.0, 10.0, 10.0000001, 20.0]

    forge_metadata(forged, sliver)
    result = shardsmith("verify", forged, "--decode", "--quiet")
    assert result.returncode != 0, result.stdout
    assert "r000c002" in result.stdout + result.stderr


def sliver_at_a_tile_border(source: Path) -> dict:
    """A 1280 x 256 original in 256 px tiles; its one YOLO box ends 0.0004 px past the border
    of tiles 2 and 3 (coordinates converted from another tool's pixels often do).  Returns
    the config."""
    images.write(source / "good" / "a.png", images.png(1280, 256, 1))
    (source / "good" / "a.txt").write_text(
        f"1 {(736 + 768.0004) / 2 / 1280:.9f} 0.5 {32.0004 / 1280:.9f} 0.2\n")
    return {name: value for name, value in CUT_CONFIG.items() if "mask" not in name}


def test_keep_cut_exports_a_tiled_dataset_whose_box_ends_a_hair_past_a_tile_border(tmp_path):
    config = sliver_at_a_tile_border(tmp_path / "source")
    defects.pack_with(tmp_path / "source", tmp_path / "dataset", config)
    result = shardsmith("export", tmp_path / "dataset", tmp_path / "yolo", "--layout", "yolo",
                        "--task", "detect", "--keep-cut", "--quiet")
    assert result.returncode == 0, result.stderr


def test_an_export_of_a_tiled_dataset_with_min_visible_0_never_stops_on_its_own_box(tmp_path):
    config = sliver_at_a_tile_border(tmp_path / "source")
    defects.pack_with(tmp_path / "source", tmp_path / "dataset",
                      {**config, "source.annotations.min_visible": 0})
    result = shardsmith("export", tmp_path / "dataset", tmp_path / "yolo", "--layout", "yolo",
                        "--task", "detect", "--quiet")
    assert result.returncode == 0, result.stderr
