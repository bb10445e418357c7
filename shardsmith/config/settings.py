"""Everything derived from the settings' declarations (``config.declare``): the command-line
overrides of ``pack`` and the example job file ``shardsmith init-config`` prints.

Each function takes the root of a config tree (``Config`` unless told), so a setting added to
a dataclass with its declaration appears in ``pack --help``, in the override map and in the
example file with no other edit.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from .declare import Declaration, declaration_of, default_of
from .model import Config

EXAMPLE_HEADER = """\
# shardsmith job file: every key, with its default (the paths are examples: they have none).
#   shardsmith init-config > job.yaml        # this file; edit the paths, then
#   shardsmith pack --config job.yaml
# Command-line options override the file (e.g. --size 384).  Unknown keys are an error.
"""
# The example file's comments start in this column unless a line is too long for it (then
# three spaces after it) or the setting declares a column of its own.
COMMENT_COLUMN = 23
INDENT = "  "


@dataclass(frozen=True)
class Declared:
    """One setting of a config tree: where the job file keeps it and what it declares."""

    path: str  # the dotted key of the job file: "image.size", "splits.group"
    field: dataclasses.Field
    annotation: Any  # the field's type, resolved
    default: Any
    declaration: Declaration

    @property
    def is_section(self) -> bool:
        return dataclasses.is_dataclass(self.default)

    @property
    def parameter(self) -> str:
        """The name of the ``pack`` parameter its flag fills (an identifier)."""
        return self.path.replace(".", "__")


def declared(root: type = Config, prefix: str = "") -> Iterator[Declared]:
    """Every field of the tree under ``root``, sections before their settings, in order."""
    hints = typing.get_type_hints(root)
    for item in dataclasses.fields(root):
        default = default_of(item)
        path = item.metadata.get("yaml", f"{prefix}{item.name}")
        entry = Declared(path, item, hints[item.name], default, declaration_of(item))
        yield entry
        if entry.is_section:
            yield from declared(type(default), f"{path}.")


# The command line ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Flag:
    """A ``pack`` option that overrides one setting, as the command line offers it."""

    flag: str  # "--size"
    parameter: str  # "image__size"
    path: str  # "image.size"
    kind: type  # int, float, str or bool (a switch)
    choices: tuple[str, ...]
    metavar: str
    help: str  # with the setting's default appended where one is worth showing


def flags(root: type = Config) -> list[Flag]:
    """The options of ``pack`` that override settings, in the order of the job file."""
    out = []
    for entry in declared(root):
        declaration = entry.declaration
        if not declaration.flag:
            continue
        shown = _shown_default(entry.default)
        out.append(Flag(
            flag=declaration.flag, parameter=entry.parameter, path=entry.path,
            kind=flag_kind(entry.annotation),
            choices=declaration.choices or _literal_words(entry.annotation),
            metavar=declaration.metavar,
            help=declaration.help + (f"  [default: {shown}]" if shown else ""),
        ))
    return out


def override_map(root: type = Config) -> dict[str, str]:
    """The parameter each flag fills -> the dotted job-file key it overrides."""
    return {flag.parameter: flag.path for flag in flags(root)}


def overrides_of(parameters: dict[str, Any], root: type = Config) -> dict[str, Any]:
    """``pack``'s flag parameters as dotted-key overrides for ``load_config``."""
    paths = override_map(root)
    return {paths[name]: value for name, value in parameters.items()}


def flag_kind(annotation: Any) -> type:
    """int, float, bool or str: a list (extensions, split fractions) is one comma-separated
    string on the command line, as the parser takes it."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        annotation = next(arg for arg in typing.get_args(annotation) if arg is not type(None))
    if typing.get_origin(annotation) is typing.Literal:
        annotation = type(typing.get_args(annotation)[0])
    return annotation if annotation in (int, float, bool) else str


def _literal_words(annotation: Any) -> tuple[str, ...]:
    """The words of a ``Literal["a", "b"]`` type (none for any other type)."""
    if typing.get_origin(annotation) is typing.Literal:
        return tuple(str(word) for word in typing.get_args(annotation))
    return ()


def _shown_default(value: Any) -> str:
    """The default as ``--help`` shows it: none for a switch, an empty value or None."""
    if value is None or isinstance(value, bool) or value in ("", ()):
        return ""
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple) and all(_is_pair(item) for item in value):
        return ",".join(f"{name}={fraction:g}" for name, fraction in value)
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value)
    return str(value)


def _is_pair(item: Any) -> bool:
    return isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)


# The example job file -----------------------------------------------------------------------


def example_file(root: type = Config, header: str = EXAMPLE_HEADER) -> str:
    """The job file ``init-config`` prints: every key with its default (an example where the
    declaration gives one) and its declared comment."""
    lines = header.splitlines()
    for entry in declared(root):
        depth = entry.path.count(".")
        if depth == 0:
            lines.append("")  # a blank line between top-level sections
        key = f"{INDENT * depth}{entry.path.rsplit('.', 1)[-1]}:"
        if entry.is_section:
            texts = [key]
        elif isinstance(entry.default, tuple) and entry.default \
                and all(_is_pair(item) for item in entry.default):
            texts = [key] + [f"{INDENT * (depth + 1)}{name}: {_scalar(value)}"
                             for name, value in entry.default]
        else:
            texts = [f"{key} {entry.declaration.example or _scalar(entry.default)}"]
        lines += _commented(texts, entry.declaration)
    return "\n".join(lines) + "\n"


def _commented(texts: list[str], declaration: Declaration) -> list[str]:
    """The lines of one setting with its comment beside them, the rest of it below."""
    column = declaration.comment_column or COMMENT_COLUMN
    comment = declaration.comment
    out = []
    for number, text in enumerate(texts):
        if number < len(comment):
            gap = " " * (column - len(text)) if len(text) <= column - 2 else "   "
            text = f"{text}{gap}# {comment[number]}"
        out.append(text)
    out += [f"{' ' * column}# {line}" for line in comment[len(texts):]]
    return out


def _scalar(value: Any) -> str:
    """A value in YAML flow style, quoted only where plain YAML would read something else."""
    if isinstance(value, tuple):
        return "[" + ", ".join(_scalar(item) for item in value) + "]"
    if value is None or isinstance(value, (bool, int, float)):
        return json.dumps(value)
    if value and yaml.safe_load(value) == value and value.strip() == value:
        return value
    return json.dumps(value)
