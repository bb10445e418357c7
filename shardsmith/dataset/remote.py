"""Local copies of a bucket's files, for the readers that need a file on disk.

The shard and changes-file readers work on a descriptor (``pread``, a tar stream), so a
command that reads an ``s3://`` dataset's shards (``sheet``, ``report``, ``export``) copies
each one it needs to a private temporary folder first, then reads the copy exactly as it reads
a local dataset, and the copy is removed when the reading is done.  The object comes in
through the guarded door (``door.open_file`` hands it to ``storage.ObjectPath.open_guarded``):
refused unseen when it is larger than the manifest says, read in ranged GETs of
``COPY_CHUNK`` bytes, so memory stays at one chunk and disk at one file whatever its size.
Its sha256 is checked where the reader of a local file checks it (``export`` does, as it
reads), not twice.  A local ``Path`` is handed back untouched.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..door import open_file
from ..storage import ObjectPath

# Same chunk as a stage's download (ops/stage.py): one ranged GET, and the memory of one
# download grows by ~46 MiB at this size (docs/storage.md, measured).
COPY_CHUNK = 8 << 20


@contextmanager
def local_copy(location: Path | ObjectPath, size: int) -> Iterator[Path]:
    """``location`` itself when local; else a private copy of the object (at most ``size``
    bytes, its manifest's count: a larger object is ``Refused`` ``too_large``, not read).
    A missing object is a FileNotFoundError, an unreachable store an OSError, as for a file.
    """
    if not isinstance(location, ObjectPath):
        yield location
        return
    with tempfile.TemporaryDirectory(prefix="shardsmith-remote-") as scratch:
        target = Path(scratch) / "copy"
        download(location, target, size)
        yield target


def download(location: ObjectPath, target: Path, cap: int) -> int:
    """Write the object at ``location`` (at most ``cap`` bytes) to the new file ``target``;
    returns its size."""
    with open_file(location, cap) as handle:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        with os.fdopen(os.open(target, flags, 0o600), "wb") as writer:
            offset = 0
            while offset < handle.size:
                data = handle.pread(min(COPY_CHUNK, handle.size - offset), offset)
                if not data:  # shrank since it was listed: the reader sees a short file
                    break
                writer.write(data)
                offset += len(data)
    return offset
