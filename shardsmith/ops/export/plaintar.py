"""The samples of a WebDataset shard as shardsmith writes them (plain USTAR: a 512-byte header
per member, no long-name or pax entries), found from their headers alone.

``tarfile`` builds an object per member and checks its fields in Python: 0.45 ms a sample,
the largest cost of an export after creating its files.  Here a header is one ``pread`` and
a few slices.  Anything this walk does not recognise (another header type, a checksum that
does not add up, a name the format refuses, a sample in two runs, a short file) makes it
answer None, and the format's own reader, with its own error messages, reads the shard.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from ...dataset.formats.base import Member, Record
from ...dataset.formats.webdataset import BLOCK, MEMBER_EXTENSIONS, check_member_name
from ...door import chunks
from ...errors import ShardFormatError

MAGIC = b"ustar\x0000"
ZERO = bytes(BLOCK)
REGULAR = (b"0", b"\x00")


def _octal(field: bytes) -> int | None:
    text = field.split(b"\x00", 1)[0].strip()
    # what is left once the octal digits are taken out: 1 us a field, 2.8 us a byte at a
    # time (timeit; six fields a sample, 60,000 in an export of 10,000 samples)
    if not text or text.translate(None, b"01234567"):
        return None
    return int(text, 8)


def _padded(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


class _Chunks:
    """The file read once from its start in chunks (``door.chunks``: a multiple of BLOCK, so a
    header never straddles two), each fed to ``digest`` as it comes: the headers are sliced
    from the chunk in hand (a ``pread`` a header was 30,000 system calls in an export of
    10,000 samples, on top of the shard's hashing)."""

    def __init__(self, fd: int, size: int, digest: Any):
        self.reads, self.size, self.digest = chunks(fd, size), size, digest
        self.start, self.data = 0, b""

    def block(self, offset: int) -> bytes | None:
        """The 512 bytes at ``offset`` (never before the last asked for); None when the file
        ends first or a header straddles a short read (the walk then gives up)."""
        while offset + BLOCK > self.start + len(self.data):
            if not self._next():
                return None
        at = offset - self.start
        return self.data[at : at + BLOCK] if at >= 0 else None

    def _next(self) -> bool:
        data = next(self.reads, b"")
        if self.digest is not None:
            self.digest.update(data)
        self.start, self.data = self.start + len(self.data), data
        return bool(data)

    def finish(self) -> bool:
        """Read (and hash) the rest of the file; False when it ends before ``size``."""
        while self._next():
            pass
        return self.start == self.size


def plain_samples(fd: int, size: int,
                  digest: Any = None) -> list[tuple[str, list[Member]]] | None:
    """(key, its members with absolute offsets) of each sample of the tar in ``fd`` (its first
    ``size`` bytes), or None when the shard is not plainly what shardsmith writes.  Every
    byte of the ``size`` is read once, in order, and fed to ``digest`` (a ``hashlib`` hash)
    when one is given: the shard is hashed by the same reads."""
    chunks = _Chunks(fd, size, digest)
    samples: list[tuple[str, list[Member]]] = []
    seen: set[str] = set()
    offset = 0
    while offset + BLOCK <= size:
        header = chunks.block(offset)
        if header is None:
            return None
        if header == ZERO:
            break
        if header[156:157] not in REGULAR or header[257:265] != MAGIC \
                or header[345:500].strip(b"\x00"):
            return None
        checksum, length = _octal(header[148:156]), _octal(header[124:136])
        if checksum is None or length is None \
                or checksum != sum(header) - sum(header[148:156]) + 8 * 32:
            return None
        try:
            name = header[:100].split(b"\x00", 1)[0].decode("ascii")
            key, extension = check_member_name(name)
        except (UnicodeDecodeError, ShardFormatError):
            return None
        data = offset + BLOCK
        if data + length > size:
            return None
        if not samples or samples[-1][0] != key:
            if key in seen:
                return None
            seen.add(key)
            samples.append((key, []))
        samples[-1][1].append(Member(extension, offset, data, length))
        offset = data + _padded(length)
    for _, members in samples:
        extensions = {member.extension for member in members}
        if any(extension not in extensions for extension in MEMBER_EXTENSIONS):
            return None
    return samples if chunks.finish() else None


def read_samples(fd: int, samples: list[tuple[str, list[Member]]],
                 wanted: set[str] | dict) -> Iterator[tuple[int, Record]]:
    """(offset, record) of each sample of ``samples`` whose key is ``wanted``, one ``pread``
    a sample, as the format's ``records`` gives them."""
    for key, members in samples:
        if key not in wanted:
            continue
        start = members[0].header
        end = members[-1].data + _padded(members[-1].size)
        data = os.pread(fd, end - start, start)
        if len(data) != end - start:
            raise ShardFormatError(f"sample {key} is cut short")
        yield start, Record(key, data, tuple(
            Member(m.extension, m.header - start, m.data - start, m.size) for m in members))
