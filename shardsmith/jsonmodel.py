"""Typed reading of untrusted JSON into frozen dataclasses.

A manifest may come from another team's share or be damaged.  ``parse`` checks every field
against its annotation (ints, strings, lists of records, optional parts) and raises
``ManifestError`` naming where the document goes wrong (``shards[3].bytes: expected an
integer, got 'abc'``), so no command ever reads a dict by string keys and trips on a
``KeyError`` or ``TypeError`` halfway through its work.

Numbers are bounded too: a plain ``int`` field takes what fits a signed 64-bit integer, and a
field declared ``Annotated[int, Bounds(low, high)]`` (``Count``, ``Size``) only what shardsmith's
own writer can produce; a manifest that says a split's next shard is number 10**9 or that a
shard holds -3 samples is refused on reading, not followed into names no pattern accepts.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from functools import cache
from typing import Annotated, Any, TypeVar, Union

from .errors import ManifestError
from .text import shown

T = TypeVar("T")
_MISSING = dataclasses.MISSING


@dataclasses.dataclass(frozen=True)
class Bounds:
    """The range (both ends included) an integer field may hold: ``Annotated[int, Bounds(...)]``."""

    low: int
    high: int


# Integers beyond 2**53 lose their value in every JSON reader that decodes numbers as doubles
# (JavaScript, jq, many dashboards): no count or size of ours ever comes near that.
MAX_EXACT = 2**53 - 1
INT64 = Bounds(-(2**63), 2**63 - 1)
Count = Annotated[int, Bounds(0, MAX_EXACT)]  # samples, shards, files, bytes, versions


# The longest line of a sample index or spool we read: a record of ours is a few hundred bytes
# (a path of 4 KiB at most), so anything longer is not one, and is not read into memory whole.
LINE_CAP = 1 << 20

# A free-form field (a run's resolved config, the tool's details) is a few levels of mappings
# and a few hundred values; these leave ample room and keep every recursive copy shallow.
MAX_DEPTH = 32
MAX_ITEMS = 100_000


def decode(data: bytes | str, where: str) -> Any:
    """``data`` decoded as JSON; ManifestError naming ``where`` for anything that is not JSON
    this reader can hold: a syntax error, bytes that are not UTF-8, an integer past Python's
    digit limit, or nesting deeper than the interpreter's recursion limit (RecursionError)."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise ManifestError(f"{where}: not valid JSON: {shown(str(exc), 80)}") from None


def parse(cls: type[T], value: Any, where: str) -> T:
    """``value`` (decoded JSON) as an instance of the dataclass ``cls``; unknown keys ignored."""
    return _parse(cls, value, where)


def to_json(obj: Any) -> Any:
    """The inverse of ``parse``: plain JSON types, optional fields that are None left out."""
    if dataclasses.is_dataclass(obj):
        out = {}
        for item in dataclasses.fields(obj):
            value = getattr(obj, item.name)
            if value is None and item.default is None:
                continue
            out[item.name] = to_json(value)
        return out
    if isinstance(obj, (list, tuple)):
        return [to_json(item) for item in obj]
    if isinstance(obj, dict):
        return {key: to_json(value) for key, value in obj.items()}
    return obj


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def _parse(annotation: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(annotation)
    if annotation is Any:
        _check_free_form(value, where)
        return value
    if origin is Annotated:
        inner, *extras = typing.get_args(annotation)
        parsed = _parse(inner, value, where)
        for extra in extras:
            if isinstance(extra, Bounds):
                _check_bounds(parsed, extra, where)
        return parsed
    if dataclasses.is_dataclass(annotation):
        return _parse_record(annotation, value, where)
    if origin in (Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None and type(None) in options:
            return None
        (inner,) = [option for option in options if option is not type(None)]
        return _parse(inner, value, where)
    if origin is tuple:
        if not isinstance(value, list):
            raise _wrong(where, "a list", value)
        inner = typing.get_args(annotation)[0]
        return tuple(_parse(inner, item, f"{where}[{i}]") for i, item in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise _wrong(where, "a mapping", value)
        inner = typing.get_args(annotation)[1]
        return {key: _parse(inner, item, f"{where}.{key}") for key, item in value.items()}
    if annotation is bool:
        if not isinstance(value, bool):
            raise _wrong(where, "true or false", value)
        return value
    if annotation is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise _wrong(where, "an integer", value)
        _check_bounds(value, INT64, where)
        return value
    if annotation is float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise _wrong(where, "a number", value)
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise _wrong(where, "a string", value)
        return value
    raise TypeError(f"jsonmodel cannot parse {annotation!r}")  # a bug in a model, not input


def _parse_record(cls: type, value: Any, where: str) -> Any:
    if not isinstance(value, dict):
        raise _wrong(where, "a mapping", value)
    hints = _hints(cls)
    values = {}
    for item in dataclasses.fields(cls):
        path = f"{where}.{item.name}" if where else item.name
        if item.name in value:
            values[item.name] = _parse(hints[item.name], value[item.name], path)
        elif item.default is _MISSING and item.default_factory is _MISSING:
            raise ManifestError(f"{path}: missing")
    record = cls(**values)
    check = getattr(record, "check", None)
    if check is not None:
        check(where)
    return record


def _check_free_form(value: Any, where: str) -> None:
    """A free-form field (``Any``: a run's config, tool details) is only ever copied and
    written back: deeper than ``MAX_DEPTH`` or with more than ``MAX_ITEMS`` values it is not
    one of ours, and would overflow the stack of every recursive writer (``to_json``,
    ``json.dumps``) that copies it on.  Checked without recursion."""
    pending = [(value, 1)]
    items = 0
    while pending:
        current, depth = pending.pop()
        items += 1
        if depth > MAX_DEPTH:
            raise ManifestError(f"{where or 'the document'}: nested deeper than {MAX_DEPTH} "
                                "levels, which no field of ours is")
        if items > MAX_ITEMS:
            raise ManifestError(f"{where or 'the document'}: more than {MAX_ITEMS:,} values, "
                                "which no field of ours holds")
        if isinstance(current, dict):
            pending.extend((item, depth + 1) for item in current.values())
        elif isinstance(current, list):
            pending.extend((item, depth + 1) for item in current)


def _check_bounds(value: int, bounds: Bounds, where: str) -> None:
    if not bounds.low <= value <= bounds.high:
        raise ManifestError(f"{where or 'the document'}: {shown(value, 30)} is out of range "
                            f"(from {bounds.low} to {bounds.high})")


def _wrong(where: str, expected: str, value: Any) -> ManifestError:
    return ManifestError(f"{where or 'the document'}: expected {expected}, got {shown(value)}")
