"""No hang, prompt interrupts, no orphans (issue 9): Ctrl-C or SIGTERM during a pack or a stage
ends in one line with the documented exit code, no temporaries and no worker left running.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import cv2
import pytest
from hostile_helpers import (
    PACK_ARGS,
    REPO,
    MiB,
    command,
    finish,
    no_temporaries,
    originals,
    run,
    sha256,
    start,
    write_manifest,
)

import images

pytestmark = pytest.mark.slow

# A NAS-like source: every copy of 256 KiB takes 0.1 s.
SLOW_STORAGE = """
import os, time
import shardsmith.door
shardsmith.door.CHUNK = 256 * 1024
real_copy_file_range = os.copy_file_range
def slow_copy_file_range(*args, **kwargs):
    time.sleep(0.1)
    return real_copy_file_range(*args, **kwargs)
os.copy_file_range = slow_copy_file_range
"""


def opaque_dataset(root: Path, shards: int, shard_bytes: int) -> Path:
    """A manifest over opaque shards of random bytes: something big to copy."""
    root.mkdir(parents=True)
    entries = []
    for number in range(shards):
        data = os.urandom(shard_bytes)
        name = f"train-{number:06d}.tar"
        (root / name).write_bytes(data)
        entries.append({"name": name, "split": "train", "samples": 1, "bytes": shard_bytes,
                        "sha256": sha256(data)})
    (root / "samples.jsonl").write_bytes(b"")
    manifest = {
        "schema_version": 1, "format": "webdataset", "fingerprint": "x", "classes": [],
        "totals": {"seen": shards, "packed": shards, "rejected": 0, "excluded": 0,
                   "bytes_in": 0, "bytes_out": shards * shard_bytes},
        "rejects": [], "shards": entries, "splits": {"train": {}},
        "samples_index": {"name": "samples.jsonl", "samples": 0, "bytes": 0,
                          "sha256": sha256(b"")},
    }
    write_manifest(root, manifest)
    return root


def test_ctrl_c_during_a_stage_cancels_the_queued_copies_and_leaves_no_temporaries(tmp_path):
    dataset = opaque_dataset(tmp_path / "big", 12, 4 * MiB)  # 4.8 s of copying, 4 at a time
    staged, logs = tmp_path / "nvme", tmp_path / "logs"
    process = start(command("stage", dataset, "--to", staged, "--quiet", hook=SLOW_STORAGE),
                    logs)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and process.poll() is None and not (
            staged.is_dir() and len(list(staged.glob(".*.tmp"))) >= 2):
        time.sleep(0.005)
    time.sleep(0.2)  # every copy is queued by now, a few are under way
    assert process.poll() is None, finish(process, logs)
    os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group
    stderr = finish(process, logs)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert not no_temporaries(staged)
    assert len(list(staged.glob("train-*.tar"))) < 12  # queued copies were cancelled


@functools.cache
def big_png() -> bytes:
    """A 1200x900 PNG: about 30 ms to decode, so a pack of many takes a while."""
    ok, data = cv2.imencode(".png", images.gradient_rgb(1200, 900),
                            [cv2.IMWRITE_PNG_COMPRESSION, 1])
    assert ok
    return data.tobytes()


def slow_originals(root: Path, count: int = 60) -> Path:
    """``count`` hard links to one big PNG: seconds of decoding, no disk space."""
    first = images.write(root / "a" / "000.png", big_png())
    for number in range(1, count):
        target = root / "ab"[number % 2] / f"{number:03d}.png"
        target.parent.mkdir(parents=True, exist_ok=True)
        os.link(first, target)
    return root


def descendants(pid: int) -> list:
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def still_running(processes: list) -> list:
    import psutil

    alive = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
        except psutil.NoSuchProcess:
            pass
    return alive


def test_sigterm_during_a_pack_exits_143_in_one_line_and_leaves_no_workers(tmp_path):
    source = slow_originals(tmp_path / "source")
    output, logs = tmp_path / "out", tmp_path / "logs"
    process = start(command("pack", source, output, "--size", "64", "--shard-samples", "2",
                            "--workers", "2", "--quiet"), logs)
    workers: list = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None and not (
                list(output.glob("*.tar")) and len(workers) >= 2):
            workers = descendants(process.pid)
            time.sleep(0.01)
        assert process.poll() is None, finish(process, logs)
        process.send_signal(signal.SIGTERM)  # to the job's process, as systemd or cron do
        finish(process, logs)
        deadline = time.monotonic() + 5
        while still_running(workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = still_running(workers)
        stderr = (logs / "stderr").read_text()  # with what its helpers wrote as they ended
    finally:
        for worker in still_running(workers):
            worker.kill()
    assert process.returncode == 143, stderr
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert stderr.startswith("shardsmith: error:") and "SIGTERM" in stderr
    assert not no_temporaries(output)
    assert not left, f"worker processes left running: {[worker.pid for worker in left]}"


def checkpointed(output) -> bool:
    """Whether the pack's journal records a finished shard (its header and a checkpoint line):
    a shard under its final name may still wait for its checkpoint, and a kill between the two
    makes the rerun start over (rightly), not resume."""
    try:
        return (output / ".shardsmith" / "journal.jsonl").read_bytes().count(b"\n") >= 2
    except OSError:
        return False


def test_a_pack_killed_with_sigkill_leaves_no_process_behind_and_the_rerun_resumes(tmp_path):
    source = slow_originals(tmp_path / "source")
    output, logs = tmp_path / "out", tmp_path / "logs"
    arguments = ("--size", "64", "--shard-samples", "2", "--workers", "2", "--quiet")
    process = start(command("pack", source, output, *arguments), logs)
    tree: list = []  # the workers and loky's resource trackers
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None and not (
                checkpointed(output) and len(tree) >= 4):
            tree = descendants(process.pid)
            time.sleep(0.01)
        assert process.poll() is None, finish(process, logs)
        assert checkpointed(output), "no shard was checkpointed within a minute"
        process.kill()  # SIGKILL to the driver alone: nothing of it runs to tell the others
        process.wait()
        deadline = time.monotonic() + 10
        while still_running(tree) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [(worker.pid, worker.cmdline()[-3:]) for worker in still_running(tree)]
    finally:
        for worker in still_running(tree):
            worker.kill()
    assert not left, f"processes of the killed pack left running: {left}"
    rerun = run("pack", source, output, *arguments)
    assert rerun.returncode == 0 and "resumed after" in rerun.stdout, rerun.stderr
    fresh = run("pack", source, tmp_path / "fresh", *arguments)
    assert fresh.returncode == 0, fresh.stderr
    assert images.dataset_bytes(output) == images.dataset_bytes(tmp_path / "fresh")


def the_command(*args: object, hook: str) -> list[str]:
    """``python -m shardsmith ARGS`` (the installed command's entry), ``hook`` run first."""
    program = f"{hook}\nimport runpy, sys\nsys.argv[0] = 'shardsmith'\n" \
              "runpy.run_module('shardsmith', run_name='__main__', alter_sys=True)\n"
    return [sys.executable, "-c", program, *map(str, args)]


@pytest.mark.parametrize("delay", [0.1, 0.25, 0.4])
def test_ctrl_c_in_the_first_instants_prints_one_line(tmp_path, delay):
    """``delay`` counts from the instant the interpreter hands over to shardsmith: a Ctrl-C
    while Python itself starts (its site module, 0.1 s and more on a loaded machine) is the
    interpreter's, answered with its own traceback before any of our code can run."""
    source, logs, begun = slow_originals(tmp_path / "source"), tmp_path / "logs", tmp_path / "begun"
    process = start(the_command("pack", source, tmp_path / "out", "--size", "64", "--workers",
                                "2", "--quiet", hook=f"open({str(begun)!r}, 'w').close()"), logs)
    deadline = time.monotonic() + 30
    while not begun.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    assert begun.exists(), finish(process, logs)
    time.sleep(delay)
    os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group
    stderr = finish(process, logs)
    # 130, or death by SIGINT (also 130 to a shell): CPython 3.11 sets its "unhandled
    # KeyboardInterrupt" flag when the interrupt lands inside an eval() during an import (e.g.
    # a namedtuple's __new__), even though shardsmith handles it, and exits by SIGINT.
    assert process.returncode in (130, -signal.SIGINT), stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardsmith: error:"), stderr


# Ctrl-C arrives while click parses the arguments (click's own handler said "Aborted!", exit 1).
WHILE_PARSING = """
import os, signal, click.core
parse_args = click.core.Command.parse_args
def interrupted(self, ctx, args):
    os.kill(os.getpid(), signal.SIGINT)
    return parse_args(self, ctx, args)
click.core.Command.parse_args = interrupted
"""

# Ctrl-C lands in a compiled module's init, which clears it (as Cython's does while it patches
# collections.abc): the pack ran on and exited 0.
SWALLOWED_BY_AN_INIT = """
import os, signal
from importlib.machinery import ExtensionFileLoader
exec_module = ExtensionFileLoader.exec_module
def swallowing(loader, module):
    if module.__name__ == "simplejpeg._jpeg":
        try:
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(100000))  # the interrupt is raised here
        except KeyboardInterrupt:
            pass
    exec_module(loader, module)
ExtensionFileLoader.exec_module = swallowing
"""


# Ctrl-C lands inside fdopen once it owns the journal spool's descriptor (a second close
# replaced the interrupt with "Bad file descriptor", exit 1).
INSIDE_THE_SPOOLS_FDOPEN = """
import os, sys
fdopen = os.fdopen
def interrupted(fd, *args, **kwargs):
    handle = fdopen(fd, *args, **kwargs)
    if sys._getframe(1).f_code.co_name == "_open_spool":
        handle.close()  # as the file does when the interrupt drops it
        raise KeyboardInterrupt
    return handle
os.fdopen = interrupted
"""


@pytest.mark.parametrize("hook", [WHILE_PARSING, SWALLOWED_BY_AN_INIT, INSIDE_THE_SPOOLS_FDOPEN],
                         ids=["while-parsing", "swallowed-by-a-module-init", "inside-fdopen"])
def test_a_ctrl_c_in_the_first_instants_is_never_lost_nor_another_error(tmp_path, hook):
    source = originals(tmp_path / "source")
    result = subprocess.run(the_command("pack", source, tmp_path / "out", "--size", "64",
                                        "--quiet", hook=hook),
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode in (130, -signal.SIGINT), (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardsmith: error: interrupted"), \
        result.stderr
    assert not (tmp_path / "out" / "manifest.json").exists()

@pytest.mark.parametrize("command, ending", [
    (["pack", "SOURCE", "OUT", "--size", "64", "--quiet"],
     "interrupted; finished work is kept, rerun the same command to resume"),
    (["inspect", "SOURCE"], "interrupted"),  # it keeps nothing: a rerun starts over
    (["probe", "SOURCE", "--quiet"], "interrupted"),
])
def test_only_a_command_that_resumes_says_a_rerun_resumes(tmp_path, command, ending):
    source = originals(tmp_path / "source")
    arguments = [{"SOURCE": source, "OUT": tmp_path / "out"}.get(word, word) for word in command]
    result = subprocess.run(the_command(*arguments, hook=WHILE_PARSING),
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 130, result.stderr
    assert result.stderr.strip() == f"shardsmith: error: {ending}"


# ------------------------------------------- a kill -9 between the commit and its cleanup

KILL_AT = {
    # inside the commit: the manifest renamed, its lists and obsolete files not yet handled
    "after-the-manifest-rename": ("shardsmith.dataset.manifest", "write_derived"),
    # after the commit: the journal and spool of the committed run not yet removed
    "before-the-journal-is-removed": ("shardsmith.packing.journal", "Journal.remove"),
}


def kill_hook(module: str, function: str) -> str:
    """Python run before the command: SIGKILL on the first call of ``module.function``."""
    owner, _, name = function.rpartition(".")
    target = f"module.{owner}" if owner else "module"
    return (f"import os, signal, importlib\nmodule = importlib.import_module({module!r})\n"
            f"def killed(*args, **kwargs):\n    os.kill(os.getpid(), signal.SIGKILL)\n"
            f"setattr({target}, {name!r}, killed)\n")


def second_version_sources(source: Path) -> None:
    """Sources of a second version: one original removed, one changed, one added (a shard
    of the first version is rewritten, one more leaves)."""
    (source / "a" / "0.jpg").unlink()
    images.write(source / "b" / "1.jpg", images.jpeg(90, 60, 77))
    images.write(source / "a" / "new.jpg", images.jpeg(80, 50, 78))


def everything(dataset: Path) -> dict[str, bytes]:
    """Every file of the dataset and of its state folder (the lock aside), the manifest
    without its timings."""
    files = images.dataset_bytes(dataset)
    state = dataset / ".shardsmith"
    files.update({f".shardsmith/{path.name}": path.read_bytes() for path in state.iterdir()
                  if path.name != "lock"})
    return files


@pytest.mark.parametrize("point", list(KILL_AT))
def test_a_kill_after_the_commit_is_finished_by_the_rerun_as_an_uninterrupted_run(
        tmp_path, point):
    source = originals(tmp_path / "source", 8)
    first = tmp_path / "v1"
    assert run("pack", source, first, *PACK_ARGS).returncode == 0
    second_version_sources(source)
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    shutil.copytree(first, reference)
    shutil.copytree(first, killed)
    assert run("pack", source, reference, *PACK_ARGS).returncode == 0

    interrupted = run("pack", source, killed, *PACK_ARGS, hook=kill_hook(*KILL_AT[point]))
    assert interrupted.returncode == -signal.SIGKILL, interrupted.stderr
    assert images.manifest_of(killed)["version"] == 2  # committed, not cleaned up
    rerun = run("pack", source, killed, *PACK_ARGS)
    assert rerun.returncode == 0 and "Traceback" not in rerun.stderr, rerun.stderr
    assert everything(killed) == everything(reference)
    assert run("verify", killed, "--quiet").stdout.count("not listed") == 0


def test_an_interrupt_as_a_shard_s_index_file_is_made_leaves_no_temporary(tmp_path, monkeypatch):
    """SIGTERM's exception may land after the index's temporary file is created and before the
    writer holds it (a pack under load left ``.train-000001.idx.PID.tmp``): the shard's discard
    removes it by its name."""
    from collections import Counter

    from shardsmith.dataset import formats
    from shardsmith.dataset.formats.webdataset import _record

    made = formats.HashingFile

    class InterruptedWhenMade(made):
        def __init__(self, final: Path):
            super().__init__(final)
            if final.suffix == ".idx":
                raise KeyboardInterrupt

    monkeypatch.setattr(formats, "HashingFile", InterruptedWhenMade)
    roller = formats.ShardRoller(formats.shard_format("webdataset"), tmp_path,
                                 formats.ShardLimits(1 << 20), Counter())
    roller.add("train", _record("k", {"jpg": b"\xff\xd8", "cls": b"0", "json": b"{}"}))
    with pytest.raises(KeyboardInterrupt):
        roller.close()
    assert sorted(path.name for path in tmp_path.iterdir()) == []
