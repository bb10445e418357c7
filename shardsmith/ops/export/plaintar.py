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

from ...dataset.formats.base import Member, Record
from ...dataset.formats.webdataset import BLOCK, MEMBER_EXTENSIONS, check_member_name
from ...errors import ShardFormatError

MAGIC = b"ustar\x0000"
ZERO = bytes(BLOCK)
REGULAR = (b"0", b"\x00")


def _octal(field: bytes) -> int | None:
    text = field.split(b"\x00", 1)[0].strip()
    if not text or any(byte not in b"01234567" for byte in text):
        return None
    return int(text, 8)


def _padded(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def plain_samples(fd: int, size: int) -> list[tuple[str, list[Member]]] | None:
    """(key, its members with absolute offsets) of each sample of the tar in ``fd`` (its first
    ``size`` bytes), or None when the shard is not plainly what shardsmith writes."""
    samples: list[tuple[str, list[Member]]] = []
    seen: set[str] = set()
    offset = 0
    while offset + BLOCK <= size:
        header = os.pread(fd, BLOCK, offset)
        if len(header) != BLOCK:
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
    return samples


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
