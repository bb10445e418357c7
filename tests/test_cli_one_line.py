"""A usage error of any command (a flag's value click cannot take, an unknown option or command,
a missing or extra argument) is one line on stderr in the house format and exit code 2, as the
project's own checks are: ``shardsmith: error: OPTION: what is wrong with VALUE (COMMAND --help
lists the options)``, never click's three lines (Usage, Try, Error).  ``--help``,
``--version`` and a bare ``shardsmith`` print what they printed before."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner
from hostile_helpers import REPO, cli, one_error_line, one_stderr_line

from shardsmith import __version__
from shardsmith.cli import main


@pytest.mark.parametrize(("arguments", "line"), [
    (["pack", "--quality", "nan"], "--quality: 'nan' is not a valid integer (pack --help lists "
                                   "the options)"),
    (["pack", "--size", "abc"], "--size: 'abc' is not a valid integer (pack --help"),
    (["pack", "--format", "zip"], "--format: 'zip' is not one of 'webdataset', 'tfrecord' "
                                  "(pack --help"),
    (["pack", "--bogus"], "--bogus: no such option (pack --help lists the options)"),
    (["pack", "--qualty", "3"], "--qualty: no such option (did you mean --quality"),
    (["pack", "--quality"], "--quality: requires an argument (pack --help"),
    (["pack", "a", "b", "c"], "got unexpected extra argument (c) (pack --help"),
    (["pack", "--probe"], "--probe goes with --dry-run (pack --help"),
    (["inspect", "/no/such/dataset"], "DATASET: directory '/no/such/dataset' does not exist "
                                      "(inspect --help"),
    (["sheet", "."], "--output: a required option, not given (sheet --help"),
    (["sheet", ".", "-o", "x.png", "--per-class", "99"], "--per-class: 99 is not in the "
                                                         "range 1<=x<=64 (sheet --help"),
    (["stage", "--workers", "x"], "--workers: 'x' is not a valid integer (stage --help"),
    (["verify", "--workers", "1.5"], "--workers: '1.5' is not a valid integer (verify --help"),
    (["probe", "--gpu-demand", "-1"], "--gpu-demand: -1.0 is not in the range x>0 (probe"),
    (["bench-read", ".", "--batch-size", "q"], "--batch-size: 'q' is not a valid integer "
                                               "(bench-read --help"),
    (["log"], "output.path: no dataset given (argument DATASET or --config)"),
    (["no-such-command"], "no such command 'no-such-command' (shardsmith --help lists the "
                          "commands)"),
    (["--bogus"], "--bogus: no such option (did you mean --verbose?) (shardsmith --help"),
])
def test_a_usage_error_is_one_line_naming_the_option_and_the_value(arguments, line):
    assert one_error_line(cli(*arguments), 2).startswith(f"shardsmith: error: {line}")


@pytest.mark.parametrize("command", sorted(main.commands))
def test_an_unknown_option_of_every_command_is_one_line_naming_the_command(command):
    found = one_error_line(cli(command, "--no-such-option"), 2)
    assert found == (f"shardsmith: error: --no-such-option: no such option ({command} --help "
                     "lists the options)")


def test_a_control_character_in_the_value_is_shown_escaped():
    found = one_error_line(cli("pack", "--format", "zip\x1b[31m"), 2)
    assert "\x1b" not in found and "--format:" in found


def test_the_real_command_prints_one_line_on_stderr_and_nothing_on_stdout():
    process = subprocess.run([sys.executable, "-m", "shardsmith", "pack", "--quality", "nan"],
                             cwd=REPO, capture_output=True, text=True, timeout=60)
    assert one_stderr_line(process, 2) == ("shardsmith: error: --quality: 'nan' is not a "
                                           "valid integer (pack --help lists the options)")
    assert process.stdout == ""


def test_help_version_and_a_bare_command_are_unchanged():
    runner = CliRunner()
    assert runner.invoke(main, ["--version"], prog_name="shardsmith").output == \
        f"shardsmith, version {__version__}\n"
    for arguments in (["--help"], ["pack", "-h"]):
        result = runner.invoke(main, arguments, prog_name="shardsmith")
        assert result.exit_code == 0 and result.output.startswith("Usage: shardsmith")
    bare = runner.invoke(main, [], prog_name="shardsmith")
    assert "Commands:" in bare.output and "error" not in bare.output
