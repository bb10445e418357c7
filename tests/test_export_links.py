"""The link worker's program (``shardsmith/ops/export/linkworker.py``) as the export runs it:
``python -I -S``, folder descriptors passed, requests on stdin, its lines on stdout."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from shardsmith.errors import OutputStateError
from shardsmith.ops.export.links import WORKER


def run_worker(pairs: list[tuple[int, int]], requests: bytes) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-I", "-S", str(WORKER),
                           *(f"{source},{target}" for source, target in pairs)],
                          input=requests, capture_output=True,
                          pass_fds=[fd for pair in pairs for fd in pair], timeout=60)


def request(folder: int, size: int, source: Path) -> bytes:
    """A request to link ``source`` (by its name), as recorded: ``size`` bytes, its inode."""
    inode = source.lstat().st_ino if os.path.lexists(source) else 0
    return b"%d\0%d\0%d\0%s\0" % (folder, size, inode, os.fsencode(source.name))


def opened(path: Path) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY)


def test_a_worker_links_what_was_written_and_names_what_it_did_not(tmp_path):
    source, target = tmp_path / "v1", tmp_path / "v2.partial"
    source.mkdir()
    target.mkdir()
    (source / "a b.jpg").write_bytes(b"abc")
    (source / "short.jpg").write_bytes(b"ab")  # recorded as 3 bytes: cut short
    (source / "run.jpg").write_bytes(b"abc")
    (source / "run.jpg").chmod(0o755)  # executable: a fresh export would not make it so
    (source / "elsewhere.jpg").symlink_to(source / "a b.jpg")
    (source / "folder.jpg").mkdir()
    pairs = [(opened(source), opened(target))]
    names = ["a b.jpg", "short.jpg", "run.jpg", "elsewhere.jpg", "folder.jpg", "gone.jpg"]
    result = run_worker(pairs, b"".join(request(0, 3, source / name) for name in names)
                        + b"\0")
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().splitlines() == ["F 1", "F 2", "F 3", "F 4", "F 5", "D"]
    assert (target / "a b.jpg").stat().st_ino == (source / "a b.jpg").stat().st_ino
    assert os.listdir(target) == ["a b.jpg"]  # nothing not as written is left linked


def test_a_file_on_another_file_system_is_not_linked_and_the_worker_goes_on(tmp_path):
    """A version folder someone mounted from elsewhere: its files cannot be linked (EXDEV),
    the samples are made from their shards, and the export does not fail on every rerun."""
    other = Path("/dev/shm")
    if not other.is_dir() or other.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("no second file system at /dev/shm to link across")
    source = Path(tempfile.mkdtemp(dir=other))
    try:
        (source / "a.jpg").write_bytes(b"abc")
        target = tmp_path / "v2.partial"
        target.mkdir()
        result = run_worker([(opened(source), opened(target))],
                            request(0, 3, source / "a.jpg") + b"\0")
        assert result.returncode == 0 and result.stdout.decode().splitlines() == ["F 0", "D"]
    finally:
        shutil.rmtree(source)


def test_a_worker_stops_at_an_error_no_other_file_would_escape(tmp_path):
    """Not a file problem but the target's (here: not a folder; a full disk alike): one
    line with its errno and request, exit 1, nothing after it linked."""
    source = tmp_path / "v1"
    source.mkdir()
    for name in ("a.jpg", "b.jpg"):
        (source / name).write_bytes(b"abc")
    (tmp_path / "file").write_bytes(b"")
    not_a_folder = os.open(tmp_path / "file", os.O_RDONLY)
    second = tmp_path / "second"
    second.mkdir()
    pairs = [(opened(source), opened(second)), (opened(source), not_a_folder)]
    result = run_worker(pairs, request(0, 3, source / "a.jpg") + request(1, 3, source / "a.jpg")
                        + request(0, 3, source / "b.jpg"))
    assert result.returncode == 1
    assert result.stdout.decode().splitlines() == [f"X {errno.ENOTDIR} 1"]
    assert os.listdir(second) == ["a.jpg"]


def test_a_worker_whose_export_is_gone_stops_quietly(tmp_path):
    """stdin ends mid-request (the export killed): the worker ends without a traceback."""
    source, target = tmp_path / "v1", tmp_path / "v2.partial"
    source.mkdir()
    target.mkdir()
    (source / "a.jpg").write_bytes(b"abc")
    result = run_worker([(opened(source), opened(target))],
                        request(0, 3, source / "a.jpg") + b"0\0")
    assert result.stdout == b"" and (target / "a.jpg").exists()
    assert b"Traceback" not in result.stderr


def exported_twice_with(tmp_path: Path, monkeypatch, worker_program: str | None):
    """A second version exported after the first with ``links.WORKER`` replaced by a
    program of ``worker_program`` (None: the real one); returns the export's error or result."""
    from test_export import exported_then_one_more

    from shardsmith.ops.export import export, links

    exported_then_one_more(tmp_path)
    if worker_program is not None:
        program = tmp_path / "worker.py"
        program.write_text(worker_program)
        monkeypatch.setattr(links, "WORKER", program)
    try:
        return export(tmp_path / "dataset", tmp_path / "yolo", "yolo", quiet=True)
    except OutputStateError as exc:
        return exc


@pytest.mark.parametrize("program, said", [
    ("import sys\nsys.exit(0)\n", "ended with exit 0 before it was done"),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n", "was killed by SIGKILL"),
])
def test_a_worker_that_ends_without_its_last_mark_stops_the_export(tmp_path, monkeypatch,
                                                                   program, said):
    """Not the worker's program (an application's own binary as ``sys.executable``), or
    killed (the OOM killer): what it was sent is not linked, so nothing is switched."""
    error = exported_twice_with(tmp_path, monkeypatch, program)
    assert isinstance(error, OutputStateError) and said in str(error), error
    assert "rerun" in str(error)
    assert os.readlink(tmp_path / "yolo" / "current") == "v1"
    monkeypatch.undo()
    from shardsmith.ops.export import export

    assert export(tmp_path / "dataset", tmp_path / "yolo", "yolo", quiet=True).linked > 0


def test_progress_counts_each_sample_once_when_links_fail(tmp_path, monkeypatch):
    """Files of the previous version made executable are not linked: their samples are
    made from their shards and counted there, not also as linked."""
    from shardsmith.ops import export as package
    from shardsmith.progress import Progress

    counted = []

    class Counted(Progress):
        def update(self, count: int = 1) -> None:
            counted.append(count)
            super().update(count)

    from test_export import exported_then_one_more

    exported_then_one_more(tmp_path)
    for path in (tmp_path / "yolo" / "v1" / "images").rglob("*.jpg"):
        path.chmod(0o755)
    monkeypatch.setattr(package, "Progress", Counted)
    result = package.export(tmp_path / "dataset", tmp_path / "yolo", "yolo", quiet=True)
    assert result.linked == 0 and result.written == result.samples
    assert sum(counted) == result.samples and min(counted) >= 0


def test_where_the_second_worker_cannot_start_the_links_are_made_here(tmp_path, monkeypatch):
    """A process limit reached at the second worker: the first is ended, the links are made
    in the export's process, and the version equals a fresh export."""
    from test_export import tree_of

    from shardsmith.ops.export import export, links

    started = []
    real = links._Worker.__init__

    def limited(self, *args, **kwargs):
        if started:
            raise BlockingIOError(errno.EAGAIN, os.strerror(errno.EAGAIN))
        real(self, *args, **kwargs)
        started.append(self)

    monkeypatch.setattr(links._Worker, "__init__", limited)
    result = exported_twice_with(tmp_path, monkeypatch, None)
    assert started and started[0].process.returncode is not None  # ended, not left running
    assert result.linked > 0 and os.readlink(tmp_path / "yolo" / "current") == "v2"
    export(tmp_path / "dataset", tmp_path / "fresh", "yolo", quiet=True)
    fresh = tree_of(tmp_path / "fresh" / "v2")
    fresh["data.yaml"] = fresh["data.yaml"].replace(b"/fresh/", b"/yolo/")
    assert tree_of(tmp_path / "yolo" / "v2") == fresh
