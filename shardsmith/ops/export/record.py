"""What an export folder holds, as ``.export/record.json`` says: the dataset version it came
from, the layout and options, and per shard of the dataset the files its samples gave (path,
size, inode).

The record is kept per shard because a shard is what a later export links whole: a shard whose
sha256 and sample-index lines are unchanged since gives the same files, so its group is linked
as it stands (nothing of it read from its shard, decoded or hashed again) and goes into the new
record as it was (a hard link keeps the inode).

The record decides what a later export may hard-link and what an interrupted one may keep, so
it is read as untrusted (someone may have edited it, or the folder may be another tool's):
strictly typed, no field a record of ours lacks, every number bounded, every digest a sha256; a
sample's paths are held to the layout's own before its files are linked or trusted
(``layouts.paths_fit``).  A record that does not fit is an OutputStateError naming the file.

Its types are msgspec Structs, not the frozen dataclasses of ``schema``: a record of 10,000
samples decoded into Structs refusing unknown fields takes 10 to 20 ms; into dataclasses, then
encoded again to find unknown fields, 50 to 80 ms, a sixth of a re-export after a 1% increment.
Every version's record is read for its head only (``RecordHead``: what it is and its layout,
its shards skipped unread, 2 to 3 ms); the whole record only of the version a re-export links
from.  A record of format 1 (a release that kept one entry per sample) is read for its head
only: its version lends no file, and its next export makes every file again, once.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated

import msgspec

from ...door import STATE_CAP, Refused, open_beneath, open_file
from ...errors import ManifestError, OutputStateError
from ...schema import Count, decode, explain
from ...text import shown

RECORD_DIR = ".export"
RECORD_NAME = "record.json"
JOURNAL_NAME = "journal.jsonl"
RECORD_FORMAT = 2  # 1: an entry per sample (lends no file: made again once)
RECORD_CAP = 4 * STATE_CAP  # the least a record may be, whatever the dataset's size
# A record (format 2) is ~250 bytes a YOLO sample and ~350 a COCO sample (40 samples of short
# names; its key and file paths make the rest): read up to 16 KiB a sample of the dataset
# exported (with a fixed cap, a record of 256 MiB, 500,000 samples of format 1, made the next
# export refuse the folder it had itself written).
RECORD_BYTES_PER_SAMPLE = 16 << 10


# st_ino is 64 bits unsigned (overlayfs puts a file system's number in the high ones), past
# what msgspec bounds: no upper bound, a larger number only matching no file.
Inode = Annotated[int, msgspec.Meta(ge=0)]


class ExportedFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    path: str  # relative to the export folder: the layout's (``layouts.paths_fit``)
    bytes: Count
    # The file's inode number as written: a later export links it (or a resumed one keeps
    # it) only where the name still holds that file (one swapped for a hard link to another
    # file of the same size and mode is not ours).  Size, inode and mode are all a file is
    # checked by: its bytes are not read again.
    inode: Inode


class SharedFile(ExportedFile, frozen=True, forbid_unknown_fields=True, gc=False):
    """A split-wide file (``data.yaml``, COCO's instances files): made again by every export,
    never linked, with the sha256 of what it holds."""

    sha256: str


class CocoObject(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """An annotation of a COCO instances file, less its ids (given when the file is made)."""

    category_id: Count
    bbox: tuple[float, float, float, float]
    area: float
    polygons: tuple[tuple[float, ...], ...] | None = None
    rle: str | None = None


class ExportedSample(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    key: str
    split: str
    width: Count
    height: Count
    files: tuple[ExportedFile, ...]
    coco: tuple[CocoObject, ...] | None = None


class ExportOptions(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What decides an export's files besides the samples: resolved once, compared whole."""

    layout: str
    task: str | None = None  # yolo: detect, segment or classify
    normal: str | None = None  # anomalib: the image class of normal samples
    anomalib_layout: str | None = None  # anomalib: folder or mvtec
    splits: tuple[str, ...] | None = None  # None: every split
    # yolo (detect, segment), coco: samples with a defect cut below min_visible are written,
    # the cut objects labelled (else left out)
    keep_cut: bool = False
    # coco: whether an object with a box only gets its box as ``segmentation`` (None: a
    # record of an earlier release, which gave it one)
    box_polygons: bool | None = None


class RecordHead(msgspec.Struct, frozen=True):
    """A record less its files: what ``survey`` reads of every version (the files, unknown
    here, are skipped unread)."""

    format: Count
    options: ExportOptions
    content_fingerprint: str
    fingerprint: str
    version: Count
    classes: tuple[str, ...]
    object_classes: tuple[str, ...] | None


class ExportedShard(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """The samples one shard of the dataset gave, with their files: linked whole by a later
    export while the shard (``sha256``) and its samples' index lines (``index``) are the
    same; a line of the resume journal too (a shard an interrupted export finished)."""

    shard: str
    sha256: str  # the shard's, as the manifest lists it
    index: str  # of the shard's samples' sample-index lines, in their order (``index_digest``)
    samples: tuple[ExportedSample, ...]


class ExportRecord(RecordHead, frozen=True, forbid_unknown_fields=True):
    shards: tuple[ExportedShard, ...]
    shared: tuple[SharedFile, ...] = ()

    def samples(self) -> list[ExportedSample]:
        """Every sample of the record, shard by shard."""
        return [sample for group in self.shards for sample in group.samples]

    def files(self) -> list[ExportedFile]:
        """Every file of the record: the samples', then the split-wide ones."""
        return [file for group in self.shards for sample in group.samples
                for file in sample.files] + list(self.shared)


def record_cap(samples: int) -> int:
    """The largest record read or written for a dataset of ``samples`` samples."""
    return max(RECORD_CAP, samples * RECORD_BYTES_PER_SAMPLE)


_ENCODER = msgspec.json.Encoder(order="sorted")  # keys sorted, every field (None as null)
_HEAD = msgspec.json.Decoder(RecordHead)
_RECORD = msgspec.json.Decoder(ExportRecord)
_JOURNAL_ENTRY = msgspec.json.Decoder(ExportedShard)


def read_head(folder: Path, cap: int = RECORD_CAP) -> RecordHead | None:
    """The head of the record of the export folder ``folder``; None when it has none."""
    return _read(folder, cap, _HEAD)


def read_record(folder: Path, cap: int = RECORD_CAP) -> ExportRecord | None:
    """The whole record of the export folder ``folder``; None when it has none."""
    return _read(folder, cap, _RECORD)


def _read(folder: Path, cap: int, decoder: msgspec.json.Decoder):
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
    return parse_record(raw, path, folder, decoder)


def parse_record(raw: bytes, path: Path, folder: Path,
                 decoder: msgspec.json.Decoder = _RECORD):
    """``raw`` as a record (``decoder``: ``_RECORD`` or ``_HEAD``); OutputStateError naming
    ``path`` and what does not fit."""
    try:
        record = decoder.decode(raw)
    except (msgspec.MsgspecError, RecursionError) as exc:
        why = _explained(exc, decoder.type, raw, path)
    else:
        why = (sha256_problem(record.shards, record.shared)
               if isinstance(record, ExportRecord) else None)
        if why is None:
            return record
    raise OutputStateError(f"{path}: {why}: not an export record shardsmith wrote; move "
                           f"{folder} away and rerun")


def _explained(exc: Exception, cls: type, raw: bytes, path: Path) -> str:
    """What msgspec refused in ``raw``, in the words of every other file we read
    (``samples[0].files[0].bytes: -1 is out of range``); or why it is not JSON."""
    try:
        value = decode(raw, str(path))
    except ManifestError as error:  # not JSON: Python's reader says why
        return str(error).removeprefix(f"{path}: ")
    if isinstance(exc, msgspec.ValidationError):
        return explain(str(exc), cls, value)
    return f"not JSON a record of ours holds ({exc})"  # NaN, a lone surrogate escape


def sha256_problem(shards: tuple[ExportedShard, ...],
                   shared: tuple[SharedFile, ...] = ()) -> str | None:
    """The first digest of ``shards`` (a shard's, its index lines') or of ``shared`` that is
    not a sha256, named; None when all are (two a shard: a pattern each costs nothing)."""
    named = [(digest, f"shards[{number}].{field}") for number, group in enumerate(shards)
             for field, digest in (("sha256", group.sha256), ("index", group.index))]
    named += [(file.sha256, f"shared[{index}].sha256") for index, file in enumerate(shared)]
    return next((f"{where}: {shown(value)} is not a sha256" for value, where in named
                 if SHA256.fullmatch(value) is None), None)


SHA256 = re.compile(r"[0-9a-f]{64}")


def record_bytes(record: ExportRecord) -> bytes:
    return _ENCODER.encode(record) + b"\n"


def journal_line(entry: ExportedShard) -> bytes:
    return _ENCODER.encode(entry) + b"\n"


def read_journal(folder: Path, options_line: bytes,
                 cap: int = RECORD_CAP) -> dict[str, ExportedShard]:
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
            entry = _JOURNAL_ENTRY.decode(line)
        except msgspec.ValidationError as exc:
            problem = _explained(exc, ExportedShard, line, path)
        except (msgspec.DecodeError, RecursionError):
            break  # a torn last line: what it held is exported again
        else:
            problem = sha256_problem((entry,))
        if problem is not None:
            raise OutputStateError(f"{path}: {problem}: not a journal shardsmith wrote; move "
                                   f"{folder} away and rerun")
        entries[entry.shard] = entry
    return entries


def options_line(options: ExportOptions, content_fingerprint: str) -> bytes:
    """The journal's first line: a journal of other options, another dataset version or
    another record format (one of an earlier release) is not read, its files checked again."""
    return (json.dumps({"options": msgspec.to_builtins(options), "content": content_fingerprint,
                        "format": RECORD_FORMAT}, sort_keys=True) + "\n").encode()
