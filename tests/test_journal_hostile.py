"""A pack's journal and sample spool are our own files, but read like any dataset file: a
resumed pack never trusts a checkpoint that does not fit its plan, nor a spool that does not
hold exactly the records the checkpoints count.  Such a journal is discarded with one warning
naming why, and the pack starts afresh: no original is lost, no invalid dataset published.

The sample index of a finished dataset gets the same care: a line nested past the recursion
limit, or longer than any record, is one line naming the file and the line, never a traceback.

Every case runs the real command in a fresh process with a timeout.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
from hostile_helpers import as_process
from hostile_helpers import one_stderr_line as one_error_line

from shardsmith.packing.journal import Journal

import images
from images import manifest_of

REPO = Path(__file__).resolve().parents[1]
PACK_ARGS = ("--size", "32", "--shard-samples", "2", "--workers", "1", "--quiet")
ORIGINALS = 12
DEEP = "[" * 100_000 + "]" * 100_000

pytestmark = pytest.mark.slow


def run(*args: object, timeout: float = 120, memory: int | None = None
        ) -> subprocess.CompletedProcess:
    """``shardsmith ARGS`` as a finished process: in this one (``as_process``), or, to cap
    its address space at ``memory`` bytes, in a fresh process, which fails the test past
    ``timeout``."""
    if memory is None:
        return as_process(*args)
    program = "import sys\nfrom shardsmith.cli import main\nmain(sys.argv[1:], " \
              "prog_name='shardsmith')\n"

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    return subprocess.run([sys.executable, "-c", program, *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, preexec_fn=cap)




def originals(folder: Path) -> Path:
    for number in range(ORIGINALS):
        images.write(folder / "ab"[number % 2] / f"{number}.png", images.png(96, 64, number))
    return folder


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return originals(tmp_path / "source")


def interrupted(source: Path, output: Path, checkpoints: int = 3) -> None:
    """A first pack of ``source`` that stopped right after its third checkpoint (the state
    a kill leaves), its journal and spool in ``output/.shardsmith``."""
    real, count = Journal.checkpoint, [0]

    def checkpoint(self: Journal, *args: object, **kwargs: object) -> None:
        real(self, *args, **kwargs)
        count[0] += 1
        if count[0] == checkpoints:
            raise KeyboardInterrupt

    with mock.patch.object(Journal, "checkpoint", checkpoint):
        assert run("pack", source, output, *PACK_ARGS).returncode == 130
    assert (output / ".shardsmith" / "journal.jsonl").exists()
    assert not (output / "manifest.json").exists()


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Originals and an interrupted first pack of them, made once for the module: the tests
    read the originals and take a copy of the pack's output (``stopped``)."""
    root = tmp_path_factory.mktemp("first-run")
    source = originals(root / "source")
    interrupted(source, root / "out")
    return source, root / "out"


@pytest.fixture
def stopped(first_run: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    """The originals and this test's own copy of the interrupted pack's output."""
    source, output = first_run
    return source, Path(shutil.copytree(output, tmp_path / "out", symlinks=True))


class State:
    """The journal's checkpoints and the spool's records, edited as JSON and written back
    (the checkpoints' spool ends follow a spool that changed length, as the tester's did)."""

    def __init__(self, output: Path):
        self.journal = output / ".shardsmith" / "journal.jsonl"
        self.spool = output / ".shardsmith" / "samples.jsonl"
        self.lines = self.journal.read_text().splitlines()
        self.records = self.spool.read_text().splitlines()
        self.spool_size = self.spool.stat().st_size

    def checkpoint(self, number: int) -> dict:
        return json.loads(self.lines[number])

    def set_checkpoint(self, number: int, **changes: object) -> None:
        self.lines[number] = json.dumps(dict(self.checkpoint(number), **changes))

    def set_record(self, number: int, **changes: object) -> None:
        self.records[number] = json.dumps(dict(json.loads(self.records[number]), **changes),
                                          sort_keys=True, separators=(",", ":"))

    def save(self, follow: bool = True) -> None:
        spool = "".join(f"{record}\n" for record in self.records).encode()
        shift = len(spool) - self.spool_size
        if follow and shift:
            for number in range(1, len(self.lines)):
                entry = self.checkpoint(number)
                self.lines[number] = json.dumps(dict(entry,
                                                     samples_end=entry["samples_end"] + shift))
        self.spool.write_bytes(spool)
        self.journal.write_text("".join(f"{line}\n" for line in self.lines))


def edit_next_past_the_plan(state: State) -> None:
    state.set_checkpoint(-1, next=10**15)


def edit_spool_end_to_zero(state: State) -> None:
    state.set_checkpoint(-1, samples_end=0)


def edit_part_past_the_tiles(state: State) -> None:
    state.set_checkpoint(1, part=10**15, sources=1)


def edit_unchanged_list_of_another_run(state: State) -> None:
    state.set_checkpoint(1, unchanged={"nope.png": ["xxh3:00", 1, 2]})


def edit_reject_outside_the_plan(state: State) -> None:
    state.set_checkpoint(1, rejects=[{"path": "../../x", "reason": "corrupt",
                                      "detail": "\x1b[31mred"}])


def edit_object_classes_to_a_number(state: State) -> None:
    state.set_checkpoint(1, object_classes=5)


def edit_deep_journal_line(state: State) -> None:
    state.lines.insert(2, '{"shard":' + DEEP + "}")


def edit_big_number_in_journal(state: State) -> None:
    state.lines.insert(2, '{"next":' + "9" * 5000 + "}")


def edit_spool_without_split(state: State) -> None:
    record = json.loads(state.records[0])
    del record["split"]
    state.records[0] = json.dumps(record)


def edit_spool_without_path(state: State) -> None:
    record = json.loads(state.records[0])
    del record["path"]
    state.records[0] = json.dumps(record)


def edit_spool_key_escaping(state: State) -> None:
    state.set_record(0, key="../../etc/passwd")


def edit_spool_shard_escaping(state: State) -> None:
    state.set_record(0, shard="../../x.tar")


def edit_spool_label_text(state: State) -> None:
    state.set_record(0, label="x")


def edit_spool_width_negative(state: State) -> None:
    state.set_record(0, width=-5)


def edit_spool_height_nan(state: State) -> None:
    record = json.loads(state.records[0])
    state.records[0] = json.dumps(dict(record, height="NaN")).replace('"NaN"', "NaN")


def edit_spool_split_unplanned(state: State) -> None:
    state.set_record(0, split="evil")


def edit_spool_key_duplicated(state: State) -> None:
    state.set_record(1, key=json.loads(state.records[0])["key"])


def edit_spool_path_duplicated(state: State) -> None:
    state.set_record(1, path=json.loads(state.records[0])["path"])


def edit_spool_not_a_record(state: State) -> None:
    state.records[0] = "[1,2]"


def edit_spool_deep_line(state: State) -> None:
    state.records[0] = state.records[0][:-1] + ',"d":' + DEEP + "}"


def edit_spool_record_dropped(state: State) -> None:
    del state.records[0]


def same_length(state: State, number: int, field: str) -> None:
    """The spool record ``number`` with the last digit of ``field`` changed in place: the
    spool keeps its length, the checkpoints their counts and ends."""
    record = state.records[number]
    at = record.index(f'"{field}":') + len(field) + 3
    while record[at + 1].isdigit():
        at += 1
    digit = "1" if record[at] != "1" else "2"
    state.records[number] = record[:at] + digit + record[at + 1:]


def edit_spool_label_same_length(state: State) -> None:
    same_length(state, 0, "label")


def edit_spool_width_same_length(state: State) -> None:
    same_length(state, 1, "width")


def edit_spool_jpeg_bytes_same_length(state: State) -> None:
    same_length(state, 2, "jpeg_bytes")


def edit_shard_sha256_to_zeros(state: State) -> None:
    entry = state.checkpoint(1)
    state.set_checkpoint(1, shard=dict(entry["shard"], sha256="0" * 64))


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def edit_published_shard_byte_flipped(state: State) -> None:
    flip_a_byte(state.journal.parents[1] / state.checkpoint(1)["shard"]["name"])


def edit_published_shard_index_byte_flipped(state: State) -> None:
    flip_a_byte(state.journal.parents[1] / state.checkpoint(2)["shard"]["index"]["name"])


def edit_spool_sha256_dropped(state: State) -> None:
    entry = state.checkpoint(1)
    del entry["spool_sha256"]
    state.lines[1] = json.dumps(entry)


EDITS = [edit_next_past_the_plan, edit_spool_end_to_zero, edit_part_past_the_tiles,
         edit_unchanged_list_of_another_run, edit_reject_outside_the_plan,
         edit_object_classes_to_a_number, edit_deep_journal_line, edit_big_number_in_journal,
         edit_spool_without_split, edit_spool_without_path, edit_spool_key_escaping,
         edit_spool_shard_escaping, edit_spool_label_text, edit_spool_width_negative,
         edit_spool_height_nan, edit_spool_split_unplanned, edit_spool_key_duplicated,
         edit_spool_path_duplicated, edit_spool_not_a_record, edit_spool_deep_line,
         edit_spool_record_dropped, edit_spool_label_same_length, edit_spool_width_same_length,
         edit_spool_jpeg_bytes_same_length, edit_shard_sha256_to_zeros,
         edit_published_shard_byte_flipped, edit_published_shard_index_byte_flipped,
         edit_spool_sha256_dropped]


def assert_packed_afresh_with_one_warning(result: subprocess.CompletedProcess,
                                          output: Path) -> None:
    """The pack succeeded with one warning that it did not resume, and published a dataset
    that holds every original and verifies."""
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    warnings = result.stderr.strip().splitlines()
    assert len(warnings) == 1 and "journal.jsonl: not resumed from" in warnings[0], warnings
    assert "packing afresh" in warnings[0]
    assert manifest_of(output)["totals"]["packed"] == ORIGINALS
    assert "resumed" not in result.stdout
    checked = run("verify", output, "--quiet")
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("edit", EDITS, ids=lambda edit: edit.__name__[5:])
def test_a_journal_that_does_not_fit_the_plan_is_discarded_and_the_pack_starts_afresh(
        stopped, edit):
    source, output = stopped
    state = State(output)
    edit(state)
    state.save()
    assert_packed_afresh_with_one_warning(run("pack", source, output, *PACK_ARGS), output)


def test_an_untouched_journal_is_still_resumed_from(stopped):
    source, output = stopped
    result = run("pack", source, output, *PACK_ARGS)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert "resumed after" in result.stdout
    assert manifest_of(output)["totals"]["packed"] == ORIGINALS
    assert run("verify", output, "--quiet").returncode == 0


def test_a_sparse_spool_of_gigabytes_is_never_read_into_memory(stopped):
    """A spool made 8 GiB of zeros, the last checkpoint accounting for all of it: the first
    line past the records is longer than any record, and reading stops there."""
    source, output = stopped
    state = State(output)
    end = 8 << 30
    state.set_checkpoint(-1, samples_end=end)
    state.save(follow=False)
    os.truncate(state.spool, end)
    result = run("pack", source, output, *PACK_ARGS, memory=3 << 30)
    assert_packed_afresh_with_one_warning(result, output)


# ----------------------------------------------------- the sample index of a finished dataset

def dataset_with_index_line(source: Path, output: Path, line: bytes) -> Path:
    """A finished dataset whose sample index has ``line`` in place of its second line, the
    manifest's size and sha256 made to match (a consistent, hostile dataset)."""
    assert run("pack", source, output, *PACK_ARGS).returncode == 0
    manifest = manifest_of(output)
    index = output / manifest["samples_index"]["name"]
    lines = index.read_bytes().splitlines(keepends=True)
    lines[1] = line
    data = b"".join(lines)
    index.write_bytes(data)
    manifest["samples_index"].update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    (output / "manifest.json").write_text(json.dumps(manifest))
    return index


def deep_line() -> bytes:
    return b'{"d":' + DEEP.encode() + b"}\n"


def long_line() -> bytes:
    """A valid record but for its length: two MiB of blanks, which JSON allows."""
    record = {"key": "k", "path": "a/x.png", "label": 0, "split": "train",
              "shard": "train-000000.tar", "width": 1, "height": 1, "jpeg_bytes": 1,
              "source_size": 1, "source_mtime_ns": 0}
    return b'{"key":"k",' + b" " * (2 << 20) + json.dumps(record).encode()[1:] + b"\n"


@pytest.mark.parametrize("line", [deep_line, long_line], ids=["deep", "long"])
@pytest.mark.parametrize("command", ["inspect", "pack again"])
def test_a_hostile_sample_index_line_is_one_line_naming_the_file_and_line(
        source, tmp_path, line, command):
    output = tmp_path / "out"
    index = dataset_with_index_line(source, output, line())
    if command == "inspect":
        result = run("inspect", output)
    else:  # one more original: the pack is an increment, which reads the index
        images.write(source / "a" / "new.png", images.png(96, 64, 99))
        result = run("pack", source, output, *PACK_ARGS)
    message = one_error_line(result, 2)
    assert f"{index}: line 2:" in message


@pytest.mark.parametrize("line", [deep_line, long_line], ids=["deep", "long"])
def test_verify_names_a_hostile_sample_index_line_as_a_problem(source, tmp_path, line):
    output = tmp_path / "out"
    index = dataset_with_index_line(source, output, line())
    result = run("verify", output, "--quiet")
    assert result.returncode in (1, 2), result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert f"{index.name}: line 2:" in result.stdout + result.stderr


def _older_release_header(state: State) -> str:
    """Releases before the Delta began {"run": {config, sources, base}}."""
    return json.dumps({"run": {"config": "c" * 64, "sources": "s" * 64, "base": None}})


def _older_format_header(state: State) -> str:
    """Format 2 checkpoints hold no sha256 of the spool: what they say cannot be checked."""
    return json.dumps(dict(state.checkpoint(0), journal=2))


@pytest.mark.parametrize("header", [_older_release_header, _older_format_header],
                         ids=["older release", "older format"])
def test_a_journal_of_an_older_release_or_format_is_discarded_with_one_line(stopped, header):
    """Such a run is packed again from the start: correct, just not resumed."""
    source, output = stopped
    state = State(output)
    state.lines[0] = header(state)
    state.save(follow=False)
    result = run("pack", source, output, *PACK_ARGS)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    warnings = result.stderr.strip().splitlines()
    assert len(warnings) == 1 and "written by an older release" in warnings[0], warnings
    assert "resumed" not in result.stdout
    assert manifest_of(output)["totals"]["packed"] == ORIGINALS
    assert run("verify", output, "--quiet").returncode == 0


@pytest.mark.parametrize("first", ['{"journal": 2, "run": 5}', '{"journal": "2", "run": {}}',
                                   "[1, 2]", '{"journal": ' + "9" * 5000 + "}", "null"],
                         ids=["run-a-number", "format-a-string", "a-list", "huge-number",
                              "null"])
def test_a_damaged_first_journal_line_is_never_a_traceback(stopped, first):
    source, output = stopped
    state = State(output)
    state.lines[0] = first
    state.save(follow=False)
    result = run("pack", source, output, *PACK_ARGS)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) <= 1
    assert "resumed" not in result.stdout
    assert manifest_of(output)["totals"]["packed"] == ORIGINALS
