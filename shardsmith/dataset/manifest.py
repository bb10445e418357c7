"""The dataset's manifest and per-sample index: one typed, validated model for every command.

Layout of a packed (or staged) directory::

    manifest.json          the commit point: a directory without it is not a dataset
    samples-vN.jsonl       the sample index of version N (key, path, label, split, shard, ...)
    SPLIT-NNNNNN.tar       or .tfrecord, each with SPLIT-NNNNNN.idx (per-record offsets)
    .shardsmith/           lock, journal of an unfinished pack, stage records

A manifest and its sample index are untrusted input: they may come from another team's share
or be damaged.  ``read_manifest`` checks types and required fields, and that every file name
is a plain name of our own pattern (no separator, no ``..``), before any command touches a
file; sizes bound every copy and read.  Anything else is one ``ManifestError`` (exit 2).

The manifest is the single commit point (docs/design.md, invariant 8): new files go under new names,
then the manifest is renamed into place, then files the new manifest no longer names are
removed.  Shard numbers and index versions only grow, so a name never changes its content.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from ..annotations.audit import SourceReport
from ..annotations.limits import MAX_OBJECT_CLASSES, MAX_OBJECTS
from ..atomic import HashingFile, check_replaceable, fsync_directory, write_bytes_atomic
from ..config import config_from_settings
from ..door import MANIFEST_CAP, Refused, open_file, sha256_of
from ..errors import ConfigError, ManifestError
from ..schema import INT64, LINE_CAP, Bounds, Count, decode, line_reader, parse, to_json
from ..storage import NoSuchBucket, StoreError
from ..text import shown
from .entries import MAX_SHARD_NUMBER, SHARD_NAME, FileEntry, ShardEntry, plain_name
from .entries import index_name as index_name  # the names of shards, importable from here too
from .entries import shard_name as shard_name
from .entries import shard_number as shard_number
from .formats import FORMATS
from .keys import KeyTally, duplicate_message, repeated_keys
from .statedir import DatasetDir

SCHEMA_VERSION = 2
READABLE_SCHEMAS = (1, 2)
MANIFEST_NAME = "manifest.json"
LEGACY_SAMPLES_NAME = "samples.jsonl"
OBJECTS_RECORD_CAP = 64 << 20  # two versions' names, ~100 bytes each: a million shards
# How this release derives a sample's objects and class mask from an original's annotations:
# raised whenever that changes, so a dataset never mixes samples made by two sets of rules
# (the next pack re-derives the annotated samples of an older dataset, as one new version).
# 1: a mask object keeps its whole instance's box clipped to the window (every release before
# this field); 2: an object with pixels has the box of its own pixels in the window, the class
# mask holds the kept objects only, a box and a mask of one defect are one object; 3: each
# object dropped by min_visible is recorded (``SampleRecord.objects_cut``, ``KEY.json``), and a
# tile showing one is kept by ``tiles.keep: annotated`` (never drawn as background).
ANNOTATION_RULES = 3
MAX_ANNOTATION_RULES = 10**6  # far past any release; a larger number is damage

SPLIT_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
SAMPLES_INDEX_NAME = re.compile(r"samples(-v\d{1,9}(-[a-z][a-z0-9_]{0,63})?)?\.jsonl")
CHANGES_NAME = re.compile(r"changes-v(?P<version>\d{1,9})\.jsonl")
SHARD_LIST_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}-shards\.(txt|json)")
LABEL_MAP_NAME = "label_map.pbtxt"  # TFRecord datasets with objects: the OD API's class ids
SAMPLE_KEY = re.compile(r"[A-Za-z0-9_-]{1,128}")

# The numbers our own writer produces, and so all a manifest may hold: shard numbers fit the
# six digits of ``SPLIT-NNNNNN`` (``MAX_SHARD_NUMBER``; a split's next number too: the writer
# never goes past it), a version's sample index name ``samples-vN`` its nine, a label is a class
# index or -1.
ShardNumber = Annotated[int, Bounds(0, MAX_SHARD_NUMBER)]
MAX_VERSION = 10**9 - 1
Version = Annotated[int, Bounds(0, MAX_VERSION)]
Label = Annotated[int, Bounds(-1, 2**31 - 1)]
ImageSide = Annotated[int, Bounds(16, 16384)]  # as ``image.size`` allows
MtimeNs = Annotated[int, INT64]
ObjectCounts = Annotated[tuple[Annotated[int, Bounds(0, MAX_OBJECTS)], ...],
                         msgspec.Meta(max_length=MAX_OBJECT_CLASSES)]
AnnotationRules = Annotated[int, Bounds(1, MAX_ANNOTATION_RULES)]


def samples_index_name(version: int, split: str | None = None) -> str:
    return f"samples-v{version}" + (f"-{split}" if split else "") + ".jsonl"


def changes_name(version: int) -> str:
    """What version ``version`` changed, beside the manifest: ``changes-vN.jsonl``."""
    return f"changes-v{version}.jsonl"


def is_shard_file(name: str) -> bool:
    """True for names shardsmith writes as shards or shard indexes."""
    return SHARD_NAME.fullmatch(name) is not None


def is_dataset_file(name: str) -> bool:
    """True for names the manifest may list: shards, their indexes, sample indexes, changes
    files."""
    return is_shard_file(name) or SAMPLES_INDEX_NAME.fullmatch(name) is not None \
        or CHANGES_NAME.fullmatch(name) is not None


def is_shard_list(name: str) -> bool:
    """True for the per-split shard lists (derived from the manifest, stable names)."""
    return SHARD_LIST_NAME.fullmatch(name) is not None


def is_derived_file(name: str) -> bool:
    """True for files derived from the manifest under stable names: shard lists, label map."""
    return is_shard_list(name) or name == LABEL_MAP_NAME


def shard_list_names(split: str, fmt: str) -> tuple[str, ...]:
    """The shard lists of ``split`` in format ``fmt``: ``SPLIT-shards.txt`` (one shard per
    line), and those the format adds (``SPLIT-shards.json``, which webdataset's
    ``wids.ShardListDataset`` reads)."""
    return tuple(f"{split}-shards.{ext}" for ext in FORMATS[fmt].shard_lists)


def settings_facts(settings: dict[str, Any]) -> dict[str, Any]:
    """The facts of a dataset packed with ``settings`` (a manifest's ``config``), by the
    fields of ``Manifest`` that hold them; ManifestError when the settings do not validate."""
    try:
        config = config_from_settings(settings)
    except ConfigError as exc:
        raise ManifestError(f"config: {exc}") from None
    return {"image_size": config.image.size, "image_resize": config.image.resize,
            "has_masks": config.source.annotations.has_masks}


# Each fact of ``settings_facts`` and the setting it comes from, as a message names it.
FACT_SETTINGS = {"image_size": "image.size", "image_resize": "image.resize",
                 "has_masks": "source.annotations: has_masks"}


def _fact_text(value: Any) -> str:
    return json.dumps(value) if isinstance(value, bool) else str(value)


@dataclass(frozen=True)
class SampleIndexEntry:
    """The per-sample index file and how many lines it holds."""

    name: str
    bytes: Count
    sha256: str
    samples: Count = 0

    def check(self, where: str) -> None:
        plain_name(self.name, SAMPLES_INDEX_NAME, f"{where}.name", "sample index")
        FileEntry.check(self, where)

    @property
    def file(self) -> FileEntry:
        return FileEntry(self.name, self.bytes, self.sha256)


@dataclass(frozen=True)
class ChangesEntry:
    """The changes file of one version (``changes-vN.jsonl``: what it changed against the
    version before it, docs/format.md), as the manifest names it."""

    version: Version
    name: str
    bytes: Count
    sha256: str

    def check(self, where: str) -> None:
        if self.name != changes_name(self.version):
            raise ManifestError(f"{where}.name: {shown(self.name)} is not the changes file "
                                f"of version {self.version} ({changes_name(self.version)})")
        FileEntry.check(self, where)

    @property
    def file(self) -> FileEntry:
        return FileEntry(self.name, self.bytes, self.sha256)


@dataclass(frozen=True)
class SplitTotals:
    samples: Count = 0
    shards: Count = 0
    bytes: Count = 0


@dataclass(frozen=True)
class RejectEntry:
    """A source file that is not a sample, and why; its stat when it was judged."""

    path: str
    reason: str
    detail: str
    source_size: Count | None = None
    source_mtime_ns: MtimeNs | None = None
    # the image's annotation digest when it was judged (None: none, or an older release): a
    # ``bad_annotation`` reject is judged again when it differs, though the image did not change
    annotation_digest: str | None = None


@dataclass(frozen=True)
class Totals:
    """``seen`` = originals packed + rejected + excluded; ``packed`` counts samples, which are
    the packed originals unless they were cut into tiles (then ``sources`` counts those)."""

    seen: Count
    packed: Count
    rejected: Count
    excluded: Count
    bytes_in: Count
    bytes_out: Count
    sources: Count | None = None


@dataclass(frozen=True)
class ChangeCounts:
    """How many originals, or how many samples (the unit is the field that holds it), a
    version added, changed (content), relabelled, re-annotated (same pixels, other objects),
    removed and moved to another split (``splits.near_duplicates``): the count of each kind
    of line in its changes file, or the sum of their ``samples`` (a tile's original makes
    several)."""

    added: Count = 0
    changed: Count = 0
    relabelled: Count = 0
    reannotated: Count = 0
    removed: Count = 0
    moved: Count | None = None  # None: none (left out, as in a release before moves)


@dataclass(frozen=True)
class VersionEntry:
    """What one dataset version changed (``shardsmith log``).  ``originals`` and ``samples``
    (absent before they were recorded) count each change in its unit; the older fields
    ``added``, ``changed`` and ``removed`` are kept as recorded, their unit mixed in entries
    written without ``originals`` (``removed`` counted samples and rejects), the originals
    counts in newer ones."""

    version: Version
    created: str = ""
    added: Count = 0
    changed: Count = 0
    removed: Count = 0
    rejected: Count = 0
    touched: Count = 0
    repaired: Count = 0
    reannotated: Count | None = None  # sources whose objects were derived again (new rules)
    shards_added: tuple[str, ...] = ()
    shards_removed: tuple[str, ...] = ()
    previous_content_fingerprint: str | None = None
    note: str | None = None
    originals: ChangeCounts | None = None
    samples: ChangeCounts | None = None


@dataclass(frozen=True)
class Manifest:
    """Everything a dataset directory promises.  Built by ``pack``; read by every command."""

    schema_version: int
    format: str
    classes: tuple[str, ...]
    splits: dict[str, SplitTotals]
    shards: tuple[ShardEntry, ...]
    samples_index: SampleIndexEntry
    totals: Totals
    fingerprint: str
    rejects: tuple[RejectEntry, ...] = ()
    excluded: dict[str, Count] = field(default_factory=dict)
    # The first paths of each reason (``scan.EXCLUDED_PATHS_KEPT``); ``excluded`` has the counts.
    excluded_paths: dict[str, tuple[str, ...]] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    version: Version = 1
    created: str = ""
    tool: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    sources_fingerprint: str = ""
    previous_content_fingerprint: str | None = None
    content_fingerprint: str = ""
    history: tuple[VersionEntry, ...] = ()
    run: dict[str, Any] = field(default_factory=dict)
    next_shard_numbers: dict[str, ShardNumber] = field(default_factory=dict)
    staged: dict[str, Any] | None = None
    shard_lists: tuple[str, ...] = ()  # derived from ``shards``, replaced after each commit
    # Classes of annotated objects (boxes, polygons, masks): id k is object_classes[k - 1],
    # 0 is the background.  Only appended to, so an id keeps its meaning across versions.
    object_classes: tuple[str, ...] | None = None
    # The dataset's facts a reader needs, as fields (docs/format.md), so that no reader
    # re-derives them from ``config``.  Left out (None), they are derived from ``config``: a
    # manifest of an older release gets them when read, a new one when it is built.
    image_size: ImageSide | None = None  # ``image.size``: what a whole original is resized to
    image_resize: str | None = None  # how an original became a sample (``image.resize``)
    has_masks: bool | None = None  # every sample carries a class mask (``KEY.mask.png``)
    # With objects: annotation files that match no image, and warnings about the sources.
    annotation_sources: SourceReport | None = None
    # The rules its objects and class masks were derived by (``ANNOTATION_RULES``); written
    # with ``object_classes``, absent in a dataset of an older release: rules 1.
    annotation_rules: AnnotationRules | None = None
    # The changes files of the last versions (``output.keep_changes``), oldest first; none in
    # a dataset of an older release, so ``diff`` knows only versions packed since.
    changes: tuple[ChangesEntry, ...] = ()
    # How the sample index's ``near`` hashes were made; none in a dataset of an older
    # release (its next pack makes them from the stored samples).
    near_hash: NearHashEntry | None = None
    # "together" when the pack kept each cluster of near-duplicates in one split
    # (``splits.near_duplicates``, not part of the fingerprint); absent otherwise.
    near_duplicates: Literal["together"] | None = None

    def __post_init__(self) -> None:
        if self.image_size is None or self.image_resize is None or self.has_masks is None:
            for name, value in settings_facts(self.config).items():
                if getattr(self, name) is None:
                    object.__setattr__(self, name, value)

    def check(self, where: str) -> None:
        if self.schema_version not in READABLE_SCHEMAS:
            raise ManifestError(f"unsupported manifest schema {self.schema_version} (this "
                                f"shardsmith reads {', '.join(map(str, READABLE_SCHEMAS))})")
        self._check_facts()
        if self.format not in FORMATS:
            raise ManifestError(f"format: {shown(self.format)} is not one of "
                                f"{', '.join(FORMATS)}")
        for split in self.splits:
            plain_name(split, SPLIT_NAME, "splits", "split")
        for split in self.next_shard_numbers:
            plain_name(split, SPLIT_NAME, "next_shard_numbers", "split")
        for name in self.shard_lists:
            plain_name(name, SHARD_LIST_NAME, "shard_lists", "shard list")
        names: set[str] = set()
        fmt = FORMATS[self.format]
        for number, shard in enumerate(self.shards):
            where_shard = f"shards[{number}]"
            if not shard.name.endswith(fmt.extension):
                raise ManifestError(f"{where_shard}.name: {shard.name} is not a "
                                    f"{self.format} shard")
            if fmt.index_required and shard.index is None:
                raise ManifestError(f"{where_shard}.index: missing ({self.format} shards "
                                    "have one)")
            if shard.split not in self.splits:
                raise ManifestError(f"{where_shard}: split {shard.split} is not in splits")
            for entry in shard.files():
                if entry.name in names:
                    raise ManifestError(f"{where_shard}: {entry.name} is listed twice")
                names.add(entry.name)
        self._check_changes()

    def _check_changes(self) -> None:
        """Changes files of versions up to this one, each once, oldest first."""
        last = 0
        for number, entry in enumerate(self.changes):
            if not last < entry.version <= self.version:
                raise ManifestError(f"changes[{number}].version: {entry.version} is not a "
                                    f"version after {last} and up to {self.version}")
            last = entry.version

    def _check_facts(self) -> None:
        """The recorded facts are the ones its recorded settings give (what a manifest
        without them is given): a reader trusts them (a class mask, the image size), so a
        fact edited against the settings, or settings edited against a fact, is damage."""
        derived = settings_facts(self.config)  # a manifest without facts: derived, equal
        for name, setting in FACT_SETTINGS.items():
            if getattr(self, name) != derived[name]:
                raise ManifestError(
                    f"{name} {_fact_text(getattr(self, name))} disagrees with its settings "
                    f"({setting} {_fact_text(derived[name])}): the manifest is damaged")

    @property
    def rules(self) -> int | None:
        """The annotation rules its objects were derived by (None: a dataset without
        objects; 1 for one of a release before the rules were recorded)."""
        if self.object_classes is None:
            return None
        return self.annotation_rules if self.annotation_rules is not None else 1

    @property
    def current(self) -> bool:
        """Written by this schema (an older one is upgraded by the next pack)."""
        return self.schema_version == SCHEMA_VERSION

    def files(self) -> tuple[FileEntry, ...]:
        """Every file the manifest names: shards, their indexes, the sample index, the
        changes files."""
        return (*(f for shard in self.shards for f in shard.files()), self.samples_index.file,
                *(entry.file for entry in self.changes))

    def only_split(self, split: str) -> Manifest:
        """The same dataset restricted to one split (``stage --split``), without the changes
        files (they describe every split)."""
        return replace(self, shards=tuple(s for s in self.shards if s.split == split),
                       splits={split: self.splits[split]}, changes=(),
                       shard_lists=tuple(name for name in self.shard_lists
                                         if name.startswith(f"{split}-")))

    def with_content_fingerprint(self) -> Manifest:
        listing = [(shard.name, shard.sha256) for shard in self.shards]
        listing.append((LEGACY_SAMPLES_NAME if self.schema_version == 1
                        else self.samples_index.name, self.samples_index.sha256))
        digest = hashlib.sha256(json.dumps(listing).encode()).hexdigest()
        return replace(self, content_fingerprint=digest)


def read_manifest(directory: Path) -> Manifest:
    """Load and validate ``directory/manifest.json``; raises ManifestError (exit 2)."""
    path = directory / MANIFEST_NAME
    try:
        with open_file(path, MANIFEST_CAP) as handle:
            raw = handle.read()
    except NoSuchBucket as exc:
        raise ManifestError(f"{directory}: {exc.strerror}") from None
    except FileNotFoundError:
        raise ManifestError(f"{directory}: no {MANIFEST_NAME}: not a packed dataset (or its "
                            "pack has not finished)") from None
    except Refused as exc:
        raise ManifestError(f"{path}: {exc.detail}") from None
    except StoreError:
        raise  # the store failed, not the manifest: exit 1 (docs/storage.md)
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return parse_manifest(raw, str(path))


def parse_manifest(raw: bytes, where: str) -> Manifest:
    """``raw`` as a manifest, validated; ManifestError naming ``where`` otherwise."""
    data = decode(raw, where, unique_keys=True)
    try:
        return parse(Manifest, data, "")
    except ManifestError as exc:
        raise ManifestError(f"{where}: {exc}") from None


def write_manifest(directory: Path, manifest: Manifest) -> None:
    """Publish the manifest atomically: the commit point of a dataset version."""
    text = json.dumps(to_json(manifest), indent=1, sort_keys=True) + "\n"
    write_bytes_atomic(directory / MANIFEST_NAME, text.encode("ascii"))


@dataclass(frozen=True, slots=True)
class NearHashEntry:
    """How the sample index's near-duplicate hashes (``SampleRecord.near``) were made:
    ``neardup.hashing``'s algorithm and version."""

    algorithm: Annotated[str, msgspec.Meta(pattern=r"^[a-z0-9-]{1,64}$")]
    version: Annotated[int, Bounds(1, 10**6)]


Hex16 = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{16}$")]
Hex8 = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{8}$")]
Signature = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9+/]{168}$")]  # 126 bytes, base64


@dataclass(frozen=True, slots=True)
class CutRecord:
    """An object a crop or tile showed too little of (``min_visible``), in the sample index:
    its object class id, its clipped box (x0, y0, x1, y1 in the sample's pixels) and, when it
    has a mask, its pixels in the sample as a COCO compressed RLE string."""

    label: Annotated[int, Bounds(1, MAX_OBJECT_CLASSES)]
    box: tuple[float, float, float, float]
    rle: Annotated[str, msgspec.Meta(max_length=LINE_CAP)] | None = None


@dataclass(frozen=True, slots=True)
class SampleRecord:
    """One line of the sample index."""

    key: str
    path: str
    label: Label
    split: str
    shard: str
    width: Count
    height: Count
    jpeg_bytes: Count
    source_size: Count
    source_mtime_ns: MtimeNs
    source_digest: str = ""
    group: str | None = None  # the group id under ``splits.group``, when it matched
    annotation_digest: str | None = None  # of the annotations it was made from
    # With objects: per object class id k, objects[k - 1] of that class in the sample (the
    # list ends at its last class); the objects a crop or tile left out (min_visible); and
    # the pairs of a mask and a box of one defect made one object (merge_iou).
    objects: ObjectCounts | None = None
    objects_dropped: Count | None = None
    objects_merged: Count | None = None
    # Each object dropped by min_visible (absent when none was, and in indexes of releases
    # before it was recorded): a sample with one is never normal (``dataset.normal``).
    objects_cut: Annotated[tuple[CutRecord, ...],
                           msgspec.Meta(max_length=MAX_OBJECTS)] | None = None
    # Per object class id k, at k - 1, the objects of that class with a box only (no polygon,
    # no instance mask), up to its last such class: ``[]`` when every object has pixels; None
    # in an index line written before it was counted (the export cannot tell).
    objects_box_only: ObjectCounts | None = None
    # The near-duplicate hashes of its stored JPEG (two, 16 hex digits each) and the digest
    # of the fixture background they were made against (``packing.nearhash``); absent where
    # none could be made, and in indexes of releases before them.
    near: tuple[Hex16, Hex16, Hex8] | None = None
    # What ranks the nearest of its hashes (``neardup.hashing._signature``), with ``near``;
    # a line with ``near`` and none is hashed again.
    near_signature: Signature | None = None

    def check(self, where: str) -> None:
        shard = SHARD_NAME.fullmatch(self.shard)
        if shard is not None and shard["split"] == self.split \
                and int(shard["number"]) <= MAX_SHARD_NUMBER \
                and SAMPLE_KEY.fullmatch(self.key) is not None:
            return  # every line of a sound index: two matches, not five
        if SAMPLE_KEY.fullmatch(self.key) is None:
            raise ManifestError(f"{where}.key: {shown(self.key)} is not a sample key")
        plain_name(self.split, SPLIT_NAME, f"{where}.split", "split")
        plain_name(self.shard, SHARD_NAME, f"{where}.shard", "shard")
        if SHARD_NAME.fullmatch(self.shard)["split"] != self.split:
            raise ManifestError(f"{where}: sample {self.key} of split {self.split} is in "
                                f"{self.shard}, a shard of another split")


def sample_line(record: dict[str, Any] | SampleRecord) -> bytes:
    """The JSON line of a sample record (ASCII: odd bytes in names are escaped, not lost)."""
    payload = to_json(record) if isinstance(record, SampleRecord) else record
    return (json.dumps(payload, sort_keys=True, separators=(",", ":")) + "\n").encode("ascii")


_read_sample_line = line_reader(SampleRecord)
# Bytes of the sample index read and hashed at once, then split into lines (10,000 lines read,
# checked and hashed: medians of 58 ms, 65 ms a ``readline`` at a time; msgspec's
# ``decode_lines`` on the block, 48 ms, was not worth a second reader to keep equal to this).
INDEX_BLOCK = 1 << 20


def iter_sample_index(directory: Path, manifest: Manifest) -> Iterator[SampleRecord]:
    """The sample index, validated line by line, streamed a block at a time (memory grows by
    8 bytes a line only: the key check).

    Reads at most the manifest's byte count, and hashes what it reads: an index read in full
    whose sha256 is not the manifest's, or that holds a sample key twice (``dataset.keys``),
    raises ManifestError after its last line (an edit of the same size, a label changed, is
    found by nothing else), so a consumer acts on the records only once the loop has
    finished.  The hash costs ~0.25 s a million lines (282 MB), a few percent of the 5-7 s
    their parse takes.
    """
    tally = KeyTally()
    for record in _index_records(directory, manifest):
        tally.add(record.key)
        yield record
    hashes = tally.repeated()
    if hashes:  # read again, only to name them (a dataset that is refused anyway)
        repeated = repeated_keys(((record.key, record.shard) for record in
                                  _index_records(directory, manifest)), hashes)
        if repeated:
            raise ManifestError(f"{directory / manifest.samples_index.name}: "
                                f"{duplicate_message(repeated, 'the sample index')}")


def _index_records(directory: Path, manifest: Manifest) -> Iterator[SampleRecord]:
    entry = manifest.samples_index
    path = directory / entry.name
    digest = hashlib.sha256()
    try:
        opened = open_file(path, entry.bytes)
    except Refused as exc:
        raise ManifestError(f"{path}: not the {entry.bytes:,}-byte sample index the manifest "
                            f"names: {exc.detail}") from None
    except OSError as exc:
        raise ManifestError(f"{path}: cannot open the sample index: "
                            f"{exc.strerror or exc}") from None
    if opened.size != entry.bytes:
        opened.close()
        raise ManifestError(f"{path}: the sample index is not the {entry.bytes:,}-byte "
                            "file the manifest names")
    with opened.stream() as handle:  # a local file or an object (ranged GETs)
        remaining, number, carried = entry.bytes, 0, b""
        while remaining > 0 and (block := handle.read(min(remaining, INDEX_BLOCK))):
            remaining -= len(block)
            digest.update(block)
            lines = (carried + block).split(b"\n")
            carried = lines.pop()  # the start of a line the next block ends
            if carried and (remaining <= 0 or len(carried) > LINE_CAP):
                lines.append(carried)  # the last line, without its newline, or one too long
            for line in lines:
                number += 1
                if len(line) >= LINE_CAP:  # with its newline, longer than the cap
                    raise ManifestError(f"{path}: line {number}: longer than {LINE_CAP:,} "
                                        "bytes, which no sample record is")
                try:
                    record = _read_sample_line(line, f"line {number}")
                except ManifestError as exc:
                    message = str(exc)
                    raise ManifestError(message if message.startswith(f"{path}: ")
                                        else f"{path}: {message}") from None
                yield record
    if digest.hexdigest() != entry.sha256:
        raise ManifestError(_damaged_index(path))


def _damaged_index(path: Path) -> str:
    return (f"{path}: the sample index is damaged: its sha256 is not the one the manifest "
            "records (edited or overwritten since it was packed)")


def sample_index_intact(directory: Path, manifest: Manifest) -> bool:
    """The sample index is there, a regular file at its listed size, and its sha256 is the
    manifest's: what a pack that changes nothing checks before it calls a dataset up to date
    (it reads the whole index, as a pack that changes something does: ~0.25 s a million
    lines from the page cache, a read of the index's bytes from a NAS)."""
    entry = manifest.samples_index
    try:
        with open_file(directory / entry.name, entry.bytes) as opened:
            return opened.size == entry.bytes and sha256_of(opened, entry.bytes) == entry.sha256
    except (OSError, Refused):
        return False


def write_sample_index(directory: Path, name: str,
                       records: Iterable[dict[str, Any] | SampleRecord]) -> SampleIndexEntry:
    """Write the sample index under ``name`` (a new name: nothing published is replaced).
    A key twice (an earlier version's index forged to name an original under another path
    than its key's, which the pack then packs again under the same key) is a ManifestError,
    and nothing is published: every command would refuse the version."""
    index = HashingFile(directory / name)
    tally = KeyTally()
    count = 0
    try:
        for record in records:
            index.write(sample_line(record))
            tally.add(record["key"] if isinstance(record, dict) else record.key)
            count += 1
        hashes = tally.repeated()
        repeated = _repeated_lines(index, hashes) if hashes else {}
        if repeated:
            key, lines = next(iter(repeated.items()))
            raise ManifestError(
                f"{directory / name}: sample key {key} would be in it {len(lines)} times "
                f"({', '.join(lines[:2])}): the previous version's sample index names that "
                "sample's original under another path than its key's, so it is damaged or "
                "forged; nothing was published")
        sha256 = index.publish()
    except BaseException:
        index.discard()
        raise
    return SampleIndexEntry(name, index.bytes_written, sha256, count)


def _repeated_lines(index: HashingFile, hashes: frozenset[int]) -> dict[str, list[str]]:
    """The keys of ``hashes`` that come twice in the index being written, with their lines."""
    index.flush()
    with open(index.tmp, "rb") as handle:
        keys = ((json.loads(line)["key"], f"line {number}")
                for number, line in enumerate(handle, 1))
        return repeated_keys(keys, hashes)


def sources_fingerprint(entries: Iterable[tuple]) -> str:
    """Hash of (relpath, size, mtime_ns, ...) of every candidate source, in path order: equal
    means unchanged."""
    digest = hashlib.sha256()
    for entry in entries:
        digest.update(os.fsencode("\0".join(str(value) for value in entry) + "\n"))
    return digest.hexdigest()


def files_intact(directory: Path, entries: Iterable[FileEntry]) -> bool:
    """Every file is there, a regular file (not a link, FIFO or device) at its listed size (an
    ``lstat`` each: cheap, no reading, never blocks)."""
    for entry in entries:
        try:
            info = os.lstat(directory / entry.name)
        except OSError:
            return False
        if not stat.S_ISREG(info.st_mode) or info.st_size != entry.bytes:
            return False
    return True


def remove_unnamed(directory: Path, keep: Iterable[str]) -> list[str]:
    """Remove dataset files (our name patterns only, regular files only: a folder or link
    under such a name is not ours) that ``keep`` does not name."""
    keep = set(keep)
    removed = []
    for entry in sorted(os.scandir(directory), key=lambda e: e.name):
        if is_dataset_file(entry.name) and entry.name not in keep \
                and entry.is_file(follow_symlinks=False):
            os.unlink(entry.path)
            removed.append(entry.name)
    return removed


def _remove_file(path: Path) -> None:
    """Remove a file of ours the new version no longer names; a folder that took its name is
    someone else's and stays (a link goes: removing it touches nothing it points to)."""
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            return
        os.unlink(path)
    except FileNotFoundError:
        pass


def shard_list_contents(manifest: Manifest) -> dict[str, bytes]:
    """The content of every shard list of ``manifest``: name -> bytes.

    Names in them are relative to the dataset directory (wids resolves them against the JSON
    file's own directory), so a staged copy's lists work where they are.
    """
    lists: dict[str, bytes] = {}
    for split in manifest.splits:
        shards = [shard for shard in manifest.shards if shard.split == split]
        names = shard_list_names(split, manifest.format)
        lists[names[0]] = "".join(f"{shard.name}\n" for shard in shards).encode("ascii")
        if len(names) > 1:
            wids = {
                "__kind__": "wids-shard-index-v1",
                "wids_version": 1,
                "name": split,
                "shardlist": [{"url": shard.name, "nsamples": shard.samples,
                               "filesize": shard.bytes} for shard in shards],
            }
            lists[names[1]] = (json.dumps(wids, indent=1) + "\n").encode("ascii")
    return lists


def label_map(object_classes: tuple[str, ...]) -> bytes:
    """The TensorFlow Object Detection API's ``label_map.pbtxt``: an item per class, ids from
    1 (0 is the background), names quoted as protobuf text strings."""
    items = []
    for number, name in enumerate(object_classes, 1):
        items.append(f"item {{\n  id: {number}\n  name: {_text_string(name)}\n}}\n")
    return "".join(items).encode("ascii")


def _text_string(text: str) -> str:
    """``text`` as a protobuf text-format string literal: its UTF-8 bytes, printable ASCII as
    is and every other byte as an octal escape, which every protobuf parser reads back (a
    JSON ``\\uD83D`` surrogate pair, outside the Basic Multilingual Plane, it does not)."""
    out = []
    for byte in text.encode("utf-8", "surrogateescape"):
        if byte in b'"\\':
            out.append("\\" + chr(byte))
        elif 0x20 <= byte < 0x7F:
            out.append(chr(byte))
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def derived_contents(manifest: Manifest) -> dict[str, bytes]:
    """Every file derived from ``manifest`` under a stable name: its shard lists, and for
    datasets with objects in a format that has one (TFRecord) the label map."""
    contents = shard_list_contents(manifest)
    if FORMATS[manifest.format].label_map and manifest.object_classes is not None:
        contents[LABEL_MAP_NAME] = label_map(manifest.object_classes)
    return contents


def commit(directory: Path, manifest: Manifest, obsolete: Iterable[str] = ()) -> None:
    """Publish a version: the manifest rename is the commit point; the shard lists and label
    map (derived, stable names) are replaced right after it, naming only files that exist;
    then the ``obsolete`` files, which the new manifest does not name, are removed.

    A folder under the name of a derived file is refused before the commit (OutputStateError),
    so a published manifest is never left without its lists."""
    derived = derived_contents(manifest)
    for name in (MANIFEST_NAME, *derived):
        check_replaceable(directory / name)
    write_manifest(directory, manifest)
    write_derived(directory, manifest, derived)
    named = {entry.name for entry in manifest.files()}
    for name in obsolete:
        if name not in named:
            _remove_file(directory / name)
    fsync_directory(directory)


def write_derived(directory: Path, manifest: Manifest,
                  derived: dict[str, bytes] | None = None) -> list[str]:
    """Make the derived files (shard lists, label map) what ``manifest`` implies: each one that
    differs (or is a link, a FIFO, a device) is replaced atomically, and lists of splits the
    manifest does not hold are removed.  Returns the names replaced or removed.

    What is there now is read through the door, within the size the right content has: a
    FIFO or a link to ``/dev/zero`` under a list's name is replaced, never waited on."""
    changed = []
    for name, content in (derived or derived_contents(manifest)).items():
        path = directory / name
        try:
            with open_file(path, len(content)) as handle:
                unchanged = handle.read() == content
        except (OSError, Refused):
            unchanged = False
        if not unchanged:
            write_bytes_atomic(path, content)
            changed.append(name)
    if manifest.shard_lists:  # lists of splits this version does not hold name nothing of it
        for entry in os.scandir(directory):
            if is_shard_list(entry.name) and entry.name not in manifest.shard_lists \
                    and not entry.is_dir(follow_symlinks=False):
                os.unlink(entry.path)
                changed.append(entry.name)
    return changed


def no_longer_named(previous: Manifest | None, manifest: Manifest) -> list[str]:
    """Files ``previous`` named that ``manifest`` does not."""
    if previous is None:
        return []
    named = {entry.name for entry in manifest.files()}
    return [entry.name for entry in previous.files() if entry.name not in named]


def objects_record(raw: bytes | None) -> dict[str, Any]:
    """The object record of a dataset in a bucket (``DatasetDir.objects``: ``manifest``, the
    sha256 of the manifest it was written for; ``names``, that version's objects; ``kept``,
    the previous version's) when it is one shardsmith wrote; {} otherwise (untrusted)."""
    if raw is None:
        return {}
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than ~1,000
        return {}
    if not isinstance(record, dict) or not isinstance(record.get("manifest"), str):
        return {}
    for name in ("names", "kept"):
        value = record.get(name)
        if not isinstance(value, list) or not all(isinstance(item, str) and "/" not in item
                                                  for item in value):
            return {}
    return record


def kept_objects(location: Any, manifest_sha256: str) -> frozenset[str]:
    """The objects of the previous version a dataset in a bucket keeps until its next commit
    (a stage of that version may be copying them); empty where no record of ours says so."""
    try:
        with open_file(DatasetDir(location).objects, OBJECTS_RECORD_CAP) as handle:
            record = objects_record(handle.read())
    except (FileNotFoundError, Refused):
        return frozenset()
    if record.get("manifest") != manifest_sha256:
        return frozenset()
    return frozenset(record["kept"]) - frozenset(record["names"])
