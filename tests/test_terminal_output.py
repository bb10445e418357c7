"""What reaches the terminal: a file name or manifest string is shown, never obeyed.

A name holding an escape sequence (set the window title, clear the screen), a C1 control or a
bidi override comes from the source tree or a dataset another team wrote.  Every command
prints such strings with those characters escaped (``\\x1b``, ``\\u202e``), in its output, its
lists of rejects and notes, and its one-line errors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shardsmith.text import printable

import images

REPO = Path(__file__).resolve().parent.parent
TITLE = "\x1b]0;owned\x07"  # OSC: sets the terminal's title (click does not strip it)
CLEAR = "\x9b2J"  # C1 CSI: clears the screen on terminals that take 8-bit controls
FLIP = "\u202e"  # right-to-left override: "x\u202egpj.exe" shows as "xexe.jpg"
HOSTILE = TITLE + CLEAR + FLIP


def shardsmith(*args: object) -> subprocess.CompletedProcess:
    """The real command in a fresh process; its output as the terminal would get the bytes."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "shardsmith", *map(str, args)], cwd=REPO,
                          env=env, capture_output=True, timeout=120)


def acted_on(raw: bytes) -> list[str]:
    """The characters of ``raw`` a terminal would act on instead of showing."""
    text = raw.decode("utf-8", "replace")
    return sorted({repr(char) for char in text
                   if (ord(char) < 0x20 and char != "\n") or 0x7f <= ord(char) <= 0x9f
                   or char in "\u061c\u200e\u200f\u2028\u2029"
                   or 0x202a <= ord(char) <= 0x202e or 0x2066 <= ord(char) <= 0x2069})


@pytest.fixture(scope="module")
def hostile_dataset(tmp_path_factory) -> tuple[Path, Path, subprocess.CompletedProcess]:
    """A dataset whose class name and rejected file name carry escape sequences; the pack's
    own run is returned too (its list of rejected files)."""
    base = tmp_path_factory.mktemp("hostile")
    source, output = base / "source", base / "out"
    images.write(source / "ok" / "a.jpg", images.jpeg(96, 64, 1))
    images.write(source / f"odd{HOSTILE}" / "b.jpg", images.jpeg(96, 64, 2))
    images.write(source / "ok" / f"bad{HOSTILE}\nforged line.jpg", b"not an image")
    packed = shardsmith("pack", source, output, "--size", "64", "--workers", "1",
                        "--max-reject-fraction", "1")
    assert packed.returncode == 0, packed.stderr.decode(errors="replace")
    return source, output, packed


def test_pack_lists_a_rejected_file_name_escaped_on_one_line(hostile_dataset):
    _, _, packed = hostile_dataset
    stderr = packed.stderr.decode()

    assert acted_on(packed.stderr) == [] and acted_on(packed.stdout) == []
    assert "\\x1b]0;owned\\x07\\x9b2J\\u202e\\x0aforged line.jpg" in stderr
    assert not any(line.startswith("forged line") for line in stderr.splitlines())


def test_inspect_shows_class_names_and_reject_paths_escaped(hostile_dataset):
    _, output, _ = hostile_dataset
    shown = shardsmith("inspect", output, "--rejects")

    assert shown.returncode == 0, shown.stderr.decode(errors="replace")
    assert acted_on(shown.stdout) == [] and acted_on(shown.stderr) == []
    assert "odd\\x1b]0;owned\\x07" in shown.stdout.decode()


def test_log_shows_a_version_note_escaped(hostile_dataset, tmp_path):
    _, output, _ = hostile_dataset
    manifest = json.loads((output / "manifest.json").read_text())
    manifest["history"][-1]["note"] = f"rebuilt {HOSTILE} by another team"
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "manifest.json").write_text(json.dumps(manifest))

    shown = shardsmith("log", copy)

    assert shown.returncode == 0, shown.stderr.decode(errors="replace")
    assert acted_on(shown.stdout) == []
    assert "rebuilt \\x1b]0;owned\\x07\\x9b2J\\u202e by another team" in shown.stdout.decode()


@pytest.mark.slow
def test_sheet_notes_quote_the_recorded_source_escaped(hostile_dataset, tmp_path):
    _, output, _ = hostile_dataset
    manifest_path = output / "manifest.json"
    kept = manifest_path.read_bytes()
    manifest = json.loads(kept)
    manifest["source"] = str(tmp_path / f"gone{HOSTILE}")  # the originals cannot be reached
    manifest_path.write_text(json.dumps(manifest))
    try:
        drawn = shardsmith("sheet", output, "-o", tmp_path / "sheet.png")
    finally:
        manifest_path.write_bytes(kept)

    assert drawn.returncode == 0, drawn.stderr.decode(errors="replace")
    assert "note:" in drawn.stderr.decode()
    assert acted_on(drawn.stderr) == [] and acted_on(drawn.stdout) == []


def test_an_error_quoting_a_path_is_one_escaped_line(tmp_path):
    empty = tmp_path / f"empty{HOSTILE}\nsecond line"
    empty.mkdir()

    failed = shardsmith("pack", empty, tmp_path / "out", "--workers", "1")

    assert failed.returncode == 1
    assert acted_on(failed.stderr) == []
    lines = failed.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardsmith: error: no image files")
    assert "empty\\x1b]0;owned\\x07\\x9b2J\\u202e\\x0asecond line" in lines[0]


def test_a_manifest_error_quoting_a_class_name_is_one_escaped_line(hostile_dataset, tmp_path):
    _, output, _ = hostile_dataset
    manifest = json.loads((output / "manifest.json").read_text())
    manifest["shards"][0]["name"] = f"../{HOSTILE}.tar"
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))

    failed = shardsmith("verify", tmp_path)

    assert failed.returncode == 2, failed.stderr.decode(errors="replace")
    assert acted_on(failed.stderr) == []
    assert len(failed.stderr.decode().splitlines()) == 1


@pytest.mark.parametrize("text, shown", [
    (TITLE, "\\x1b]0;owned\\x07"),
    (CLEAR, "\\x9b2J"),
    (f"x{FLIP}gpj.exe", "x\\u202egpj.exe"),
    ("two\nlines\r", "two\\x0alines\\x0d"),
    (os.fsdecode(b"caf\xe9.jpg"), "caf\\xe9.jpg"),
    ("\ud800", "\\ud800"),  # a lone surrogate, as JSON can spell one
    ("plain é → ok.jpg", "plain é → ok.jpg"),
])
def test_printable_escapes_what_a_terminal_would_act_on(text, shown):
    assert printable(text) == shown
    assert printable(printable(text)) == shown  # escaping twice changes nothing


def test_printable_keeps_the_line_breaks_of_a_whole_text_when_asked():
    assert printable(f"a{TITLE}\nb", keep_newlines=True) == "a\\x1b]0;owned\\x07\nb"


# --- progress lines in a log (stderr not a terminal) ---------------------------------------


class Clock:
    """A monotonic clock the test moves: progress lines depend on time, not on this machine."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def progress_lines(updates: int, seconds_each: float, monkeypatch) -> list[str]:
    import io

    from shardsmith import progress

    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    log = io.StringIO()  # not a terminal: plain lines
    counter = progress.Progress(updates, 0, "samples", "export", False, stream=log)
    for _ in range(updates):
        clock.now += seconds_each
        counter.update()
    counter.close()
    return log.getvalue().splitlines()


def test_a_short_job_writes_its_last_progress_line_only_to_a_log(monkeypatch):
    lines = progress_lines(13, 0.01, monkeypatch)  # each sample more than a tenth of the job
    assert len(lines) == 1 and lines[0].startswith("export: 13/13 samples (100%)")


def test_a_long_job_writes_at_most_one_progress_line_every_few_seconds(monkeypatch):
    lines = progress_lines(20, 1.0, monkeypatch)  # 20 s: a tenth every 2 s
    assert 2 <= len(lines) <= 20 / 5 + 1  # one every 5 s at most, and the last
    assert all(line.startswith("export: ") for line in lines)
    assert lines[-1].startswith("export: 20/20 samples (100%)")
