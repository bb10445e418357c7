"""Re-annotating a dataset of older annotation rules keeps its JPEG bytes: the next pack
derives objects and masks from each original's header and annotations, copies the JPEG
bytes of the same keys from the previous version, and the result equals a fresh full pack
of the same tree, record for record.  Where the windows needed were not packed before, or
the header cannot tell the decoded size, the original is decoded as before, and counted.

The "older rules" are made by packing the first version with ``annotated.window_objects``
replaced: every window marked as holding an object (a phantom; with ``tiles.keep:
annotated`` every tile is packed), or none (only background tiles are packed).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from test_delta import SHARD_0, SHARD_1, manifest, planned, record, shard, tiles

from shardsmith import load_config
from shardsmith.annotations.model import Objects, Vocabulary
from shardsmith.cli import main
from shardsmith.dataset.formats import shard_format
from shardsmith.dataset.manifest import iter_sample_index, read_manifest
from shardsmith.dataset.records import Rederived, Sample
from shardsmith.ops.verify import verify
from shardsmith.packing import annotated
from shardsmith.packing.delta import Facts, RederiveItem, diff
from shardsmith.packing.jpegcopy import Decoded, PreviousJpegs, copy_jpegs
from shardsmith.packing.plan import PlanItem
from shardsmith.packing.scan import scan

import defects
import images

SUFFIX = {"jpeg8": ".jpg", "png8": ".png", "png16": ".png", "tiff16": ".tif"}
LAYOUTS = {
    "pad": {"image.resize": "pad", "image.size": 200},
    "center_crop": {"image.resize": "center_crop", "image.size": 96},
    "tiles": {"image.tiles.size": 96, "image.tiles.overlap": 16,
              "image.tiles.keep": "annotated", "image.tiles.background_fraction": 0.2},
}
REAL_WINDOW_OBJECTS = annotated.window_objects


def corpus(source: Path, kind: str, orientations: tuple[int, ...]) -> list[str]:
    """Annotated corpus originals of ``kind``, one an orientation, and one without defects."""
    relpaths = []
    for orientation in orientations:
        path = images.write(source / "parts" / f"o{orientation}{SUFFIX[kind]}",
                            defects.corpus_original(kind, orientation))
        defects.write_corpus_annotations(path.with_suffix(""))
        relpaths.append(str(path.relative_to(source)))
    images.write(source / "parts" / f"clean{SUFFIX[kind]}",
                 defects.corpus_original(kind, 1, with_defects=False))
    return relpaths


def phantoms(*args, **kwargs) -> list[Objects | None]:
    """Older rules: every window's objects, and every window marked as showing one."""
    return [objects if objects is None else replace(objects, marked=True)
            for objects in REAL_WINDOW_OBJECTS(*args, **kwargs)]


def nothing(*args, **kwargs) -> list[Objects | None]:
    """Older rules that found no object in any window."""
    return [Objects() for _ in REAL_WINDOW_OBJECTS(*args, **kwargs)]


def settings(layout: str, fmt: str = "webdataset") -> dict:
    return {**defects.CORPUS_ANNOTATIONS, **LAYOUTS[layout], "output.format": fmt,
            "output.shard_samples": 3, "run.max_reject_fraction": 0.9}


def older_version(source: Path, output: Path, overrides: dict, monkeypatch,
                  rules=phantoms) -> None:
    """Version 1 packed by ``rules``, its manifest saying annotation rules 1."""
    with monkeypatch.context() as patch:
        patch.setattr(annotated, "window_objects", rules)
        defects.pack_with(source, output, overrides)
    path = output / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest.pop("annotation_rules")
    path.write_text(json.dumps(manifest))


def records(output: Path) -> dict[str, bytes]:
    """Every record of a dataset (its exact bytes in the shard), by key."""
    manifest = images.manifest_of(output)
    fmt = shard_format(manifest["format"])
    return {record.key: record.data for shard in manifest["shards"]
            for _, record in fmt.records(output / shard["name"], shard["bytes"])}


def rederived_and_fresh(tmp_path: Path, monkeypatch, kind: str, orientations: tuple[int, ...],
                        layout: str, fmt: str = "webdataset",
                        rules=phantoms) -> tuple[dict, dict, dict]:
    """Records of the re-annotated dataset and of a fresh pack, and the re-annotated
    version's manifest."""
    source = tmp_path / "source"
    corpus(source, kind, orientations)
    overrides = settings(layout, fmt)
    older_version(source, tmp_path / "out", overrides, monkeypatch, rules)
    manifest = defects.pack_with(source, tmp_path / "out", overrides)
    defects.pack_with(source, tmp_path / "fresh", overrides)
    return records(tmp_path / "out"), records(tmp_path / "fresh"), manifest


# ------------------------------------------------------------------------- equal to a fresh pack

@pytest.mark.parametrize(("kind", "layout", "orientations"), [
    ("jpeg8", "pad", (1, 6, 8)),
    ("jpeg8", "tiles", (3, 5)),
    ("jpeg8", "center_crop", (2, 7)),
    ("png8", "tiles", (1, 6)),
    ("png16", "pad", (4, 8)),
    ("tiff16", "center_crop", (1, 3)),
])
@pytest.mark.slow
def test_re_annotated_samples_equal_a_fresh_pack_record_for_record(
        tmp_path, monkeypatch, kind, layout, orientations):
    rederived, fresh, manifest = rederived_and_fresh(tmp_path, monkeypatch, kind,
                                                     orientations, layout)
    assert rederived.keys() == fresh.keys()
    assert all(rederived[key] == fresh[key] for key in fresh)  # KEY.json, mask, JPEG
    sources = len(orientations) + 1
    assert manifest["run"]["jpeg_copied"] == sources and manifest["run"]["decoded"] == 0
    assert manifest["history"][-1]["reannotated"] == sources
    assert verify(tmp_path / "out").ok


def test_tfrecord_samples_re_annotated_equal_a_fresh_pack(tmp_path, monkeypatch):
    rederived, fresh, manifest = rederived_and_fresh(tmp_path, monkeypatch, "jpeg8", (1, 6),
                                                     "tiles", "tfrecord")
    assert rederived == fresh
    assert manifest["run"]["jpeg_copied"] == 3


def test_the_re_annotated_objects_are_the_new_rules_not_the_old(tmp_path, monkeypatch):
    source = tmp_path / "source"
    corpus(source, "jpeg8", (1,))
    overrides = settings("pad")
    older_version(source, tmp_path / "out", overrides, monkeypatch, nothing)
    before = defects.members(tmp_path / "out")
    defects.pack_with(source, tmp_path / "out", overrides)
    after = defects.members(tmp_path / "out")
    key = next(key for key in after if "clean" not in key)
    assert json.loads(before[key]["json"])["labels"] == []
    assert json.loads(after[key]["json"])["labels"] != []
    assert after[key]["jpg"] == before[key]["jpg"]


# ------------------------------------------------------------------------- decoded after all

def test_tiles_needed_now_but_not_packed_before_are_decoded_and_counted(tmp_path, monkeypatch):
    rederived, fresh, manifest = rederived_and_fresh(tmp_path, monkeypatch, "jpeg8", (1, 6),
                                                     "tiles", rules=nothing)
    assert rederived == fresh
    run = manifest["run"]
    assert run["decoded"] >= 2  # the annotated originals need tiles never packed
    assert run["decoded"] + run["jpeg_copied"] == 3


def test_a_tiff_turned_by_its_orientation_is_decoded_not_copied(tmp_path, monkeypatch):
    rederived, fresh, manifest = rederived_and_fresh(tmp_path, monkeypatch, "tiff16", (6,),
                                                     "pad")
    assert rederived == fresh
    assert (manifest["run"]["jpeg_copied"], manifest["run"]["decoded"]) == (1, 1)


def test_a_previous_shard_damaged_during_the_run_is_decoded_from_the_original(tmp_path):
    source, output = tmp_path / "source", tmp_path / "out"
    relpath = corpus(source, "jpeg8", (1,))[0]
    overrides = settings("pad")
    defects.pack_with(source, output, overrides)
    config = load_config(None, {"source.path": str(source), "output.path": str(output),
                                **overrides})
    previous = read_manifest(output)
    found = next(line for line in iter_sample_index(output, previous) if line.path == relpath)
    table = scan(source, config.source).files
    item = PlanItem(table[table.index_of(relpath)], found.split)
    sample = Sample(found.key, relpath, found.split, found.label, b"", 200, 200, 0, 320, 240,
                    "L", "JPEG", 0, 0, "")
    (output / found.shard).write_bytes(b"\0" * 1024)  # damaged after the Delta was made
    with PreviousJpegs(shard_format("webdataset"), output, previous.shards) as jpegs:
        made = copy_jpegs(Rederived((sample,), (found.shard,)), jpegs, item, str(source),
                          config, Vocabulary((), tuple(defects.CORPUS_CLASSES)))
    assert isinstance(made, Decoded) and isinstance(made.decoded, tuple)
    assert made.decoded[0].jpeg.startswith(b"\xff\xd8")


# ------------------------------------------------------------------------- the Delta

def test_a_dry_run_says_how_many_keep_their_jpeg_bytes(tmp_path, monkeypatch):
    source = tmp_path / "source"
    corpus(source, "jpeg8", (1, 6))
    overrides = settings("pad")
    older_version(source, tmp_path / "out", overrides, monkeypatch)
    config = tmp_path / "job.yaml"
    config.write_text(json.dumps(_nested(overrides)))
    result = CliRunner().invoke(main, ["pack", str(source), str(tmp_path / "out"), "--config",
                                       str(config), "--dry-run", "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert "3 re-annotated (3 with their JPEG bytes copied)" in result.output


def test_the_pack_summary_and_report_say_how_many_kept_their_jpeg_bytes(tmp_path,
                                                                         monkeypatch):
    source = tmp_path / "source"
    corpus(source, "jpeg8", (1, 6))
    overrides = settings("pad")
    older_version(source, tmp_path / "out", overrides, monkeypatch)
    config = tmp_path / "job.yaml"
    config.write_text(json.dumps(_nested(overrides)))
    report = tmp_path / "report.json"
    result = CliRunner().invoke(main, ["pack", str(source), str(tmp_path / "out"), "--config",
                                       str(config), "--workers", "1", "--report", str(report)])
    assert result.exit_code == 0, result.output
    head = next(line for line in result.output.splitlines() if ": version 2:" in line)
    assert "0 images decoded, 3 re-annotated with their JPEG bytes copied" in head, head
    assert json.loads(report.read_text())["jpeg_copied"] == 3
    assert json.loads(report.read_text())["decoded"] == 0


def _nested(overrides: dict) -> dict:
    nested: dict = {}
    for dotted, value in overrides.items():
        *parents, name = dotted.split(".")
        level = nested
        for parent in parents:
            level = level.setdefault(parent, {})
        level[name] = value
    return nested


def test_a_source_changed_since_is_decoded_not_copied(tmp_path, monkeypatch):
    source = tmp_path / "source"
    relpaths = corpus(source, "jpeg8", (1, 6))
    overrides = settings("pad")
    older_version(source, tmp_path / "out", overrides, monkeypatch)
    images.write(source / relpaths[0], defects.corpus_original("jpeg8", 3))
    manifest = defects.pack_with(source, tmp_path / "out", overrides)
    assert (manifest["run"]["jpeg_copied"], manifest["run"]["decoded"]) == (2, 1)
    defects.pack_with(source, tmp_path / "fresh", overrides)
    assert records(tmp_path / "out") == records(tmp_path / "fresh")


# ------------------------------------------------------------------------- resume

KILL_SCRIPT = """
import os, signal, sys
from shardsmith.dataset.formats import ShardRoller
closing = ShardRoller.close
published = 0
def close(self):
    global published
    entry = closing(self)
    if entry is not None:
        published += 1
        if published == 2:
            os.kill(os.getpid(), signal.SIGKILL)
    return entry
ShardRoller.close = close
from shardsmith.cli import main
sys.argv = ["shardsmith"] + sys.argv[1:]
main()
"""


@pytest.mark.slow
def test_a_re_annotation_killed_and_run_again_equals_one_uninterrupted(tmp_path, monkeypatch):
    source = tmp_path / "source"
    corpus(source, "jpeg8", (1, 2, 3, 5, 6, 8))
    overrides = {**settings("pad"), "output.shard_samples": 2}
    for name in ("killed", "whole"):
        older_version(source, tmp_path / name, overrides, monkeypatch)
    config = tmp_path / "job.yaml"
    config.write_text(json.dumps(_nested(overrides)))
    command = [sys.executable, "-c", KILL_SCRIPT, "pack", str(source), str(tmp_path / "killed"),
               "--config", str(config), "--workers", "1", "--quiet"]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    killed = subprocess.run(command, env=environment, capture_output=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL
    assert (tmp_path / "killed" / ".shardsmith").is_dir()
    manifest = defects.pack_with(source, tmp_path / "killed", overrides)
    assert manifest["run"]["resumed_at"] > 0
    defects.pack_with(source, tmp_path / "whole", overrides)
    assert images.dataset_bytes(tmp_path / "killed") == images.dataset_bytes(tmp_path / "whole")


# ------------------------------------------------------------------------- the Delta decides

def older_rules_delta(records, files=(("a.jpg", 10, 1), ("b.jpg", 10, 1)), damaged=()):
    plan = planned(*files)
    digests = np.array([0x1F, 0x2A][: len(files)], np.uint64)
    return plan, diff(manifest(shard(SHARD_0), shard(SHARD_1)), records, plan,
                      Facts(annotation_digests=digests, older_rules=True,
                            damaged=frozenset(damaged)))


def test_a_re_annotated_source_is_a_rederive_item_naming_its_samples_and_their_shards():
    records = [*tiles("b.jpg", SHARD_1, SHARD_0, annotation="2a"),
               record("a.jpg", SHARD_0, annotation="1f", digest="xxh3:a1")]
    plan, delta = older_rules_delta(records)
    items = {item.source.relpath: item for item in delta.items()}
    assert all(isinstance(item, RederiveItem) for item in items.values())
    assert items["a.jpg"].previous == ((records[2].key, SHARD_0),)
    assert items["a.jpg"].source_digest == "xxh3:a1"
    assert items["b.jpg"].previous == ((records[0].key, SHARD_1), (records[1].key, SHARD_0))
    assert len(delta.copied_positions()) == 2


@pytest.mark.parametrize("why", ["damaged tile", "file changed", "no digest"])
def test_a_re_annotated_source_is_decoded_when_its_bytes_cannot_be_trusted(why):
    size = 11 if why == "file changed" else 10
    digest = "" if why == "no digest" else "xxh3:aa"
    records = [record("a.jpg", SHARD_0, annotation="1f"),
               *tiles("b.jpg", SHARD_0, SHARD_1, annotation="2a", size=size, digest=digest)]
    plan, delta = older_rules_delta(
        records, damaged=(SHARD_1,) if why == "damaged tile" else ())
    kinds = {item.source.relpath: isinstance(item, RederiveItem) for item in delta.items()}
    assert kinds == {"a.jpg": True, "b.jpg": False}


def test_the_delta_digest_names_the_samples_copied():
    _, one = older_rules_delta([record("a.jpg", SHARD_0, annotation="1f")],
                               files=(("a.jpg", 10, 1),))
    _, other = older_rules_delta([record("a.jpg", SHARD_1, annotation="1f")],
                                 files=(("a.jpg", 10, 1),))
    assert one.digest != other.digest
