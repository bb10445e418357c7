"""`shardsmith probe` and `pack --dry-run`: what they measure and say, and that a dry run
writes nothing.  Behaviour only: the timings themselves are checked by `make bench`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from shardsmith.cli import main

import images
from images import manifest_of, samples_of

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from slowfs import fuse_available, slow_mount  # noqa: E402


def shardsmith(*args: str, expect: int = 0) -> str:
    """Run the CLI; its standard output (progress lines go to stderr)."""
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == expect, result.output
    return result.stdout


def probe_json(source: Path, *args: str) -> dict:
    return json.loads(shardsmith("probe", str(source), "--json", "--quiet", *args))


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """Three class folders of small JPEG and PNG originals, nothing broken."""
    root = tmp_path_factory.mktemp("probe") / "source"
    for number in range(15):
        kind = images.jpeg if number % 3 else images.png
        images.write(root / ("dent", "ok", "scratch")[number % 3]
                     / f"{number:02d}.{'jpg' if number % 3 else 'png'}",
                     kind(480, 360, number))
    return root


@pytest.mark.slow
def test_probe_json_has_listing_reads_image_path_writer_prediction_and_training(tree):
    report = probe_json(tree, "--sample", "6", "--gpu-demand", "2000")

    assert report["files"] == 15
    assert report["classes"] == ["dent", "ok", "scratch"]
    for walk in ("serial", "parallel"):
        assert report["listing"][walk]["files"] == 15
        assert report["listing"][walk]["complete"]
    reads = report["reads"]
    assert [level["readers"] for level in reads["levels"]][:3] == [1, 2, 4]
    for level in reads["levels"]:
        assert level["files"] == 6 and level["mb_per_second"] > 0
        assert 0 < level["p50_ms"] <= level["p99_ms"]
    assert isinstance(reads["cold"], bool) and reads["note"]
    assert report["image_path"]["images"] == 6
    assert set(report["image_path"]["formats"]) <= {"JPEG", "PNG"}
    assert report["image_path"]["record_bytes_per_sample"] > \
        report["image_path"]["jpeg_bytes_per_sample"] > 0
    assert report["writer"]["samples_per_second"] > 0

    prediction = report["prediction"]
    assert prediction["binding"] in ("read-bound", "CPU-bound", "writer-bound")
    assert 0 < prediction["images_per_second"] <= min(
        value for value in prediction["bounds"].values() if value is not None)
    assert prediction["seconds"] > 15 / prediction["images_per_second"]
    assert 1 <= prediction["workers"] <= 2 * report["cores"]
    assert sum(prediction["shards"].values()) >= 1 and prediction["output_bytes"] > 0

    training = report["training"]
    assert training["shards_images_per_second"] > training["originals_images_per_second"] > 0
    assert set(training["gpu_utilisation"]) == {"originals", "shards"}


@pytest.mark.slow
def test_probe_sample_is_seeded_by_the_job(tree, tmp_path):
    config = tmp_path / "job.yaml"
    config.write_text("seed: 7\n")

    first = probe_json(tree, "--sample", "4", "--config", str(config))["sample"]
    again = probe_json(tree, "--sample", "4", "--config", str(config))["sample"]

    assert first == again and first["seed"] == 7 and len(first["paths"]) == 4


@pytest.mark.slow
def test_probe_table_says_which_stage_binds_and_the_workers_to_use(tree):
    table = shardsmith("probe", str(tree), "--sample", "3", "--workers", "2", "--quiet")

    assert "parallel scan" in table and "serial walk" in table
    assert "cold reads of the sample" in table
    assert "prediction for the whole tree, 2 workers on as many cores" in table
    assert "<- binds" in table and "--workers" in table
    assert "from staged shards" in table


def test_probe_of_a_tree_without_images_fails_in_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(main, ["probe", str(tmp_path / "empty"), "--quiet"])

    assert result.exit_code == 1
    assert result.stderr.startswith("shardsmith: error: no image files under")
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_probe_accepts_a_tiled_job_and_says_what_its_image_path_leaves_out(tree, tmp_path):
    config = tmp_path / "tiles.yaml"
    config.write_text("image:\n  tiles:\n    size: 256\n    keep: all\n")

    result = CliRunner().invoke(main, ["probe", str(tree), "--config", str(config), "--quiet",
                                       "--sample", "4"])

    assert result.exit_code == 0, result.output
    assert "note: image path measured as a whole-image conversion" in result.stdout
    assert "cutting tiles" in result.stdout


@pytest.mark.slow
def test_probe_accepts_an_annotated_job(tree, tmp_path):
    config = tmp_path / "yolo.yaml"
    (tmp_path / "labels").mkdir()
    config.write_text(f"source:\n  annotations:\n    files: yolo\n    files_dir: "
                      f"{tmp_path / 'labels'}\n    classes: [crack]\n")

    document = json.loads(CliRunner().invoke(main, [
        "probe", str(tree), "--config", str(config), "--quiet", "--sample", "4",
        "--json"]).stdout)

    assert "reading annotations" in document["note"]


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm here")
@pytest.mark.slow
def test_probe_says_reads_are_not_cold_when_the_files_live_in_memory(tmp_path):
    """tmpfs keeps every page in memory: dropping them from the page cache cannot work."""
    import tempfile

    with tempfile.TemporaryDirectory(dir="/dev/shm") as shm:
        images.write(Path(shm) / "a" / "x.jpg", images.jpeg(320, 240))
        reads = probe_json(Path(shm), "--sample", "1")["reads"]

    assert reads["cold"] is False
    assert reads["note"].startswith("not cold")


def test_dry_run_creates_no_output_directory(tree, tmp_path):
    output = tmp_path / "out"

    table = shardsmith("pack", str(tree), str(output), "--dry-run", "--quiet")

    assert not output.exists()
    assert "nothing written" in table and "15 originals to pack" in table
    assert "assumed, not measured" in table


@pytest.mark.slow
def test_dry_run_with_probe_estimates_the_time_and_writes_nothing(tree, tmp_path):
    output = tmp_path / "out"

    table = shardsmith("pack", str(tree), str(output), "--dry-run", "--probe", "--quiet")

    assert not output.exists()
    assert "measured on" in table and "prediction for the whole tree" in table


def test_probe_option_needs_dry_run(tree, tmp_path):
    result = CliRunner().invoke(main, ["pack", str(tree), str(tmp_path / "out"), "--probe"])

    assert result.exit_code == 2 and "--dry-run" in result.output
    assert not (tmp_path / "out").exists()


def test_dry_run_counts_equal_what_the_pack_then_packs(tree, tmp_path):
    output, report = tmp_path / "out", tmp_path / "dry.json"
    options = ["--split", "train=0.6,val=0.4", "--group", r"(?P<group>\d)\.",
               "--shard-samples", "2", "--size", "64"]
    shardsmith("pack", str(tree), str(output), *options, "--dry-run", "--quiet",
               "--report", str(report))
    dry = json.loads(report.read_text())["dry_run"]

    shardsmith("pack", str(tree), str(output), *options, "--quiet", "--workers", "1")

    manifest = manifest_of(output)
    packed: dict[str, dict[str, int]] = {}
    for sample in samples_of(output):
        by_class = packed.setdefault(sample["split"], {})
        name = manifest["classes"][sample["label"]]
        by_class[name] = by_class.get(name, 0) + 1
    assert {split: counts for split, counts in dry["counts"].items() if counts} == packed
    assert dry["splits"] == {name: split["samples"] for name, split in manifest["splits"].items()}
    assert dry["bytes_in"] == manifest["totals"]["bytes_in"]
    assert dry["shards"] == {name: split["shards"] for name, split in manifest["splits"].items()}


# -- through a slow mount -------------------------------------------------------------------


@pytest.fixture(scope="module")
def slow_probe(tmp_path_factory):
    """One probe of a tree behind a slow mount: 1 ms per metadata operation, reads capped at
    0.3 MB/s, planned for 64 cores (many, relative to that bandwidth)."""
    reason = fuse_available()
    if reason is not None:
        pytest.skip(reason)
    base = tmp_path_factory.mktemp("slow")
    data = images.jpeg(400, 300, quality=95)
    for folder in range(12):  # 768 files: three batches of the scan's parallel stat
        for number in range(64):
            images.write(base / "backing" / f"c{folder:02d}" / f"{number:03d}.jpg", data)
    with slow_mount(base / "backing", base / "mnt", latency=0.001, bandwidth=0.3e6) as fs:
        report = probe_json(fs.mountpoint, "--sample", "4", "--workers", "64")
    return report


@pytest.mark.slow
def test_probe_behind_a_slow_mount_says_read_bound(slow_probe):
    prediction = slow_probe["prediction"]

    assert prediction["binding"] == "read-bound"
    assert prediction["workers"] < 64
    assert slow_probe["reads"]["cold"]


@pytest.mark.slow
def test_parallel_and_serial_listings_behind_a_slow_mount_count_the_same_files(slow_probe):
    listing = slow_probe["listing"]  # which is faster: scripts/bench_nas.py (make bench)

    assert listing["serial"]["files"] == listing["parallel"]["files"] == 768
    assert listing["parallel"]["files_per_second"] > 0 and listing["serial"]["files_per_second"] > 0


# ------------------------------------------------------------------ the dry run as a gate

def gate_tree(root: Path, good: int, broken: int = 0) -> Path:
    """``good`` small JPEGs and ``broken`` originals a pack rejects (zero-byte, or text named
    .png), in one class folder."""
    for number in range(good):
        images.write(root / "parts" / f"p{number:03d}.jpg", images.jpeg(64, 48, number))
    for number in range(broken):
        images.write(root / "parts" / f"bad{number}.{'png' if number % 2 else 'jpg'}",
                     b"notes, not pixels" if number % 2 else b"")
    return root


def dry_run(source: Path, tmp_path: Path, *args: str) -> tuple[object, dict]:
    """``pack --dry-run`` through the CLI: its result and its --report."""
    report = tmp_path / "dry.json"
    result = CliRunner().invoke(main, ["pack", str(source), str(tmp_path / "out"),
                                       "--dry-run", "--quiet", "--report", str(report),
                                       *args])
    return result, json.loads(report.read_text())


def test_a_dry_run_exits_3_as_the_pack_does_when_annotations_use_a_class_not_listed(
        tmp_path):
    source = gate_tree(tmp_path / "source", 10)
    for number in range(10):  # the last one names YOLO id 2 of a list of two
        images.write(source / "parts" / f"p{number:03d}.txt",
                     f"{2 if number == 9 else 0} 0.5 0.5 0.2 0.2\n".encode())
    job = tmp_path / "job.yaml"
    job.write_text("source:\n  annotations:\n    files: yolo\n    classes: [scratch, dent]\n")

    result, report = dry_run(source, tmp_path, "--config", str(job))

    assert result.exit_code == 3, result.output
    error = result.stderr.strip().splitlines()
    assert len(error) == 1 and "class 2 is not in source.annotations.classes" in error[0]
    assert "--max-reject-fraction" in error[0]
    assert report["exit_code"] == 3 and report["dry_run"]["refusal"] in error[0]
    assert not (tmp_path / "out").exists()
    pack = CliRunner().invoke(main, ["pack", str(source), str(tmp_path / "out"), "--config",
                                     str(job), "--quiet", "--workers", "1", "--size", "32"])
    assert pack.exit_code == 3, pack.output


def test_a_dry_run_exits_3_when_the_originals_it_reads_predict_too_many_rejects(tmp_path):
    source = gate_tree(tmp_path / "source", 10, broken=3)

    result, report = dry_run(source, tmp_path)

    assert result.exit_code == 3, result.output
    assert "a pack would reject about 3 of 13 originals" in result.stderr
    assert report["dry_run"]["rejects_predicted"]["rejects"] == 3
    assert "rejects, predicted: 3 of 13 originals (23.1%), allowed 1.0%" in result.stdout


def test_a_dry_run_of_2_broken_files_of_40_within_the_allowed_fraction_exits_0(tmp_path):
    source = gate_tree(tmp_path / "source", 38, broken=2)

    result, report = dry_run(source, tmp_path, "--max-reject-fraction", "0.1")

    assert result.exit_code == 0, result.output
    assert report["dry_run"]["rejects_predicted"]["rejects"] == 2
    assert report["dry_run"]["refusal"] is None
