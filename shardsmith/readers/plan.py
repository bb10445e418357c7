"""Where every sample of a split lives, and which samples each rank and worker reads in an epoch.

Framework-free (NumPy only), so the torch, DALI and tf readers and the tests share one
definition of an epoch:

* ``SampleTable`` holds, per sample, its shard and the offsets of its image, label and
  metadata (and class mask, when it has one) in the shard, as its format reads them from the
  per-shard index the pack writes (``ShardFormat.sample_rows``: tar members of DALI's
  ``wds2idx`` index, or TFRecord records of DALI's TFRecord index).  An index is untrusted
  like the manifest: a line whose names could escape a directory or whose offsets leave the
  shard is skipped with a warning naming it.
* ``epoch_order`` is one global order per (seed, epoch): each shard is cut into blocks of
  consecutive samples (at a phase that changes every epoch), the blocks are shuffled, and the
  samples inside each block are shuffled.  Reads stay within a block of one shard, and the
  pack already shuffled samples across shards, so a block is a random draw of its split.
* ``rank_share`` cuts that order into equal contiguous shares, one per rank: padded by
  wrapping around (like ``DistributedSampler``), cut to a multiple (``drop_last``), or, for
  evaluation, left unequal with nothing padded.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..dataset.formats import ShardFormat, open_shard, shard_format
from ..dataset.keys import KeyTally, duplicate_message, repeated_keys
from ..dataset.manifest import Manifest, ShardEntry, iter_sample_index
from ..door import OpenFile
from ..errors import ManifestError, ShardFormatError
from ..text import shown

log = logging.getLogger(__name__)

DEFAULT_BLOCK = 256
# The tag of the unweighted order's seeds past 32 bits (``seed_words``).
ORDER_STREAM = 0x6F726465
OPEN_SHARDS = 64  # descriptors a reader keeps open (a dataset may have thousands of shards)


@dataclass(frozen=True)
class SampleTable:
    """Per-sample locations: shard number, offset and size of the image, the label, the
    metadata (``KEY.json``) and the class mask (``KEY.mask.png``; offset -1 without one)."""

    paths: tuple[str, ...]
    shard: np.ndarray  # int32
    image_offset: np.ndarray  # int64
    image_size: np.ndarray  # int64
    label_offset: np.ndarray  # int64
    label_size: np.ndarray  # int64
    meta_offset: np.ndarray  # int64
    meta_size: np.ndarray  # int64
    mask_offset: np.ndarray  # int64
    mask_size: np.ndarray  # int64
    # Per shard, the image offset and key of its first sample ("" if none): what a shard
    # opened later must hold there to be the shard the index describes.
    first_members: tuple[tuple[int, str], ...] = ()
    # Each sample's key, for messages (a sample whose shard cannot be read is still named):
    # the keys end to end in one string, sample i's from key_bounds[i] to key_bounds[i + 1].
    keys: str = ""
    key_bounds: np.ndarray | None = None  # int64, one more than there are samples
    format: str = "webdataset"  # the shards' format, which reads a sample's row

    def __len__(self) -> int:
        return len(self.shard)

    def key(self, index: int) -> str | None:
        """The key of sample ``index`` (its image member's name before the first dot), or
        None for a table made without keys."""
        bounds = self.key_bounds
        if bounds is None or not 0 <= index < len(bounds) - 1:
            return None
        return self.keys[int(bounds[index]) : int(bounds[index + 1])]

    def shard_ranges(self) -> list[tuple[int, int]]:
        """[start, end) of each shard's samples (samples of a shard are consecutive)."""
        bounds = np.searchsorted(self.shard, np.arange(len(self.paths) + 1))
        return [(int(bounds[i]), int(bounds[i + 1])) for i in range(len(self.paths))]


def load_table(directory: Path, shards: Sequence[ShardEntry],
               manifest: Manifest | None = None) -> SampleTable:
    """The sample table of ``shards`` (of ``manifest``'s format; WebDataset without one) from
    their indexes (or, for shards packed before indexes existed, from the shards, with a
    warning)."""
    fmt = shard_format(manifest.format if manifest is not None else "webdataset")
    has_masks = bool(manifest is not None and manifest.has_masks)
    columns: list[list[int]] = [[] for _ in range(9)]
    paths, first_members, keys = [], [], []
    legacy = [shard.name for shard in shards if shard.index is None]
    if legacy:
        log.warning("%d shards have no index (packed by an older shardsmith): reading their "
                    "shards instead; the next `shardsmith pack` adds the indexes", len(legacy))
    for number, shard in enumerate(shards):
        paths.append(str(directory / shard.name))
        rows = fmt.sample_rows(directory, shard, has_masks)
        first_members.append(next(((row[0], key) for row, key in rows if key), (-1, "")))
        for row, key in rows:
            keys.append(key)
            columns[0].append(number)
            for column, value in zip(columns[1:], row, strict=True):
                column.append(value)
    tally = KeyTally()  # a key twice: across the selected shards (two splits read together)
    for key in keys:
        if key:  # a record whose key did not read (a TFRecord shard cut short) is no repeat
            tally.add(key)
    hashes = tally.repeated()
    repeated = hashes and repeated_keys(
        ((key, Path(paths[shard]).name) for key, shard in zip(keys, columns[0], strict=True)),
        hashes)
    if repeated:
        raise ManifestError(f"{directory}: {duplicate_message(repeated, 'the shards read')}")
    if fmt.keys_in_shard and manifest is not None:
        _check_listed(directory, manifest, paths, columns[0], keys)
    shard_of, *rest = (np.asarray(column, np.int64) for column in columns)
    key_bounds = np.zeros(len(keys) + 1, np.int64)
    np.cumsum([len(key) for key in keys], out=key_bounds[1:])
    return SampleTable(tuple(paths), shard_of.astype(np.int32), *rest,
                       first_members=tuple(first_members), keys="".join(keys),
                       key_bounds=key_bounds, format=fmt.name)


def _check_listed(directory: Path, manifest: Manifest, paths: list[str], shard_of: list[int],
                  keys: list[str]) -> None:
    """ManifestError unless each key read from a shard is one the sample index puts in that
    shard: a TFRecord index holds offsets alone, so a shard of another split copied over one
    of the same layout would be served (one pass over the sample index, 8 bytes a sample)."""
    number = {Path(path).name: at for at, path in enumerate(paths)}
    listed = np.fromiter((hash((record.key, number[record.shard]))
                          for record in iter_sample_index(directory, manifest)
                          if record.shard in number), np.int64)
    found = np.fromiter((hash((key, shard)) for key, shard in zip(keys, shard_of, strict=True)),
                        np.int64, len(keys))
    for at in np.flatnonzero(~np.isin(found, listed)):
        if keys[at]:  # a record whose key did not read is a corrupt sample already
            raise ManifestError(f"{Path(paths[shard_of[at]]).name}: holds sample "
                                f"{shown(keys[at])}, which the sample index does not put "
                                "there: not the shard the manifest describes (a shard of "
                                "another split or version copied over it?)")


def epoch_order(table: SampleTable, seed: int, epoch: int, shuffle: bool = True,
                block: int = DEFAULT_BLOCK) -> np.ndarray:
    """The global sample order of one epoch, a function of (seed, epoch) only."""
    count = len(table)
    if not shuffle:
        return np.arange(count, dtype=np.int64)
    rng = np.random.default_rng(seed_words(int(seed), int(epoch)))
    blocks = []
    for start, end in table.shard_ranges():
        phase = int(rng.integers(block)) if end - start > block else 0
        cuts = [start, *(cut for cut in range(start + phase, end, block) if cut > start), end]
        blocks += list(zip(cuts[:-1], cuts[1:], strict=True))
    order = np.empty(count, np.int64)
    position = 0
    for index in rng.permutation(len(blocks)):
        low, high = blocks[index]
        order[position : position + high - low] = low + rng.permutation(high - low)
        position += high - low
    return order


def seed_words(seed: int, epoch: int, stream: int | None = None) -> list[int]:
    """The random numbers' seed for (seed, epoch) of one ``stream`` (None: the unweighted
    order): the whole integers, not their low 32 bits (epoch 2**32 is not epoch 0, seed -1 is
    not seed 2**32 - 1).  Seeds and epochs from 0 to 2**32 - 1 keep the words they always had
    (so their orders are unchanged); any other pair is its own longer list, led by a tag
    twice and holding each number's sign and word count (numpy's SeedSequence pads a short
    list with zeros: the count word, never 0, keeps the two kinds of list apart)."""
    mask = 0xFFFFFFFF
    if 0 <= seed <= mask and 0 <= epoch <= mask:
        return [seed, epoch] if stream is None else [seed, epoch, stream]
    tag = ORDER_STREAM if stream is None else stream
    words = [tag, tag]
    for number in (seed, epoch):
        magnitude, parts = abs(number), []
        while True:
            parts.append(magnitude & mask)
            magnitude >>= 32
            if not magnitude:
                break
        words += [int(number < 0), len(parts), *parts]
    return words


def rank_share(order: np.ndarray, rank: int, world_size: int, pad: bool = True,
               drop_last: bool = False) -> np.ndarray:
    """This rank's contiguous share of the epoch order.

    Training (default): every rank the same number of samples, padded by wrapping around the
    order (at most ``world_size - 1`` repeats); ``drop_last``: cut to a multiple instead.
    Evaluation (``pad=False``): nothing padded or dropped, shares differ by at most one.
    """
    count = len(order)
    if drop_last:
        per_rank = count // world_size
        return order[rank * per_rank : (rank + 1) * per_rank]
    if not pad:
        return order[rank * count // world_size : (rank + 1) * count // world_size]
    per_rank = math.ceil(count / world_size)
    total = per_rank * world_size
    if total > count and count:
        order = np.resize(order, total)  # np.resize repeats the array from its start
    return order[rank * per_rank : (rank + 1) * per_rank]


def batch_count(samples: int, batch_size: int, drop_last: bool) -> int:
    return samples // batch_size if drop_last else math.ceil(samples / batch_size)


class ShardFiles:
    """The shards of a sample table, each opened through the door on first use (no link, no
    FIFO, a regular file) and kept open, at most ``OPEN_SHARDS`` at once.

    A shard opened is first checked to hold, where its index puts the first sample, a sample
    of that key (``ShardFormat.check_first``): a shard swapped for another of the same size (a
    val shard copied over a train shard) is refused, not served.  Every read lies within the
    size ``fstat`` gives, whatever offsets the index claims.  Failures are ShardFormatError or
    OSError, which the readers turn into corrupt samples.
    """

    def __init__(self, table: SampleTable):
        self.table = table
        self.fmt = shard_format(table.format)
        self._open: dict[int, OpenFile] = {}

    def read(self, shard: int, offset: int, size: int) -> bytes:
        """``size`` bytes at ``offset`` of shard number ``shard``."""
        handle = self._handle(shard)
        if offset < 0 or size < 0 or offset + size > handle.size:
            raise ShardFormatError(f"{os.path.basename(handle.path)}: bytes {offset:,} to "
                                   f"{offset + size:,} lie outside its {handle.size:,} bytes")
        data = os.pread(handle.fd, size, offset)
        if len(data) != size:
            raise ShardFormatError(f"{os.path.basename(handle.path)}: cut short at byte "
                                   f"{offset + len(data)}")
        return data

    def close(self) -> None:
        while self._open:
            self._open.popitem()[1].close()

    def _handle(self, shard: int) -> OpenFile:
        handle = self._open.get(shard)
        if handle is not None:
            return handle
        if len(self._open) >= OPEN_SHARDS:
            self._open.pop(next(iter(self._open))).close()  # the least recently opened
        handle = open_shard(self.table.paths[shard])
        try:
            check_first(self.fmt, handle, self.table.first_members[shard]
                        if self.table.first_members else (-1, ""))
        except BaseException:
            handle.close()
            raise
        self._open[shard] = handle
        return handle


def check_first(fmt: ShardFormat, handle: OpenFile, first: tuple[int, str]) -> None:
    """ShardFormatError unless ``handle`` holds the sample ``first`` names (offset, key)."""
    offset, key = first
    if key:
        fmt.check_first(handle, offset, key)


def check_shards(table: SampleTable) -> None:
    """ManifestError when a shard of ``table`` that opens is not the one its index describes
    (one read of its first sample's header or key a shard).  A shard that does not open is left
    to the reads, which report its samples as corrupt."""
    fmt = shard_format(table.format)
    for shard, path in enumerate(table.paths):
        try:
            handle = open_shard(path)
        except (OSError, ShardFormatError):
            continue
        with handle:
            try:
                check_first(fmt, handle, table.first_members[shard])
            except ShardFormatError as exc:
                raise ManifestError(str(exc)) from None
