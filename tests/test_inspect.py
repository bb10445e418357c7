"""`shardsmith inspect`: what a dataset holds, without jq."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from shardsmith.cli import main
from shardsmith.packing.plan import assign_split

import images
from images import manifest_of

SPLITS = (("train", 0.5), ("val", 0.5))


def cli(*args: str, expect: int = 0) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == expect, result.output
    return result.output


def name_in(split: str, stem: str) -> str:
    """A path under ok/ that the split hash puts in ``split``."""
    return next(f"ok/{stem}_{n}.jpg" for n in range(1000)
                if assign_split(f"ok/{stem}_{n}.jpg", SPLITS) == split)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> tuple[Path, str, dict[str, str]]:
    """12 ok, 1 dent (so it misses a split), identical copies within and across splits,
    25 empty files (rejects), and files the scan leaves out."""
    root = tmp_path_factory.mktemp("inspect")
    source, output = root / "source", root / "out"
    for number in range(12):
        images.write(source / "ok" / f"part_{number:02d}.jpg", images.jpeg(64, 48, number))
    images.write(source / "dent" / "only.jpg", images.jpeg(48, 64, 50))
    copies = {"leak": (name_in("train", "leak"), name_in("val", "leak")),
              "twin": (name_in("train", "twin_a"), name_in("train", "twin_b"))}
    for seed, (first, second) in enumerate(copies.values(), 60):
        data = images.jpeg(64, 48, seed)
        images.write(source / first, data)
        images.write(source / second, data)
    for number in range(25):
        images.write(source / "ok" / f"broken_{number:02d}.jpg", b"")
    images.write(source / "ok" / "notes.txt", b"lens cleaned")
    images.write(source / "ok" / ".thumbs.jpg", b"")
    images.write(source / "loose.jpg", images.jpeg(32, 32, 70))
    summary = cli("pack", str(source), str(output), "--size", "32", "--split",
                  "train=0.5,val=0.5", "--workers", "1", "--quiet", "--max-reject-fraction", "1",
                  "--report", str(root / "report.json"))
    return output, summary, {name: " ".join(pair) for name, pair in copies.items()}


def test_classes_by_splits_with_counts_and_fractions(dataset):
    output, _, _ = dataset
    report = json.loads(cli("inspect", str(output), "--json"))
    classes = {entry["name"]: entry for entry in report["classes"]}
    assert [(c["label"], c["name"]) for c in report["classes"]] == [(0, "dent"), (1, "ok")]
    assert classes["ok"]["total"] == 16 and classes["dent"]["total"] == 1
    ok = classes["ok"]
    assert sum(ok["samples"].values()) == 16
    assert ok["fractions"]["train"] == pytest.approx(ok["samples"]["train"] / 16, abs=1e-4)
    assert report["splits"]["train"]["configured_fraction"] == 0.5
    text = cli("inspect", str(output))
    assert "samples per class and split (17 samples)" in text
    row = next(line for line in text.splitlines() if line.split()[:2] == ["1", "ok"])
    assert row.split()[-1] == "16"


def test_a_class_missing_from_a_split_and_imbalance_are_warnings(dataset):
    output, summary, _ = dataset
    report = json.loads(cli("inspect", str(output), "--json"))
    dent_split = next(s for s, n in report["classes"][0]["samples"].items() if n)
    other = "val" if dent_split == "train" else "train"
    assert f"class dent has no samples in split {other}" in report["warnings"]
    assert any(w.startswith("imbalance: ok has 16.0x the samples of dent") for w in
               report["warnings"])
    assert f"warning: class dent has no samples in split {other}" in summary
    assert "imbalance" not in summary  # defect data always is: inspect says it, pack does not
    relaxed = json.loads(cli("inspect", str(output), "--json", "--imbalance", "20"))
    assert not any(w.startswith("imbalance") for w in relaxed["warnings"])


def test_identical_originals_are_found_and_leakage_across_splits_is_flagged(dataset):
    output, summary, copies = dataset
    report = json.loads(cli("inspect", str(output), "--json"))
    sets = {" ".join(c["path"] for c in s["copies"]): s for s in report["duplicates"]["sets"]}
    leak = sets[copies["leak"]]
    assert leak["leak"] and {c["split"] for c in leak["copies"]} == {"train", "val"}
    assert not sets[copies["twin"]]["leak"]
    assert report["duplicates"]["samples_without_content_digest"] == 0
    assert "leakage: 1 set of identical originals in more than one split" in report["warnings"]
    assert ("duplicates   2 sets of identical originals (4 files), 1 in more than one split "
            "(leakage)") in summary
    findings = json.loads((output.parent / "report.json").read_text())["findings"]
    assert findings["duplicate_sets"] == 2 and findings["duplicate_sets_across_splits"] == 1
    text = cli("inspect", str(output))
    leak_line = next(line for line in text.splitlines() if "LEAK" in line)
    assert all(path in leak_line for path in copies["leak"].split())


def test_rejects_are_listed_with_paths_the_first_20_unless_all_are_asked_for(dataset):
    output, _, _ = dataset
    text = cli("inspect", str(output))
    assert "rejects  25 (empty: 25)" in text
    assert sum(1 for line in text.splitlines() if "ok/broken_" in line) == 20
    assert "... and 5 more (--rejects lists all)" in text
    everything = cli("inspect", str(output), "--rejects")
    assert sum(1 for line in everything.splitlines() if "ok/broken_" in line) == 25


def test_excluded_files_are_recorded_with_their_paths(dataset):
    output, _, _ = dataset
    manifest = manifest_of(output)
    assert manifest["excluded"] == {"extension": 1, "hidden": 1, "not in a class folder": 1}
    assert manifest["excluded_paths"] == {"extension": ["ok/notes.txt"],
                                          "hidden": ["ok/.thumbs.jpg"],
                                          "not in a class folder": ["loose.jpg"]}
    text = cli("inspect", str(output), "--excluded")
    lines = [line.split() for line in text.splitlines()]
    assert ["extension", "ok/notes.txt"] in lines and ["hidden", "ok/.thumbs.jpg"] in lines


def test_shards_and_image_sizes_are_summarised(dataset):
    output, _, _ = dataset
    report = json.loads(cli("inspect", str(output), "--json"))
    manifest = manifest_of(output)
    assert report["shards"]["count"] == len(manifest["shards"])
    assert report["shards"]["bytes"] == sum(s["bytes"] for s in manifest["shards"])
    assert report["images"]["common_sizes"][0] == {"width": 32, "height": 24, "samples": 16}
    assert report["images"]["width"]["min"] == 24 and report["images"]["width"]["max"] == 32


def test_one_split_only(dataset):
    output, _, _ = dataset
    report = json.loads(cli("inspect", str(output), "--json", "--split", "val"))
    assert list(report["splits"]) == ["val"]
    assert report["samples"] == report["splits"]["val"]["samples"] > 0
    assert all(any(c["split"] == "val" for c in s["copies"])
               for s in report["duplicates"]["sets"])
    assert "has no split 'test'" in cli("inspect", str(output), "--split", "test", expect=2)


def test_a_manifest_from_before_excluded_paths_were_recorded_still_inspects(dataset, tmp_path):
    import shutil

    output, _, _ = dataset
    older = tmp_path / "older"
    shutil.copytree(output, older)
    manifest = manifest_of(older)
    del manifest["excluded_paths"]
    (older / "manifest.json").write_text(json.dumps(manifest))
    assert "paths not recorded" in cli("inspect", str(older))


def test_a_directory_without_a_manifest_is_one_line(tmp_path):
    output = cli("inspect", str(tmp_path), expect=2)
    assert output.count("\n") == 1 and "no manifest.json: not a packed dataset" in output
