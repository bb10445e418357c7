"""`shardsmith sheet`: a contact sheet a person can look at, drawn from the packed samples."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from shardsmith.cli import main
from shardsmith.dataset.manifest import read_manifest
from shardsmith.insight.named_source import named_originals
from shardsmith.insight.sheet import render_sheet

import defects
import images
from images import manifest_of

PER_CLASS = 3


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """Three classes (one with a single image), a truncated JPEG and an empty file."""
    root = tmp_path_factory.mktemp("sheet")
    source, output = root / "source", root / "out"
    for number in range(5):
        images.write(source / "ok" / f"a{number}.jpg", images.jpeg(96, 64, number))
        images.write(source / "scratch" / f"b{number}.png", images.png(64, 96, 10 + number))
    images.write(source / "dent" / "c.jpg", images.jpeg(80, 80, 20))
    images.write(source / "dent" / "cut.jpg", images.truncated_jpeg())
    images.write(source / "dent" / "zero.jpg", b"")
    result = CliRunner().invoke(main, ["pack", str(source), str(output), "--size", "64",
                                       "--split", "train=0.6,val=0.4", "--workers", "1",
                                       "--quiet", "--max-reject-fraction", "1"])
    assert result.exit_code == 0, result.output
    return output


def sheet_cli(dataset: Path, png: Path, *args: str, expect: int = 0) -> str:
    result = CliRunner().invoke(main, ["sheet", str(dataset), "-o", str(png),
                                       "--per-class", str(PER_CLASS), *args])
    assert result.exit_code == expect, result.output
    return result.output


def test_the_sheet_reads_the_sample_index_once(dataset, monkeypatch):
    from shardsmith.insight import census, picks

    passes, walk = [], census.iter_sample_index

    def counted(*args, **kwargs):
        passes.append(args)
        return walk(*args, **kwargs)

    for module in (census, picks):  # wherever the index is walked from
        monkeypatch.setattr(module, "iter_sample_index", counted, raising=False)
    sheet = render_sheet(dataset, read_manifest(dataset), per_class=PER_CLASS, seed=0)
    assert [len(row.thumbnails) for row in sheet.rows] == [1, PER_CLASS, PER_CLASS]
    assert len(passes) == 1


def busy(image: Image.Image, box: tuple[int, int, int, int]) -> bool:
    """The box holds a picture, not a flat fill."""
    return float(np.asarray(image.crop(box).convert("L"), np.float32).std()) > 4.0


def test_one_row_per_class_with_non_blank_thumbnails(dataset):
    sheet = render_sheet(dataset, read_manifest(dataset), per_class=PER_CLASS, seed=0)
    assert [(row.label, row.name) for row in sheet.rows] == [(0, "dent"), (1, "ok"),
                                                             (2, "scratch")]
    assert [len(row.thumbnails) for row in sheet.rows] == [1, PER_CLASS, PER_CLASS]
    for row in sheet.rows:
        assert all(busy(sheet.image, box) for box in row.thumbnails)
        assert row.box[1] >= (sheet.rows[row.label - 1].box[3] if row.label else 0)
    assert sheet.image.width >= 2 * 160 + PER_CLASS * 160


def test_tfrecord_samples_are_drawn_too(tmp_path):
    source, output = tmp_path / "source", tmp_path / "out"
    for number in range(2):
        images.write(source / "ok" / f"a{number}.jpg", images.jpeg(96, 64, number))
    result = CliRunner().invoke(main, ["pack", str(source), str(output), "--size", "64",
                                       "--format", "tfrecord", "--workers", "1", "--quiet"])
    assert result.exit_code == 0, result.output
    sheet = render_sheet(output, read_manifest(output), per_class=PER_CLASS, seed=0)
    (row,) = sheet.rows
    assert len(row.thumbnails) == 2 and all(busy(sheet.image, box) for box in row.thumbnails)


def source_of(dataset: Path) -> str:
    """The folder the dataset was packed from: what a user names with --source."""
    return str(dataset.parent / "source")


def test_rejected_originals_are_shown_as_far_as_they_decode(dataset):
    sheet = render_sheet(dataset, read_manifest(dataset), per_class=PER_CLASS, seed=0,
                         source=named_originals(source_of(dataset)))
    assert len(sheet.rejects) == 2 and sheet.reject_thumbnails == 1  # the truncated JPEG
    assert not sheet.notes


@pytest.mark.slow
def test_the_same_seed_draws_the_same_png_and_another_seed_other_samples(dataset, tmp_path):
    first, again, other = tmp_path / "1.png", tmp_path / "2.png", tmp_path / "3.png"
    output = sheet_cli(dataset, first, "--seed", "5")
    sheet_cli(dataset, again, "--seed", "5")
    sheet_cli(dataset, other, "--seed", "6")
    assert first.read_bytes() == again.read_bytes()
    assert first.read_bytes() != other.read_bytes()
    with Image.open(first) as image:
        assert image.format == "PNG"
        assert f"{image.width}x{image.height} px, 3 class rows, 7 samples, 2 rejects" in output


@pytest.mark.slow
def test_one_split_only(dataset, tmp_path):
    split_of = {}
    name = manifest_of(dataset)["samples_index"]["name"]
    for line in (dataset / name).read_text().splitlines():
        record = json.loads(line)
        split_of.setdefault(record["split"], 0)
        split_of[record["split"]] += 1
    output = sheet_cli(dataset, tmp_path / "val.png", "--split", "val", "--per-class", "64")
    assert f"{split_of['val']} samples" in output


def test_without_the_source_the_sheet_is_still_drawn_and_says_why(dataset, tmp_path):
    source = Path(manifest_of(dataset)["source"])
    moved = source.with_name("moved-away")
    source.rename(moved)
    try:
        result = CliRunner().invoke(main, ["sheet", str(dataset), "-o",
                                           str(tmp_path / "s.png"), "--source", str(source)])
    finally:
        moved.rename(source)
    assert result.exit_code == 0, result.output
    assert "note: the originals are not reachable" in result.output
    assert (tmp_path / "s.png").stat().st_size > 0


@pytest.mark.parametrize("bad_path", ["../outside.jpg", "/etc/hostname", "dent/../../x.jpg"])
def test_a_reject_path_that_leaves_the_source_is_refused(dataset, tmp_path, bad_path):
    copy = tmp_path / "copy"
    shutil.copytree(dataset, copy)
    manifest = manifest_of(copy)
    manifest["rejects"][0]["path"] = bad_path
    (copy / "manifest.json").write_text(json.dumps(manifest))
    output = sheet_cli(copy, tmp_path / "s.png", "--source", source_of(dataset), expect=2)
    assert "(refused)" in output and not (tmp_path / "s.png").exists()


def test_a_reject_that_is_a_link_out_of_the_source_is_refused(dataset, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(dataset, copy)
    secret = images.write(tmp_path / "secret" / "x.jpg", images.jpeg(32, 32))
    manifest = manifest_of(copy)
    link = Path(manifest["source"]) / "dent" / "link.jpg"
    link.symlink_to(secret)
    manifest["rejects"][0]["path"] = "dent/link.jpg"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    try:
        output = sheet_cli(copy, tmp_path / "s.png", "--source", source_of(dataset),
                           expect=2)
    finally:
        link.unlink()
    assert "leads out of the source" in output


# --- --objects: the labels drawn over the samples ------------------------------------------


@pytest.fixture(scope="module")
def annotated(tmp_path_factory) -> dict[str, Path]:
    """Three originals with a LabelMe scratch box and dent polygon each (a class mask) and
    two without objects, packed to 128 px in both formats."""
    import defects

    root = tmp_path_factory.mktemp("annotated")
    source = root / "source"
    relpaths = [f"parts/p{number}.jpg" for number in range(3)]
    for number, relpath in enumerate(relpaths):
        images.write(source / relpath, defects.original(seed=number))
    overrides = defects.write_annotations(source, relpaths, "labelme")
    for number in range(2):
        images.write(source / "parts" / f"clean{number}.jpg", images.jpeg(240, 180, number))
    for fmt in ("webdataset", "tfrecord"):
        defects.pack_with(source, root / fmt, overrides, **{"image.size": 128,
                                                            "output.format": fmt})
    return {fmt: root / fmt for fmt in ("webdataset", "tfrecord")}


def tiles_by_path(output: Path, sheet) -> dict[str, tuple[int, int, int, int]]:
    """The original's path of each drawn thumbnail -> its tile on the sheet."""
    from shardsmith.insight.census import take_census

    (row,) = sheet.rows
    (records,) = take_census(output, read_manifest(output), per_class=8, seed=0).picks.values()
    return {record.path: box for record, box in zip(records, row.thumbnails, strict=True)}


def colours_in(image: Image.Image, box: tuple[int, int, int, int]) -> set[tuple[int, ...]]:
    return {tuple(pixel) for pixel in np.asarray(image.crop(box)).reshape(-1, 3)}


@pytest.mark.parametrize("fmt", ["webdataset", "tfrecord"])
def test_objects_are_drawn_in_their_class_colour_and_a_clean_image_has_none(annotated, fmt):
    from shardsmith.insight.objects_drawn import class_colour

    output = annotated[fmt]
    sheet = render_sheet(output, read_manifest(output), per_class=8, seed=0, objects=True)
    classes = tuple(read_manifest(output).object_classes)
    assert sorted(item.name for item in sheet.objects) == ["dent"] * 3 + ["scratch"] * 3
    for item in sheet.objects:
        assert item.colour == class_colour(classes, item.name)
        left, top, right, bottom = item.box
        assert right - left > 10 and bottom - top > 10
        for edge_pixel in (((left + right) // 2, bottom), (left, (top + bottom) // 2),
                           (right, (top + bottom) // 2)):
            assert sheet.image.getpixel(edge_pixel) == item.colour
    palette = {class_colour(classes, name) for name in classes}
    tiles = tiles_by_path(output, sheet)
    assert len(tiles) == 5
    for path, tile in tiles.items():
        found = colours_in(sheet.image, tile) & palette
        assert found == (set() if "clean" in path else palette), path


def test_mask_outlines_are_drawn_where_the_dataset_has_masks(annotated):
    from shardsmith.insight.objects_drawn import class_colour

    output = annotated["webdataset"]
    manifest = read_manifest(output)
    assert manifest.has_masks  # the LabelMe polygon of the dent is a mask
    dent = class_colour(tuple(manifest.object_classes), "dent")
    sheet = render_sheet(output, manifest, per_class=8, seed=0, objects=True)
    for item in sheet.objects:
        if item.name == "dent":  # the octagon's outline: dent pixels inside its box
            left, top, right, bottom = item.box
            inner = np.asarray(sheet.image.crop((left + 3, top + 3, right - 2, bottom - 2)))
            assert (inner.reshape(-1, 3) == dent).all(axis=1).sum() > 20


def test_the_objects_sheet_is_the_same_png_for_the_same_seed(annotated, tmp_path):
    output = annotated["webdataset"]
    first, again = tmp_path / "1.png", tmp_path / "2.png"
    said = sheet_cli(output, first, "--objects", "--per-class", "8")
    sheet_cli(output, again, "--objects", "--per-class", "8")
    assert first.read_bytes() == again.read_bytes()
    assert "6 objects drawn" in said


def damage_member(output: Path, extension: str, key_of_path: str) -> str:
    """Overwrite the start of one sample's ``extension`` member in its tar (same length, so
    the tar and its index still hold); returns the sample's key."""
    import tarfile

    (record,) = [s for s in images.samples_of(output) if s["path"] == key_of_path]
    shard = output / record["shard"]
    with tarfile.open(shard) as tar:
        member = tar.getmember(f"{record['key']}.{extension}")
        offset = member.offset_data
    data = bytearray(shard.read_bytes())
    data[offset : offset + 8] = b"\x00garbage"
    shard.write_bytes(bytes(data))
    return record["key"]


@pytest.mark.parametrize("extension, problem", [("json", "does not parse"),
                                                ("mask.png", "class mask")])
def test_a_sample_whose_objects_do_not_read_is_a_tile_saying_why(annotated, tmp_path,
                                                                 extension, problem):
    copy = tmp_path / "copy"
    shutil.copytree(annotated["webdataset"], copy)
    key = damage_member(copy, extension, "parts/p1.jpg")
    png = tmp_path / "s.png"
    said = sheet_cli(copy, png, "--objects", "--per-class", "8")
    assert "4 objects drawn" in said and png.stat().st_size > 0
    sheet = render_sheet(copy, read_manifest(copy), per_class=8, seed=0, objects=True)
    assert key not in {item.key for item in sheet.objects}
    assert len(sheet.rows[0].thumbnails) == 4  # the damaged one is a grey tile with a reason


def test_objects_need_an_annotated_dataset(dataset, tmp_path):
    said = sheet_cli(dataset, tmp_path / "s.png", "--objects", expect=2)
    assert "--objects needs them" in said and not (tmp_path / "s.png").exists()


def test_a_tiled_dataset_is_labelled_by_its_tile_size_not_the_resize_setting(tmp_path):
    source = tmp_path / "source"
    images.write(source / "ok" / "wide.jpg", images.jpeg(700, 400, 1))
    defects.pack_with(source, tmp_path / "out", {}, **{"image.tiles.size": 256,
                                                       "image.tiles.overlap": 32})
    sheet = render_sheet(tmp_path / "out", read_manifest(tmp_path / "out"), per_class=2)
    assert "256 px tiles (overlap 32)" in sheet.headline
    assert "px fit" not in sheet.headline
