"""The JPEG bytes of the previous version's samples, for re-annotated sources whose pixels did
not change (``delta.COPY``): the driver copies them into the new samples instead of decoding
the originals again.

A shard is located once, when a sample of it is first asked for (``ShardFormat.records``, as
``incremental.rewrite`` reads a shard: every record checked, within the size the manifest
gives), keeping per record only its key, offset, size and members; each JPEG is then read with
one ``pread`` of its record.  Memory: a few hundred bytes a sample of the last ``keep`` shards
located (the samples of one original may lie in shards of two splits' rolls).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from ..annotations.model import Vocabulary
from ..config import Config
from ..dataset.formats import Member, Record, ShardFormat, open_shard
from ..dataset.manifest import ShardEntry
from ..dataset.records import Rederived, Reject, Sample, Unchanged
from ..door import OpenFile
from ..errors import ShardFormatError
from .plan import PlanItem

log = logging.getLogger(__name__)

Place = tuple[int, int, tuple[Member, ...]]  # offset, size, members of a record


class PreviousJpegs:
    """JPEG bytes of the samples of ``shards`` (the previous version's) in ``output``, by
    shard name and key.  Close it (``with``) to close the shards it holds open."""

    def __init__(self, fmt: ShardFormat, output: Path, shards: Iterable[ShardEntry],
                 keep: int = 4):
        self.fmt, self.output, self.keep = fmt, output, keep
        self.sizes = {shard.name: shard.bytes for shard in shards}
        self._open: OrderedDict[str, tuple[OpenFile, dict[str, Place]]] = OrderedDict()
        # A shard that could not be located stays so: reading it again for each of its
        # samples made a truncated 15 MB shard of 1,920 samples take 5 minutes, not 9 s.
        self._broken: dict[str, str] = {}

    def jpeg(self, shard: str, key: str) -> bytes:
        """The JPEG bytes of sample ``key`` in ``shard``.  Raises ShardFormatError when the
        shard is not the previous version's, is damaged, or holds no such sample; OSError
        when it cannot be read."""
        handle, places = self._located(shard)
        place = places.get(key)
        if place is None:
            raise ShardFormatError(f"{shard} holds no sample {key}")
        offset, size, members = place
        data = handle.pread(size, offset)
        if len(data) != size:
            raise ShardFormatError(f"{shard}: sample {key} is cut short")
        return self.fmt.jpeg(Record(key, data, members))

    def _located(self, shard: str) -> tuple[OpenFile, dict[str, Place]]:
        found = self._open.get(shard)
        if found is not None:
            self._open.move_to_end(shard)
            return found
        if shard in self._broken:
            raise ShardFormatError(self._broken[shard])
        size = self.sizes.get(shard)
        if size is None:
            raise ShardFormatError(f"{shard} is not a shard of the previous version")
        path = self.output / shard
        try:
            places = {record.key: (offset, len(record.data), record.members)
                      for offset, record in self.fmt.records(path, size)}
            handle = open_shard(path)
        except (ShardFormatError, OSError) as exc:
            self._broken[shard] = str(exc)
            raise
        if handle.size < size:
            handle.close()
            self._broken[shard] = f"{shard} is shorter than the manifest says"
            raise ShardFormatError(self._broken[shard])
        self._open[shard] = (handle, places)
        while len(self._open) > self.keep:
            _, (oldest, _) = self._open.popitem(last=False)
            oldest.close()
        return handle, places

    def close(self) -> None:
        """Close every shard held open."""
        while self._open:
            _, (handle, _) = self._open.popitem()
            handle.close()

    def __enter__(self) -> PreviousJpegs:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Decoded:
    """What the full path made of an original whose JPEG bytes could not be copied."""

    decoded: tuple[Sample, ...] | Sample | Reject | Unchanged


def copy_jpegs(rederived: Rederived, jpegs: PreviousJpegs, item: PlanItem, root: str,
               config: Config, vocabulary: Vocabulary) -> tuple[Sample, ...] | Decoded:
    """The samples of ``rederived`` with the JPEG bytes of the same keys in the previous
    version; where one cannot be read (a shard damaged since the run began) or is not the
    size the sample has, the original is decoded here, in the driver (rare: correct, only
    slower), and the result is ``Decoded``."""
    import simplejpeg

    samples = []
    try:
        for sample, shard in zip(rederived.samples, rederived.shards, strict=True):
            jpeg = jpegs.jpeg(shard, sample.key)
            height, width, colorspace, _ = simplejpeg.decode_jpeg_header(jpeg)
            if (width, height) != (sample.width, sample.height):
                raise ShardFormatError(f"{shard}: sample {sample.key} is {width}x{height}, "
                                       f"not {sample.width}x{sample.height}")
            samples.append(replace(sample, jpeg=jpeg, channels=1 if colorspace == "Gray" else 3))
    except (ShardFormatError, OSError, ValueError) as exc:
        log.warning("%s: its JPEG bytes cannot be copied (%s): decoded again",
                    item.source.relpath, exc)
        from .annotated import process_annotated

        return Decoded(process_annotated(item, root, config, vocabulary))
    return tuple(samples)
