"""Seeded choices of samples and rejects, and the packed images of chosen samples.

A sample is chosen by the rank ``sha256(seed, key)``: the same seed chooses the same samples
whatever the order of the index, and a sample chosen once stays chosen when others are added
(unless a newcomer ranks before it).  Packed images are read back from their shards with the
format's own record reader, stopping in each shard at the last chosen sample.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import io
import os
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from PIL import Image

from ..dataset.formats import shard_format
from ..dataset.manifest import Manifest, RejectEntry, SampleRecord
from ..dataset.remote import local_copy
from ..door import Refused
from ..errors import CorruptSampleError, ManifestError, ShardFormatError

T = TypeVar("T")


def seeded_rank(seed: int, name: str) -> int:
    """Where ``name`` (a key or a path) comes in the seeded order: lower comes first."""
    digest = hashlib.sha256(f"{seed}\0".encode() + os.fsencode(name)).digest()
    return int.from_bytes(digest[:8], "big")


class SeededPicks:
    """Up to ``per_class`` samples of each label in seeded order, chosen as the sample index
    streams by (``add``; ``census.take_census`` feeds it)."""

    def __init__(self, per_class: int, seed: int):
        self.per_class, self.seed = per_class, seed
        self.kept: dict[int, list[tuple[int, str, SampleRecord]]] = defaultdict(list)

    def add(self, record: SampleRecord) -> None:
        heap = self.kept[record.label]
        entry = (-seeded_rank(self.seed, record.key), record.key, record)  # a max-heap of ranks
        if len(heap) < self.per_class:
            heapq.heappush(heap, entry)
        elif self.per_class and entry[:2] > heap[0][:2]:
            heapq.heapreplace(heap, entry)

    def picks(self) -> dict[int, list[SampleRecord]]:
        """label -> its samples, in seeded order."""
        return {label: [record for _, _, record in sorted(heap, key=lambda e: (-e[0], e[1]))]
                for label, heap in sorted(self.kept.items())}


def interleave(picks: dict[int, list[SampleRecord]], count: int) -> list[SampleRecord]:
    """``count`` samples taken from the classes in turn, so every class gets its share."""
    chosen: list[SampleRecord] = []
    depth = 0
    while len(chosen) < count and any(depth < len(records) for records in picks.values()):
        for records in picks.values():
            if depth < len(records) and len(chosen) < count:
                chosen.append(records[depth])
        depth += 1
    return chosen


def pick_rejects(rejects: tuple[RejectEntry, ...], count: int, seed: int) -> list[RejectEntry]:
    """Up to ``count`` rejects in seeded order."""
    ranked = sorted(rejects, key=lambda reject: (seeded_rank(seed, reject.path), reject.path))
    return ranked[:count]


def read_packed(directory: Path, manifest: Manifest,
                records: list[SampleRecord]) -> dict[str, bytes]:
    """key -> packed JPEG bytes of ``records``, read from their shards (``read_each``)."""
    fmt = shard_format(manifest.format)
    return read_each(directory, manifest, records, lambda packed, _: fmt.jpeg(packed))


def sample_picture(jpeg: bytes | None, record: SampleRecord, thumb: int) -> Image.Image | None:
    """A packed sample in RGB, decoded at the smallest scale that still covers ``thumb`` x
    ``thumb`` (the caller fits it); None when there is none, it does not decode, or its header
    claims another size than the sample index records (a sample of ours is that size: a
    header claiming 65500 x 65500 is not decoded at all)."""
    if jpeg is None:
        return None
    try:
        with Image.open(io.BytesIO(jpeg)) as image:
            if image.size != (record.width, record.height):
                return None
            image.draft("RGB", (thumb, thumb))
            return image.convert("RGB")
    except (OSError, ValueError, SyntaxError, EOFError, Image.DecompressionBombError):
        return None


def read_each(directory: Path, manifest: Manifest, records: list[SampleRecord],
              take: Callable[[Any, SampleRecord], T]) -> dict[str, T]:
    """key -> ``take(packed record, sample record)`` for each of ``records``, each shard read
    once, up to its last wanted key.

    A key its shard does not hold is left out (``verify`` tells why); a shard that does not
    parse is a CorruptSampleError, a shard the manifest does not list a ManifestError.  The
    shards of an ``s3://`` dataset are read from a temporary copy (``remote.local_copy``).
    """
    listed = {shard.name: shard for shard in manifest.shards}
    wanted: dict[str, dict[str, SampleRecord]] = defaultdict(dict)
    for record in records:
        if record.shard not in listed:
            raise ManifestError(f"sample {record.key}: its shard {record.shard} is not in the "
                                "manifest")
        wanted[record.shard][record.key] = record
    fmt = shard_format(manifest.format)
    found: dict[str, T] = {}
    for name, keys in sorted(wanted.items()):
        size = listed[name].bytes
        try:
            with local_copy(directory / name, size) as path, \
                    contextlib.closing(fmt.records(path, size)) as stream:
                for _, packed in stream:
                    sample = keys.pop(packed.key, None)
                    if sample is not None:
                        found[packed.key] = take(packed, sample)
                        if not keys:
                            break
        except Refused as exc:  # an object larger than its manifest's count: not read
            raise CorruptSampleError(f"{directory / name}: {exc.detail} (shardsmith verify "
                                     "checks the whole dataset)") from None
        except ShardFormatError as exc:
            raise CorruptSampleError(f"{directory / name}: {exc} (shardsmith verify "
                                     "checks the whole dataset)") from None
        except FileNotFoundError:
            raise CorruptSampleError(f"{directory / name}: missing (a staged copy of another "
                                     "split? shardsmith verify checks the dataset)") from None
    return found
