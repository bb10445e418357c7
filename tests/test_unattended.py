"""Nightly use: locking, machine-readable reports, log-friendly progress."""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from shardsmith.cli import main

import images

REPO = Path(__file__).resolve().parents[1]


def small_tree(root: Path, count: int = 6) -> Path:
    for number in range(count):
        images.write(root / "ab"[number % 2] / f"{number}.jpg", images.jpeg(200, 150, number))
    return root


def test_a_second_pack_on_the_same_output_refuses_at_once_naming_the_holder(tmp_path):
    source = small_tree(tmp_path / "source")
    lock = tmp_path / "out" / ".shardsmith" / "lock"
    lock.parent.mkdir(parents=True)
    with open(lock, "a+") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        holder.write("pid 777 on etl-host since 2026-11-29T02:00:00\n")
        holder.flush()
        result = CliRunner().invoke(main, ["pack", str(source), str(tmp_path / "out")])
    assert result.exit_code == 1
    assert "is being packed by pid 777 on etl-host since 2026-11-29T02:00:00" in result.output
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.slow
def test_a_lock_left_by_a_dead_run_is_taken_over(tmp_path):
    source = small_tree(tmp_path / "source")
    lock = tmp_path / "out" / ".shardsmith" / "lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("pid 999999 on this-host since 2026-11-29T02:00:00\n")  # no flock held
    result = subprocess.run(
        [sys.executable, "-m", "shardsmith.cli", "pack", str(source), str(tmp_path / "out"),
         "--quiet"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "taking over the lock" in result.stderr and "pid 999999" in result.stderr
    assert (tmp_path / "out" / "manifest.json").exists()
    assert lock.read_text() == ""  # released cleanly


def test_report_file_describes_a_successful_run(tmp_path):
    source = small_tree(tmp_path / "source")
    images.write(source / "a" / "broken.jpg", b"")
    report = tmp_path / "report.json"
    result = CliRunner().invoke(main, ["pack", str(source), str(tmp_path / "out"), "--quiet",
                                       "--max-reject-fraction", "0.5", "--report", str(report)])
    assert result.exit_code == 0
    data = json.loads(report.read_text())
    assert data["exit_code"] == 0 and data["error"] is None and data["status"] == "packed"
    assert data["totals"]["packed"] == 6 and data["totals"]["rejected"] == 1
    assert data["rejects_by_reason"] == {"empty": 1}
    assert data["run"]["seconds"] > 0 and data["version"]


def test_report_file_is_written_when_the_run_fails(tmp_path):
    report = tmp_path / "report.json"
    result = CliRunner().invoke(main, ["pack", str(tmp_path / "missing"), str(tmp_path / "out"),
                                       "--report", str(report)])
    assert result.exit_code == 2
    data = json.loads(report.read_text())
    assert data["exit_code"] == 2 and "source.path" in data["error"]


@pytest.mark.slow
def test_without_a_terminal_progress_is_a_few_plain_lines(tmp_path):
    source = small_tree(tmp_path / "source", 20)
    result = subprocess.run(
        [sys.executable, "-m", "shardsmith.cli", "pack", str(source), str(tmp_path / "out"),
         "--workers", "1"], cwd=REPO, capture_output=True, text=True, check=True)
    lines = result.stderr.splitlines()
    assert 1 <= len(lines) <= 10, lines
    # the pack's, then its near-duplicate hashes' (made once the shards are written)
    assert all(line.startswith(("pack: ", "hash: ")) and "img/s" in line for line in lines)
    assert "\r" not in result.stderr
    assert [line for line in lines if line.startswith("pack: ")][-1].startswith(
        "pack: 20/20 img (100%)")
    assert lines[-1].startswith("hash: 20/20 img (100%)")
