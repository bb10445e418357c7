"""Every command's parameters are declared once, as the fields of one frozen dataclass
(``config.commands``); the command line is made from those declarations and each command gets
one object holding their values."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import click
import pytest
from click.testing import CliRunner

from shardsmith.cli import declared_command, main
from shardsmith.config import commands
from shardsmith.config.declare import argument, option
from shardsmith.config.settings import flags

DECLARATIONS = {
    "pack": commands.PackCommand, "probe": commands.ProbeCommand,
    "init-config": commands.InitConfigCommand, "inspect": commands.InspectCommand,
    "sheet": commands.SheetCommand, "report": commands.ReportCommand,
    "log": commands.LogCommand, "diff": commands.DiffCommand, "stage": commands.StageCommand,
    "verify": commands.VerifyCommand, "export": commands.ExportCommand,
    "bench-read": commands.BenchReadCommand,
}


def test_every_command_has_a_declaration():
    assert sorted(main.commands) == sorted(DECLARATIONS)


@pytest.mark.parametrize("name", sorted(DECLARATIONS))
def test_a_commands_parameters_are_its_declared_fields_in_order(name):
    expected = []
    for item in dataclasses.fields(DECLARATIONS[name]):
        expected += [flag.parameter for flag in flags()] if item.name == "settings" \
            else [item.name]
    assert [parameter.name for parameter in main.commands[name].params
            if parameter.name != "help"] == expected


@dataclass(frozen=True)
class MadeUp:
    where: str | None = argument(path="any")
    sharpen: float = option(0.5, "--sharpen", bounds=(0, 1), show_default=True,
                            help="Unsharp mask amount.")
    passes: tuple[str, ...] = option((), "--pass", help="A pass (repeatable).")
    preview: bool = option(False, "--preview", help="Preview only.")
    colour: str | None = option(None, "--colour", choices=("red", "blue"), needs="preview",
                                help="Preview colour.")


made_up = click.Group()


@declared_command(MadeUp, made_up)
def run(command: MadeUp) -> None:
    """A made-up command."""
    click.echo(json.dumps(dataclasses.asdict(command)))


def test_a_new_declared_option_is_on_the_command_line_with_its_help_and_bounds():
    text = " ".join(CliRunner().invoke(made_up, ["run", "--help"]).output.split())
    assert "--sharpen FLOAT RANGE Unsharp mask amount. [default: 0.5; 0<=x<=1]" in text
    assert "--colour [red|blue] Preview colour." in text
    assert "run [OPTIONS] [WHERE]" in text


def test_the_command_gets_one_object_holding_the_values():
    result = CliRunner().invoke(made_up, ["run", "here", "--pass", "a", "--pass", "b",
                                          "--preview", "--colour", "red"])
    assert json.loads(result.output) == {"where": "here", "sharpen": 0.5,
                                         "passes": ["a", "b"], "preview": True,
                                         "colour": "red"}


def test_an_option_given_without_the_one_it_needs_is_a_usage_error():
    result = CliRunner().invoke(made_up, ["run", "--colour", "red"])
    assert result.exit_code == 2
    assert "--colour goes with --preview" in result.output


def test_a_value_out_of_its_declared_bounds_is_a_usage_error():
    result = CliRunner().invoke(made_up, ["run", "--sharpen", "2"])
    assert result.exit_code == 2
    assert "2.0 is not in the range 0<=x<=1" in result.output
