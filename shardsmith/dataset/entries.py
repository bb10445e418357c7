"""A file and a shard as the manifest lists them, and the names shardsmith gives shards: what
the shard formats and the manifest both build on."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ManifestError
from ..schema import Count
from ..text import shown

SHARD_NAME = re.compile(r"(?P<split>[a-z][a-z0-9_]{0,63})-(?P<number>\d{6,9})"
                        r"\.(?P<ext>tar|tfrecord|idx)")
SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_SHARD_NUMBER = 999_999  # the six digits of ``SPLIT-NNNNNN``


def shard_name(split: str, number: int, extension: str) -> str:
    return f"{split}-{number:06d}{extension}"


def index_name(shard: str) -> str:
    """The per-record index beside a shard: ``train-000003.tar`` -> ``train-000003.idx``."""
    return shard.rsplit(".", 1)[0] + ".idx"


def shard_number(name: str) -> int:
    return int(SHARD_NAME.fullmatch(name)["number"])


def plain_name(name: str, pattern: re.Pattern, where: str, what: str) -> None:
    """ManifestError unless ``name`` is a plain file name of ``pattern`` (and a shard's number
    one our writer gives)."""
    if pattern.fullmatch(name) is None:
        raise ManifestError(f"{where}: {shown(name)} is not a {what} name shardsmith writes "
                            "(refused: names must be plain file names of the dataset)")
    if pattern is SHARD_NAME and shard_number(name) > MAX_SHARD_NUMBER:
        raise ManifestError(f"{where}: {shown(name)} has a shard number past "
                            f"{MAX_SHARD_NUMBER}, which shardsmith never writes (refused)")


def _size(value: int, where: str) -> None:
    if not 0 <= value < 1 << 50:
        raise ManifestError(f"{where}: {value} is not a possible size")


@dataclass(frozen=True)
class FileEntry:
    """A file of the dataset: plain name, exact size, sha256."""

    name: str
    bytes: Count
    sha256: str

    def check(self, where: str) -> None:
        _size(self.bytes, f"{where}.bytes")
        if SHA256.fullmatch(self.sha256) is None:
            raise ManifestError(f"{where}.sha256: not a sha256 hex digest: {shown(self.sha256)}")


@dataclass(frozen=True)
class ShardEntry:
    """A shard: its file, split, sample count, and its per-record index."""

    name: str
    split: str
    samples: Count
    bytes: Count
    sha256: str
    index: FileEntry | None = None

    def check(self, where: str) -> None:
        plain_name(self.name, SHARD_NAME, f"{where}.name", "shard")
        match = SHARD_NAME.fullmatch(self.name)
        if match["ext"] == "idx":
            raise ManifestError(f"{where}.name: {self.name} is an index, not a shard")
        if match["split"] != self.split:
            raise ManifestError(f"{where}: shard {self.name} is listed under split "
                                f"{shown(self.split)}")
        FileEntry.check(self, where)  # same size and digest rules
        if self.samples < 0:
            raise ManifestError(f"{where}.samples: {self.samples} is negative")
        if self.index is not None and self.index.name != index_name(self.name):
            raise ManifestError(f"{where}.index.name: {shown(self.index.name)} is not the "
                                f"index of {self.name}")

    @property
    def file(self) -> FileEntry:
        return FileEntry(self.name, self.bytes, self.sha256)

    def files(self) -> tuple[FileEntry, ...]:
        """The files of this shard: the shard, then its index if it has one."""
        return (self.file,) if self.index is None else (self.file, self.index)
