"""Our own state folder (``DIR/.shardsmith``: lock, journal, sample spool, stage record) is
never followed out of: a link, a FIFO, a folder or a second name in place of one of its parts
is one line naming the path and exit 2, never a hang, and nothing outside is read or touched.

Every case runs the real command in a fresh process with a timeout: a FIFO that is waited on
fails the test instead of hanging the suite.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hostile_helpers import PACK_ARGS, REPO, run
from hostile_helpers import one_stderr_line as one_error_line

import images
from images import manifest_of

FOREIGN = b"\x1b[31mSECRET of another program\nsecond line\n"


def snapshot(root: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every entry under ``root``: its kind, size and (for regular files) bytes."""
    found = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        data = path.read_bytes() if stat.S_ISREG(info.st_mode) else b""
        found[str(path.relative_to(root))] = (stat.S_IFMT(info.st_mode), info.st_size, data)
    return found


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """A finished dataset of six small JPEGs, packed as PACK_ARGS say."""
    source = tmp_path / "source"
    for number in range(6):
        images.write(source / "ab"[number % 2] / f"{number}.jpg", images.jpeg(96, 64, number))
    return images.pack_small(source, tmp_path / "dataset", "webdataset", 32, "train=0.5,val=0.5")


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder of someone else's, holding a file with content of its own."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "notes.txt").write_bytes(FOREIGN)
    return folder


def add_original(dataset: Path) -> None:
    """A new original in the dataset's source: the next pack is an increment."""
    source = dataset.parent / "source"
    images.write(source / "a" / "new.jpg", images.jpeg(96, 64, 99))


def pack(dataset: Path) -> subprocess.CompletedProcess:
    return run("pack", dataset.parent / "source", dataset, *PACK_ARGS)


def stage(dataset: Path, destination: Path) -> subprocess.CompletedProcess:
    return run("stage", dataset, "--to", destination, "--quiet")


def staged(dataset: Path, destination: Path) -> Path:
    assert stage(dataset, destination).returncode == 0
    return destination


# ------------------------------------------------------------------------- the lock file

@pytest.mark.slow
def test_a_lock_linked_to_a_file_outside_is_refused_by_an_up_to_date_pack(dataset, outside):
    lock = dataset / ".shardsmith" / "lock"
    lock.unlink()
    lock.symlink_to(outside / "notes.txt")
    before = snapshot(outside)
    line = one_error_line(pack(dataset), 2)
    assert str(lock) in line and "symbolic link" in line
    assert snapshot(outside) == before


@pytest.mark.slow
def test_a_lock_linked_to_a_file_outside_is_refused_by_an_increment(dataset, outside):
    lock = dataset / ".shardsmith" / "lock"
    lock.unlink()
    lock.symlink_to(outside / "notes.txt")
    add_original(dataset)
    before = snapshot(outside)
    line = one_error_line(pack(dataset), 2)
    assert str(lock) in line
    assert snapshot(outside) == before
    assert manifest_of(dataset)["version"] == 1


@pytest.mark.slow
def test_a_lock_linked_to_a_file_outside_is_refused_by_stage_at_the_destination(
        dataset, outside, tmp_path):
    destination = staged(dataset, tmp_path / "nvme")
    lock = destination / ".shardsmith" / "lock"
    lock.unlink()
    lock.symlink_to(outside / "notes.txt")
    before = snapshot(outside)
    line = one_error_line(stage(dataset, destination), 2)
    assert str(lock) in line
    assert snapshot(outside) == before


def test_a_lock_linked_to_a_file_outside_is_refused_by_stage_at_the_source(
        dataset, outside, tmp_path):
    lock = dataset / ".shardsmith" / "lock"
    lock.unlink()
    lock.symlink_to(outside / "notes.txt")
    before = snapshot(outside)
    line = one_error_line(stage(dataset, tmp_path / "nvme"), 2)
    assert str(lock) in line
    assert snapshot(outside) == before


def test_a_lock_with_a_second_name_outside_is_refused_and_left_as_it_is(dataset, outside):
    lock = dataset / ".shardsmith" / "lock"
    lock.unlink()
    os.link(outside / "notes.txt", lock)  # the same file under two names
    before = snapshot(outside)
    line = one_error_line(pack(dataset), 2)
    assert str(lock) in line
    assert snapshot(outside) == before


@pytest.mark.parametrize("command", ["pack", "stage to it", "stage from it"])
@pytest.mark.slow
def test_a_lock_that_is_a_fifo_is_one_line_not_a_hang(dataset, tmp_path, command):
    destination = staged(dataset, tmp_path / "nvme") if command == "stage to it" else None
    lock = (destination or dataset) / ".shardsmith" / "lock"
    lock.unlink()
    os.mkfifo(lock)
    if command == "pack":
        result = pack(dataset)
    else:
        result = stage(dataset, destination or tmp_path / "other")
    line = one_error_line(result, 2)
    assert str(lock) in line and "FIFO" in line


@pytest.mark.slow
def test_a_lock_that_is_a_folder_is_one_line_and_the_folder_stays(dataset):
    lock = dataset / ".shardsmith" / "lock"
    lock.unlink()
    lock.mkdir()
    (lock / "keep.txt").write_bytes(FOREIGN)
    line = one_error_line(pack(dataset), 2)
    assert str(lock) in line
    assert (lock / "keep.txt").read_bytes() == FOREIGN


@pytest.mark.slow
def test_taking_over_a_lock_never_prints_what_a_foreign_lock_file_holds(dataset):
    (dataset / ".shardsmith" / "lock").write_bytes(FOREIGN)
    add_original(dataset)
    result = pack(dataset)
    assert result.returncode == 0, result.stderr
    assert "SECRET" not in result.stderr and "\x1b" not in result.stderr
    assert manifest_of(dataset)["version"] == 2


@pytest.mark.slow
def test_taking_over_a_lock_of_ours_names_its_holder(dataset):
    holder = "pid 4242 on trainer-7 since 2026-01-01T10:00:00"
    (dataset / ".shardsmith" / "lock").write_text(holder + "\n")
    add_original(dataset)
    result = pack(dataset)
    assert result.returncode == 0, result.stderr
    assert holder in result.stderr


# ------------------------------------------------------------------------ the state folder

@pytest.mark.parametrize("command", ["pack", "increment", "stage to it"])
@pytest.mark.slow
def test_a_state_folder_linked_to_another_folder_is_refused_and_nothing_is_written_there(
        dataset, outside, tmp_path, command):
    root = staged(dataset, tmp_path / "nvme") if command == "stage to it" else dataset
    folder = root / ".shardsmith"
    for entry in folder.iterdir():
        entry.unlink()
    folder.rmdir()
    folder.symlink_to(outside, target_is_directory=True)
    if command == "increment":
        add_original(dataset)
    before = snapshot(outside)
    result = stage(dataset, root) if command == "stage to it" else pack(dataset)
    line = one_error_line(result, 2)
    assert str(folder) in line and "symbolic link" in line
    assert snapshot(outside) == before


def test_a_state_folder_that_is_a_file_is_one_line(dataset):
    folder = dataset / ".shardsmith"
    for entry in folder.iterdir():
        entry.unlink()
    folder.rmdir()
    folder.write_bytes(FOREIGN)
    line = one_error_line(pack(dataset), 2)
    assert str(folder) in line
    assert folder.read_bytes() == FOREIGN


# --------------------------------------------------------------- a pack's journal and spool

def interrupted_journal(dataset: Path) -> Path:
    """The journal of an increment that stopped before its commit: written by a real pack
    told to fail right after its first checkpoint."""
    add_original(dataset)
    hook = ("import shardsmith.packing.journal as journal\n"
            "real = journal.Journal.checkpoint\n"
            "def checkpoint(self, *args, **kwargs):\n"
            "    real(self, *args, **kwargs)\n"
            "    raise KeyboardInterrupt\n"
            "journal.Journal.checkpoint = checkpoint\n")
    program = f"{hook}import sys\nfrom shardsmith.cli import main\n" \
              "main(sys.argv[1:], prog_name='shardsmith')\n"
    subprocess.run([sys.executable, "-c", program, "pack", dataset.parent / "source", dataset,
                    *PACK_ARGS], cwd=REPO, capture_output=True, timeout=60)
    journal = dataset / ".shardsmith" / "journal.jsonl"
    assert journal.exists() and manifest_of(dataset)["version"] == 1
    return journal


@pytest.mark.parametrize("name", ["journal.jsonl", "samples.jsonl"])
@pytest.mark.slow
def test_a_journal_file_linked_outside_is_refused_and_the_file_outside_stays(
        dataset, outside, name):
    interrupted_journal(dataset)
    target = dataset / ".shardsmith" / name
    (outside / name).write_bytes(target.read_bytes())
    target.unlink()
    target.symlink_to(outside / name)
    before = snapshot(outside)
    line = one_error_line(pack(dataset), 2)
    assert str(target) in line
    assert snapshot(outside) == before


@pytest.mark.parametrize("name", ["journal.jsonl", "samples.jsonl"])
@pytest.mark.slow
def test_a_journal_file_that_is_a_fifo_is_one_line_not_a_hang(dataset, name):
    interrupted_journal(dataset)
    target = dataset / ".shardsmith" / name
    target.unlink()
    os.mkfifo(target)
    line = one_error_line(pack(dataset), 2)
    assert str(target) in line and "FIFO" in line


@pytest.mark.slow
def test_an_interrupted_increment_still_resumes_from_its_journal(dataset):
    interrupted_journal(dataset)
    result = pack(dataset)
    assert result.returncode == 0, result.stderr
    assert manifest_of(dataset)["version"] == 2
    assert run("verify", dataset, "--quiet").returncode == 0


# ------------------------------------------------------------------- a stage's own record

@pytest.mark.parametrize("kind", ["a link to a file outside", "a FIFO"])
@pytest.mark.slow
def test_a_stage_record_that_is_not_a_file_of_ours_is_one_line(dataset, outside, tmp_path,
                                                               kind):
    destination = staged(dataset, tmp_path / "nvme")
    record = destination / ".shardsmith" / "staged.json"
    record.unlink()
    if kind == "a FIFO":
        os.mkfifo(record)
    else:
        record.symlink_to(outside / "notes.txt")
    before = snapshot(outside)
    line = one_error_line(stage(dataset, destination), 2)
    assert str(record) in line
    assert snapshot(outside) == before
