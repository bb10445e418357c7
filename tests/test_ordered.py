"""The one bounded, ordered parallel map: item order, a bounded window, nothing cancelled."""

from __future__ import annotations

import os
import random
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from shardsmith import load_config
from shardsmith.ordered import in_order
from shardsmith.packing.scan import SourceFile
from shardsmith.probe import compute

import images


def test_results_come_in_item_order_with_at_most_the_window_submitted_and_not_taken():
    pending = 0
    most = 0
    lock = threading.Lock()

    def work(item: int) -> int:
        time.sleep(random.Random(item).random() / 200)
        return item * item

    def submit(item: int) -> Future:
        nonlocal pending, most
        with lock:
            pending += 1
            most = max(most, pending)
        return pool.submit(work, item)

    results = []
    with ThreadPoolExecutor(4) as pool:
        for result in in_order(submit, range(50), 3):
            with lock:
                pending -= 1
            results.append(result)
    assert results == [item * item for item in range(50)]
    assert most == 3


def test_a_result_that_raises_stops_the_map_and_cancels_no_future():
    futures = []

    def submit(item: int) -> Future:
        futures.append(Future())
        if item == 0:
            futures[-1].set_exception(RuntimeError("worker failed"))
        return futures[-1]

    with pytest.raises(RuntimeError, match="worker failed"):
        list(in_order(submit, range(10), 4))
    assert len(futures) == 4
    assert not any(future.cancelled() for future in futures)


def test_take_gets_each_item_with_its_future_to_name_it_in_an_error():
    def take(item: str, future: Future) -> str:
        return f"{item}={future.result()}"

    with ThreadPoolExecutor(2) as pool:
        assert list(in_order(lambda item: pool.submit(len, item), ["a", "bb", "ccc"], 2, take)) \
            == ["a=1", "bb=2", "ccc=3"]


class _HeldExecutor:
    """An executor whose first task fails and whose others wait: what a loky pool holds when
    the probe stops early."""

    def __init__(self) -> None:
        self.futures: list[Future] = []

    def submit(self, function, *args) -> Future:
        future: Future = Future()
        if not self.futures:
            future.set_exception(RuntimeError("conversion failed"))
        self.futures.append(future)
        return future


def test_a_probe_stopped_by_a_failed_conversion_cancels_no_future_of_the_loky_pool(
        tmp_path, monkeypatch):
    # Cancelling a loky future can leave loky's manager thread dead and its workers running
    # (packing/parallel.py): the probe's map leaves them to run out as the pack's does.
    sample = []
    for index in range(8):
        path = images.write(tmp_path / f"{index}.jpg", images.jpeg(32, 24, seed=index))
        info = os.stat(path)
        sample.append(SourceFile(path.name, info.st_size, info.st_mtime_ns, 0, info.st_ino))
    executor = _HeldExecutor()
    monkeypatch.setattr(compute, "local_executor", lambda processes: executor)
    monkeypatch.setattr(compute, "machine_cores", lambda: 2)
    config = load_config(None, {"source.path": str(tmp_path), "run.workers": 2})
    with pytest.raises(RuntimeError, match="conversion failed"):
        compute.measure_sample(tmp_path, sample, config, ("a",))
    assert len(executor.futures) == 4
    assert not any(future.cancelled() for future in executor.futures)
