"""A new defect class is a new version, not a rebuild: ``source.annotations.classes`` may grow
(every existing id keeps its meaning), never move or shrink.  An image rejected for an id the
list did not know is packed once the id is added or its label file is fixed.  A dataset whose
objects were derived by older annotation rules is re-annotated once, its JPEG bytes unchanged.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from shardsmith import load_config
from shardsmith.cli import main
from shardsmith.dataset.manifest import ANNOTATION_RULES
from shardsmith.ops.verify import verify

import defects
import images
from defects import members

STAIN_LINE = "2 0.5 0.5 0.1 0.1\n"  # YOLO id 2: "stain", once the list has it


def job(output: Path, classes: tuple[str, ...] = defects.CLASSES, **more: object) -> Path:
    """A job file of a YOLO dataset with ``classes``."""
    settings: dict = {"source": {"annotations": {"files": "yolo", "classes": list(classes),
                                                 **more}},
                      "run": {"max_reject_fraction": 0.5}}  # one original in four is
    path = output.parent / f"{output.name}.yaml"
    path.write_text(json.dumps(settings))  # JSON is YAML
    return path


def pack(source: Path, output: Path, classes: tuple[str, ...] = defects.CLASSES,
         *extra: str, expect: int = 0, **more: object) -> str:
    result = CliRunner().invoke(main, ["pack", str(source), str(output), "--config",
                                       str(job(output, classes, **more)), "--size", "96",
                                       "--shard-samples", "2", "--workers", "1", "--quiet",
                                       *extra])
    assert result.exit_code == expect, result.output
    return result.output


def tree(source: Path, count: int = 4) -> list[str]:
    """``count`` annotated originals; the last one's label file also names YOLO id 2."""
    relpaths = [f"parts/p{number}.jpg" for number in range(count)]
    for number, relpath in enumerate(relpaths):
        images.write(source / relpath, defects.original(seed=number))
    defects.write_annotations(source, relpaths, "yolo")
    with (source / "parts" / f"p{count - 1}.txt").open("a") as label_file:
        label_file.write(STAIN_LINE)
    return relpaths


def manifest_of(output: Path) -> dict:
    return images.manifest_of(output)


def shard_digests(output: Path) -> dict[str, str]:
    return {shard["name"]: hashlib.sha256((output / shard["name"]).read_bytes()).hexdigest()
            for shard in manifest_of(output)["shards"]}


def rejected(output: Path) -> dict[str, str]:
    return {reject["path"]: reject["reason"] for reject in manifest_of(output)["rejects"]}


def appended(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A dataset packed with (scratch, dent) whose p3 named id 2, then packed again with
    ``stain`` appended; returns source, output and the shard digests of version 1."""
    source, output = tmp_path / "source", tmp_path / "out"
    tree(source)
    pack(source, output)
    assert rejected(output) == {"parts/p3.jpg": "bad_annotation"}
    before = shard_digests(output)
    pack(source, output, (*defects.CLASSES, "stain"))
    return source, output, before


# ------------------------------------------------------------------------- appending

def test_the_fingerprint_with_the_configs_own_classes_is_its_fingerprint():
    config = load_config(None, {"source.annotations.files": "yolo",
                                "source.annotations.classes": ["scratch", "dent"]})
    assert config.fingerprint(("scratch", "dent")) == config.fingerprint()
    assert config.fingerprint(("scratch",)) != config.fingerprint()


def test_appending_a_class_is_a_new_version_that_packs_the_image_naming_it(tmp_path):
    _, output, _ = appended(tmp_path)
    manifest = manifest_of(output)
    assert manifest["version"] == 2 and rejected(output) == {}
    assert manifest["run"]["decoded"] == 1  # p3 alone: the others named no new id
    # p3, a reject of version 1 (an unknown class id), is a sample now: an original added
    assert manifest["history"][-1]["originals"] == {"added": 1, "changed": 0, "relabelled": 0,
                                                    "reannotated": 0, "removed": 0}
    assert (manifest["history"][-1]["added"], manifest["history"][-1]["changed"]) == (1, 0)
    assert manifest["object_classes"] == ["scratch", "dent", "stain"]  # ids 1, 2 kept
    assert manifest["config"]["source"]["annotations"]["classes"] == [
        "scratch", "dent", "stain"]
    assert verify(output).ok


def test_appending_a_class_keeps_every_shard_of_the_samples_that_did_not_change(tmp_path):
    _, output, before = appended(tmp_path)
    after = shard_digests(output)
    assert all(after[name] == digest for name, digest in before.items())


def test_the_new_class_gets_the_next_object_id_in_the_sample_naming_it(tmp_path):
    _, output, _ = appended(tmp_path)
    key = {sample["path"]: sample["key"] for sample in images.samples_of(output)}["parts/p3.jpg"]
    metadata = json.loads(members(output)[key]["json"])
    assert sorted(set(metadata["labels"])) == [1, 2, 3]
    assert metadata["label_names"][metadata["labels"].index(3)] == "stain"


def test_a_dataset_appended_to_is_then_up_to_date(tmp_path):
    source, output, _ = appended(tmp_path)
    assert "up to date" in pack(source, output, (*defects.CLASSES, "stain"))


def test_appending_a_class_no_image_names_packs_nothing_again(tmp_path):
    source, output = tmp_path / "source", tmp_path / "out"
    tree(source)
    (source / "parts" / "p3.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    pack(source, output)
    before = shard_digests(output)
    pack(source, output, (*defects.CLASSES, "stain"))
    manifest = manifest_of(output)
    assert manifest["version"] == 2 and manifest["run"]["decoded"] == 0
    assert shard_digests(output) == before
    assert manifest["object_classes"] == ["scratch", "dent", "stain"]


def test_a_dry_run_of_an_appended_class_builds_on_the_dataset(tmp_path):
    source, output = tmp_path / "source", tmp_path / "out"
    tree(source)
    pack(source, output)
    summary = pack(source, output, (*defects.CLASSES, "stain"), "--dry-run")
    assert "other settings" not in summary and "0 new, 0 removed, 1 changed" in summary


# ------------------------------------------------------------------------- refused

@pytest.mark.parametrize("classes, shown", [
    (("dent", "scratch"), "YOLO id 0 is 'dent', not 'scratch'"),
    (("scratch",), "YOLO id 1 is nothing, not 'dent'"),
    (("scratch", "stain", "dent"), "YOLO id 1 is 'stain', not 'dent'"),
])
def test_moving_or_removing_a_class_is_refused_saying_why_ids_must_not_move(
        tmp_path, classes, shown):
    source, output = tmp_path / "source", tmp_path / "out"
    tree(source)
    pack(source, output)
    before = shard_digests(output)
    message = pack(source, output, classes, expect=2)
    assert shown in message and "ids must not move" in message
    assert len(message.strip().splitlines()) == 1
    assert shard_digests(output) == before and manifest_of(output)["version"] == 1


def test_classes_appended_with_another_setting_changed_are_different_settings(tmp_path):
    source, output = tmp_path / "source", tmp_path / "out"
    tree(source)
    pack(source, output)
    message = pack(source, output, (*defects.CLASSES, "stain"), expect=2, min_visible=0.5)
    assert "different settings (source.annotations.classes, source.annotations.min_visible)" \
        in message


def test_overwrite_still_rebuilds_with_a_reordered_list(tmp_path):
    source, output = tmp_path / "source", tmp_path / "out"
    tree(source)
    pack(source, output)
    pack(source, output, ("dent", "scratch", "stain"), "--overwrite")
    assert manifest_of(output)["version"] == 1
    assert manifest_of(output)["object_classes"] == ["dent", "scratch", "stain"]


# ------------------------------------------------------------------------- rejects judged again

def test_a_reject_for_an_unknown_id_is_packed_once_its_label_file_is_fixed(tmp_path):
    source, output = tmp_path / "source", tmp_path / "out"
    tree(source)
    pack(source, output)
    label_file = source / "parts" / "p3.txt"
    label_file.write_text(label_file.read_text().replace(STAIN_LINE, ""))
    pack(source, output)
    manifest = manifest_of(output)
    assert rejected(output) == {} and manifest["run"]["decoded"] == 1
    assert manifest["totals"]["packed"] == 4


def test_a_reject_whose_annotations_did_not_change_is_not_read_again(tmp_path):
    source, output = tmp_path / "source", tmp_path / "out"
    tree(source)
    pack(source, output)
    images.write(source / "parts" / "p9.jpg", defects.original(seed=9))  # a new image only
    pack(source, output)
    manifest = manifest_of(output)
    assert rejected(output) == {"parts/p3.jpg": "bad_annotation"}
    assert manifest["run"]["decoded"] == 1


def test_a_reject_of_an_older_release_without_a_digest_is_judged_again_once(tmp_path):
    source, output = tmp_path / "source", tmp_path / "out"
    tree(source)
    pack(source, output)
    edit_manifest(output, lambda manifest: [reject.pop("annotation_digest")
                                            for reject in manifest["rejects"]])
    images.write(source / "parts" / "p9.jpg", defects.original(seed=9))
    pack(source, output)
    assert manifest_of(output)["run"]["decoded"] == 2  # the new image and the reject
    assert rejected(output) == {"parts/p3.jpg": "bad_annotation"}  # still bad: judged again
    assert "annotation_digest" in manifest_of(output)["rejects"][0]
    images.write(source / "parts" / "p10.jpg", defects.original(seed=10))
    pack(source, output)
    assert manifest_of(output)["run"]["decoded"] == 1


# ------------------------------------------------------------------------- annotation rules

def edit_manifest(output: Path, edit) -> None:
    path = output / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))


def jpegs(output: Path) -> dict[str, bytes]:
    return {key: files["jpg"] for key, files in members(output).items()}


def test_an_annotated_dataset_records_the_annotation_rules(tmp_path):
    source, output = tmp_path / "source", tmp_path / "out"
    tree(source)
    pack(source, output)
    assert manifest_of(output)["annotation_rules"] == ANNOTATION_RULES


def test_a_dataset_without_objects_records_no_annotation_rules(tmp_path):
    source, output = tmp_path / "source", tmp_path / "out"
    images.write(source / "a" / "one.jpg", images.jpeg(120, 90, 1))
    result = CliRunner().invoke(main, ["pack", str(source), str(output), "--size", "64",
                                       "--workers", "1", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "annotation_rules" not in manifest_of(output)


@pytest.mark.parametrize("older", ["absent", "previous"])
def test_a_dataset_of_older_annotation_rules_is_re_annotated_once_jpeg_bytes_equal(
        tmp_path, older):
    source, output = tmp_path / "source", tmp_path / "out"
    tree(source)
    pack(source, output)
    before, shards_before = jpegs(output), shard_digests(output)

    def make_older(manifest: dict) -> None:
        if older == "absent":
            del manifest["annotation_rules"]
        else:
            manifest["annotation_rules"] = ANNOTATION_RULES - 1

    edit_manifest(output, make_older)
    summary = pack(source, output)
    manifest = manifest_of(output)
    history = manifest["history"][-1]
    assert manifest["version"] == 2 and manifest["annotation_rules"] == ANNOTATION_RULES
    # p3 is a reject again, the others' objects are the ones they had: no sample changed
    assert history["reannotated"] == 3 and history["changed"] == 0
    assert "3 re-annotated" in history["note"] and "3 re-annotated" in summary
    assert jpegs(output) == before  # decoded again: the same pixels, the same JPEG bytes
    assert set(history["shards_removed"]) == set(shards_before)  # every sample is annotated
    assert verify(output).ok
    assert "up to date" in pack(source, output)


def test_a_dry_run_of_an_older_rules_dataset_counts_the_re_annotated(tmp_path):
    source, output = tmp_path / "source", tmp_path / "out"
    tree(source)
    pack(source, output)
    edit_manifest(output, lambda manifest: manifest.pop("annotation_rules"))
    assert "3 re-annotated" in pack(source, output, (*defects.CLASSES,), "--dry-run")


def test_a_dataset_of_newer_annotation_rules_is_refused(tmp_path):
    source, output = tmp_path / "source", tmp_path / "out"
    tree(source)
    pack(source, output)
    edit_manifest(output, lambda manifest: manifest.update(
        annotation_rules=ANNOTATION_RULES + 1))
    message = pack(source, output, expect=2)
    assert f"annotation rules {ANNOTATION_RULES + 1}, newer than" in message
    assert len(message.strip().splitlines()) == 1


# ------------------------------------------------------------------------- damaged manifests

@pytest.mark.parametrize("field, value", [
    ("annotation_rules", 10**30), ("annotation_rules", 0), ("annotation_rules", -1),
    ("annotation_rules", "2"), ("annotation_rules", 2.5), ("annotation_rules", True),
])
def test_a_damaged_annotation_rules_field_is_one_line_and_exit_2(tmp_path, field, value):
    source, output = tmp_path / "source", tmp_path / "out"
    tree(source)
    pack(source, output)
    edit_manifest(output, lambda manifest: manifest.update({field: value}))
    message = pack(source, output, expect=2)
    assert "annotation_rules" in message and len(message.strip().splitlines()) == 1


@pytest.mark.parametrize("digest", [7, ["2a"], {"a": 1}])
def test_a_reject_digest_of_the_wrong_type_is_one_line_and_exit_2(tmp_path, digest):
    source, output = tmp_path / "source", tmp_path / "out"
    tree(source)
    pack(source, output)
    edit_manifest(output, lambda manifest: manifest["rejects"][0].update(
        annotation_digest=digest))
    message = pack(source, output, expect=2)
    assert "annotation_digest" in message and len(message.strip().splitlines()) == 1


@pytest.mark.parametrize("digest", ["", "zz", "f" * 5000, "-1"])
def test_a_reject_digest_that_is_not_one_sends_the_reject_to_be_judged_again(tmp_path, digest):
    source, output = tmp_path / "source", tmp_path / "out"
    tree(source)
    pack(source, output)
    edit_manifest(output, lambda manifest: manifest["rejects"][0].update(
        annotation_digest=digest))
    images.write(source / "parts" / "p9.jpg", defects.original(seed=9))
    pack(source, output)
    assert manifest_of(output)["run"]["decoded"] == 2


@pytest.mark.parametrize("classes", ["scratch", [1, 2], None, {"a": "b"}])
def test_damaged_recorded_classes_are_different_settings_not_an_append(tmp_path, classes):
    source, output = tmp_path / "source", tmp_path / "out"
    tree(source)
    pack(source, output)
    edit_manifest(output, lambda manifest: manifest["config"]["source"]["annotations"].update(
        classes=classes))
    message = pack(source, output, (*defects.CLASSES, "stain"), expect=2)
    assert len(message.strip().splitlines()) == 1


def test_a_journal_reject_with_a_digest_of_the_wrong_type_is_not_one():
    from shardsmith.errors import ManifestError
    from shardsmith.packing.journal import JournalState

    line = {"next": 1, "packed": 0, "bytes_in": 0, "samples_end": 0, "shard": None,
            "rejects": [{"path": "parts/p3.jpg", "reason": "bad_annotation", "detail": "id",
                         "source_size": 5, "source_mtime_ns": 1, "annotation_digest": 7}]}
    with pytest.raises(ManifestError, match="annotation_digest"):
        JournalState().apply(line)
