"""The command line as users know it, pinned: ``--help`` of every command and the job file
``init-config`` writes.  A change to either must be deliberate: rerun with
``pytest tests/test_golden_help.py --update-golden`` and review the diff of ``tests/golden/``."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from shardsmith.cli import main

GOLDEN = Path(__file__).parent / "golden"
COMMANDS = sorted(main.commands)


def output_of(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), prog_name="shardsmith", terminal_width=100,
                                max_content_width=100)
    assert result.exit_code == 0, result.output
    return result.output


def matches_golden(name: str, text: str, update: bool) -> None:
    path = GOLDEN / name
    if update:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.read_text() == text, f"{name} changed: rerun with --update-golden and review"


def test_the_top_level_help_is_the_pinned_one(request):
    matches_golden("help.txt", output_of("--help"), request.config.getoption("--update-golden"))


@pytest.mark.parametrize("command", COMMANDS)
def test_each_commands_help_is_the_pinned_one(request, command):
    matches_golden(f"help-{command}.txt", output_of(command, "--help"),
                   request.config.getoption("--update-golden"))


def test_init_config_writes_the_pinned_job_file(request):
    matches_golden("init-config.yaml", output_of("init-config"),
                   request.config.getoption("--update-golden"))
