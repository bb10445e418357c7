"""The counts of a dataset version: totals that equal a fresh pack's, and every count of a
change in its unit (originals or samples), the same number in every command that shows it."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from shardsmith.cli import main

import defects
import images

# 480x360 originals cut into 256 px tiles: 4 samples an original, so originals != samples
JOB = {"source": {"labels": "none", "annotations": {"files": "voc"}},
       "image": {"size": 64, "tiles": {"size": 256, "keep": "all"}},
       "output": {"shard_samples": 6}, "run": {"workers": 1, "quiet": True}}
TILES = 4


def annotated(source: Path, name: str, objects: list[tuple[str, tuple]] | None = None,
              seed: int = 0) -> None:
    images.write(source / "parts" / f"{name}.jpg", defects.original(seed=seed))
    (source / "parts" / f"{name}.xml").write_text(defects.voc_xml(
        objects or [("scratch", defects.SCRATCH), ("dent", (80, 205, 220, 325))]))


def pack(source: Path, output: Path, *more: str) -> str:
    job = source.parent / "job.yaml"
    job.write_text(json.dumps(JOB))  # JSON is YAML
    result = CliRunner().invoke(main, ["pack", str(source), str(output), "--config", str(job),
                                       *more])
    assert result.exit_code == 0, result.output
    return result.output


def nightly(tmp_path: Path, dry_run: bool = False) -> tuple[Path, Path, str]:
    """Version 1 of six originals, then a nightly change: six added (one naming a new object
    class), two removed (eight tiles), one relabelled (a scratch called a crack now), one
    changed (its pixels)."""
    source, output = tmp_path / "source", tmp_path / "out"
    for number in range(6):
        annotated(source, f"p{number}", seed=number)
    pack(source, output)
    change(source)
    return source, output, pack(source, output, *(
        ["--dry-run"] if dry_run else ["--report", str(tmp_path / "pack-report.json")]))


def change(source: Path) -> None:
    for number in range(6):
        annotated(source, f"n{number}", [("crack", defects.SCRATCH)] if number == 0 else None,
                  seed=10 + number)
    for name in ("p4", "p5"):
        (source / "parts" / f"{name}.jpg").unlink()
        (source / "parts" / f"{name}.xml").unlink()
    (source / "parts" / "p0.xml").write_text(defects.voc_xml([("crack", defects.SCRATCH)]))
    images.write(source / "parts" / "p1.jpg", defects.original(seed=99))  # other pixels


def cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def test_after_a_nightly_change_every_total_equals_a_fresh_packs(tmp_path):
    source, output, _ = nightly(tmp_path)
    fresh = tmp_path / "fresh"
    pack(source, fresh)
    after, clean = images.manifest_of(output), images.manifest_of(fresh)
    assert after["version"] == 2 and clean["version"] == 1
    assert {key: value for key, value in after["totals"].items() if key != "bytes_out"} == \
        {key: value for key, value in clean["totals"].items() if key != "bytes_out"}
    assert after["totals"]["sources"] == 10 and after["totals"]["packed"] == 10 * TILES
    assert {split: totals["samples"] for split, totals in after["splits"].items()} == \
        {split: totals["samples"] for split, totals in clean["splits"].items()}


def test_the_next_pack_of_a_dataset_with_damaged_totals_counts_them_again_and_log_says_so(
        tmp_path):
    source, output = tmp_path / "source", tmp_path / "out"
    for number in range(3):
        annotated(source, f"p{number}", seed=number)
    pack(source, output)
    manifest = images.manifest_of(output)
    recorded = dict(manifest["totals"])
    manifest["totals"] |= {"bytes_in": recorded["bytes_in"] * 3, "sources": 7}
    (output / "manifest.json").write_text(json.dumps(manifest))
    annotated(source, "p3", seed=3)
    pack(source, output)
    fresh = tmp_path / "fresh"
    pack(source, fresh)
    after, clean = images.manifest_of(output)["totals"], images.manifest_of(fresh)["totals"]
    assert after | {"bytes_out": 0} == clean | {"bytes_out": 0}
    said = cli("log", str(output))
    assert "totals of v1 corrected from its sample index" in said
    assert f"bytes in {recorded['bytes_in'] * 3:,} -> {recorded['bytes_in']:,}" in said
    assert "originals packed 7 -> 3" in said


def test_every_command_counts_the_nightly_change_in_originals_and_samples_alike(tmp_path):
    _, output, summary = nightly(tmp_path)
    said = ("originals: 6 added, 1 changed, 1 re-annotated, 2 removed; "
            "samples: 24 added, 4 changed, 4 re-annotated, 8 removed")
    assert said in summary
    assert said in cli("inspect", str(output))
    version_2 = next(line for line in cli("log", str(output)).splitlines()
                     if line.split()[:1] == ["2"])
    assert version_2.split()[2:12] == ["6", "(24)", "1", "(4)", "0", "1", "(4)", "2", "(8)",
                                       "0"]
    text = cli("diff", str(output))
    assert "originals   6 added, 1 changed, 0 relabelled, 1 re-annotated, 2 removed" in text
    assert "samples     24 added, 4 changed, 0 relabelled, 4 re-annotated, 8 removed" in text
    found = json.loads(cli("diff", str(output), "--json"))
    assert found["originals"] == {"added": 6, "changed": 1, "relabelled": 0,
                                  "reannotated": 1, "removed": 2}
    assert found["samples"] == {"added": 24, "changed": 4, "relabelled": 0,
                                "reannotated": 4, "removed": 8}
    history = images.manifest_of(output)["history"][-1]
    assert (history["originals"], history["samples"]) == (found["originals"],
                                                          found["samples"])
    report = json.loads((output.parent / "pack-report.json").read_text())
    assert report["changes"] == {"originals": found["originals"], "samples": found["samples"]}
    cli("report", str(output), "-o", str(tmp_path / "r.html"))
    page = (tmp_path / "r.html").read_text()
    history_rows = page[page.index('id="history"'):page.index('id="diff"')]
    assert "2 (8)" in history_rows and "6 (24)" in history_rows
    diff_part = page[page.index('id="diff"'):]
    assert "2 (8)" in diff_part and "6 (24)" in diff_part
    counts = diff_part[diff_part.index("Samples per class and split, now"):]
    assert "<td>(no class)</td>" in counts and "None" not in page


def test_a_history_entry_of_an_earlier_release_is_counted_from_its_changes_file_or_as_recorded(
        tmp_path):
    _, output, _ = nightly(tmp_path)
    manifest = images.manifest_of(output)
    for entry in manifest["history"]:  # as an earlier release wrote them: samples removed
        entry.pop("originals"), entry.pop("samples")
    manifest["history"][-1] |= {"added": 6, "changed": 1, "removed": 8}
    (output / "manifest.json").write_text(json.dumps(manifest))
    version_2 = next(line for line in cli("log", str(output)).splitlines()
                     if line.split()[:1] == ["2"])
    assert version_2.split()[2:11] == ["6", "(24)", "1", "(4)", "0", "1", "(4)", "2", "(8)"]

    manifest["changes"] = [entry for entry in manifest["changes"] if entry["version"] != 2]
    (output / "manifest.json").write_text(json.dumps(manifest))
    (output / "changes-v2.jsonl").unlink()
    version_2 = next(line for line in cli("log", str(output)).splitlines()
                     if line.split()[:1] == ["2"])
    assert version_2.split()[2:7] == ["6", "1", "-", "-", "8"]
    assert "v2 as recorded" in version_2


def test_the_report_of_a_detection_dataset_counts_object_classes_and_says_what_was_reannotated(
        tmp_path):
    source, output, _ = nightly(tmp_path)
    (source / "parts" / "ghost.xml").write_text(defects.voc_xml([("dent", (1, 1, 9, 9))]))
    (source / "parts" / "n1.xml").write_text(defects.voc_xml([("crack", defects.SCRATCH)]))
    pack(source, output)
    found = json.loads(cli("diff", str(output), "--json"))
    assert found["originals"]["reannotated"] == 1 and found["samples"]["reannotated"] == TILES
    [reannotated] = found["reannotated"]
    assert reannotated["path"] == "parts/n1.jpg" and reannotated["samples"] == TILES
    assert reannotated["objects_before"] == {"scratch": 3, "dent": 2}
    assert reannotated["objects_after"] == {"crack": 3}
    cli("report", str(output), "-o", str(tmp_path / "r.html"))
    page = (tmp_path / "r.html").read_text()
    cards = page[:page.index('id="history"')]
    assert "<b>3</b>object classes" in cards
    assert ">classes<" not in cards  # its images have none: not "0 classes"
    assert "None" not in page
    assert "scratch 3 → 0" in page and "crack 0 → 3" in page
    orphans = page[page.index('id="orphans"'):]
    assert "parts/ghost.xml" in orphans


def test_the_dry_run_counts_the_removed_originals_as_the_pack_then_does(tmp_path):
    _, _, planned = nightly(tmp_path, dry_run=True)
    assert "6 new, 2 removed" in planned
