"""``shardsmith diff``: what changed between versions, from the changes file each pack commits."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import shardsmith.packing.pipeline as pipeline
from shardsmith.cli import main
from shardsmith.dataset.changes import (
    CHANGES_FORMAT,
    ChangeLine,
    ChangesHeader,
    VersionTotals,
    check_object_counts,
    json_line,
)
from shardsmith.dataset.manifest import ChangesEntry
from shardsmith.errors import ManifestError
from shardsmith.insight.diff import diff_versions
from shardsmith.ops.stage import stage
from shardsmith.ops.verify import verify
from shardsmith.packing.changes import write_changes

import defects
import images

SPLITS = {"splits": {"train": 0.7, "val": 0.3}, "image.size": 64, "output.shard_samples": 3,
          "run.max_reject_fraction": 1.0}


def tree(root: Path, count: int = 12) -> Path:
    for number in range(count):
        images.write(root / "abc"[number % 3] / f"{number:02d}.jpg",
                     images.jpeg(200, 150, number))
    return root


def pack(source: Path, output: Path, **overrides) -> dict:
    return defects.pack_with(source, output, SPLITS | overrides)


def diff(*args: str, expect: int = 0) -> str:
    result = CliRunner().invoke(main, ["diff", *args])
    assert result.exit_code == expect, result.output
    return result.output


def diff_json(output: Path, *versions: str) -> dict:
    return json.loads(diff(str(output), *versions, "--json"))


def paths(entries: list[dict]) -> list[str]:
    return sorted(entry["path"] if isinstance(entry, dict) else entry for entry in entries)


def counted(counts: dict) -> int:
    return sum(n for per_class in counts.values() for n in per_class.values())


@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord"])
def test_diff_lists_sources_added_removed_and_changed_with_counts_before_and_after(tmp_path,
                                                                                    fmt):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output, **{"output.format": fmt})
    images.write(source / "a" / "new.jpg", images.jpeg(200, 150, 99))
    images.write(source / "d" / "first.jpg", images.jpeg(200, 150, 98))  # a new class
    (source / "b" / "01.jpg").unlink()
    images.write(source / "c" / "02.jpg", images.jpeg(220, 150, 97))
    pack(source, output, **{"output.format": fmt})

    found = diff_json(output)
    assert (found["old"], found["new"]) == (1, 2)
    assert found["originals"] == found["samples"] == {
        "added": 2, "removed": 1, "changed": 1, "relabelled": 0, "reannotated": 0}
    assert paths(found["added"]) == ["a/new.jpg", "d/first.jpg"]
    assert found["removed"][0] | {"key": None} == {"path": "b/01.jpg", "key": None,
                                                   "split": found["removed"][0]["split"],
                                                   "class": "b"}
    assert paths(found["changed"]) == ["c/02.jpg"]
    assert found["classes_added"] == ["d"]
    assert (counted(found["counts"]["old"]), counted(found["counts"]["new"])) == (12, 13)
    after = images.samples_of(output)
    split_of = {sample["path"]: sample["split"] for sample in after}
    assert found["counts"]["new"][split_of["d/first.jpg"]]["d"] == 1
    assert {entry["key"] for entry in found["added"]} <= {sample["key"] for sample in after}


def test_the_summary_names_the_versions_the_changes_and_the_counts(tmp_path):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output)
    images.write(source / "a" / "new.jpg", images.jpeg(200, 150, 99))
    pack(source, output)
    text = diff(str(output))
    assert "v1 -> v2: 12 -> 13 samples" in text
    assert "originals   1 added, 0 changed, 0 relabelled, 0 removed" in text
    assert "samples  " not in text  # a sample an original: one count says both
    assert "a/new.jpg" in text


def test_a_relabelled_source_is_relabelled_not_changed(tmp_path):
    source, output = tmp_path / "source", tmp_path / "out"
    for name in ("p1", "p2", "p3"):
        images.write(source / "parts" / f"{name}.jpg", images.jpeg(200, 150, len(name)))
    labels = source / "labels.csv"
    labels.write_text("path,label\nparts/p1.jpg,ok\nparts/p2.jpg,ok\nparts/p3.jpg,scratch\n")
    settings = {"source.labels": "file", "source.annotations.labels": "labels.csv"}
    pack(source, output, **settings)
    labels.write_text("path,label\nparts/p1.jpg,scratch\nparts/p2.jpg,ok\nparts/p3.jpg,scratch\n")
    pack(source, output, **settings)

    found = diff_json(output)
    assert found["originals"] == {"added": 0, "removed": 0, "changed": 0, "relabelled": 1,
                                  "reannotated": 0}
    assert [(e["path"], e["from"], e["to"]) for e in found["relabelled"]] == [
        ("parts/p1.jpg", "ok", "scratch")]


def test_an_annotated_dataset_reports_a_new_object_class_and_the_objects_per_class(tmp_path):
    source, output = tmp_path / "source", tmp_path / "out"
    for name in ("p1", "p2"):
        images.write(source / "parts" / f"{name}.jpg", defects.original())
    settings = defects.write_annotations(source, ["parts/p1.jpg", "parts/p2.jpg"], "voc")
    pack(source, output, **settings)
    images.write(source / "parts" / "p3.jpg", defects.original())
    (source / "parts" / "p3.xml").write_text(defects.voc_xml([("crack", defects.SCRATCH)]))
    pack(source, output, **settings)

    found = diff_json(output)
    assert found["object_classes_added"] == ["crack"]
    assert found["objects"]["old"] == {"scratch": 2, "dent": 2}
    assert found["objects"]["new"] == {"scratch": 2, "dent": 2, "crack": 1}
    assert paths(found["added"]) == ["parts/p3.jpg"]


def test_rejects_appearing_and_fixed_are_listed_with_their_reason(tmp_path):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output)
    broken = source / "a" / "broken.jpg"
    broken.write_bytes(images.truncated_jpeg())
    pack(source, output)
    first = diff_json(output)
    assert first["rejects"]["new_count"] == 1 and first["rejects"]["fixed_count"] == 0
    assert first["rejects"]["new"][0]["path"] == "a/broken.jpg"
    assert first["rejects"]["new"][0]["reason"]

    images.write(broken, images.jpeg(200, 150, 55))
    pack(source, output)
    fixed = diff_json(output)
    assert fixed["rejects"] == {"new": [], "fixed": ["a/broken.jpg"], "removed": [],
                                "new_count": 0, "fixed_count": 1, "removed_count": 0}
    assert paths(fixed["added"]) == ["a/broken.jpg"]  # a sample now


def test_a_source_that_became_a_reject_is_a_removed_sample_and_a_new_reject(tmp_path):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output)
    (source / "b" / "04.jpg").write_bytes(b"not an image any more")
    pack(source, output)
    found = diff_json(output)
    assert paths(found["removed"]) == ["b/04.jpg"]
    assert paths(found["rejects"]["new"]) == ["b/04.jpg"]


def test_a_tiled_original_is_one_change_by_its_path_however_many_tiles_it_made(tmp_path):
    source, output = tmp_path / "source", tmp_path / "out"
    images.write(source / "parts" / "big1.jpg", images.jpeg(640, 480, 1))
    tiled = {"image.tiles.size": 256, "image.tiles.keep": "all", "splits": {"train": 1.0}}
    pack(source, output, **tiled)
    images.write(source / "parts" / "big2.jpg", images.jpeg(640, 480, 2))
    pack(source, output, **tiled)
    found = diff_json(output)
    assert found["originals"]["added"] == 1
    assert paths(found["added"]) == ["parts/big2.jpg"]
    tiles = counted(found["counts"]["new"]) - counted(found["counts"]["old"])
    assert tiles > 1 and found["samples"]["added"] == tiles
    assert tiles == sum(s["path"] == "parts/big2.jpg" for s in images.samples_of(output))


def test_diff_composes_versions_and_a_path_added_then_removed_is_neither(tmp_path):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output)  # v1
    images.write(source / "a" / "brief.jpg", images.jpeg(200, 150, 70))
    images.write(source / "a" / "stays.jpg", images.jpeg(200, 150, 71))
    pack(source, output)  # v2
    (source / "a" / "brief.jpg").unlink()
    (source / "c" / "05.jpg").unlink()
    pack(source, output)  # v3
    images.write(source / "b" / "late.jpg", images.jpeg(200, 150, 72))
    pack(source, output)  # v4

    found = diff_json(output, "v1", "v4")
    assert paths(found["added"]) == ["a/stays.jpg", "b/late.jpg"]
    assert paths(found["removed"]) == ["c/05.jpg"]
    assert (counted(found["counts"]["old"]), counted(found["counts"]["new"])) == (12, 13)
    against_current = diff_json(output, "v2")
    assert (against_current["old"], against_current["new"]) == (2, 4)
    assert paths(against_current["removed"]) == ["a/brief.jpg", "c/05.jpg"]


def test_one_version_only_is_one_line_and_exit_2(tmp_path):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output)
    result = CliRunner().invoke(main, ["diff", str(output)])
    assert result.exit_code == 2
    assert "one version only" in result.output and "Traceback" not in result.output


def test_a_dataset_of_an_older_release_without_changes_files_is_one_clear_line(tmp_path):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output)
    images.write(source / "a" / "new.jpg", images.jpeg(200, 150, 99))
    pack(source, output)
    manifest = images.manifest_of(output)
    for entry in manifest.pop("changes"):
        (output / entry["name"]).unlink()
    (output / "manifest.json").write_text(json.dumps(manifest))
    assert "packed by a release before shardsmith diff" in diff(str(output), expect=2)


def test_changes_files_are_kept_for_the_last_versions_the_setting_names(tmp_path):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    for number in range(4):
        images.write(source / "a" / f"n{number}.jpg", images.jpeg(200, 150, 80 + number))
        pack(source, output, **{"output.keep_changes": 2})
    assert sorted(p.name for p in output.glob("changes-*")) == ["changes-v3.jsonl",
                                                               "changes-v4.jsonl"]
    assert [entry["version"] for entry in images.manifest_of(output)["changes"]] == [3, 4]
    assert diff_json(output, "v2", "v4")["originals"]["added"] == 2
    assert "no longer kept" in diff(str(output), "v1", "v4", expect=2)


def test_the_keep_setting_is_not_part_of_the_fingerprint(tmp_path):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    first = pack(source, output)
    again = pack(source, output, **{"output.keep_changes": 5})
    assert again["version"] == first["version"] == 1
    assert again["fingerprint"] == first["fingerprint"]


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "malformed line"])
def test_a_damaged_changes_file_is_one_line_and_exit_2(tmp_path, damage):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output)
    images.write(source / "a" / "new.jpg", images.jpeg(200, 150, 99))
    pack(source, output)
    path = output / "changes-v2.jsonl"
    data = bytearray(path.read_bytes())
    if damage == "flipped byte":
        data[-5] ^= 0x01
        path.write_bytes(bytes(data))
    elif damage == "truncated":
        path.write_bytes(bytes(data[:-10]))
    else:  # consistent with an edited manifest: only the line itself is wrong
        import hashlib

        data = bytes(data) + b'{"change":"added","path":"x","key":"../up","split":"train"}\n'
        path.write_bytes(data)
        manifest = images.manifest_of(output)
        manifest["changes"][-1] |= {"bytes": len(data),
                                    "sha256": hashlib.sha256(data).hexdigest()}
        (output / "manifest.json").write_text(json.dumps(manifest))
    result = CliRunner().invoke(main, ["diff", str(output)])
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and "changes-v2.jsonl" in result.output


def test_stage_copies_the_changes_files_and_verify_checks_them(tmp_path):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output)
    images.write(source / "a" / "new.jpg", images.jpeg(200, 150, 99))
    pack(source, output)
    staged = tmp_path / "staged"
    stage(output, staged, quiet=True)
    for name in ("changes-v1.jsonl", "changes-v2.jsonl"):
        assert (staged / name).read_bytes() == (output / name).read_bytes()
    assert diff_json(staged) == diff_json(output)
    assert verify(staged).ok

    damaged = bytearray((staged / "changes-v1.jsonl").read_bytes())
    damaged[3] ^= 0x01
    (staged / "changes-v1.jsonl").write_bytes(bytes(damaged))
    assert any("changes-v1.jsonl" in problem for problem in verify(staged).problems)


def test_a_staged_split_has_no_changes_files(tmp_path):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output)
    stage(output, tmp_path / "staged", split="train", quiet=True)
    assert not list((tmp_path / "staged").glob("changes-*"))
    assert verify(tmp_path / "staged").ok


def test_a_kill_before_the_manifest_commit_leaves_the_old_version_and_a_rerun_the_same_file(
        tmp_path, monkeypatch):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output)
    images.write(source / "a" / "new.jpg", images.jpeg(200, 150, 99))
    (source / "b" / "01.jpg").unlink()
    clean = tmp_path / "clean"
    shutil.copytree(output, clean)
    pack(source, clean)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "commit", killed)
    with pytest.raises(KeyboardInterrupt):
        pack(source, output)
    assert (output / "changes-v2.jsonl").exists()  # written, not named yet
    assert images.manifest_of(output)["version"] == 1
    assert "one version only" in diff(str(output), expect=2)
    monkeypatch.undo()
    pack(source, output)
    assert (output / "changes-v2.jsonl").read_bytes() == (clean / "changes-v2.jsonl").read_bytes()
    assert diff_json(output) == diff_json(clean)


@pytest.mark.parametrize("entry", [
    {"version": 1, "name": "../changes-v1.jsonl"},
    {"version": 1, "name": "changes-v2.jsonl"},
    {"version": 7, "name": "changes-v7.jsonl"},
])
def test_a_manifest_naming_a_changes_file_not_of_ours_is_one_line_and_exit_2(tmp_path, entry):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output)
    manifest = images.manifest_of(output)
    manifest["changes"] = [manifest["changes"][0] | entry]
    (output / "manifest.json").write_text(json.dumps(manifest))
    result = CliRunner().invoke(main, ["diff", str(output)])
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert "changes" in result.output


@pytest.mark.parametrize("versions, said", [(("v0",), "no version v0"),
                                            (("v9",), "no version v9"),
                                            (("v2", "v1"), "not older"),
                                            (("latest",), "not a version"),
                                            (("1", "2", "3"), "at most two")])
def test_versions_that_do_not_fit_are_one_line_and_exit_2(tmp_path, versions, said):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output)
    images.write(source / "a" / "new.jpg", images.jpeg(200, 150, 99))
    pack(source, output)
    assert said in diff(str(output), *versions, expect=2)


def test_composing_a_path_removed_then_added_again_is_changed_and_relabelled_back_is_nothing(
        tmp_path):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output, **{"output.keep_changes": 0})
    empty = VersionTotals(("a", "b"))

    def line(change, path, label="a", was=None):
        return json_line(ChangeLine(change, path, "k_" + path, "train", label, was))

    versions = {
        2: [line("removed", "p1"), line("relabelled", "p2", "b", "a")],
        3: [line("added", "p1"), line("relabelled", "p2", "a", "b")],
    }
    entries = [write_changes(output, ChangesHeader(CHANGES_FORMAT, number, empty, empty), body)
               for number, body in versions.items()]
    manifest = images.manifest_of(output)
    manifest["version"] = 3
    manifest["changes"] = [{"version": e.version, "name": e.name, "bytes": e.bytes,
                            "sha256": e.sha256} for e in entries]
    (output / "manifest.json").write_text(json.dumps(manifest))
    found = diff_versions(output, 1, 3)
    assert found.counts == {"added": 0, "removed": 0, "changed": 1, "relabelled": 0,
                            "reannotated": 0}
    assert [entry["path"] for entry in found.changed] == ["p1"]


def test_a_reject_whose_source_is_gone_is_removed_not_fixed(tmp_path):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    broken = source / "a" / "broken.jpg"
    broken.write_bytes(images.truncated_jpeg())
    pack(source, output)
    broken.unlink()
    pack(source, output)
    rejects = diff_json(output)["rejects"]
    assert (rejects["fixed"], rejects["removed"]) == ([], ["a/broken.jpg"])
    assert (rejects["fixed_count"], rejects["removed_count"]) == (0, 1)
    assert "0 fixed, 1 removed" in diff(str(output))


def test_keep_changes_0_names_the_setting_not_an_older_release(tmp_path):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output, **{"output.keep_changes": 0})
    images.write(source / "a" / "new.jpg", images.jpeg(200, 150, 99))
    pack(source, output, **{"output.keep_changes": 0})
    line = diff(str(output), expect=2)
    assert "output.keep_changes 0" in line and "release before" not in line


def test_a_newline_in_a_path_or_class_cannot_forge_a_summary_line(tmp_path):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output)
    images.write(source / "a\nv9 -> v10: 0 -> 0 samples" / "x\n  forged.jpg",
                 images.jpeg(200, 150, 77))
    pack(source, output)
    summary = diff(str(output))
    assert "\nv9 -> v10" not in summary and "\n  forged" not in summary
    assert "a\\x0av9 -> v10" in summary and "x\\x0a  forged.jpg" in summary


def test_a_lone_surrogate_in_a_changes_path_is_a_path_like_any_other(tmp_path):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output)
    images.write(source / "a" / "new.jpg", images.jpeg(200, 150, 99))
    pack(source, output)
    manifest = images.manifest_of(output)
    entry = manifest["changes"][-1]
    changes = output / entry["name"]
    data = changes.read_bytes().replace(b'"a/new.jpg"', b'"a/\\ud800.jpg"')
    changes.write_bytes(data)
    entry.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    (output / "manifest.json").write_text(json.dumps(manifest))
    found = diff_json(output)
    assert paths(found["added"]) == ["a/\ud800.jpg"]
    assert "a/\\ud800.jpg" in diff(str(output))


def deep_changes_line(tmp_path: Path) -> Path:
    """A two-version dataset whose last changes file ends with a line holding a field nested
    100,000 lists deep, its size and sha256 fixed up in the manifest (only the line itself is
    wrong)."""
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output)
    images.write(source / "a" / "new.jpg", images.jpeg(200, 150, 99))
    pack(source, output)
    path = sorted(output.glob("changes-v*.jsonl"))[-1]
    data = (path.read_bytes() + b'{"change":"added","path":"x","deep":' + b"[" * 100_000
            + b"]" * 100_000 + b"}\n")
    path.write_bytes(data)
    manifest = images.manifest_of(output)
    manifest["changes"][-1] |= {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (output / "manifest.json").write_text(json.dumps(manifest))
    return output


def test_a_changes_line_nested_deeper_than_the_stack_is_one_line_and_exit_2(tmp_path):
    output = deep_changes_line(tmp_path)
    result = CliRunner().invoke(main, ["diff", str(output)])
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1 and "changes-v2.jsonl" in result.output
    assert "nested" in result.output or "not valid JSON" in result.output


def test_the_report_of_a_changes_line_nested_too_deep_says_no_diff_in_one_line(tmp_path):
    output = deep_changes_line(tmp_path)
    result = CliRunner().invoke(main, ["report", str(output), "-o", str(tmp_path / "r.html"),
                                       "--source", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.output.count("\n") == 1 and "no diff:" in result.output
    assert "changes-v2.jsonl: damaged" in (tmp_path / "r.html").read_text()


def version_2_changes(output: Path, header: ChangesHeader, body) -> ChangesEntry:
    """Make the one-version dataset in ``output`` a version 2 whose changes file holds
    ``body`` (lines of the pack's own writer) under ``header``."""
    entry = write_changes(output, header, body)
    manifest = images.manifest_of(output)
    manifest["version"] = 2
    manifest["changes"] = [{"version": 2, "name": entry.name, "bytes": entry.bytes,
                            "sha256": entry.sha256}]
    (output / "manifest.json").write_text(json.dumps(manifest))
    return entry


@pytest.mark.slow
def test_the_reject_lines_of_a_changes_file_are_not_held_in_memory_as_read(tmp_path):
    """40,000 new rejects (9 MB of lines): the diff keeps a few bytes of each and the chunk
    it reads, not the lines (kept whole, they took ~3.3x the file's size here)."""
    import tracemalloc

    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output, **{"output.keep_changes": 0})
    empty = VersionTotals(("a", "b"))
    detail = "cannot identify image file: the first bytes are not of a format we read " * 2
    body = (json_line(ChangeLine("rejected", f"lot{number % 97}/part{number:06d}.png",
                                 reason="unreadable", detail=detail))
            for number in range(40_000))
    entry = version_2_changes(output, ChangesHeader(CHANGES_FORMAT, 2, empty, empty), body)
    tracemalloc.start()
    try:
        found = diff_versions(output)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert found.rejects_new_count == 40_000
    assert found.rejects_new[0]["path"] == "lot0/part000000.png"
    assert found.rejects_new[0]["detail"] == detail
    assert peak < entry.bytes * 3 // 4, \
        f"{peak:,} bytes traced for a {entry.bytes:,}-byte file"


def test_a_changes_file_of_format_1_is_read_as_it_was_written(tmp_path):
    source, output = tree(tmp_path / "source"), tmp_path / "out"
    pack(source, output, **{"output.keep_changes": 0})
    empty = VersionTotals(("a", "b"))
    body = [json_line(ChangeLine("changed", "a/00.jpg", "k_a", "train", "a")),
            json_line(ChangeLine("removed", "b/01.jpg", "k_b", "train", "b", samples=4))]
    version_2_changes(output, ChangesHeader(1, 2, empty, empty), body)
    found = diff_json(output)
    assert found["originals"] == {"added": 0, "changed": 1, "relabelled": 0, "reannotated": 0,
                                  "removed": 1}
    assert found["samples"]["removed"] == 4
    assert "objects_before" not in found["changed"][0]


def test_object_counts_of_a_change_line_name_the_headers_object_classes_or_an_id():
    known = frozenset({"crack", "scratch"})
    check_object_counts({"crack": 2, "#3": 1}, known, "line 2.objects_after")
    with pytest.raises(ManifestError, match="'dent' is not an object class of the header"):
        check_object_counts({"crack": 1, "dent": 1}, known, "line 2.objects_before")
    with pytest.raises(ManifestError, match="300 object classes, more than a dataset has"):
        check_object_counts({f"#{n}": 1 for n in range(1, 301)}, known, "line 2")
