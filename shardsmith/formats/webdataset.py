"""WebDataset shards: plain POSIX tar, members ``KEY.jpg``, ``KEY.cls``, ``KEY.json``.

Written with the standard library's ``tarfile`` (``import webdataset`` would pull in torch
where it is installed) and with fixed header fields, so equal input gives equal bytes.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ..atomic import HashingFile
from . import ShardFormatError, ShardInfo, class_name, sample_metadata

if TYPE_CHECKING:
    from ..imaging import Sample

_BLOCK = tarfile.BLOCKSIZE


MEMBER_EXTENSIONS = ("jpg", "cls", "json")


def iter_samples(path: Path, with_data: bool = False) -> Iterator[tuple[str, dict[str, bytes]]]:
    """Yield (key, {extension: bytes}) per sample, checking that every member is complete.

    Without ``with_data`` the dict maps extensions to ``b""`` (headers only: fast).
    Raises ShardFormatError for truncation, foreign members or incomplete samples.
    """
    size = path.stat().st_size
    try:
        with tarfile.open(path, mode="r:") as tar:
            key, members = None, {}
            for member in tar:
                name = member.name
                if not member.isfile() or "/" in name or "." not in name:
                    raise ShardFormatError(f"unexpected member {name!r}")
                if member.offset_data + member.size > size:
                    raise ShardFormatError(f"member {name} is cut short (truncated file)")
                member_key, extension = name.split(".", 1)
                if member_key != key:
                    if key is not None:
                        yield key, _complete(key, members)
                    key, members = member_key, {}
                members[extension] = tar.extractfile(member).read() if with_data else b""
            if key is not None:
                yield key, _complete(key, members)
    except (tarfile.TarError, EOFError) as exc:
        raise ShardFormatError(f"unreadable tar: {exc}") from None


def _complete(key: str, members: dict[str, bytes]) -> dict[str, bytes]:
    missing = [ext for ext in MEMBER_EXTENSIONS if ext not in members]
    if missing:
        raise ShardFormatError(f"sample {key} lacks {', '.join('.' + m for m in missing)}")
    return members


class TarShardWriter:
    """Appends samples to one tar shard; ``close`` publishes it atomically."""

    def __init__(self, directory: Path, name: str, split: str, classes: tuple[str, ...]):
        self.name, self.split, self.classes = name, split, classes
        self._file = HashingFile(directory / name)
        self._tar = tarfile.open(fileobj=self._file, mode="w", format=tarfile.USTAR_FORMAT)
        self.samples = 0

    @property
    def bytes_written(self) -> int:
        return self._file.bytes_written

    def record_size(self, sample: Sample) -> int:
        """Bytes this sample adds to the tar (three headers plus padded members)."""
        padded = -(-len(sample.jpeg) // _BLOCK) * _BLOCK
        return 3 * _BLOCK + padded + 2 * _BLOCK

    def add(self, sample: Sample) -> None:
        metadata = sample_metadata(sample, class_name(self.classes, sample.label))
        self._add_members(sample.key, {
            "jpg": sample.jpeg,
            "cls": str(sample.label).encode("ascii"),
            "json": json.dumps(metadata, sort_keys=True, separators=(",", ":")).encode(),
        })

    def copy_from(self, shard: Path, keep: set[str] | None = None) -> int:
        """Append the samples of another shard (those in ``keep``), bytes unchanged."""
        copied = 0
        for key, members in iter_samples(shard, with_data=True):
            if keep is None or key in keep:
                self._add_members(key, members)
                copied += 1
        return copied

    def _add_members(self, key: str, members: dict[str, bytes]) -> None:
        for extension in MEMBER_EXTENSIONS:
            payload = members[extension]
            info = tarfile.TarInfo(f"{key}.{extension}")
            info.size = len(payload)
            info.mtime = 0
            info.mode = 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            self._tar.addfile(info, io.BytesIO(payload))
        self.samples += 1

    def close(self) -> ShardInfo:
        self._tar.close()  # writes the end-of-archive blocks; leaves our file open
        sha256 = self._file.publish()
        return ShardInfo(self.name, self.split, self.samples, self._file.bytes_written, sha256)

    def discard(self) -> None:
        self._file.discard()
