"""Nothing about annotations passes in silence: a missing source is an error, orphans and
sources that match no image are reported, and the pack summary and ``inspect`` count objects
per class and split."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from shardsmith.annotations.audit import SourceReport, survey
from shardsmith.cli import main
from shardsmith.config import AnnotationConfig

import images

YOLO = ["--size", "64", "--workers", "1", "--quiet"]


def yolo_job(root: Path, files_dir: str = "labels", extra: str = "") -> Path:
    """Two dents with YOLO files in ``labels/`` (one box of class crack, one of scratch and
    crack), one scratch without a file, and an orphan label for an image that is not there."""
    source = root / "source"
    images.write(source / "dent" / "a.jpg", images.jpeg(160, 120, 1))
    images.write(source / "dent" / "b.jpg", images.jpeg(160, 120, 2))
    images.write(source / "scratch" / "c.jpg", images.jpeg(160, 120, 3))
    labels = source / "labels"
    images.write(labels / "dent" / "a.txt", b"1 0.5 0.5 0.2 0.2\n")
    images.write(labels / "dent" / "b.txt", b"0 0.3 0.3 0.2 0.2\n1 0.7 0.7 0.2 0.2\n")
    images.write(labels / "dent" / "gone.txt", b"0 0.5 0.5 0.1 0.1\n")
    config = root / "job.yaml"
    config.write_text("source:\n  annotations:\n    files: yolo\n"
                      f"    files_dir: {files_dir}\n    classes: [scratch, crack]\n" + extra)
    return config


def run(*args: str) -> object:
    return CliRunner().invoke(main, [str(arg) for arg in args])


def test_a_files_dir_that_does_not_exist_is_an_error_naming_the_setting(tmp_path):
    config = yolo_job(tmp_path, files_dir="../labelz")
    result = run("pack", tmp_path / "source", tmp_path / "out", "--config", config, *YOLO)
    assert result.exit_code == 2
    assert "source.annotations.files_dir" in result.output and "../labelz" in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_a_masks_folder_that_does_not_exist_is_an_error(tmp_path):
    config = tmp_path / "job.yaml"
    images.write(tmp_path / "source" / "dent" / "a.jpg", images.jpeg(160, 120, 1))
    config.write_text("source:\n  annotations:\n    masks: ../maskz\n")
    result = run("pack", tmp_path / "source", tmp_path / "out", "--config", config, *YOLO)
    assert result.exit_code == 2 and "source.annotations.masks" in result.output


def test_a_coco_file_that_is_a_folder_is_an_error(tmp_path):
    images.write(tmp_path / "source" / "dent" / "a.jpg", images.jpeg(160, 120, 1))
    (tmp_path / "source" / "coco.json").mkdir()
    config = tmp_path / "job.yaml"
    config.write_text("source:\n  annotations:\n    coco: coco.json\n")
    result = run("pack", tmp_path / "source", tmp_path / "out", "--config", config, *YOLO)
    assert result.exit_code == 2 and "source.annotations.coco" in result.output


def test_orphan_labels_are_counted_and_named_in_the_pack_summary(tmp_path):
    config = yolo_job(tmp_path)
    result = run("pack", tmp_path / "source", tmp_path / "out", "--config", config, *YOLO)
    assert result.exit_code == 0, result.output
    assert "orphans" in result.output and "labels/dent/gone.txt" in result.output
    manifest = images.manifest_of(tmp_path / "out")
    assert manifest["annotation_sources"] == {"orphans": 1,
                                              "orphan_paths": ["labels/dent/gone.txt"],
                                              "warnings": []}


def test_the_pack_summary_counts_objects_per_class_and_samples_without_objects(tmp_path):
    config = yolo_job(tmp_path)
    report = tmp_path / "report.json"
    result = run("pack", tmp_path / "source", tmp_path / "out", "--config", config, *YOLO,
                 "--report", report)
    assert result.exit_code == 0, result.output
    objects = json.loads(report.read_text())["objects"]
    assert objects["objects"] == 3
    assert objects["samples_with_objects"] == {"train": 2}
    assert objects["samples_without_objects"] == {"train": 1}
    totals = {entry["name"]: entry["total"] for entry in objects["classes"]}
    assert totals == {"scratch": 1, "crack": 2}
    assert "samples without" in result.output


def test_inspect_shows_objects_and_orphans_in_text_and_json(tmp_path):
    config = yolo_job(tmp_path)
    assert run("pack", tmp_path / "source", tmp_path / "out", "--config", config,
               *YOLO).exit_code == 0
    text = run("inspect", tmp_path / "out")
    assert text.exit_code == 0, text.output
    assert "objects  3 in 2 samples; 1 sample without objects" in text.output
    assert "orphan annotation files  1" in text.output
    document = json.loads(run("inspect", tmp_path / "out", "--json").output)
    assert document["objects"]["samples_without_objects"] == {"train": 1}
    assert document["annotation_sources"]["orphans"] == 1


def test_inspect_counts_objects_in_the_one_pass_over_the_sample_index(tmp_path, monkeypatch):
    from shardsmith.insight import census, inspection

    config = yolo_job(tmp_path)
    assert run("pack", tmp_path / "source", tmp_path / "out", "--config", config,
               *YOLO).exit_code == 0
    passes, walk = [], census.iter_sample_index

    def counted(*args, **kwargs):
        passes.append(args)
        return walk(*args, **kwargs)

    for module in (census, inspection):  # wherever the index is walked from
        monkeypatch.setattr(module, "iter_sample_index", counted, raising=False)
    document = json.loads(run("inspect", tmp_path / "out", "--json").output)
    assert document["objects"]["objects"] == 3
    assert len(passes) == 1


def test_a_dataset_without_annotations_has_no_object_report(tmp_path):
    images.write(tmp_path / "source" / "dent" / "a.jpg", images.jpeg(160, 120, 1))
    assert run("pack", tmp_path / "source", tmp_path / "out", *YOLO).exit_code == 0
    manifest = images.manifest_of(tmp_path / "out")
    assert "annotation_sources" not in manifest
    assert all("objects" not in sample for sample in images.samples_of(tmp_path / "out"))
    assert "objects" not in json.loads(run("inspect", tmp_path / "out", "--json").output)


def test_a_files_dir_that_matches_no_image_is_a_warning(tmp_path):
    config = yolo_job(tmp_path, files_dir="elsewhere")
    images.write(tmp_path / "source" / "elsewhere" / "other" / "x.txt", b"0 0.5 0.5 0.1 0.1\n")
    result = run("pack", tmp_path / "source", tmp_path / "out", "--config", config, *YOLO)
    assert result.exit_code == 0, result.output
    assert "warning: source.annotations.files_dir" in result.output
    assert "is it the right folder?" in result.output


def binary_mask_job(root: Path, extra: str = "") -> object:
    """A dent image with a binary mask in ``masks/``, packed with ``extra`` annotation keys."""
    source = root / "source"
    images.write(source / "dent" / "a.jpg", images.jpeg(160, 120, 1))
    mask = np.zeros((120, 160), np.uint8)
    mask[40:60, 50:90] = 255
    images.write(source / "masks" / "dent" / "a.png", images.encode(mask, "PNG"))
    config = root / "job.yaml"
    config.write_text("source:\n  annotations:\n    masks: masks\n" + extra)
    return run("pack", source, root / "out", "--config", config, *YOLO)


def test_binary_masks_warn_when_folder_names_become_object_classes(tmp_path):
    result = binary_mask_job(tmp_path)
    assert result.exit_code == 0, result.output
    assert "binary masks take the class of their image" in result.output
    assert images.manifest_of(tmp_path / "out")["object_classes"] == ["dent"]


def test_mask_class_names_the_object_class_of_binary_masks_without_a_warning(tmp_path):
    result = binary_mask_job(tmp_path, "    mask_class: crack\n")
    assert result.exit_code == 0, result.output
    assert "binary masks take" not in result.output
    assert images.manifest_of(tmp_path / "out")["object_classes"] == ["crack"]


@pytest.mark.parametrize("text", ["    mask_class: crack\n",
                                  "    masks: masks\n    mask_values: index\n"
                                  "    classes: [a]\n    mask_class: crack\n",
                                  "    masks: masks\n    mask_class: ' crack'\n",
                                  "    masks: masks\n    mask_class: [crack]\n"])
def test_a_misplaced_or_malformed_mask_class_is_refused(tmp_path, text):
    images.write(tmp_path / "source" / "dent" / "a.jpg", images.jpeg(160, 120, 1))
    (tmp_path / "source" / "masks").mkdir()
    config = tmp_path / "job.yaml"
    config.write_text("source:\n  annotations:\n" + text)
    result = run("pack", tmp_path / "source", tmp_path / "out", "--config", config, *YOLO)
    assert result.exit_code == 2 and "mask_class" in result.output
    assert "Traceback" not in result.output


def test_orphans_are_named_a_few_then_counted(tmp_path):
    labels = tmp_path / "labels"
    for number in range(30):
        images.write(labels / f"x{number:02}.txt", b"")
    report = survey(["a.jpg"], str(tmp_path), AnnotationConfig(files="yolo", files_dir="labels",
                                                                classes=("a",)), ())
    assert report.orphans == 30 and len(report.orphan_paths) == 20
    assert report.orphan_paths[0] == "labels/x00.txt"


def test_an_annotation_matches_its_image_whatever_the_image_extension(tmp_path):
    images.write(tmp_path / "labels" / "dir" / "a.b.txt", b"")
    images.write(tmp_path / "labels" / "dir" / "a.txt", b"")
    report = survey(["dir/a.b.tif", "dir/a.png"], str(tmp_path),
                    AnnotationConfig(files="yolo", files_dir="labels", classes=("a",)), ())
    assert report == SourceReport(0, (), ())


@pytest.mark.parametrize("damage", [
    {"orphans": -1}, {"orphans": "3"}, {"orphans": 2**80},
    {"orphans": 1, "orphan_paths": ["a"] * 21}, {"orphans": 0, "orphan_paths": ["a"]},
    {"warnings": ["w"] * 17}, {"warnings": "w"},
])
def test_a_damaged_annotation_report_in_the_manifest_is_one_line_and_exit_2(tmp_path, damage):
    config = yolo_job(tmp_path)
    run("pack", tmp_path / "source", tmp_path / "out", "--config", config, *YOLO)
    path = tmp_path / "out" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["annotation_sources"] = {"orphans": 0, "orphan_paths": [], "warnings": []} | damage
    path.write_text(json.dumps(manifest))
    result = run("inspect", tmp_path / "out")
    assert result.exit_code == 2 and "annotation_sources" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("objects", [[-1], [2**40], ["1"], [1] * 255, 3])
def test_damaged_object_counts_in_the_sample_index_are_one_line_and_exit_2(tmp_path, objects):
    config = yolo_job(tmp_path)
    run("pack", tmp_path / "source", tmp_path / "out", "--config", config, *YOLO)
    out = tmp_path / "out"
    manifest = json.loads((out / "manifest.json").read_text())
    index = out / manifest["samples_index"]["name"]
    lines = [json.loads(line) for line in index.read_text().splitlines()]
    lines[0]["objects"] = objects
    data = "".join(json.dumps(line, sort_keys=True, separators=(",", ":")) + "\n"
                   for line in lines).encode()
    index.write_bytes(data)
    import hashlib
    manifest["samples_index"] |= {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (out / "manifest.json").write_text(json.dumps(manifest))
    result = run("inspect", out)
    assert result.exit_code == 2 and "objects" in result.output
    assert "Traceback" not in result.output


def dry_run(root: Path, config: Path) -> tuple[object, dict]:
    report = root / "dry.json"
    result = run("pack", root / "source", root / "out", "--config", config, "--dry-run",
                 "--quiet", "--report", report)
    return result, json.loads(report.read_text()).get("dry_run", {}) if report.exists() else {}


def test_the_dry_run_of_an_annotated_job_checks_ids_orphans_and_how_many_it_read(tmp_path):
    config = yolo_job(tmp_path)
    images.write(tmp_path / "source" / "labels" / "scratch" / "c.txt", b"7 0.5 0.5 0.1 0.1\n")
    result, document = dry_run(tmp_path, config)
    assert result.exit_code == 3, result.output  # a class the job does not list: as a pack
    check = document["annotations"]
    assert check["checked"] == 3 and check["originals"] == 3
    assert check["problem_count"] == 1 and "class 7 is not in" in check["problems"][0]
    assert check["orphans"] == 1 and check["orphan_paths"] == ["labels/dent/gone.txt"]
    assert "annotations: read for 3 of 3 originals" in result.output
    assert not (tmp_path / "out").exists()


def test_the_dry_run_compares_the_size_a_voc_file_records_with_the_header(tmp_path):
    source = tmp_path / "source"
    images.write(source / "dent" / "a.jpg", images.jpeg(160, 120, 1))
    images.write(source / "dent" / "b.jpg", images.jpeg(160, 120, 2))
    voc = ("<annotation><size><width>{w}</width><height>{h}</height></size><object>"
           "<name>crack</name><bndbox><xmin>10</xmin><ymin>10</ymin><xmax>50</xmax>"
           "<ymax>50</ymax></bndbox></object></annotation>")
    images.write(source / "dent" / "a.xml", voc.format(w=160, h=120).encode())
    images.write(source / "dent" / "b.xml", voc.format(w=4000, h=3000).encode())
    config = tmp_path / "job.yaml"
    config.write_text("source:\n  annotations:\n    files: voc\n")
    result, document = dry_run(tmp_path, config)
    assert result.exit_code == 3, result.output  # a pack rejects 1 of 2: over its 1%
    problems = document["annotations"]["problems"]
    assert len(problems) == 1 and problems[0].startswith("dent/b.jpg")
    assert "made for a 4000x3000 image, this one is 160x120" in problems[0]


def test_the_dry_run_reads_a_turned_tiffs_mask_in_the_frame_the_pack_does(tmp_path):
    import defects

    turned = tmp_path / "source" / "parts" / "turned.tif"
    images.write(turned, defects.corpus_original("tiff16", 6))  # Pillow: 240x320 upright
    defects.write_corpus_annotations(turned.with_suffix(""))  # a mask of 320x240, as stored
    config = tmp_path / "job.yaml"
    config.write_text("source:\n  annotations:\n" + "".join(
        f"    {key.rsplit('.', 1)[1]}: {json.dumps(value)}\n"
        for key, value in defects.CORPUS_ANNOTATIONS.items()))
    result, document = dry_run(tmp_path, config)
    assert result.exit_code == 0, result.output
    assert document["annotations"]["problem_count"] == 0
    assert run("pack", tmp_path / "source", tmp_path / "out", "--config", config,
               *YOLO).exit_code == 0  # as the pack packs it


def test_the_dry_run_of_a_job_with_a_missing_masks_folder_fails_naming_it(tmp_path):
    images.write(tmp_path / "source" / "dent" / "a.jpg", images.jpeg(160, 120, 1))
    config = tmp_path / "job.yaml"
    config.write_text("source:\n  annotations:\n    masks: ../maskz\n")
    result, _ = dry_run(tmp_path, config)
    assert result.exit_code == 2 and "source.annotations.masks" in result.output
    assert "Traceback" not in result.output


def test_the_dry_run_of_a_tiled_annotated_job_is_accepted(tmp_path):
    config = yolo_job(tmp_path, extra="image:\n  tiles:\n    size: 64\n")
    result, document = dry_run(tmp_path, config)
    assert result.exit_code == 0, result.output
    assert document["annotations"]["checked"] == 3
