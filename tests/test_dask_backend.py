"""The dask backend: a real LocalCluster of worker processes, byte-identical output."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from test_pack_e2e import dataset_bytes

from shardsmith.cli import main

import images

distributed = pytest.importorskip(
    "distributed", reason="the dask extra is not installed (pip install 'shardsmith[dask]')")


@pytest.fixture(scope="module")
def scheduler():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None)
    yield cluster.scheduler_address
    cluster.close()


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
