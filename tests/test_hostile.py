"""A hostile user's cases (issue 9), each driving the real command on real files.

A dataset directory is untrusted input; a full disk, a signal or a file swapped mid-run never
publishes an inconsistent dataset, never hangs and never prints a traceback: one line, the
documented exit code.  The cases that mount a tmpfs (a small or read-only disk) need root, which
CI has; elsewhere they skip and say why.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import io
import json
import logging
import os
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import pytest
from click.testing import CliRunner, Result

from shardsmith.cli import main

import images
from images import dataset_bytes, manifest_of, samples_of

REPO = Path(__file__).resolve().parents[1]
PAGE = os.sysconf("SC_PAGE_SIZE")
MiB = 2**20
# The settings of ``packed`` (images.pack_small): a CLI pack with these continues its dataset.
PACK_ARGS = ("--size", "32", "--shard-samples", "3", "--split", "train=0.5,val=0.5",
             "--workers", "1", "--quiet")


# ------------------------------------------------------------------------------------ helpers

def cli(*args: object) -> Result:
    """The ``shardsmith`` command in this process (click's runner)."""
    return CliRunner().invoke(main, [str(arg) for arg in args])


def pack_cli(source: Path, output: Path, *extra: object) -> Result:
    return cli("pack", source, output, *PACK_ARGS, *extra)


def crashed(result: Result) -> str:
    """The traceback of an exception the command let through (not a clean exit), or ''."""
    if result.exc_info is None or isinstance(result.exception, SystemExit):
        return ""
    return "".join(traceback.format_exception(*result.exc_info))


def one_error_line(result: Result, code: int) -> str:
    """The command failed with ``code`` and printed exactly one line: ``shardsmith: error: ...``."""
    assert not crashed(result), crashed(result)
    assert result.exit_code == code, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardsmith: error:"), lines
    return lines[0]


def one_stderr_line(process: subprocess.CompletedProcess, code: int) -> str:
    assert process.returncode == code, (process.returncode, process.stdout, process.stderr)
    assert "Traceback" not in process.stderr, process.stderr
    lines = process.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardsmith: error:"), process.stderr
    return lines[0]


def command(*args: object, hook: str = "") -> list[str]:
    """A fresh ``shardsmith`` process; ``hook`` runs first (the one way to act mid-run)."""
    program = f"{hook}\nimport sys\nfrom shardsmith.cli import main\n" \
              "main(sys.argv[1:], prog_name='shardsmith')\n"
    return [sys.executable, "-c", program, *map(str, args)]


def run(*args: object, hook: str = "", timeout: float = 60, **options) -> \
        subprocess.CompletedProcess:
    """Run the command in a fresh process; past ``timeout`` (a hang) the test fails."""
    return subprocess.run(command(*args, hook=hook), cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, **options)


def start(argv: list[str], logs: Path) -> subprocess.Popen:
    """Start ``argv`` in its own process group (a terminal's foreground job), its output going
    to files in ``logs``: a pipe would also wait for any orphan still holding it.

    SIGINT gets its default handling back first: a test run started in the background (``&``,
    ``nohup``) ignores it, and a child inherits that, as Python keeps an ignored SIGINT."""
    logs.mkdir(parents=True, exist_ok=True)
    with open(logs / "stdout", "w") as stdout, open(logs / "stderr", "w") as stderr:
        return subprocess.Popen(argv, cwd=REPO, stdout=stdout, stderr=stderr,
                                start_new_session=True, preexec_fn=_default_sigint)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def finish(process: subprocess.Popen, logs: Path, timeout: float = 30) -> str:
    """Wait for the process (killing its group if it hangs); returns what it wrote to stderr."""
    try:
        process.wait(timeout=timeout)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return (logs / "stderr").read_text()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def originals(root: Path, count: int = 6) -> Path:
    """``count`` small JPEGs in two class folders, a and b."""
    for number in range(count):
        images.write(root / "ab"[number % 2] / f"{number}.jpg", images.jpeg(96, 64, number))
    return root


def packed(tmp_path: Path, name: str = "dataset", count: int = 6) -> Path:
    """A finished dataset of ``tmp_path/source`` (made on first use), packed as PACK_ARGS say."""
    source = tmp_path / "source"
    if not source.exists():
        originals(source, count)
    output = tmp_path / name
    output.parent.mkdir(parents=True, exist_ok=True)
    return images.pack_small(source, output, "webdataset", 32, "train=0.5,val=0.5")


def write_manifest(dataset: Path, manifest: object) -> None:
    (dataset / "manifest.json").write_text(json.dumps(manifest, indent=1))


def index_bytes(records: list[dict]) -> bytes:
    return b"".join((json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()
                    for record in records)


def replace_sample_index(dataset: Path, data: bytes, fix_size: bool = True,
                         fix_sha: bool = True) -> None:
    """Put ``data`` in the dataset's sample index; the manifest's size and sha256 follow it
    unless told not to."""
    manifest = manifest_of(dataset)
    entry = manifest["samples_index"]
    (dataset / entry["name"]).write_bytes(data)
    if fix_size:
        entry["bytes"] = len(data)
    if fix_sha:
        entry["sha256"] = sha256(data)
    write_manifest(dataset, manifest)


def files_outside(root: Path, inside: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under ``root`` except ``inside`` and what it holds: its kind, size and mtime.

    What a command confined to ``inside`` must leave exactly as it was.
    """
    found = {}
    for path in root.rglob("*"):
        if path == inside or inside in path.parents:
            continue
        info = path.lstat()
        found[str(path.relative_to(root))] = (stat.S_IFMT(info.st_mode), info.st_size,
                                              info.st_mtime_ns)
    return found


def staged_version(directory: Path) -> int:
    return manifest_of(directory)["version"]


def no_temporaries(directory: Path) -> list[str]:
    return sorted(str(path) for path in directory.rglob("*.tmp"))


def limit_file_size() -> None:
    """In the child: a file past 64 MiB kills it (SIGXFSZ) instead of filling the disk."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * MiB, 64 * MiB))


def used_bytes(path: Path) -> int:
    info = os.statvfs(path)
    return (info.f_blocks - info.f_bfree) * info.f_frsize


def refill(disk: Path, first: Path, target: Path, free_pages: int) -> None:
    """``target`` a fresh copy of ``first`` on ``disk``, with ``free_pages`` pages left free."""
    shutil.rmtree(target, ignore_errors=True)
    resize(disk, 8 * MiB)
    shutil.copytree(first, target)
    resize(disk, used_bytes(disk) + free_pages * PAGE)


def full_disk_problem(result: Result, target: Path, where: str) -> str | None:
    """What is wrong with a run that hit a full disk: it must say so in one line (exit 1),
    naming a file under ``target``, with no traceback; None when all of that holds."""
    lines, trace = result.output.strip().splitlines(), crashed(result)
    if trace or result.exit_code != 1 or len(lines) != 1 or \
            "No space left on device" not in lines[0]:
        return f"{where}: exit {result.exit_code}: {result.output!r} {trace}"
    if str(target) not in lines[0]:
        return f"{where}: the line names no file: {lines[0]}"
    return None


def resize(mount_point: Path, size: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(mount_point)], check=True,
                   capture_output=True)


@pytest.fixture
def tmpfs(tmp_path: Path):
    """``tmpfs(path, size, "ro")`` mounts a tmpfs at ``path``; all are unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs (a small or read-only disk) needs root; CI runs as root")
    mounted: list[Path] = []

    def mount(path: Path, size: int, *options: str) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join([f"size={size}",
                                 *options]), "tmpfs", str(path)], capture_output=True, text=True)
        if result.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


# ------------------------------------------------------- security: a dataset is untrusted input

TRAVERSAL_NAMES = ["../../x/evil.txt", "{tmp}/abs/train-000000.tar", "../victim/train-000000.tar"]


def plant_shard_name(tmp_path: Path, dataset: Path, name: str) -> Path:
    """List the dataset's first shard under ``name`` (manifest and sample index) and put its
    real bytes where that name points, so size and sha256 match; returns that place."""
    manifest = manifest_of(dataset)
    shard = manifest["shards"][0]
    target = Path(os.path.normpath(dataset / name))
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(dataset / shard["name"], target)
    records = [dict(record, shard=name if record["shard"] == shard["name"] else record["shard"])
               for record in samples_of(dataset)]
    data = index_bytes(records)
    (dataset / manifest["samples_index"]["name"]).write_bytes(data)
    manifest["samples_index"].update(bytes=len(data), sha256=sha256(data))
    shard["name"] = name
    shard.pop("index", None)  # an index is optional for tars; its name would need one too
    write_manifest(dataset, manifest)
    return target


def traversal_dataset(tmp_path: Path, name: str) -> tuple[Path, Path]:
    dataset = packed(tmp_path, "lib/dataset")
    return dataset, plant_shard_name(tmp_path, dataset, name.format(tmp=tmp_path))


@pytest.mark.parametrize("name", TRAVERSAL_NAMES)
def test_stage_refuses_a_traversal_shard_name_and_writes_nothing_outside(tmp_path, name):
    dataset, _ = traversal_dataset(tmp_path, name)
    destination = tmp_path / "deep" / "er" / "nvme"
    destination.mkdir(parents=True)
    before = files_outside(tmp_path, destination)
    line = one_error_line(cli("stage", dataset, "--to", destination, "--quiet"), 2)
    assert "manifest.json" in line
    assert files_outside(tmp_path, destination) == before
    assert not (destination / "manifest.json").exists()
    assert not [p for p in destination.rglob("*") if p.is_file() and p.parent == destination]


@pytest.mark.parametrize("name", TRAVERSAL_NAMES)
def test_verify_refuses_a_traversal_shard_name_in_one_line(tmp_path, name):
    dataset, _ = traversal_dataset(tmp_path, name)
    before = files_outside(tmp_path, tmp_path / "nothing")
    line = one_error_line(cli("verify", dataset), 2)
    assert "manifest.json" in line
    assert files_outside(tmp_path, tmp_path / "nothing") == before


@pytest.mark.parametrize("name", TRAVERSAL_NAMES)
def test_an_increment_never_deletes_a_file_a_traversal_shard_name_points_to(tmp_path, name):
    dataset, target = traversal_dataset(tmp_path, name)
    planted = [r for r in samples_of(dataset) if r["shard"] == name.format(tmp=tmp_path)]
    (tmp_path / "source" / planted[0]["path"]).unlink()  # its shard is now stale: "obsolete"
    content = target.read_bytes()
    before = files_outside(tmp_path, dataset)
    line = one_error_line(pack_cli(tmp_path / "source", dataset), 2)
    assert "manifest.json" in line
    assert target.read_bytes() == content
    assert files_outside(tmp_path, dataset) == before


def test_the_torch_reader_refuses_a_traversal_shard_name(tmp_path):
    from shardsmith.errors import ManifestError
    from shardsmith.readers.torch import dataset as torch_dataset

    dataset, _ = traversal_dataset(tmp_path, "../victim/train-000000.tar")
    with pytest.raises(ManifestError, match="manifest.json"):
        torch_dataset(dataset, shuffle=False)


@pytest.mark.parametrize("kind", ["a symlink to /dev/zero", "a FIFO"])
def test_stage_refuses_a_shard_that_is_not_a_regular_file_and_fills_nothing(tmp_path, kind):
    dataset = packed(tmp_path)
    name = manifest_of(dataset)["shards"][0]["name"]
    (dataset / name).unlink()
    if kind == "a FIFO":
        os.mkfifo(dataset / name)
    else:
        os.symlink("/dev/zero", dataset / name)
    destination = tmp_path / "nvme"
    result = run("stage", dataset, "--to", destination, "--quiet", timeout=60,
                 preexec_fn=limit_file_size)
    line = one_stderr_line(result, 1)
    assert name in line
    assert not (destination / name).exists() and not (destination / "manifest.json").exists()
    assert sum(p.stat().st_size for p in destination.rglob("*") if p.is_file()) < MiB
    assert not no_temporaries(destination)


def _top_level_list(manifest: dict) -> object:
    return [manifest]


def _shards_a_string(manifest: dict) -> object:
    return dict(manifest, shards="abc")


def _shard_without_bytes(manifest: dict) -> object:
    del manifest["shards"][0]["bytes"]
    return manifest


def _no_samples_index(manifest: dict) -> object:
    del manifest["samples_index"]
    return manifest


def _no_format(manifest: dict) -> object:
    del manifest["format"]
    return manifest


def _shard_listed_twice(manifest: dict) -> object:
    manifest["shards"].append(manifest["shards"][0])
    return manifest


def _unknown_schema(manifest: dict) -> object:
    return dict(manifest, schema_version=99)


MALFORMED: dict[str, Callable[[dict], object]] = {
    "top-level list": _top_level_list,
    "shards is a string": _shards_a_string,
    "a shard without bytes": _shard_without_bytes,
    "no samples_index": _no_samples_index,
    "no format": _no_format,
    "a shard listed twice": _shard_listed_twice,
    "unknown schema version": _unknown_schema,
}


@pytest.mark.parametrize("command_name", ["verify", "stage", "pack", "log"])
@pytest.mark.parametrize("damage", list(MALFORMED))
def test_a_malformed_manifest_is_one_line_and_exit_2(tmp_path, damage, command_name):
    dataset = packed(tmp_path)
    shards = sorted(p.name for p in dataset.glob("*.tar"))
    write_manifest(dataset, MALFORMED[damage](manifest_of(dataset)))
    args = {"verify": ["verify", dataset], "log": ["log", dataset],
            "stage": ["stage", dataset, "--to", tmp_path / "nvme", "--quiet"],
            "pack": ["pack", tmp_path / "source", dataset, *PACK_ARGS]}[command_name]
    one_error_line(cli(*args), 2)
    assert sorted(p.name for p in dataset.glob("*.tar")) == shards  # nothing removed
    assert not (tmp_path / "nvme" / "manifest.json").exists()


def rewrite_first_sample(dataset: Path, change: Callable[[tarfile.TarInfo], None]) -> str:
    """Rebuild the first shard with ``change`` applied to its first member (a .jpg), fixing the
    manifest's size and sha256 so only the member is wrong; returns the shard's name."""
    manifest = manifest_of(dataset)
    shard = manifest["shards"][0]
    path = dataset / shard["name"]
    with tarfile.open(path) as tar:
        members = [(info, tar.extractfile(info).read()) for info in tar.getmembers()]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for number, (info, data) in enumerate(members):
            if number == 0:
                change(info)
                data = data if info.isfile() else b""
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    data = buffer.getvalue()
    path.write_bytes(data)
    (dataset / shard["index"]["name"]).unlink()
    shard.update(bytes=len(data), sha256=sha256(data))
    del shard["index"]
    write_manifest(dataset, manifest)
    return shard["name"]


def _member_in_a_folder(info: tarfile.TarInfo) -> None:
    info.name = "sub/" + info.name


def _member_going_up(info: tarfile.TarInfo) -> None:
    info.name = "../" + info.name


def _member_a_symlink(info: tarfile.TarInfo) -> None:
    info.type, info.linkname, info.size = tarfile.SYMTYPE, "/etc/passwd", 0


UNSAFE_MEMBERS = {"a path separator": _member_in_a_folder, "..": _member_going_up,
                  "a symlink": _member_a_symlink}


@pytest.mark.parametrize("unsafe", list(UNSAFE_MEMBERS))
def test_verify_reports_a_tar_member_that_could_escape_or_is_not_a_file(tmp_path, unsafe):
    dataset = packed(tmp_path)
    name = rewrite_first_sample(dataset, UNSAFE_MEMBERS[unsafe])
    result = cli("verify", dataset)
    assert not crashed(result), crashed(result)
    assert result.exit_code == 1, result.output
    problems = [line for line in result.output.splitlines() if line.startswith(f"{name}: ")]
    assert any("member" in line for line in problems), result.output


def read_all_naming_problems(dataset: Path, caplog: pytest.LogCaptureFixture) -> str:
    """Read every sample with the torch reader; returns the error it raised, or else what it
    logged (a reader may skip or replace a bad sample, but must say which)."""
    from shardsmith.readers.torch import dataset as torch_dataset

    with caplog.at_level(logging.WARNING):
        try:
            list(torch_dataset(dataset, shuffle=False))
        except Exception as exc:  # noqa: BLE001 - a named error is one of the two outcomes
            return f"{type(exc).__name__}: {exc}"
    return caplog.text


@pytest.mark.parametrize("unsafe", list(UNSAFE_MEMBERS))
def test_the_torch_reader_names_the_shard_of_an_unsafe_tar_member(tmp_path, unsafe, caplog):
    dataset = packed(tmp_path)
    name = rewrite_first_sample(dataset, UNSAFE_MEMBERS[unsafe])
    said = read_all_naming_problems(dataset, caplog)
    assert name in said and "member" in said, said


def test_an_original_swapped_for_a_symlink_after_the_scan_is_rejected_not_followed(
    tmp_path, monkeypatch
):
    import shardsmith.pipeline

    source = originals(tmp_path / "source")
    secret = images.write(tmp_path / "outside" / "secret.jpg", images.jpeg(120, 80, 42))
    victim = source / "a" / "0.jpg"
    real_scan = shardsmith.pipeline.scan

    def scan_then_swap(*args, **kwargs):
        scanned = real_scan(*args, **kwargs)
        victim.unlink()
        victim.symlink_to(secret)
        return scanned

    monkeypatch.setattr(shardsmith.pipeline, "scan", scan_then_swap)
    output = tmp_path / "out"
    result = pack_cli(source, output, "--max-reject-fraction", "1")
    assert result.exit_code == 0, result.output + crashed(result)
    rejects = {r["path"]: r["reason"] for r in manifest_of(output)["rejects"]}
    assert rejects == {"a/0.jpg": "not_a_file"}
    assert "a/0.jpg" not in {record["path"] for record in samples_of(output)}


# ------------------------------------------------- integrity: never publish an inconsistent set

def add_increment(source: Path) -> None:
    """The issue's increment: one new image and 150 empty files."""
    images.write(source / "a" / "new.jpg", images.jpeg(96, 64, 99))
    for number in range(150):
        images.write(source / "b" / f"empty{number:03d}.jpg", b"")


def test_a_full_disk_at_any_point_of_an_increment_leaves_a_dataset_that_verifies(
    tmp_path, tmpfs
):
    """ENOSPC sweep: one page more free space each round, so each round fails at a later write.

    After every failed run: one line naming the file, exit 1, the report written, no
    temporaries, and ``verify`` passes on the old version or the new one; with space again, a
    rerun gives the bytes of an uninterrupted run.
    """
    source = originals(tmp_path / "source", 8)
    clean, first = tmp_path / "clean", tmp_path / "first"
    assert pack_cli(source, clean).exit_code == 0
    shutil.copytree(clean, first)
    add_increment(source)
    assert pack_cli(source, clean, "--max-reject-fraction", "1").exit_code == 0
    expected = dataset_bytes(clean)
    disk = tmpfs(tmp_path / "disk", 8 * MiB)
    output, report = disk / "out", tmp_path / "report.json"
    problems: list[str] = []
    failure_points: set[str] = set()
    for free_pages in range(64):
        refill(disk, first, output, free_pages)
        report.unlink(missing_ok=True)
        result = pack_cli(source, output, "--max-reject-fraction", "1", "--report", report)
        if result.exit_code == 0:
            break
        where = f"{free_pages} pages free"
        problem = full_disk_problem(result, output, where)
        if problem:
            problems.append(problem)
        else:
            failure_points.add(result.output.strip().replace(str(output), "OUTPUT"))
        written = json.loads(report.read_text()) if report.exists() else {}
        if written.get("exit_code") != 1 or not written.get("error"):
            problems.append(f"{where}: report {written}")
        del result
        gc.collect()  # (a lock handle leaked by a failed run: its own test below)
        if no_temporaries(output):
            problems.append(f"{where}: temporaries left: {no_temporaries(output)}")
        verified = cli("verify", output, "--quiet")
        if verified.exit_code != 0:
            problems.append(f"{where}: verify after the failure (version "
                            f"{staged_version(output)}): {verified.output.strip()!r}")
        resize(disk, 8 * MiB)
        rerun = pack_cli(source, output, "--max-reject-fraction", "1")
        if rerun.exit_code != 0:
            problems.append(f"{where}: the rerun failed: {rerun.output.strip()}")
        elif dataset_bytes(output) != expected:
            problems.append(f"{where}: the rerun differs from an uninterrupted run")
    else:
        pytest.fail("the increment never fitted")
    assert free_pages >= 5 and len(failure_points) >= 3, (free_pages, failure_points, problems)
    assert not problems, "\n".join(problems)


def test_a_full_disk_when_taking_the_lock_does_not_keep_the_dataset_locked(tmp_path, tmpfs):
    from shardsmith import load_config, pack

    source = originals(tmp_path / "source")
    first = packed(tmp_path, "first")
    disk = tmpfs(tmp_path / "disk", 8 * MiB)
    output = disk / "out"
    shutil.copytree(first, output)
    images.write(source / "a" / "new.jpg", images.jpeg(96, 64, 99))
    config = load_config(None, {"source.path": str(source), "output.path": str(output),
                                "output.shard_samples": 3, "image.size": 32,
                                "splits": "train=0.5,val=0.5", "run.quiet": True,
                                "run.workers": 1})
    resize(disk, used_bytes(disk))  # not a page to spare: writing the holder's name fails
    with pytest.raises(OSError) as failure:  # the caller keeps the error (to report it)
        pack(config)
    resize(disk, 8 * MiB)
    assert pack(config).manifest.version == 2, failure  # the same process retries


def test_a_full_destination_at_any_point_of_a_restage_keeps_the_old_staged_version(
    tmp_path, tmpfs, monkeypatch
):
    """ENOSPC sweep of a re-stage (the free-space check passed: another writer fills the disk).

    After every failed run: one line naming the file, exit 1, no temporaries, and the
    destination verifies (old version or new); with space again the stage completes.
    """
    monkeypatch.setattr(shutil, "disk_usage",
                        lambda path: shutil._ntuple_diskusage(2**40, 0, 2**40))
    dataset = packed(tmp_path)
    disk = tmpfs(tmp_path / "disk", 8 * MiB)
    destination, first = disk / "nvme", tmp_path / "staged-v1"
    assert cli("stage", dataset, "--to", destination, "--quiet").exit_code == 0
    shutil.copytree(destination, first)
    for number in range(6, 12):
        images.write(tmp_path / "source" / "ab"[number % 2] / f"{number}.jpg",
                     images.jpeg(96, 64, number))
    assert pack_cli(tmp_path / "source", dataset).exit_code == 0
    problems: list[str] = []
    for free_pages in range(64):
        refill(disk, first, destination, free_pages)
        result = cli("stage", dataset, "--to", destination, "--quiet")
        if result.exit_code == 0:
            break
        where = f"{free_pages} pages free"
        problem = full_disk_problem(result, destination, where)
        if problem:
            problems.append(problem)
        del result
        gc.collect()
        if no_temporaries(destination):
            problems.append(f"{where}: temporaries left: {no_temporaries(destination)}")
        verified = cli("verify", destination, "--quiet")
        if verified.exit_code != 0:
            problems.append(f"{where}: verify after the failure: {verified.output.strip()!r}")
        resize(disk, 8 * MiB)
        again = cli("stage", dataset, "--to", destination, "--quiet")
        if again.exit_code != 0 or staged_version(destination) != 2:
            problems.append(f"{where}: the rerun: {again.output.strip()!r}")
    else:
        pytest.fail("the stage never fitted")
    assert free_pages >= 3, problems
    assert not problems, "\n".join(problems)


def test_a_rewrite_during_decoding_keeps_the_digest_of_the_decoded_bytes(tmp_path, monkeypatch):
    """The bytes decoded are the bytes hashed; the next pack sees the rewrite and decodes it."""
    import shardsmith.imaging
    from shardsmith.records import content_digest

    source = tmp_path / "source"
    victim = images.write(source / "a" / "scan.bmp", images.bmp(160, 120, 1))
    images.write(source / "b" / "other.bmp", images.bmp(160, 120, 2))
    decoded, rewritten = victim.read_bytes(), images.bmp(160, 120, 3)
    assert len(decoded) == len(rewritten) and decoded != rewritten
    real_convert = shardsmith.imaging.convert
    rewrites = []

    def convert_while_rewritten(data, config):
        if not rewrites and (data == decoded or str(data) == str(victim)):
            mtime_ns = victim.stat().st_mtime_ns
            with open(victim, "r+b") as handle:  # same size, in place, mid-decode
                handle.write(rewritten)
            os.utime(victim, ns=(mtime_ns, mtime_ns + 10**9))
            rewrites.append(victim)
        return real_convert(data, config)

    monkeypatch.setattr(shardsmith.imaging, "convert", convert_while_rewritten)
    output = tmp_path / "out"
    assert pack_cli(source, output).exit_code == 0
    assert rewrites
    record = {r["path"]: r for r in samples_of(output)}["a/scan.bmp"]
    assert record["source_digest"] == content_digest(decoded)
    monkeypatch.undo()
    assert pack_cli(source, output).exit_code == 0
    manifest = manifest_of(output)
    assert manifest["run"]["decoded"] == 1 and manifest["history"][-1]["changed"] == 1
    record = {r["path"]: r for r in samples_of(output)}["a/scan.bmp"]
    assert record["source_digest"] == content_digest(rewritten)


def edit_the_middle(path: Path) -> None:
    """Invert 3000 bytes in the middle of the file, same size, mtime one second later."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 3000] = bytes(255 - byte for byte in data[middle : middle + 3000])
    before = path.stat()
    path.write_bytes(bytes(data))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 10**9))


def bmp_source(tmp_path: Path) -> tuple[Path, Path]:
    source = tmp_path / "source"
    victim = images.write(source / "a" / "scan.bmp", images.bmp(320, 240, 1))  # 230 kB
    assert victim.stat().st_size > 3 * 64 * 1024  # the middle is in neither edge
    images.write(source / "b" / "other.jpg", images.jpeg(96, 64, 2))
    return source, victim


def test_a_same_size_edit_in_the_middle_of_a_bmp_is_detected_and_decoded_again(tmp_path):
    source, victim = bmp_source(tmp_path)
    output = tmp_path / "out"
    assert pack_cli(source, output).exit_code == 0
    before = {r["path"]: r for r in samples_of(output)}["a/scan.bmp"]
    edit_the_middle(victim)
    assert pack_cli(source, output).exit_code == 0
    manifest = manifest_of(output)
    assert manifest["run"]["decoded"] == 1
    assert manifest["history"][-1]["changed"] == 1 and manifest["history"][-1]["touched"] == 0
    after = {r["path"]: r for r in samples_of(output)}["a/scan.bmp"]
    assert after["source_digest"] != before["source_digest"]


def test_edges_change_detection_misses_a_same_size_edit_in_the_middle_of_a_bmp(tmp_path):
    """The documented limitation of ``run.change_detection: edges`` (head and tail 64 KiB)."""
    source, victim = bmp_source(tmp_path)
    config = tmp_path / "edges.yaml"
    config.write_text("run:\n  change_detection: edges\n")
    output = tmp_path / "out"
    assert pack_cli(source, output, "--config", config).exit_code == 0
    edit_the_middle(victim)
    result = pack_cli(source, output, "--config", config)
    assert result.exit_code == 0, result.output
    manifest = manifest_of(output)
    assert manifest["run"]["decoded"] == 0
    assert manifest["history"][-1]["touched"] == 1 and manifest["history"][-1]["changed"] == 0


def test_a_shard_deleted_by_hand_is_repaired_by_the_next_pack(tmp_path):
    dataset = packed(tmp_path)
    shard = manifest_of(dataset)["shards"][0]
    (dataset / shard["name"]).unlink()
    result = pack_cli(tmp_path / "source", dataset)
    assert result.exit_code == 0, result.output
    manifest = manifest_of(dataset)
    assert manifest["run"]["decoded"] == shard["samples"]
    assert manifest["history"][-1]["repaired"] == shard["samples"]
    verified = cli("verify", dataset, "--decode")
    assert verified.exit_code == 0, verified.output
    staged = tmp_path / "nvme"
    result = cli("stage", dataset, "--to", staged, "--quiet")
    assert result.exit_code == 0, result.output
    assert cli("verify", staged, "--decode").exit_code == 0


def test_a_restage_keeps_the_destination_manifest_valid_while_copying(tmp_path, monkeypatch):
    import shardsmith.stage
    from shardsmith.manifest import read_manifest
    from shardsmith.verify import verify

    dataset = packed(tmp_path)
    staged = tmp_path / "nvme"
    assert cli("stage", dataset, "--to", staged, "--quiet").exit_code == 0
    source = tmp_path / "source"
    for number in range(6, 12):
        images.write(source / "ab"[number % 2] / f"{number}.jpg", images.jpeg(96, 64, number))
    images.write(source / "a" / "0.jpg", images.jpeg(96, 64, 50))  # a shard is rewritten
    assert pack_cli(source, dataset).exit_code == 0
    real_copy = shardsmith.stage._copy_verified
    seen: list[tuple[str, object, list[str]]] = []

    def copy_checking_the_destination(source_dir, destination, entry, *rest):
        try:
            version: object = read_manifest(destination).version
            problems = verify(destination).problems
        except Exception as exc:  # noqa: BLE001 - recorded, asserted below
            version, problems = f"unreadable: {exc}", []
        seen.append((entry.name, version, problems))
        return real_copy(source_dir, destination, entry, *rest)

    monkeypatch.setattr(shardsmith.stage, "_copy_verified", copy_checking_the_destination)
    result = cli("stage", dataset, "--to", staged, "--workers", "1", "--quiet")
    assert result.exit_code == 0, result.output + crashed(result)
    assert len(seen) >= 2
    assert all(version == 1 and not problems for _, version, problems in seen), seen
    assert staged_version(staged) == 2 and cli("verify", staged).exit_code == 0


# ---------------------------------------------------- upgrades: earlier datasets stay readable

# ``Config.fingerprint()`` of PACK_ARGS as release 51667eb (schema 1) computed it.
PREVIOUS_RELEASE_FINGERPRINT = "537c544b24948269ff5afda8a01b36d90b5f2d97849f0925b8dbb31da61e392d"


def previous_release_digest(path: Path) -> str:
    """51667eb's ``quick_digest``: sha256 of the size, the first and the last 64 KiB."""
    data, edge = path.read_bytes(), 64 * 1024
    digest = hashlib.sha256(str(len(data)).encode())
    digest.update(data[:edge])
    if len(data) > edge:
        digest.update(data[max(edge, len(data) - edge) :][:edge])
    return digest.hexdigest()[:32]


def as_previous_release(dataset: Path, source: Path) -> None:
    """Rewrite a fresh dataset as 51667eb wrote it: schema 1, ``samples.jsonl``, no ``.idx``
    beside tars, no shard lists, no ``index`` key on tar shards, head/tail source digests."""
    manifest = manifest_of(dataset)
    records = [dict(record, source_digest=previous_release_digest(source / record["path"]))
               for record in samples_of(dataset)]
    data = index_bytes(records)
    (dataset / manifest["samples_index"]["name"]).unlink()
    (dataset / "samples.jsonl").write_bytes(data)
    for shard in manifest["shards"]:
        (dataset / shard.pop("index")["name"]).unlink()
    for shard_list in dataset.glob("*-shards.*"):
        shard_list.unlink()
    manifest["schema_version"] = 1
    manifest["samples_index"] = {"name": "samples.jsonl", "samples": len(records),
                                 "bytes": len(data), "sha256": sha256(data)}
    for version in manifest["history"]:
        version.pop("repaired", None)
        version.pop("note", None)
    listing = [(shard["name"], shard["sha256"]) for shard in manifest["shards"]]
    listing.append(("samples.jsonl", sha256(data)))
    manifest["content_fingerprint"] = sha256(json.dumps(listing).encode())
    write_manifest(dataset, manifest)


def previous_release_dataset(tmp_path: Path) -> Path:
    dataset = packed(tmp_path)
    as_previous_release(dataset, tmp_path / "source")
    return dataset


def test_a_dataset_of_the_previous_release_passes_verify(tmp_path):
    dataset = previous_release_dataset(tmp_path)
    result = cli("verify", dataset, "--decode")
    assert result.exit_code == 0, result.output + crashed(result)


def test_a_dataset_of_the_previous_release_stages_and_its_copy_verifies(tmp_path):
    dataset = previous_release_dataset(tmp_path)
    staged = tmp_path / "nvme"
    result = cli("stage", dataset, "--to", staged, "--quiet")
    assert result.exit_code == 0, result.output + crashed(result)
    verified = cli("verify", staged, "--decode")
    assert verified.exit_code == 0, verified.output


def test_the_torch_reader_reads_a_dataset_of_the_previous_release(tmp_path):
    from shardsmith.readers.torch import dataset as torch_dataset

    dataset = previous_release_dataset(tmp_path)
    samples = list(torch_dataset(dataset, shuffle=False))
    assert len(samples) == 6
    assert all(image.shape[0] == 3 and max(image.shape[1:]) == 32 for image, _ in samples)


def test_the_next_pack_upgrades_the_previous_release_without_decoding_or_overwrite(tmp_path):
    dataset = previous_release_dataset(tmp_path)
    before = {s["name"]: (s["bytes"], s["sha256"]) for s in manifest_of(dataset)["shards"]}
    result = pack_cli(tmp_path / "source", dataset)
    assert result.exit_code == 0, result.output + crashed(result)
    manifest = manifest_of(dataset)
    assert manifest["schema_version"] == 2 and manifest["version"] == 2
    assert manifest["run"]["decoded"] == 0
    assert {s["name"]: (s["bytes"], s["sha256"]) for s in manifest["shards"]} == before
    assert all((dataset / s["index"]["name"]).exists() for s in manifest["shards"])
    assert cli("verify", dataset, "--decode").exit_code == 0


def test_new_settings_at_their_defaults_keep_the_fingerprint_of_the_previous_release(tmp_path):
    assert manifest_of(packed(tmp_path))["fingerprint"] == PREVIOUS_RELEASE_FINGERPRINT


def test_no_shard_passes_a_tiny_size_target_even_with_very_long_source_paths(tmp_path):
    source = tmp_path / "source"
    folder = source / "a" / ("x" * 200) / ("y" * 200) / ("z" * 200)
    for number in range(14):
        images.write(folder / f"{number:02d}{'w' * 200}.jpg", images.jpeg(96, 64, number))
    output = tmp_path / "out"
    result = cli("pack", source, output, "--size", "32", "--shard-size", "0.02", "--workers", "1",
                 "--quiet")
    assert result.exit_code == 0, result.output
    target = int(0.02 * MiB)
    shards = manifest_of(output)["shards"]
    assert any(shard["samples"] > 1 for shard in shards)
    for shard in shards:
        assert (output / shard["name"]).stat().st_size == shard["bytes"]
        assert shard["bytes"] <= target or shard["samples"] == 1, shard


# ---------------------------------------------------- no hang, prompt interrupts, no orphans

SWAP_FOR_A_FIFO = """
import os
import shardsmith.pipeline as pipeline
real_scan = pipeline.scan
def scan_then_swap(*args, **kwargs):
    scanned = real_scan(*args, **kwargs)
    os.unlink({victim!r})
    os.mkfifo({victim!r})
    return scanned
pipeline.scan = scan_then_swap
"""


def test_a_file_replaced_by_a_fifo_after_the_scan_is_a_reject_and_the_pack_finishes(tmp_path):
    source = originals(tmp_path / "source")
    victim = source / "b" / "3.jpg"
    output = tmp_path / "out"
    result = run("pack", source, output, "--size", "32", "--workers", "2", "--quiet",
                 "--max-reject-fraction", "1", hook=SWAP_FOR_A_FIFO.format(victim=str(victim)),
                 timeout=60)
    assert result.returncode == 0, result.stderr
    rejects = {r["path"]: r["reason"] for r in manifest_of(output)["rejects"]}
    assert rejects == {"b/3.jpg": "not_a_file"}
    assert len(samples_of(output)) == 5


# A NAS-like source: every copy of 256 KiB takes 0.1 s.
SLOW_STORAGE = """
import os, time
import shardsmith.stage
shardsmith.stage.COPY_CHUNK = 256 * 1024
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


def test_ctrl_c_during_a_stage_stops_within_two_seconds_and_leaves_no_temporaries(tmp_path):
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
    interrupted = time.monotonic()
    stderr = finish(process, logs)
    elapsed = time.monotonic() - interrupted
    assert process.returncode == 130, stderr
    assert elapsed < 2.0, elapsed
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


@pytest.mark.parametrize("delay", [0.1, 0.25, 0.4])
def test_ctrl_c_in_the_first_instants_prints_one_line(tmp_path, delay):
    source, logs = slow_originals(tmp_path / "source"), tmp_path / "logs"
    process = start([sys.executable, "-m", "shardsmith", "pack", str(source),  # the command
                     str(tmp_path / "out"), "--size", "64", "--workers", "2", "--quiet"], logs)
    time.sleep(delay)
    os.killpg(process.pid, signal.SIGINT)  # Ctrl-C: the whole foreground group
    stderr = finish(process, logs)
    # 130, or death by SIGINT (also 130 to a shell): CPython 3.11 sets its "unhandled
    # KeyboardInterrupt" flag when the interrupt lands inside an eval() during an import (e.g.
    # a namedtuple's __new__), even though shardsmith handles it, and exits by SIGINT.
    assert process.returncode in (130, -signal.SIGINT), stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardsmith: error:"), stderr


# ------------------------------------------------------ bad input is a reject, not the end

def test_names_that_are_not_utf8_are_packed_and_the_summary_prints(tmp_path):
    source = tmp_path / "source"
    odd_class = source / os.fsdecode(b"caf\xe9")
    images.write(odd_class / "ok.jpg", images.jpeg(96, 64, 1))
    images.write(source / "plain" / os.fsdecode(b"caf\xe9.jpg"), images.jpeg(96, 64, 2))
    images.write(source / "plain" / "fine.jpg", images.jpeg(96, 64, 3))
    images.write(source / "plain" / os.fsdecode(b"bad\xff.jpg"), b"not an image at all")
    output = tmp_path / "out"
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONIOENCODING"}
    environment["LC_ALL"] = "C.UTF-8"  # a UTF-8 terminal: printing a bad byte is an error
    result = run("pack", source, output, "--size", "32", "--workers", "1",
                 "--max-reject-fraction", "1", env=environment)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout.startswith(f"{output}: packed")
    manifest = manifest_of(output)
    outcome = {record["path"]: "packed" for record in samples_of(output)}
    outcome.update({reject["path"]: reject["reason"] for reject in manifest["rejects"]})
    assert outcome[os.fsdecode(b"caf\xe9/ok.jpg")] in ("packed", "bad_name")
    assert outcome[os.fsdecode(b"plain/caf\xe9.jpg")] in ("packed", "bad_name")
    assert outcome["plain/fine.jpg"] == "packed"
    assert outcome[os.fsdecode(b"plain/bad\xff.jpg")] in ("not_an_image", "bad_name")
    assert manifest["totals"]["packed"] + manifest["totals"]["rejected"] == 4
    assert cli("verify", output).exit_code == 0


def test_more_than_a_thousand_nested_directories_do_not_overflow_the_stack(tmp_path):
    source = tmp_path / "source"
    chain = [source / "a"]
    for _ in range(1100):
        chain.append(chain[-1] / "d")
    for directory in chain:  # os.makedirs itself recurses
        directory.mkdir(parents=directory is chain[0])
    deepest = images.write(chain[-1] / "deep.jpg", images.jpeg(96, 64, 1))
    shallow = images.write(source / "a" / "shallow.jpg", images.jpeg(96, 64, 2))
    try:
        result = cli("pack", source, tmp_path / "out", "--size", "32", "--workers", "1",
                     "--quiet")
        assert result.exit_code == 0, result.output + crashed(result)
        assert manifest_of(tmp_path / "out")["totals"]["packed"] == 2
    finally:
        deepest.unlink()
        shallow.unlink()
        for directory in reversed(chain):  # shutil.rmtree recurses too
            directory.rmdir()


def test_a_16bit_rgba_png_over_max_decoded_mb_is_rejected_before_decoding(tmp_path, monkeypatch):
    import tracemalloc

    import shardsmith.imaging

    pixels = np.full((2000, 2000, 4), 40000, np.uint16)
    ok, png = cv2.imencode(".png", pixels)
    assert ok
    del pixels
    source = tmp_path / "source"
    images.write(source / "a" / "huge.png", png.tobytes())
    images.write(source / "a" / "small.jpg", images.jpeg(96, 64, 1))
    config = tmp_path / "limits.yaml"
    config.write_text("image:\n  max_decoded_mb: 16\n")
    real_decode = shardsmith.imaging.decode_pixels
    decoded_formats = []

    def recording_decode(data, image, *args):
        decoded_formats.append(image.format)
        return real_decode(data, image, *args)

    monkeypatch.setattr(shardsmith.imaging, "decode_pixels", recording_decode)
    tracemalloc.start()
    try:
        result = cli("pack", source, tmp_path / "out", "--config", config, "--size", "32",
                     "--workers", "1", "--quiet", "--max-reject-fraction", "1")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.exit_code == 0, result.output + crashed(result)
    (reject,) = manifest_of(tmp_path / "out")["rejects"]
    assert reject["path"] == "a/huge.png" and reject["reason"] == "too_large"
    assert "2000x2000" in reject["detail"] and "16" in reject["detail"], reject
    assert "PNG" not in decoded_formats
    assert peak < 16 * MiB, peak


ALIAS_BOMB = """\
source:
  extensions:
    - &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]
    - &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
    - &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
    - &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
    - &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
    - &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
    - &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
    - &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
    - &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""


def test_a_yaml_alias_bomb_is_one_short_line_quickly(tmp_path):
    config = tmp_path / "bomb.yaml"
    config.write_text(ALIAS_BOMB)
    assert len(ALIAS_BOMB) < 450
    originals(tmp_path / "source")
    started = time.monotonic()
    result = run("pack", tmp_path / "source", tmp_path / "out", "--config", config, timeout=60)
    elapsed = time.monotonic() - started
    line = one_stderr_line(result, 2)
    assert len(line) < 500 and "bomb.yaml" in line
    assert elapsed < 10, elapsed


def test_a_key_given_twice_in_yaml_is_an_error_naming_it(tmp_path):
    config = tmp_path / "twice.yaml"
    config.write_text("image:\n  size: 64\n  quality: 80\n  size: 128\n")
    originals(tmp_path / "source")
    line = one_error_line(cli("pack", tmp_path / "source", tmp_path / "out", "--config", config),
                          2)
    assert "'size'" in line and "twice.yaml" in line
    assert not (tmp_path / "out" / "manifest.json").exists()


# ------------------------------------------------------------ one line, not a traceback

@pytest.mark.parametrize("value", [".inf", ".nan"])
def test_an_infinite_shard_size_in_yaml_is_one_line(tmp_path, value):
    config = tmp_path / "job.yaml"
    config.write_text(f"output:\n  shard_size_mb: {value}\n")
    originals(tmp_path / "source")
    line = one_error_line(cli("pack", tmp_path / "source", tmp_path / "out", "--config", config),
                          2)
    assert "output.shard_size_mb" in line


def test_a_read_only_output_is_one_line(tmp_path, tmpfs):
    output = tmpfs(tmp_path / "readonly", MiB, "ro")
    originals(tmp_path / "source")
    line = one_error_line(cli("pack", tmp_path / "source", output, *PACK_ARGS), 1)
    assert "read-only" in line and str(output) in line


def test_a_read_only_destination_is_one_line(tmp_path, tmpfs):
    dataset = packed(tmp_path)
    destination = tmpfs(tmp_path / "readonly", MiB, "ro")
    line = one_error_line(cli("stage", dataset, "--to", destination, "--quiet"), 1)
    assert "read-only" in line and str(destination) in line


@pytest.mark.parametrize("where", ["under a regular file", "on a read-only disk"])
def test_an_unwritable_report_path_warns_in_one_line_and_the_pack_succeeds(
    tmp_path, where, request
):
    if where == "under a regular file":
        (tmp_path / "notes.txt").write_text("a file, not a folder\n")
        report = tmp_path / "notes.txt" / "report.json"
    else:
        report = request.getfixturevalue("tmpfs")(tmp_path / "readonly", MiB, "ro") / "r.json"
    originals(tmp_path / "source")
    output = tmp_path / "out"
    result = pack_cli(tmp_path / "source", output, "--report", report)
    assert result.exit_code == 0, result.output + crashed(result)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardsmith: warning:"), result.stderr
    assert "report" in lines[0]
    assert cli("verify", output).exit_code == 0


def garbage(size: int) -> bytes:
    return (b"\x00\xff{not json]\n" * (size // 13 + 1))[:size]


GARBAGE = {
    # Same size, and the manifest's sha256 made to match: only the content is bad.
    "same size": lambda size: (garbage(size), True),
    "wrong size": lambda size: (garbage(size + 100), False),
}


@pytest.mark.parametrize("kind", list(GARBAGE))
def test_garbage_in_the_sample_index_makes_an_increment_one_line_exit_2(tmp_path, kind):
    dataset = packed(tmp_path)
    data, fix_sha = GARBAGE[kind](manifest_of(dataset)["samples_index"]["bytes"])
    replace_sample_index(dataset, data, fix_size=False, fix_sha=fix_sha)
    manifest = (dataset / "manifest.json").read_bytes()
    shards = sorted(p.name for p in dataset.glob("*.tar"))
    images.write(tmp_path / "source" / "a" / "new.jpg", images.jpeg(96, 64, 77))
    line = one_error_line(pack_cli(tmp_path / "source", dataset), 2)
    assert manifest_of(dataset)["samples_index"]["name"] in line
    assert (dataset / "manifest.json").read_bytes() == manifest
    assert sorted(p.name for p in dataset.glob("*.tar")) == shards


@pytest.mark.parametrize("kind", list(GARBAGE))
def test_garbage_in_the_sample_index_is_a_problem_verify_prints(tmp_path, kind):
    dataset = packed(tmp_path)
    data, fix_sha = GARBAGE[kind](manifest_of(dataset)["samples_index"]["bytes"])
    replace_sample_index(dataset, data, fix_size=False, fix_sha=fix_sha)
    result = cli("verify", dataset)
    assert not crashed(result), crashed(result)
    assert result.exit_code == 1, result.output
    name = manifest_of(dataset)["samples_index"]["name"]
    assert any(name in line for line in result.output.splitlines()), result.output


def test_stage_refuses_a_sample_index_whose_sha256_differs_from_the_manifest(tmp_path):
    dataset = packed(tmp_path)
    name = manifest_of(dataset)["samples_index"]["name"]
    records = samples_of(dataset)
    records[0]["label"] = 1 - records[0]["label"]  # same size, other content
    replace_sample_index(dataset, index_bytes(records), fix_size=False, fix_sha=False)
    staged = tmp_path / "nvme"
    line = one_error_line(cli("stage", dataset, "--to", staged, "--quiet"), 2)
    assert name in line
    assert not (staged / "manifest.json").exists()


def test_stage_while_a_pack_holds_the_dataset_is_refused_naming_the_holder(tmp_path):
    import fcntl

    dataset = packed(tmp_path)
    staged = tmp_path / "nvme"
    with open(dataset / ".shardsmith" / "lock", "a+") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)
        holder.write("pid 4242 on etl-host since 2026-11-29T02:00:00\n")
        holder.flush()
        line = one_error_line(cli("stage", dataset, "--to", staged, "--quiet"), 1)
    assert "pid 4242 on etl-host" in line
    assert not (staged / "manifest.json").exists()


def test_stage_refuses_too_little_free_space_in_a_unit_that_fits(tmp_path, monkeypatch):
    dataset = packed(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage",
                        lambda path: shutil._ntuple_diskusage(10**9, 10**9 - 300_000, 300_000))
    line = one_error_line(cli("stage", dataset, "--to", tmp_path / "nvme", "--quiet"), 1)
    assert "not enough free space" in line and "0.00 GB" not in line
    assert re.search(r"\d[\d.,]* (B|kB) to copy", line), line
    assert "300.0 kB free" in line


def test_verify_after_staging_one_split_notes_the_other_splits_leftovers(tmp_path):
    dataset = packed(tmp_path)
    val_shards = [s["name"] for s in manifest_of(dataset)["shards"] if s["split"] == "val"]
    assert val_shards
    staged = tmp_path / "nvme"
    assert cli("stage", dataset, "--to", staged, "--quiet").exit_code == 0
    assert cli("stage", dataset, "--to", staged, "--split", "train", "--quiet").exit_code == 0
    result = cli("verify", staged)
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if line.startswith("note: ")]
    for name in val_shards:
        assert f"note: {name}: not listed, left from an earlier stage; stage --prune removes " \
               "it" in notes, result.output


def test_the_torch_reader_names_the_shard_and_key_of_a_corrupt_jpeg(tmp_path, caplog):
    dataset = packed(tmp_path)
    shard = manifest_of(dataset)["shards"][0]
    with tarfile.open(dataset / shard["name"]) as tar:
        member = next(info for info in tar.getmembers() if info.name.endswith(".jpg"))
        jpeg = tar.extractfile(member).read()
    key = member.name.split(".")[0]
    scan_start = jpeg.index(b"\xff\xda") + 14  # the entropy-coded data after the SOS header
    with open(dataset / shard["name"], "r+b") as handle:  # same size: only the pixels break
        handle.seek(member.offset_data + scan_start)
        handle.write(b"\xff\xd9" * ((len(jpeg) - scan_start) // 2 - 1))
    said = read_all_naming_problems(dataset, caplog)
    assert shard["name"] in said and key in said, said
