"""What the hostile user's cases (issue 9) share: the command in this process or a fresh one, the
one-line error checks, small datasets to damage, and a tmpfs to fill or make read-only.

A dataset directory is untrusted input; a full disk, a signal or a file swapped mid-run never
publishes an inconsistent dataset, never hangs and never prints a traceback: one line, the
documented exit code.  The cases that mount a tmpfs (a small or read-only disk) need root, which
CI has; elsewhere they skip and say why.
"""

from __future__ import annotations

import faulthandler
import hashlib
import io
import json
import logging
import os
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from shardsmith.cli import main

import images
from images import manifest_of, samples_of

REPO = Path(__file__).resolve().parents[1]
PAGE = os.sysconf("SC_PAGE_SIZE")
MiB = 2**20
# The settings of ``packed`` (images.pack_small): a CLI pack with these continues its dataset.
PACK_ARGS = ("--size", "32", "--shard-samples", "3", "--split", "train=0.5,val=0.5",
             "--workers", "1", "--quiet")


def cli(*args: object) -> Result:
    """The ``shardsmith`` command in this process (click's runner)."""
    return CliRunner().invoke(main, [str(arg) for arg in args])


def as_process(*args: object, timeout: float = 120) -> subprocess.CompletedProcess:
    """``shardsmith ARGS`` in this process, as a finished process: its exit code, stdout, and
    on stderr what it printed there, its log records (a line each, as its handler prints
    them) and the traceback of an exception it let through.  A fresh interpreter would cost
    ~2 s of CPU a call.  Past ``timeout`` (a hang: a FIFO opened, say) the test's process
    prints every thread's stack and ends, which fails the test, not the whole run."""
    records = io.StringIO()
    handler = logging.StreamHandler(records)
    logging.getLogger().addHandler(handler)
    faulthandler.dump_traceback_later(timeout, exit=True)
    try:
        result = cli(*args)
    finally:
        faulthandler.cancel_dump_traceback_later()
        logging.getLogger().removeHandler(handler)
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout,
                                       result.stderr + records.getvalue() + crashed(result))


def pack_cli(source: Path, output: Path, *extra: object) -> Result:
    return cli("pack", source, output, *PACK_ARGS, *extra)


def crashed(result: Result) -> str:
    """The traceback of an exception the command let through (not a clean exit), or ''."""
    if result.exc_info is None or isinstance(result.exc_info[1], SystemExit):
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


def tmpfs_mounts() -> Iterator[Callable[..., Path]]:
    """The body of the ``tmpfs`` fixture (conftest.py): ``tmpfs(path, size, "ro")`` mounts a tmpfs
    at ``path``; all are unmounted afterwards."""
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


def garbage(size: int) -> bytes:
    return (b"\x00\xff{not json]\n" * (size // 13 + 1))[:size]


GARBAGE = {
    # Same size, and the manifest's sha256 made to match: only the content is bad.
    "same size": lambda size: (garbage(size), True),
    "wrong size": lambda size: (garbage(size + 100), False),
}
