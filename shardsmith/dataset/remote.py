"""Local copies of a bucket's files, for the readers that need a file on disk.

The shard and changes-file readers work on a descriptor (``pread``, a tar stream), so a
command that reads an ``s3://`` dataset's shards (``sheet``, ``report``, ``export``) copies
each one it needs to a private temporary folder first, then reads the copy exactly as it reads
a local dataset, and the copy is removed when the reading is done.  The object comes in
through the guarded door (``door.open_file`` hands it to the location's ``open_guarded``):
refused unseen when it is larger than the manifest says, read in ranged GETs of
``door.CHUNK`` bytes, so memory stays at one chunk and disk at one file whatever its size.
Its sha256 is checked where the reader of a local file checks it (``export`` does, as it
reads), not twice.  A local ``Path`` is handed back untouched.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..atomic import copy_verified
from ..door import open_file
from ..storage import Location, is_url


@contextmanager
def local_copy(location: Location, size: int) -> Iterator[Path]:
    """``location`` itself when local; else a private copy of the object (at most ``size``
    bytes, its manifest's count: a larger object is ``Refused`` ``too_large``, not read).
    A missing object is a FileNotFoundError, an unreachable store an OSError, as for a file.
    """
    if not is_url(location):
        yield location
        return
    with tempfile.TemporaryDirectory(prefix="shardsmith-remote-") as scratch:
        target = Path(scratch) / "copy"
        download(location, target, size)
        yield target


def download(location: Location, target: Path, cap: int) -> None:
    """Copy the object at ``location`` (at most ``cap`` bytes) to ``target``, a private scratch
    file (not fsynced)."""
    with open_file(location, cap) as handle:
        copy_verified(handle, target, sync=False)


