"""The spool of a pack to a store (``s3://``) and what it knows of the bucket: the record of
what is uploaded (``state.json``), the files of ours the bucket holds, checked downloads and
uploads of what the bucket does not hold.

Shared by the publishing of a version (``s3output``) and the journal kept in the bucket
(``s3journal``).
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
from pathlib import Path
from typing import Any

from ..atomic import CopyMismatch, copy_verified, write_json_atomic
from ..dataset.manifest import MANIFEST_NAME, is_dataset_file, is_derived_file
from ..door import Refused, open_file
from ..errors import OutputStateError
from ..storage import Location

log = logging.getLogger(__name__)

# What was uploaded is saved every SAVE_EVERY files: a run killed while uploading sends at most
# that many again, and the record (~100 bytes a file) is not rewritten per file.
SAVE_EVERY = 16
STATE_RECORD_CAP = 64 << 20  # ~100 bytes a file: far more files than a dataset holds
SHA256 = re.compile(r"[0-9a-f]{64}")


def ours(name: str) -> bool:
    """Whether ``name`` is one shardsmith writes beside a manifest (a shard, an index, a
    sample index, a changes file, a shard list, the label map, the manifest): only such
    objects under a dataset's prefix are ever downloaded, recorded or deleted."""
    return name == MANIFEST_NAME or is_dataset_file(name) or is_derived_file(name)


def spool_record(home: Path) -> dict[str, Any]:
    """The spool's record (``base``: the sha256 of the bucket's manifest it holds;
    ``uploaded``: name -> [size, mtime_ns, ETag]).  The spool is a cache: a record damaged
    in any field is discarded with one warning (the next publish compares and re-sends)."""
    path = home / "state.json"
    try:
        with open_file(path, STATE_RECORD_CAP) as handle:
            state = json.loads(handle.read())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, RecursionError, Refused):  # RecursionError: deep nesting
        state = None
    if _sound_record(state):
        return state
    log.warning("%s: damaged, discarded (the spool is a cache: what is uploaded is "
                "compared again)", path)
    return {}


def save_record(home: Path, base: str | None, uploaded: dict[str, list]) -> None:
    """Write the spool's record (``spool_record``) atomically."""
    write_json_atomic(home / "state.json", {"base": base, "uploaded": uploaded})


def _sound_record(state: object) -> bool:
    if not isinstance(state, dict) or set(state) - {"base", "uploaded"}:
        return False
    base, uploaded = state.get("base"), state.get("uploaded", {})
    if not (base is None or (isinstance(base, str) and SHA256.fullmatch(base))):
        return False
    if not isinstance(uploaded, dict):
        return False
    return all(isinstance(name, str) and isinstance(seen, list) and len(seen) == 3
               and all(type(number) is int and number >= 0 for number in seen[:2])
               and isinstance(seen[2], str) for name, seen in uploaded.items())


def download_checked(bucket: Location, spool: Path, name: str, size: int,
                     sha256: str | None) -> list[int]:
    """The object ``name`` of ``bucket`` into the spool by ranged GETs within ``size`` (the
    manifest's; a cap for the manifest itself), its sha256 checked before it takes its name;
    returns the spool file's [size, mtime_ns] (its record, less the ETag).  OutputStateError
    for an object that is not what the manifest says."""
    source = bucket / name
    try:
        with source.open_guarded(size) as handle:
            copy_verified(handle, spool / name, sha256=sha256, sync=False)
    except Refused as exc:
        raise OutputStateError(f"{exc.path}: {exc.detail}; the bucket's version is not "
                               "what its manifest says (pack to another prefix)") from None
    except FileNotFoundError:
        raise OutputStateError(f"{source}: named by the bucket's manifest but missing; the "
                               "bucket's version is incomplete (pack to another prefix)") \
            from None
    except CopyMismatch:
        raise OutputStateError(f"{source}: its sha256 is not the manifest's; the bucket's "
                               "version is damaged (pack to another prefix)") from None
    found = (spool / name).stat()
    return [found.st_size, found.st_mtime_ns]


def upload_unheld(spool: Path, bucket: Location, name: str, uploaded: dict[str, list],
                  there: dict[str, str]) -> list | None:
    """The spool file ``name`` PUT as the bucket's object of that name, unless the bucket
    holds it: its record [size, mtime_ns, ETag] is the file's and the listing's ETag.
    Returns its new record; None when held, or when it is no regular file of the spool."""
    path = spool / name
    found = os.lstat(path)
    seen = [found.st_size, found.st_mtime_ns]
    if not stat.S_ISREG(found.st_mode) or uploaded.get(name) == seen + [there.get(name)]:
        return None
    return seen + [(bucket / name).put(path)]


def files_of_ours(bucket: Location) -> dict[str, str]:
    """name -> ETag of the objects of ours directly under the prefix (one LIST); an object
    under another name is someone else's, never listed, recorded or deleted."""
    return {name: str(entry.get("ETag") or "") for name, entry in bucket.listing().items()
            if entry.get("type") == "file" and ours(name)}
