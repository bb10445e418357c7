"""Typed reading of untrusted data into frozen dataclasses: the one validation layer.

The job config, the manifest, sample index lines and journal lines are all read here, with
msgspec as the engine and our frozen dataclasses as the types (``msgspec.convert(value, Type,
strict=True)``; a sample index line straight from its bytes by ``line_reader``).  Strict: no
``"1"`` for 1, no ``1.0`` for 1, no ``true`` for 1.  Anything that does not fit raises one
error (``ManifestError`` unless the caller names another) naming where the document goes wrong
(``shards[3].bytes: expected an integer, got 'abc'``), so no command ever reads a dict by
string keys and trips on a ``KeyError`` or ``TypeError`` halfway through its work.

Numbers are bounded too: a field declared ``Annotated[int, Bounds(low, high)]`` (``Count``,
``INT64``) holds only what shardsmith's own writer can produce; a manifest that says a split's
next shard is number 10**9 or that a shard holds -3 samples is refused on reading, not followed
into names no pattern accepts.  A record type may define ``check(where)`` for what a type
cannot say (name patterns, cross-field rules); it runs after the record is built, innermost
records first.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Annotated, Any, TypeVar, Union

import msgspec

from .errors import ManifestError, ShardsmithError
from .text import shown

T = TypeVar("T")


def Bounds(low: int, high: int) -> msgspec.Meta:
    """The range (both ends included) an integer field may hold: ``Annotated[int, Bounds(...)]``."""
    return msgspec.Meta(ge=low, le=high)


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

# What msgspec calls a JSON type, in the words our messages have always used.
_WORDS = {"int": "an integer", "str": "a string", "bool": "true or false", "float": "a number",
          "array": "a list", "object": "a mapping", "null": "null"}
_MESSAGE = re.compile(r"(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?", re.DOTALL)
_STEP = re.compile(r"\.(?P<name>[^.\[]+)|\[(?P<index>\d+|\.\.\.)\]")
_EXPECTED = re.compile(r"Expected `(?P<type>[^`]+)`(?:, got `[^`]+`)?")
_BOUND = re.compile(r"Expected `int` (?:>=|<=|>|<) -?\d+")
_LENGTH = re.compile(r"Expected `array` of length (?P<length>\d+), got \d+")
_MISSING = re.compile(r"Object missing required field `(?P<name>[^`]+)`")
_UNKNOWN = re.compile(r"Object contains unknown field `(?P<name>[^`]+)`")


def decode(data: bytes | str, where: str, *, unique_keys: bool = False) -> Any:
    """``data`` decoded as JSON; ManifestError naming ``where`` for anything that is not JSON
    this reader can hold: a syntax error, bytes that are not UTF-8 (or UTF-8 behind a
    byte-order mark, which JSON does not allow), an integer past Python's digit limit, or
    nesting deeper than the interpreter's recursion limit (RecursionError).
    (Python's reader, not msgspec's: a lone ``\\udcff`` escape, which our writer produces for
    a file name that is not UTF-8, is JSON that msgspec refuses.)

    ``unique_keys``: a key twice in one object is refused too (JSON readers differ on which
    value wins, so a document holding both says two things); for a small document such as a
    manifest, where the check's cost does not matter."""
    if data[:3] == b"\xef\xbb\xbf" or data[:1] == "\ufeff":
        raise ManifestError(f"{where}: not valid JSON: starts with a byte-order mark (save it "
                            "as UTF-8 without one)")
    try:
        return json.loads(data, object_pairs_hook=_one_value_per_key if unique_keys else None)
    except _DuplicateKey as exc:
        raise ManifestError(f"{where}: not valid JSON: the key {shown(exc.key, 60)} appears "
                            "twice in one object") from None
    except (ValueError, RecursionError) as exc:
        raise ManifestError(f"{where}: not valid JSON: {shown(str(exc), 80)}") from None


class _DuplicateKey(Exception):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _one_value_per_key(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object of a JSON document, refused (``_DuplicateKey``) when a key repeats."""
    mapping = dict(pairs)
    if len(mapping) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return mapping


def parse(cls: type[T], value: Any, where: str,
          error: type[ShardsmithError] = ManifestError) -> T:
    """``value`` (decoded JSON or YAML) as an instance of the dataclass ``cls``, strictly;
    unknown keys ignored.  ``error`` (ManifestError unless given) names the path of the first
    thing that does not fit."""
    _check_free_forms(cls, value, where)
    try:
        record = msgspec.convert(value, cls, strict=True)
    except RecursionError:  # a free-form field is bounded before: nothing of ours nests so
        raise error(f"{where or 'the document'}: nested deeper than any field of ours") \
            from None
    except msgspec.ValidationError as exc:
        # a number where a string belongs is YAML's doing in a file a person wrote
        # (``subsampling: 420``); a program that wrote a manifest needs no such hint
        hint = error is not ManifestError
        raise error(explain(str(exc), cls, value, where, hint)) from None
    _check_records(record, where)
    return record


def line_reader(cls: type[T]) -> Callable[[bytes, str], T]:
    """A reader of one JSON line into ``cls`` (a record without free-form fields, such as a
    sample index line), decoded and validated in one pass from the bytes; the same errors as
    ``decode`` then ``parse``, which it falls back to when msgspec refuses the line (to say
    why, or to take the lone surrogate escapes only Python's reader takes)."""
    decoder = msgspec.json.Decoder(cls, strict=True)
    # a flat record (no records inside) runs its own check: the walk costs ~3 us a line
    flat_check = getattr(cls, "check", None) if not _record_fields(cls) else None

    def read(line: bytes, where: str) -> T:
        try:
            record = decoder.decode(line)
        except (msgspec.MsgspecError, RecursionError):  # nesting past msgspec's own limit
            return parse(cls, decode(line, where), where)
        if flat_check is not None:
            flat_check(record, where)
        else:
            _check_records(record, where)
        return record

    return read


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


# ------------------------------------------------------------------ the model's shape


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def _bare(annotation: Any) -> tuple[Any, msgspec.Meta | None]:
    """``annotation`` without ``Annotated`` and ``| None``, and its bounds if it has any."""
    meta = None
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation, *extras = typing.get_args(annotation)
            meta = next((extra for extra in extras if isinstance(extra, msgspec.Meta)), meta)
        elif origin in (Union, types.UnionType):
            options = [o for o in typing.get_args(annotation) if o is not type(None)]
            if len(options) != 1:
                return annotation, meta
            annotation = options[0]
        else:
            return annotation, meta


def _records_in(annotation: Any) -> tuple[str, type] | None:
    """How a field holds records: ("one" | "many" | "map", their class), or None."""
    bare, _ = _bare(annotation)
    if dataclasses.is_dataclass(bare):
        return "one", bare
    origin, args = typing.get_origin(bare), typing.get_args(bare)
    if origin is tuple and args and dataclasses.is_dataclass(inner := _bare(args[0])[0]):
        return "many", inner
    if origin is dict and len(args) == 2 and dataclasses.is_dataclass(inner := _bare(args[1])[0]):
        return "map", inner
    return None


def _is_free_form(annotation: Any) -> bool:
    bare, _ = _bare(annotation)
    return bare is Any or (typing.get_origin(bare) is dict and typing.get_args(bare)[1:] == (Any,))


@cache
def _record_fields(cls: type) -> tuple[tuple[str, str, type], ...]:
    """The fields of ``cls`` that hold records (whose checks run after the parse)."""
    found = []
    for name, annotation in _hints(cls).items():
        if (held := _records_in(annotation)) is not None:
            found.append((name, *held))
    return tuple(found)


@cache
def _free_form_fields(cls: type) -> tuple[tuple[str, ...], tuple[tuple[str, str, type], ...]]:
    """The free-form fields of ``cls``, and its record fields whose records have some."""
    free = tuple(name for name, annotation in _hints(cls).items() if _is_free_form(annotation))
    nested = tuple(item for item in _record_fields(cls) if _has_free_form(item[2]))
    return free, nested


@cache
def _has_free_form(cls: type) -> bool:
    free, nested = _free_form_fields(cls)
    return bool(free or nested)


def _path(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


# ------------------------------------------------------------------ checks a type cannot make


def _check_records(record: Any, where: str) -> None:
    """Run ``check(where)`` of every record in ``record``, innermost first."""
    for name, kind, _ in _record_fields(type(record)):
        value = getattr(record, name)
        if value is None:
            continue
        path = _path(where, name)
        if kind == "one":
            _check_records(value, path)
        elif kind == "many":
            for number, item in enumerate(value):
                _check_records(item, f"{path}[{number}]")
        else:
            for key, item in value.items():
                _check_records(item, f"{path}.{key}")
    check = getattr(record, "check", None)
    if check is not None:
        check(where)


def _check_free_forms(cls: type, value: Any, where: str) -> None:
    """Bound every free-form field in ``value`` before anything copies it (a field whose
    container has the wrong type is left to the parse to name)."""
    if not isinstance(value, dict) or not _has_free_form(cls):
        return
    free, nested = _free_form_fields(cls)
    for name in free:
        if name in value:
            _check_free_form(value[name], _path(where, name))
    for name, kind, inner in nested:
        item = value.get(name)
        path = _path(where, name)
        if kind == "one":
            _check_free_forms(inner, item, path)
        elif kind == "many" and isinstance(item, list):
            for number, element in enumerate(item):
                _check_free_forms(inner, element, f"{path}[{number}]")
        elif kind == "map" and isinstance(item, dict):
            for key, element in item.items():
                _check_free_forms(inner, element, f"{path}.{key}")


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


# ------------------------------------------------------------------ msgspec's error in our words


def _is_record(annotation: Any) -> bool:
    """A record type: a dataclass or a msgspec Struct (the export's record)."""
    return dataclasses.is_dataclass(annotation) or (
        isinstance(annotation, type) and issubclass(annotation, msgspec.Struct))


def explain(message: str, cls: type, value: Any, where: str = "", hint: bool = False) -> str:
    """msgspec's ``Expected `int`, got `str` - at `$.shards[3].bytes``` as
    ``shards[3].bytes: expected an integer, got 'abc'`` (the value found by walking the
    document and the model along the path): ``cls`` a dataclass or a msgspec Struct,
    ``value`` the document decoded as plain JSON."""
    found = _MESSAGE.fullmatch(message)
    what, steps = found["what"], found["path"] or ""
    path, annotation, current = where, cls, value
    for step in _STEP.finditer(steps):
        annotation, _ = _bare(annotation)
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
        if step["name"] is not None:
            name = step["name"]
            annotation = _hints(annotation).get(name, Any) if _is_record(annotation) else Any
            current = current.get(name) if isinstance(current, dict) else None
            path = _path(path, name)
        elif step["index"] == "...":  # a mapping's value: msgspec does not say which key
            annotation = args[1] if origin is dict and len(args) == 2 else Any
            key, current = _failing_entry(current, annotation)
            path = _path(path, str(key))
        else:
            number = int(step["index"])
            annotation = (args[0] if len(args) == 2 and args[1] is Ellipsis
                          else args[number] if number < len(args) else Any)
            current = current[number] if isinstance(current, list) \
                and number < len(current) else None
            path = f"{path}[{number}]"
    where_text = path or "the document"
    if (missing := _MISSING.fullmatch(what)) is not None:
        return f"{_path(path, missing['name'])}: missing"
    if (unknown := _UNKNOWN.fullmatch(what)) is not None:  # a Struct that forbids them
        return f"{_path(path, unknown['name'])}: not a field of this record"
    if _BOUND.fullmatch(what):
        _, meta = _bare(annotation)
        low = meta.ge if meta is not None and meta.ge is not None else "-inf"
        high = meta.le if meta is not None and meta.le is not None else "inf"
        return f"{where_text}: {shown(current, 30)} is out of range (from {low} to {high})"
    if (length := _LENGTH.fullmatch(what)) is not None:
        return f"{where_text}: expected a list of {length['length']} values, got {shown(current)}"
    if (expected := _EXPECTED.fullmatch(what)) is not None:
        kinds = [kind.strip() for kind in expected["type"].split("|")]
        words = [_WORDS.get(kind, kind) for kind in kinds if kind != "null"] or ["null"]
        quote = (f" (quote it: \"{current}\")" if hint and words == ["a string"]
                 and isinstance(current, (int, float)) and not isinstance(current, bool) else "")
        return f"{where_text}: expected {' or '.join(words)}, got {shown(current)}{quote}"
    if what == "Number out of range":
        return f"{where_text}: {shown(current, 30)} is out of range"
    return f"{where_text}: {what}"


def _failing_entry(mapping: Any, annotation: Any) -> tuple[Any, Any]:
    """The first (key, value) of ``mapping`` whose value is not an ``annotation``."""
    if isinstance(mapping, dict):
        for key, item in mapping.items():
            try:
                msgspec.convert(item, annotation, strict=True)
            except msgspec.ValidationError:
                return key, item
    return "...", None
