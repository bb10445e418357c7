"""What an export folder holds, as ``.export/record.json`` says: the dataset version it came
from, the layout and options, and per sample its files (path, size, sha256).

The record decides what a later export may hard-link and what an interrupted one may keep, so
it is read as untrusted (someone may have edited it, or the folder may be another tool's):
strictly typed, every path relative and inside the folder, every number bounded.  A record
that does not fit is an OutputStateError naming the file.
"""

from __future__ import annotations

import dataclasses
import json
import re
import typing
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from ...door import STATE_CAP, Refused, open_beneath, open_file
from ...errors import ManifestError, OutputStateError
from ...schema import Count, decode, parse, to_json
from ...text import shown

RECORD_DIR = ".export"
RECORD_NAME = "record.json"
JOURNAL_NAME = "journal.jsonl"
T = TypeVar("T")
RECORD_FORMAT = 1
RECORD_CAP = 4 * STATE_CAP  # the least a record may be, whatever the dataset's size
# A record is ~500 bytes a YOLO sample and ~1 KiB a COCO sample with its polygons: read up to
# 16 KiB a sample of the dataset exported (a record of 256 MiB was 500,000 YOLO samples, and
# the next export refused the folder it had itself written).
RECORD_BYTES_PER_SAMPLE = 16 << 10
SHA256 = re.compile(r"[0-9a-f]{64}")


def safe_relpath(path: str) -> bool:
    """A path inside the export folder: relative, no ``.``, ``..`` or empty part, no NUL, not
    in our own ``.export`` folder."""
    if not 0 < len(path) <= 4096 or path[0] == "/" or path[-1] == "/" or "//" in path \
            or "\x00" in path:
        return False
    parts = path.split("/")
    if parts[0] == RECORD_DIR or any(len(part) > 255 for part in parts):
        return False
    # a part of "." or ".." starts with a dot: a path without "/." and not starting with one
    # has none (checked a file at a time in a record of 20,000: a regular expression a part
    # was half of reading it)
    return not ((path[0] == "." or "/." in path) and any(part in (".", "..") for part in parts))


@dataclass(frozen=True)
class ExportedFile:
    path: str
    bytes: Count
    sha256: str

    def check(self, where: str) -> None:
        if not safe_relpath(self.path):
            raise OutputStateError(f"{where}.path: {shown(self.path)} is not a path inside "
                                   "the export folder")
        if SHA256.fullmatch(self.sha256) is None:
            raise OutputStateError(f"{where}.sha256: {shown(self.sha256)} is not a sha256")


@dataclass(frozen=True)
class CocoObject:
    """An annotation of a COCO instances file, less its ids (given when the file is made)."""

    category_id: Count
    bbox: tuple[float, float, float, float]
    area: float
    polygons: tuple[tuple[float, ...], ...] | None = None
    rle: str | None = None


@dataclass(frozen=True)
class ExportedSample:
    key: str
    split: str
    digest: str  # of its sample-index line, less the shard it lies in
    width: Count
    height: Count
    files: tuple[ExportedFile, ...]
    coco: tuple[CocoObject, ...] | None = None

    def check(self, where: str) -> None:
        if SHA256.fullmatch(self.digest) is None:
            raise OutputStateError(f"{where}.digest: {shown(self.digest)} is not a sha256")


@dataclass(frozen=True)
class ExportOptions:
    """What decides an export's files besides the samples: resolved once, compared whole."""

    layout: str
    task: str | None = None  # yolo: detect, segment or classify
    normal: str | None = None  # anomalib: the image class of normal samples
    anomalib_layout: str | None = None  # anomalib: folder or mvtec
    splits: tuple[str, ...] | None = None  # None: every split


@dataclass(frozen=True)
class ExportRecord:
    format: Count
    options: ExportOptions
    content_fingerprint: str
    fingerprint: str
    version: Count
    classes: tuple[str, ...]
    object_classes: tuple[str, ...] | None
    samples: tuple[ExportedSample, ...]
    shared: tuple[ExportedFile, ...] = ()

    def check(self, where: str) -> None:
        if self.format != RECORD_FORMAT:
            raise OutputStateError(f"format: {self.format} is not a record format this "
                                   f"release writes ({RECORD_FORMAT})")

    def files(self) -> list[ExportedFile]:
        return [file for sample in self.samples for file in sample.files] + list(self.shared)


@dataclass(frozen=True)
class JournalEntry:
    """A shard whose samples an interrupted export finished: kept if their files still match."""

    shard: str
    sha256: str
    samples: tuple[ExportedSample, ...]


def record_cap(samples: int) -> int:
    """The largest record read or written for a dataset of ``samples`` samples."""
    return max(RECORD_CAP, samples * RECORD_BYTES_PER_SAMPLE)


def read_record(folder: Path,
                memo: dict[Path, tuple[bytes, ExportRecord]] | None = None,
                cap: int = RECORD_CAP) -> ExportRecord | None:
    """The record of the export folder ``folder``; None when it has none.  ``memo`` (path ->
    bytes and record) keeps what was parsed: the same bytes again are the same record (an
    export reads DEST twice, before its lock folder appears and under the lock; a record of
    10,000 samples takes ~0.1 s to parse)."""
    path = folder / RECORD_DIR / RECORD_NAME
    try:
        # walked from ``folder`` following no link: a ``.export`` that is a link would have a
        # record from outside DEST decide what is linked
        with open_beneath(str(folder), f"{RECORD_DIR}/{RECORD_NAME}", cap) as handle:
            raw = handle.read()
    except FileNotFoundError:
        return None
    except Refused as exc:
        raise OutputStateError(f"{path}: {exc.detail}; move {folder} away and rerun") from None
    last = None if memo is None else memo.get(path)
    if last is not None and last[0] == raw:
        return last[1]
    record = parse_record(raw, path, folder)
    if memo is not None:
        memo[path] = (raw, record)
    return record


@cache
def _inner_records(cls: type) -> dict[str, type | None]:
    """Field name -> the record class it holds (one or a tuple of them), None for a value."""
    hints = typing.get_type_hints(cls)
    return {name: next((arg for arg in typing.get_args(hint) or (hint,)
                        if dataclasses.is_dataclass(arg)), None)
            for name, hint in hints.items()}


def unknown_field(cls: type, value: Any, where: str = "") -> str | None:
    """The first field of ``value`` (decoded JSON) that ``cls`` (a record of this module) does
    not have, as a path; None when there is none.  The schema ignores unknown fields (a
    manifest of a newer release); a record that decides what is linked and kept must be
    exactly one this release wrote."""
    if not (dataclasses.is_dataclass(cls) and isinstance(value, dict)):
        return None
    fields = _inner_records(cls)
    for name, item in value.items():
        if name not in fields:
            return f"{where}{name}"
        inner = fields[name]
        if inner is None:
            continue
        items = value[name] if isinstance(item, list) else [item]
        for index, element in enumerate(items):
            at = f"{where}{name}[{index}]." if isinstance(item, list) else f"{where}{name}."
            found = unknown_field(inner, element, at)
            if found is not None:
                return found
    return None


def parse_strict(cls: type[T], value: Any) -> T:
    """``parse``, refusing fields ``cls`` does not have."""
    found = unknown_field(cls, value)
    if found is not None:
        raise OutputStateError(f"{shown(found)}: a field no export record has")
    return parse(cls, value, "", OutputStateError)


# The record's own encoding: msgspec, keys sorted, every field (None as null).  A record that
# decodes and encodes back to its very bytes has no unknown field and no key twice, so it
# needs no slower look (10,000 samples: 0.04 s instead of 0.5 s with a Python walk).
_ENCODER = msgspec.json.Encoder(order="sorted")
_RECORD_DECODER = msgspec.json.Decoder(ExportRecord, strict=True)


def _plainly_sha256(digests: list[str]) -> bool:
    """Every one of ``digests`` is a sha256 as ``SHA256`` says, seen at once: 64 characters
    each and nothing but lowercase hex in them joined (30,000 in 3 to 4 ms; a match each
    took 25 ms, one regular expression over them joined 20 to 25 ms)."""
    joined = "".join(digests)
    return (joined.isascii() and set(map(len, digests)) <= {64}
            and not joined.encode("ascii").translate(None, b"0123456789abcdef"))


def _plainly_safe(paths: list[str]) -> bool:
    """Every path passes ``safe_relpath``, seen by a few scans of them joined by newlines
    (20,000 paths in 4 ms, 40 ms one by one); False where one might not (a path with a
    newline, a part starting with a dot): then each is checked on its own."""
    if not paths:
        return True
    if not all(paths):
        return False
    joined = "\n".join(paths)
    return (joined.count("\n") == len(paths) - 1 and max(map(len, paths)) <= 255
            and joined[0] not in "/." and joined[-1] != "/" and "\n\n" not in joined
            and "//" not in joined and "/." not in joined and "\n." not in joined
            and "\n/" not in joined and "/\n" not in joined and "\x00" not in joined)


def _check_record(record: ExportRecord) -> None:
    """The ``check`` of every part of a record read fast (what ``parse`` runs after a
    conversion): in bulk where everything is sound, one by one (naming the first that is
    not) otherwise."""
    record.check("")
    files = [file for sample in record.samples for file in sample.files]
    digests = [sample.digest for sample in record.samples]
    digests += [file.sha256 for file in files]
    digests += [file.sha256 for file in record.shared]
    if _plainly_sha256(digests) and _plainly_safe([file.path for file in files]) \
            and _plainly_safe([file.path for file in record.shared]):
        return
    for number, sample in enumerate(record.samples):
        sample.check(f"samples[{number}]")
        for index, file in enumerate(sample.files):
            file.check(f"samples[{number}].files[{index}]")
    for index, file in enumerate(record.shared):
        file.check(f"shared[{index}]")


def _exact(decoder: msgspec.json.Decoder, raw: bytes) -> Any:
    """``raw`` decoded by ``decoder`` when it is exactly what our encoder writes of the result
    (with its newline); None otherwise (then the slow path says what is wrong, if anything)."""
    try:
        value = decoder.decode(raw)
    except (msgspec.MsgspecError, RecursionError):
        return None
    return value if _ENCODER.encode(value) + b"\n" == raw else None


def parse_record(raw: bytes, path: Path, folder: Path) -> ExportRecord:
    advice = f"not an export record shardsmith wrote; move {folder} away and rerun"
    try:
        record = _exact(_RECORD_DECODER, raw)
        if record is not None:
            _check_record(record)
            return record
        return parse_strict(ExportRecord, decode(raw, str(path), unique_keys=True))
    except (ManifestError, OutputStateError) as exc:
        message = str(exc).removeprefix(f"{path}: ")
        raise OutputStateError(f"{path}: {message}: {advice}") from None


def record_bytes(record: ExportRecord) -> bytes:
    return _ENCODER.encode(record) + b"\n"


def journal_line(entry: JournalEntry) -> bytes:
    return _ENCODER.encode(entry) + b"\n"


def read_journal(folder: Path, options_line: bytes,
                 cap: int = RECORD_CAP) -> dict[str, JournalEntry]:
    """shard name -> what an interrupted export into ``folder`` finished of it; empty when it
    was made with other options or is unreadable (its files are then checked again anyway)."""
    path = folder / RECORD_DIR / JOURNAL_NAME
    try:
        with open_file(path, cap) as handle:
            lines = handle.read().splitlines(keepends=True)
    except (OSError, Refused):
        return {}
    if not lines or lines[0] != options_line:
        return {}
    entries = {}
    for line in lines[1:]:
        try:
            value = decode(line, str(path))
        except ManifestError:
            break  # a torn last line: what it held is exported again
        try:
            entry = parse_strict(JournalEntry, value)
        except OutputStateError as exc:
            raise OutputStateError(f"{path}: {exc}: not a journal shardsmith wrote; move "
                                   f"{folder} away and rerun") from None
        entries[entry.shard] = entry
    return entries


def options_line(options: ExportOptions, content_fingerprint: str) -> bytes:
    return (json.dumps({"options": to_json(options), "content": content_fingerprint},
                       sort_keys=True) + "\n").encode()
