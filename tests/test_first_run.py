"""What a new user meets on a fresh clone: the first pack, the example config, make, messages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from shardsmith.cli import main
from shardsmith.config import load_config
from shardsmith.ops.stage import StageResult
from shardsmith.ops.verify import VerifyReport
from shardsmith.progress import clock

import images
from images import manifest_of

REPO = Path(__file__).resolve().parents[1]


def cli(*args: str, expect: int = 0) -> str:
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == expect, result.output
    return result.output


@pytest.mark.slow
def test_over_the_reject_budget_the_message_says_the_dataset_was_written(mixed_source,
                                                                          tmp_path):
    source, _ = mixed_source
    output = tmp_path / "out"
    message = cli("pack", str(source), str(output), "--size", "32", "--workers", "1", expect=3)
    assert "the dataset was written and is complete (version 1, 16 samples)" in message
    assert "3 of 19 images (15.8%) were rejected, more than the allowed 1.0%" in message
    assert "--max-reject-fraction 0.158 (run.max_reject_fraction in the config)" in message
    assert (output / "manifest.json").exists()
    again = cli("pack", str(source), str(output), "--size", "32", "--workers", "1", expect=3)
    assert "up to date, nothing to do" in again
    assert "nothing to do: the dataset is unchanged and complete (version 1" in again
    assert cli("pack", str(source), str(output), "--size", "32", "--workers", "1",
               "--max-reject-fraction", "0.158").startswith(f"{output}: up to date")


def test_a_flat_folder_is_refused_with_how_to_pack_it_and_packs_with_labels_none(tmp_path):
    source = tmp_path / "flat"
    for number in range(3):
        images.write(source / f"shot{number}.jpg", images.jpeg(40, 30, number))
    refused = cli("pack", str(source), str(tmp_path / "a"), expect=1)
    assert "not in class folders: pass --labels none" in refused
    cli("pack", str(source), str(tmp_path / "b"), "--labels", "none", "--size", "32",
        "--workers", "1", "--quiet")
    manifest = manifest_of(tmp_path / "b")
    assert manifest["totals"]["packed"] == 3 and manifest["classes"] == []


def test_init_config_prints_the_example_in_configs_and_pack_reads_it(tmp_path):
    printed = cli("init-config")
    assert printed == (REPO / "configs" / "example.yaml").read_text()
    job = tmp_path / "job.yaml"
    job.write_text(printed)
    assert load_config(job).image.size == 512
    assert "shardsmith init-config" in cli("pack", "--help")


def make(*args: str) -> str:
    result = subprocess.run(["make", "--no-print-directory", *args], cwd=REPO,
                            capture_output=True, text=True, check=True)
    return result.stdout


def test_make_help_lists_the_targets():
    listed = {line.split()[1] for line in make("help").splitlines()}
    assert {"demo", "test", "install", "lint", "stage", "nightly", "clean"} <= listed
    assert make().startswith(make("help")[:40])  # the default target


def test_make_demo_installs_only_the_core_package_and_ends_with_what_to_try(tmp_path):
    commands = make("-n", "demo", f"VENV={tmp_path / 'venv'}")
    installs = [line for line in commands.splitlines() if "pip install" in line]
    assert any(line.endswith("pip install --quiet -e .") for line in installs)
    assert not any("[dev]" in line or "[test]" in line or "torch" in line for line in installs)
    lines = commands.splitlines()
    tail = lines[next(at for at, line in enumerate(lines) if "Next, try:" in line):]
    assert len(tail) <= 9
    assert any("shardsmith inspect" in line for line in tail)
    assert any("shardsmith sheet" in line for line in tail)
    tests = make("-n", "test", f"VENV={tmp_path / 'venv'}")
    assert "pip install --quiet -e '.[dev]'" in tests


@pytest.mark.slow
def test_the_sample_tree_generator_leaves_an_existing_tree_untouched(tmp_path):
    command = [sys.executable, str(REPO / "scripts" / "make_sample_tree.py"),
               str(tmp_path / "tree"), "--count", "4", "--width", "64", "--height", "48",
               "--bad", "3", "--seed", "1"]
    subprocess.run(command, check=True, capture_output=True)

    def state() -> dict[str, tuple[int, bytes]]:
        return {str(p): (p.stat().st_mtime_ns, p.read_bytes())
                for p in sorted((tmp_path / "tree").rglob("*")) if p.is_file()}

    before = state()
    assert len(before) == 7
    subprocess.run(command, check=True, capture_output=True)
    assert state() == before


def test_a_log_mode_eta_past_a_day_keeps_its_hours():
    assert clock(34 * 3600 + 26 * 60 + 40) == "34:26:40"
    assert clock(59.6) == "00:01:00"


def test_the_stage_rate_is_over_the_copies_as_its_progress_line():
    result = StageResult(Path("/nvme/x"), copied=1, present=0, removed=0, bytes_copied=10**9,
                         seconds=9.0, copy_seconds=4.0)
    summary = result.summary()
    assert "copied 1 file (1.00 GB)" in summary and "copying 4.0s at 250.0 MB/s" in summary


@pytest.mark.slow
def test_counts_of_one_are_singular(mixed_source, tmp_path):
    assert VerifyReport(Path("d"), shards=1, samples=1, bytes=5,
                        problems=["x"]).summary() == "d: 1 problem: 1 shard, 1 sample, 5 B"
    source, _ = mixed_source
    summary = cli("pack", str(source), str(tmp_path / "o"), "--size", "32", "--workers", "1",
                  "--quiet", "--max-reject-fraction", "1")
    assert "with 1 worker\n" in summary


def test_verify_of_a_directory_without_a_manifest_says_so_in_one_line(tmp_path):
    output = cli("verify", str(tmp_path), expect=2)
    assert output.count("\n") == 1 and "no manifest.json: not a packed dataset" in output


@pytest.mark.slow
def test_log_counts_rejects_apart_from_added_samples(mixed_source, tmp_path):
    source, _ = mixed_source
    output = tmp_path / "out"
    cli("pack", str(source), str(output), "--size", "32", "--workers", "1", "--quiet",
        "--max-reject-fraction", "1")
    images.write(source / "ok" / "new.jpg", images.jpeg(40, 30, 77))
    images.write(source / "ok" / "new_empty.jpg", b"")
    cli("pack", str(source), str(output), "--size", "32", "--workers", "1", "--quiet",
        "--max-reject-fraction", "1")
    header, first, second, units, _ = cli("log", str(output)).splitlines()
    assert header.split()[2:9] == ["added", "changed", "relabelled", "re-annotated", "removed",
                                   "moved", "rejected"]
    assert first.split()[2:9] == ["16", "0", "0", "0", "0", "0", "3"]
    assert second.split()[2:9] == ["1", "0", "0", "0", "0", "0", "1"]
    assert units.startswith("counts: originals")
