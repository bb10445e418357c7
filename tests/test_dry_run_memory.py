"""``pack --dry-run`` predicts the memory of the job from the originals' headers, prints the
worst case apart, and a real pack stays under the worst case.  (How close the prediction is to
a real pack's peak is measured by ``scripts/check_dry_run_memory.py``, not asserted here.)

The worst case is the driver (its baseline, the per-file state, the results waiting) plus, per
worker process, its baseline, the decode budget (``image.max_decoded_mb``) and its batch's
results, plus loky's helpers.  A real pack's process tree (driver, loky workers, helpers),
sampled from /proc every 20 ms, never takes more than the dry run said; on a machine whose
baselines are heavier than the measured constants, by no more than that excess.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import cv2
import pytest
from click.testing import CliRunner

from shardsmith.cli import main

import images

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from measure_baselines import children, one_run, rss_bytes  # noqa: E402  (the same /proc reader)

REPO = Path(__file__).resolve().parents[1]
MiB = 2**20


def pngs(root: Path, count: int) -> Path:
    """``count`` 1200x900 PNGs in two class folders: ~6.5 MB each to decode (two copies)."""
    for number in range(count):
        pixels = images.gradient_rgb(1200, 900)
        pixels[number % 900, :, :] = number  # distinct contents
        ok, data = cv2.imencode(".png", pixels, [cv2.IMWRITE_PNG_COMPRESSION, 1])
        assert ok
        images.write(root / "ab"[number % 2] / f"{number:03d}.png", data.tobytes())
    return root


def budget_config(tmp_path: Path, max_decoded_mb: int) -> Path:
    config = tmp_path / "job.yaml"
    config.write_text(f"image:\n  max_decoded_mb: {max_decoded_mb}\n")
    return config


def dry_run_report(source: Path, output: Path, report: Path, *args: object) -> dict:
    result = CliRunner().invoke(main, ["pack", str(source), str(output), "--dry-run",
                                       "--report", str(report), *map(str, args)])
    assert result.exit_code == 0, result.output
    assert not output.exists()
    return json.loads(report.read_text())["dry_run"]["memory"]


def tree_rss(pid: int) -> tuple[int, int]:
    """The RSS of ``pid`` and all its descendants together, and how many processes that is."""
    total, count, stack = 0, 0, [pid]
    while stack:
        current = stack.pop()
        stack += children(current)
        total += rss_bytes(current)
        count += 1
    return total, count


def peak_of_pack(*args: object, timeout: float = 300) -> tuple[int, int]:
    """Run ``shardsmith pack`` in a fresh process, sampling its process tree every 20 ms;
    returns the largest sum of RSS seen and the most processes seen at once."""
    process = subprocess.Popen([sys.executable, "-m", "shardsmith", "pack", *map(str, args)],
                               cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak, most = 0, 0
    deadline = time.monotonic() + timeout
    try:
        while process.poll() is None and time.monotonic() < deadline:
            total, count = tree_rss(process.pid)
            peak, most = max(peak, total), max(most, count)
            time.sleep(0.02)
    finally:
        if process.poll() is None:
            process.kill()
        stderr = process.communicate()[1].decode()
    assert process.returncode == 0, stderr
    return peak, most


@pytest.mark.slow
def test_the_dry_run_prints_the_worst_case_memory_of_driver_and_each_worker(tmp_path):
    source = pngs(tmp_path / "source", 4)
    result = CliRunner().invoke(main, ["pack", str(source), str(tmp_path / "out"), "--dry-run",
                                       "--workers", "2", "--quiet", "--config",
                                       str(budget_config(tmp_path, 16))])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(line.strip().startswith("memory, worst case:") for line in lines), result.output
    assert any(line.strip().startswith("driver ") for line in lines), result.output
    assert any(line.strip().startswith("each of 2 workers ") for line in lines), result.output
    budget = [line for line in lines if line.strip().startswith("decode budget")]
    assert len(budget) == 1 and "16.8 MB" in budget[0], result.output
    assert any(line.strip().startswith("per file") for line in lines), result.output


def test_the_dry_run_report_sums_its_memory_terms(tmp_path):
    source = pngs(tmp_path / "source", 4)
    memory = dry_run_report(source, tmp_path / "out", tmp_path / "report.json", "--workers", 2,
                            "--config", budget_config(tmp_path, 16))
    assert memory["workers"] == 2
    assert memory["driver_bytes"] == sum(term["bytes"] for term in memory["driver"])
    assert memory["worker_bytes"] == sum(term["bytes"] for term in memory["worker"])
    assert memory["total_bytes"] == (memory["driver_bytes"] + 2 * memory["worker_bytes"]
                                     + memory["helpers_bytes"])
    terms = {term["name"]: term for term in memory["worker"]}
    assert terms["decode budget"]["bytes"] == 16 * MiB
    assert all(term["basis"] for term in memory["driver"] + memory["worker"])


def test_the_hash_pass_is_counted_where_it_takes_more_than_the_conversion_before_it(tmp_path):
    # a small budget: a background task of 12 shots (one per original) takes more
    source = pngs(tmp_path / "source", 12)
    config = budget_config(tmp_path, 16)
    memory = dry_run_report(source, tmp_path / "out", tmp_path / "report.json", "--workers", 2,
                            "--config", config)
    worker = {term["name"]: term["bytes"] for term in memory["worker"]}
    driver = {term["name"]: term["bytes"] for term in memory["driver"]}
    assert worker["hash task"] > 0 and driver["hash pass"] > 0
    config.write_text(config.read_text() + "output:\n  near_hashes: false\n")
    unhashed = dry_run_report(source, tmp_path / "out", tmp_path / "report.json", "--workers",
                              2, "--config", config)
    names = {term["name"] for term in unhashed["worker"] + unhashed["driver"]}
    assert not names & {"hash task", "hash pass", "hash tasks waiting"}
    assert unhashed["total_bytes"] < memory["total_bytes"]


@pytest.mark.parametrize("workers", [1, 2])
def test_the_hash_pass_holds_no_more_samples_than_the_tree_makes(tmp_path, workers):
    source = pngs(tmp_path / "source", 4)  # 4 samples: a background task holds 4, not 255
    memory = dry_run_report(source, tmp_path / "out", tmp_path / "report.json", "--workers",
                            workers, "--resize", "shorter", "--config",
                            budget_config(tmp_path, 16))
    terms = {term["name"]: term["bytes"] for term in memory["driver"] + memory["worker"]}
    sample = terms.get("result") or terms["results waiting"]  # one sample's bound, or more
    frame = 4 * 256**2  # a frame at FRAME_BYTES_PER_PIXEL
    assert terms["hash task"] <= 4 * (2 * sample + frame)
    assert terms.get("hash tasks waiting", 0) <= 4 * sample


def test_one_worker_converts_in_the_driver_and_counts_the_budget_there(tmp_path):
    source = pngs(tmp_path / "source", 2)
    memory = dry_run_report(source, tmp_path / "out", tmp_path / "report.json", "--workers", 1,
                            "--config", budget_config(tmp_path, 16))
    assert memory["workers"] == 0 and memory["worker"] == [] and memory["helpers_bytes"] == 0
    assert {term["name"]: term["bytes"] for term in memory["driver"]}["decode budget"] \
        == 16 * MiB
    assert memory["total_bytes"] == memory["driver_bytes"]


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc (Linux)")
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.slow
def test_a_real_pack_stays_under_the_worst_case_the_dry_run_printed(tmp_path, workers):
    source = pngs(tmp_path / "source", 16)
    config = budget_config(tmp_path, 16)
    output = tmp_path / "out"
    args = ("--size", "64", "--workers", workers, "--config", config)
    memory = dry_run_report(source, output, tmp_path / "report.json", *args)
    peak, processes = peak_of_pack(source, output, *args, "--quiet")
    manifest = json.loads((output / "manifest.json").read_text())
    assert manifest["totals"]["packed"] == 16  # every original decoded within the budget
    if workers > 1:
        assert processes >= 1 + workers  # the sampling saw the workers
    # The baselines are constants measured on one kind of machine; another (CI's took 24 MiB
    # more than ours for this same pack, in-process) is held to the terms that grow with the images.
    heavier = max(0, machine_baseline(tmp_path / "baseline", workers) - model_baseline(memory))
    assert peak <= memory["total_bytes"] + heavier, \
        (peak / MiB, memory["total_bytes"] / MiB, heavier / MiB, memory)


def machine_baseline(root: Path, workers: int) -> int:
    """The process tree's peak on this machine for a pack of 6 tiny JPEGs, which is what the
    baselines of ``probe/memory.py`` stand for (``scripts/measure_baselines.py``)."""
    peaks = one_run(root, workers)
    return (peaks["driver"] + (workers if workers > 1 else 0) * peaks["worker"]
            + peaks["helpers"] * peaks["helper"])


def model_baseline(memory: dict) -> int:
    """The baseline terms of the dry run's worst case, for the whole process tree."""
    def baseline(terms: list[dict]) -> int:
        return sum(term["bytes"] for term in terms if term["name"] == "baseline")
    return (baseline(memory["driver"]) + memory["workers"] * baseline(memory["worker"])
            + memory["helpers_bytes"])


@pytest.mark.slow
def test_the_dry_run_predicts_the_memory_from_the_headers_far_below_the_worst_case(tmp_path):
    source = pngs(tmp_path / "source", 4)  # 1200x900 RGB: 3.2 MB of pixels each
    report = tmp_path / "report.json"
    dry_run_report(source, tmp_path / "out", report, "--workers", 2)
    document = json.loads(report.read_text())["dry_run"]
    predicted, worst = document["memory_predicted"], document["memory"]

    decode = {term["name"]: term for term in predicted["worker"]}["largest decode"]
    assert 1200 * 900 * 3 <= decode["bytes"] <= 4 * 1200 * 900 * 3, decode
    assert "1200x900 PNG" in decode["basis"]
    assert predicted["total_bytes"] * 4 < worst["total_bytes"]
    assert document["headers"]["sampled"] == 4


@pytest.mark.slow
def test_the_largest_original_sets_the_predicted_decode(tmp_path):
    source = tmp_path / "source"
    for number in range(100):
        images.write(source / "a" / f"{number:03d}.jpg", images.jpeg(64, 48, number))
    images.write(source / "b" / "large.png", images.png(2000, 1500))
    report = tmp_path / "report.json"
    dry_run_report(source, tmp_path / "out", report, "--workers", 2)
    document = json.loads(report.read_text())["dry_run"]

    assert document["headers"]["heaviest"]["path"] == "b/large.png"
    decode = {term["name"]: term for term in document["memory_predicted"]["worker"]}
    assert decode["largest decode"]["bytes"] >= 2000 * 1500 * 3
    assert document["headers"]["sampled"] + document["headers"]["largest"] > 64


def test_the_dry_run_counts_the_local_coco_file_the_driver_parses(tmp_path):
    from shardsmith.probe.memory import PARSED_BYTES_PER_FILE_BYTE

    source = tmp_path / "source"
    for number in range(2):
        images.write(source / "ab"[number] / f"{number}.jpg", images.jpeg(64, 48, number))
    coco = json.dumps({"images": [], "annotations": [], "categories": [{"id": 1, "name": "x"}]})
    (source / "coco.json").write_text(coco + " " * 5000)
    config = tmp_path / "job.yaml"
    config.write_text("source:\n  annotations:\n    coco: coco.json\n")
    memory = dry_run_report(source, tmp_path / "out", tmp_path / "report.json",
                            "--config", config)
    terms = {term["name"]: term["bytes"] for term in memory["driver"]}
    size = (source / "coco.json").stat().st_size
    assert terms["COCO file"] == size * PARSED_BYTES_PER_FILE_BYTE
