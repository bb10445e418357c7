"""How a setting is declared, once, on its field of the config dataclasses.

``setting()`` is ``dataclasses.field`` with what the rest of the tool derives from a setting:
the comment of the example job file (``shardsmith init-config``), and for the settings that
``pack`` can override on the command line, the flag and its help.  ``config.settings`` reads
these declarations back; nothing else names a setting a second time.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

# The metadata keys read elsewhere: ``fingerprint`` by ``Config.dataset_settings``, ``yaml``
# by the parser (a field stored under another key, e.g. ``split_group`` as ``splits.group``).
DECLARATION = "setting"


@dataclass(frozen=True)
class Declaration:
    """What a field declares beyond its type and default."""

    comment: tuple[str, ...] = ()  # the example file's comment, one entry a line
    flag: str = ""  # the ``pack`` option that overrides it ("--size"); "" for none
    help: str = ""  # that option's help (its default is appended: it is the field's)
    metavar: str = ""  # that option's placeholder when not its type's ("REGEX")
    choices: tuple[str, ...] = ()  # the values it takes, when it is one of a few words
    example: str = ""  # the example file's value where it is an example, not the default
    comment_column: int = 0  # the example file's comment column, to align it with neighbours


def setting(
    default: Any = dataclasses.MISSING,
    *,
    factory: Any = dataclasses.MISSING,
    comment: str | tuple[str, ...] = (),  # one line, or a tuple of lines
    flag: str = "",
    help: str = "",  # noqa: A002 (the name click uses)
    metavar: str = "",
    choices: tuple[str, ...] = (),
    example: str = "",
    comment_column: int = 0,
    yaml: str = "",
    fingerprinted_unless_default: bool = False,
) -> Any:
    """A config field with its declaration.

    ``factory`` instead of ``default`` for a section (a nested dataclass).  ``yaml`` is the
    dotted key the job file stores it under when that is not the field's own place.
    ``fingerprinted_unless_default``: a setting added after datasets were first written stays
    out of the fingerprint at its default, so an upgrade does not make every existing dataset
    a foreign one (docs/design.md, invariant 10).
    """
    declaration = Declaration(
        comment=(comment,) if isinstance(comment, str) else tuple(comment),
        flag=flag, help=help, metavar=metavar, choices=tuple(choices), example=example,
        comment_column=comment_column,
    )
    metadata: dict[str, Any] = {DECLARATION: declaration}
    if yaml:
        metadata["yaml"] = yaml
    if fingerprinted_unless_default:
        metadata["fingerprint"] = "unless_default"
    if factory is not dataclasses.MISSING:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def declaration_of(item: dataclasses.Field) -> Declaration:
    """The declaration of a field (an empty one for a field declared without ``setting``)."""
    return item.metadata.get(DECLARATION, Declaration())


def default_of(item: dataclasses.Field) -> Any:
    """A field's default value (a fresh section for a field with a factory)."""
    if item.default_factory is not dataclasses.MISSING:
        return item.default_factory()
    return item.default


# A command's own parameters (not settings) are declared the same way, on the fields of one
# frozen dataclass per command (``config.commands``); ``cli`` makes the click parameters.
PARAMETER = "parameter"


@dataclass(frozen=True)
class Parameter:
    """What a command's field declares: its flags (none for an argument), help and checks.
    Its kind comes from the field's type (bool: a switch; a tuple: repeatable)."""

    flags: tuple[str, ...] = ()  # ("-o", "--output"); () for an argument
    help: str = ""
    metavar: str = ""
    bounds: tuple[Any, Any] | None = None  # a number's (min, max); None for an open end
    above: bool = False  # the minimum itself excluded (x>0)
    path: str = ""  # "dir", "file", "any"; "dataset": a directory or an s3:// URL
    exists: bool = False  # a path that must exist
    choices: tuple[str, ...] = ()
    required: bool = False
    show_default: bool = False
    needs: str = ""  # the field of the option this one goes with
    needs_why: str = ""  # the error when it is given without it (default: "X goes with Y")


def option(default: Any, *flags: str, **declared: Any) -> Any:
    """A command's option field: its default, its flags, then ``Parameter``'s keys."""
    return field(default=default, metadata={PARAMETER: Parameter(flags=flags, **declared)})


def argument(default: Any = None, **declared: Any) -> Any:
    """A command's argument field (named after the field, upper case, unless a metavar)."""
    return field(default=default, metadata={PARAMETER: Parameter(**declared)})
