"""Limits on what a job file may ask of the machine: worker processes and the time of the
``splits.group`` pattern.  Past a limit the command says so in one line (exit 2) before it
starts anything, instead of exhausting memory or backtracking for hours."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from shardsmith.config import LOCAL_WORKERS_PER_CORE, machine_cores
from shardsmith.errors import ConfigError
from shardsmith.packing.plan import make_plan
from shardsmith.packing.scan import SourceFile, SourceTable

import images

REPO = Path(__file__).resolve().parent.parent
SPLITS = (("train", 0.5), ("val", 0.5))
BACKTRACKS = r"(a|aa)+$"  # each letter more doubles the work of a plain backtracking matcher


def shardsmith(*args: object) -> subprocess.CompletedProcess:
    """The real command in a fresh process; a hang fails the test instead of the suite."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "shardsmith", *map(str, args)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120)


def small_tree(root: Path, names: tuple[str, ...] = ("a.jpg", "b.jpg")) -> Path:
    for number, name in enumerate(names):
        images.write(root / "ok" / name, images.jpeg(64, 48, number))
    return root


def files(paths: list[str]) -> SourceTable:
    return SourceTable.of(SourceFile(path, 1, 1, 0) for path in paths)


# ----------------------------------------------------------------------- worker processes

@pytest.mark.slow
def test_more_local_workers_than_four_per_core_is_one_line_and_starts_nothing(tmp_path):
    source, output = small_tree(tmp_path / "source"), tmp_path / "out"
    too_many = LOCAL_WORKERS_PER_CORE * machine_cores() + 1

    refused = shardsmith("pack", source, output, "--workers", too_many, "--size", "64")

    assert refused.returncode == 2, refused.stderr
    lines = refused.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardsmith: error: run.workers:"), lines
    assert f"at most {too_many - 1}" in lines[0]
    assert not output.exists()


@pytest.mark.slow
def test_a_hundred_thousand_workers_in_the_job_file_is_refused_the_same_way(tmp_path):
    source, output = small_tree(tmp_path / "source"), tmp_path / "out"
    job = tmp_path / "job.yaml"
    job.write_text(f"source: {{path: {source}}}\noutput: {{path: {output}}}\n"
                   "run: {workers: 100000}\n")

    refused = shardsmith("pack", "--config", job)

    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.startswith("shardsmith: error: run.workers: 100,000 worker")
    assert not output.exists()


@pytest.mark.slow
def test_four_workers_per_core_is_still_allowed(tmp_path):
    source, output = small_tree(tmp_path / "source"), tmp_path / "out"
    limit = LOCAL_WORKERS_PER_CORE * machine_cores()

    planned = shardsmith("pack", source, output, "--workers", limit, "--dry-run", "--quiet")

    assert planned.returncode == 0, planned.stderr


@pytest.mark.slow
def test_dask_workers_are_not_bounded_by_the_local_cores(tmp_path):
    source, output = small_tree(tmp_path / "source"), tmp_path / "out"

    planned = shardsmith("pack", source, output, "--workers", 100_000, "--backend", "dask",
                         "--scheduler", "tcp://127.0.0.1:9", "--dry-run", "--quiet")

    assert "run.workers" not in planned.stderr
    assert planned.returncode == 0, planned.stderr


def test_probe_may_plan_for_more_cores_than_this_machine_has(tmp_path):
    # A probe predicts for a machine (--workers: its cores); it starts no pool of that size.
    from shardsmith.config import check_workers, load_config

    config = load_config(None, {"source.path": str(tmp_path), "run.workers": 64 * 1024})
    with pytest.raises(ConfigError, match="run.workers"):
        check_workers(config.run)
    assert config.run.worker_count == 64 * 1024  # the file itself is valid


# ------------------------------------------------------------------ splits.group patterns

@pytest.mark.slow
def test_a_group_pattern_that_backtracks_is_one_line_naming_it_and_the_file(tmp_path):
    slow_name = "a" * 64 + "b.jpg"
    source = small_tree(tmp_path / "source", ("c.jpg", slow_name))

    refused = shardsmith("pack", source, tmp_path / "out", "--group", BACKTRACKS,
                         "--workers", "1", "--size", "64", "--quiet")

    assert refused.returncode == 2, refused.stderr
    lines = refused.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardsmith: error: splits.group:"), lines
    assert BACKTRACKS in lines[0] and f"ok/{slow_name}" in lines[0]


@pytest.mark.slow
def test_a_backtracking_group_pattern_is_a_config_error_in_the_plan():
    with pytest.raises(ConfigError, match=r"splits\.group: .*ok/a{40}b\.jpg"):
        make_plan(files(["ok/" + "a" * 40 + "b.jpg"]), SPLITS, 0, BACKTRACKS)


def test_a_group_pattern_with_lookarounds_still_names_the_group():
    plan = make_plan(files(["ok/lot7_part12_shot1.jpg", "ok/lot7_part12_shot2.jpg"]), SPLITS, 0,
                     r"(?<=_)(?P<group>part\d+)(?=_shot)")
    assert {item.group for item in plan} == {"part12"}


def test_a_group_pattern_with_a_backreference_still_names_the_group():
    plan = make_plan(files(["ok/cam3/cam3_0001.jpg", "ok/cam3/cam4_0002.jpg"]), SPLITS, 0,
                     r"(?P<group>cam\d+)/\1_")
    assert {item.source.relpath: item.group for item in plan} == {
        "ok/cam3/cam3_0001.jpg": "cam3", "ok/cam3/cam4_0002.jpg": None}
