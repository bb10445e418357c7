"""The dask backend: a real LocalCluster of worker processes, byte-identical output, and a
worker killed with SIGKILL in the middle of a pack."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import cv2
import dask
import pytest
from click.testing import CliRunner
from hostile_helpers import command, finish, run, start
from test_pack_e2e import dataset_bytes

from shardsmith.cli import main

import images

distributed = pytest.importorskip(
    "distributed", reason="the dask extra is not installed (pip install 'shardsmith[dask]')")

PACK_ARGS = ("--size", "64", "--shard-samples", "3", "--split", "train=0.5,val=0.5", "--quiet")


def local_cluster() -> distributed.LocalCluster:
    return distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                    dashboard_address=":0")


@pytest.fixture(scope="module")
def scheduler():
    cluster = local_cluster()
    yield cluster.scheduler_address
    cluster.close()


@pytest.fixture(scope="module")
def strict_scheduler():
    """A scheduler that gives a task up at the first worker that dies running it."""
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        cluster = local_cluster()
    yield cluster.scheduler_address
    cluster.close()


def slow_tree(root: Path, count: int = 24) -> Path:
    """``count`` hard links to one 2400x1600 PNG: a tenth of a second or more to decode
    each, so a worker is caught in the middle of one."""
    ok, data = cv2.imencode(".png", images.gradient_rgb(2400, 1600),
                            [cv2.IMWRITE_PNG_COMPRESSION, 1])
    assert ok
    first = images.write(root / "a" / "000.png", data.tobytes())
    for number in range(1, count):
        target = root / "ab"[number % 2] / f"{number:03d}.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        os.link(first, target)
    return root


def busy_worker(address: str, process) -> int:
    """The pid of a Dask worker, as soon as one is running a task of the pack."""
    with distributed.Client(address) as client:
        client.wait_for_workers(2, timeout=60)
        pids = client.run(os.getpid)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            busy = [worker for worker, tasks in client.processing().items() if tasks]
            if busy:
                return pids[busy[0]]
            time.sleep(0.005)
    raise AssertionError("the pack ended before a worker was seen running one of its tasks")


@contextlib.contextmanager
def scheduler_process(folder: Path) -> Iterator[tuple[subprocess.Popen, str]]:
    """A ``dask scheduler`` and two ``dask worker`` processes: (the scheduler, its address)."""
    dask_cli = str(Path(sys.executable).parent / "dask")
    scheduler_file, quiet = folder / "scheduler.json", {"stdout": subprocess.DEVNULL,
                                                         "stderr": subprocess.DEVNULL}
    scheduler = subprocess.Popen([dask_cli, "scheduler", "--port", "0", "--dashboard-address",
                                  ":0", "--scheduler-file", str(scheduler_file)], **quiet)
    workers = None
    try:
        deadline = time.monotonic() + 60
        while not (scheduler_file.exists() and scheduler_file.stat().st_size):
            assert time.monotonic() < deadline and scheduler.poll() is None, "no scheduler"
            time.sleep(0.05)
        address = json.loads(scheduler_file.read_text())["address"]
        workers = subprocess.Popen([dask_cli, "worker", address, "--nworkers", "2",
                                    "--nthreads", "1", "--no-dashboard"], **quiet)
        with distributed.Client(address) as client:
            client.wait_for_workers(2, timeout=60)
        yield scheduler, address
    finally:
        for process in (workers, scheduler):
            if process is not None:
                process.kill()
                process.wait()


@pytest.mark.slow
def test_dask_backend_output_is_byte_identical_to_the_local_backend(mixed_source, tmp_path,
                                                                      scheduler):
    source, _ = mixed_source
    common = ["--size", "72", "--shard-samples", "4", "--split", "train=0.7,val=0.3",
              "--max-reject-fraction", "0.5", "--quiet"]
    local = CliRunner().invoke(main, ["pack", str(source), str(tmp_path / "local"),
                                      "--workers", "2", *common])
    assert local.exit_code == 0, local.output
    remote = CliRunner().invoke(main, ["pack", str(source), str(tmp_path / "dask"),
                                       "--backend", "dask", "--scheduler", scheduler, *common])
    assert remote.exit_code == 0, remote.output
    assert dataset_bytes(tmp_path / "dask") == dataset_bytes(tmp_path / "local")
    index = next((tmp_path / "dask").glob("samples-v*.jsonl")).read_text().splitlines()
    assert all('"near":' in line for line in index)  # the same hashes, made on the cluster


def pack_with_a_worker_killed(tmp_path: Path, scheduler: str, timeout: float) -> tuple:
    """A local pack of a slow tree (the reference), then a pack of it on ``scheduler`` whose
    busy worker is killed: (the dask pack's arguments, its process, its stderr)."""
    source = slow_tree(tmp_path / "source")
    assert run("pack", source, tmp_path / "local", "--workers", "2", *PACK_ARGS,
               timeout=300).returncode == 0
    arguments = ("pack", source, tmp_path / "dask", "--backend", "dask", "--scheduler",
                 scheduler, *PACK_ARGS)
    logs = tmp_path / "logs"
    process = start(command(*arguments), logs)
    os.kill(busy_worker(scheduler, process), signal.SIGKILL)
    return arguments, process, finish(process, logs, timeout=timeout)


def test_a_dask_worker_killed_mid_pack_has_its_task_run_again_and_the_bytes_are_the_same(
        tmp_path, scheduler):
    _, process, stderr = pack_with_a_worker_killed(tmp_path, scheduler, timeout=300)
    assert process.returncode == 0, stderr
    assert dataset_bytes(tmp_path / "dask") == dataset_bytes(tmp_path / "local")


def test_a_task_the_scheduler_gives_up_on_stops_the_pack_in_one_line_and_the_rerun_finishes(
        tmp_path, strict_scheduler):
    # joblib's dask backend waited for good here: the timeout ends it
    arguments, process, stderr = pack_with_a_worker_killed(tmp_path, strict_scheduler,
                                                           timeout=120)
    assert process.returncode == 1, stderr
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert "died more often than the scheduler allows" in stderr
    assert "rerun the same command to resume" in stderr
    rerun = run(*arguments, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert dataset_bytes(tmp_path / "dask") == dataset_bytes(tmp_path / "local")


def test_a_lost_scheduler_stops_the_pack_in_one_line_of_ours_and_a_rerun_finishes(
        tmp_path, scheduler):
    source = slow_tree(tmp_path / "source")
    assert run("pack", source, tmp_path / "local", "--workers", "2", *PACK_ARGS,
               timeout=300).returncode == 0
    output, logs = tmp_path / "dask", tmp_path / "logs"
    with scheduler_process(tmp_path) as (doomed, address):
        process = start(command("pack", source, output, "--backend", "dask", "--scheduler",
                                address, *PACK_ARGS), logs)
        busy_worker(address, process)
        doomed.kill()
        stderr = finish(process, logs, timeout=120)
    assert process.returncode == 1, stderr
    assert "Traceback" not in stderr, stderr  # Dask's client may log a line of its own first
    assert f"the scheduler at {address} dropped the task of" in stderr.strip().splitlines()[-1]
    rerun = run("pack", source, output, "--backend", "dask", "--scheduler", scheduler,
                *PACK_ARGS, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert dataset_bytes(output) == dataset_bytes(tmp_path / "local")


def test_dask_backend_without_a_scheduler_is_a_config_error(tmp_path):
    images.write(tmp_path / "src" / "a" / "x.jpg", images.jpeg())
    result = CliRunner().invoke(main, ["pack", str(tmp_path / "src"), str(tmp_path / "out"),
                                       "--backend", "dask"])
    assert result.exit_code == 2
    assert "run.scheduler: the dask backend needs a scheduler address" in result.output


@pytest.mark.slow
def test_an_unreachable_scheduler_is_reported_clearly(tmp_path):
    images.write(tmp_path / "src" / "a" / "x.jpg", images.jpeg())
    result = CliRunner().invoke(main, ["pack", str(tmp_path / "src"), str(tmp_path / "out"),
                                       "--backend", "dask", "--scheduler", "tcp://127.0.0.1:9"])
    assert result.exit_code == 1
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in result.output
