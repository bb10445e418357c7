"""``pack`` to a store (``s3://bucket/prefix``, or any backend of ``storage.BACKENDS``): pack
into a local spool, upload, PUT the manifest last, by the store's location methods (``put``,
``delete``, ``listing``; docs/storage.md, "Other stores").

The spool is a local dataset folder that mirrors the bucket's version, packed by the same code
as a local output (so the bytes are the same, and the local journal makes a killed run resume
at its last shard).  Publishing a version to the bucket (docs/storage.md, "Pack to s3"):

1. the dataset's lease is taken (``BucketLease``: no flock on a bucket);
2. multipart uploads left unfinished under the prefix by a killed run are aborted (S3's
   ``abort_uploads``, where the store has it);
3. every file of the spool's version the bucket does not hold yet is uploaded (a PUT, or a
   multipart upload for a large file: visible only when complete);
4. the object record (``.shardsmith/objects.json``) names the objects of the new version and
   of the version it replaces, and the run whose journal objects commit with it;
5. the manifest is PUT: the commit point (a PUT is atomic per object; docs/design.md,
   invariant 8);
6. objects that neither of the two versions names are deleted: what the new version no longer
   names stays until the NEXT commit, so a stage copying the old version keeps its objects.

A run killed anywhere leaves the bucket at the old version or the new one; a rerun repeats
what is left of steps 2-6, each of which finds its work done when it is.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..atomic import remove_stale_tmp
from ..config import Config
from ..dataset.lock import BucketLease
from ..dataset.manifest import (
    MANIFEST_NAME,
    OBJECTS_RECORD_CAP,
    derived_contents,
    is_derived_file,
    objects_record,
    parse_manifest,
    read_manifest,
)
from ..dataset.statedir import STATE_DIR, DatasetDir
from ..door import MANIFEST_CAP, Refused, read_file
from ..errors import ManifestError, OutputStateError
from ..storage import Location
from ..text import cut
from .s3journal import BucketJournal, clear, clear_committed, journal_objects, restore
from .spool import (
    SAVE_EVERY,
    download_checked,
    files_of_ours,
    ours,
    save_record,
    spool_record,
    upload_unheld,
)

log = logging.getLogger(__name__)

SPOOL_VARIABLE = "SHARDSMITH_SPOOL"
UPLOADS = 4  # files uploaded at once


def spool_for(bucket: Location) -> Path:
    """The spool of a dataset in a store: ``$SHARDSMITH_SPOOL`` (default
    ``~/.cache/shardsmith/spool``) / bucket-<hash of the URL>; one spool per dataset URL."""
    root = Path(os.environ.get(SPOOL_VARIABLE)
                or Path.home() / ".cache" / "shardsmith" / "spool").expanduser()
    url = str(bucket)
    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    return root.resolve() / f"{url.partition('://')[2].split('/')[0]}-{digest}"


@contextmanager
def bucket_output(config: Config, bucket: Location) -> Iterator[tuple[Config, BucketJournal]]:
    """The lease of the dataset at ``bucket`` (its ``config.output.path``) and its local spool,
    synced with it: yields the config of a pack into the spool and the journal mirror that
    uploads its shards and checkpoints as they are written; when the pack returns, the
    spool's version is published to the bucket (steps 1-6 above)."""
    home = spool_for(bucket)
    spool = home / "dataset"
    _plain_folders(home, spool)
    with BucketLease(DatasetDir(bucket).lease, "packed") as lease:
        _refuse_foreign(bucket)
        _sync_spool(bucket, home, spool, lease.check)
        mirror = BucketJournal(bucket, spool, home, lease.check)
        try:
            yield replace(config, output=replace(config.output, path=str(spool))), mirror
        except BaseException:
            mirror.cancel()
            raise
        mirror.finish()
        lease.check()
        mirror.committed = publish(spool, bucket, home, lease.check, run=mirror.run)
        clear(bucket, home, lease.check)


def _plain_folders(home: Path, spool: Path) -> None:
    """OutputStateError unless the spool's folders are folders (or absent), never a link:
    the spool is removed and rewritten, so nothing in its place is followed."""
    for folder in (home, spool):
        try:
            mode = folder.lstat().st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(mode):
            raise OutputStateError(f"{folder}: the spool holds a link or a file where its "
                                   "folder goes; remove it (nothing was followed)")


def _refuse_foreign(bucket: Location) -> None:
    """A prefix holding no manifest is packed only when it holds nothing but objects of
    ours (a killed first run's), as a local pack refuses a folder with files it did not
    write: OutputStateError naming up to three, nothing deleted."""
    entries = {name: str(entry.get("type")) for name, entry in bucket.listing().items()}
    odd = [name for name in entries if name in (".", "..", "")]
    if odd:
        raise OutputStateError(
            f"{bucket}: an object with the key {cut(bucket.key, 80)}/{odd[0]} is under the "
            "prefix (no file name can hold it); delete that object or pack to another prefix")
    if MANIFEST_NAME in entries:
        return
    foreign = [name + ("/" if kind == "directory" else "") for name, kind in
               sorted(entries.items())
               if not (kind == "file" and ours(name)) and not
               (kind == "directory" and name == STATE_DIR)]
    if foreign:
        named = ", ".join(cut(name, 60) for name in foreign[:3]) + \
            (" ..." if len(foreign) > 3 else "")
        raise OutputStateError(f"{bucket} is not empty and holds objects shardsmith did not "
                               f"write ({named}); choose an empty or new prefix")


def _sha(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _read(target: Location, cap: int) -> bytes | None:
    """The bytes of a small object of ours; None when there is none."""
    try:
        return read_file(target, cap)
    except FileNotFoundError:
        return None


def _record(bucket: Location) -> dict[str, Any]:
    """The bucket's object record (``objects_record``); {} for one the door refuses (too
    large, a prefix), as for a damaged one: not ours, so every object is kept a commit and
    the commit writes a record of ours (``kept_objects`` reads it so too)."""
    try:
        return objects_record(_read(DatasetDir(bucket).objects, OBJECTS_RECORD_CAP))
    except Refused:
        return {}


def _named(manifest: bytes) -> set[str] | None:
    """The objects of the version ``manifest`` commits: the files it names, those derived
    from it, itself; None where it is no manifest (then nothing is known of what it needs)."""
    try:
        parsed = parse_manifest(manifest, MANIFEST_NAME)
    except ManifestError:
        return None
    return {entry.name for entry in parsed.files()} | set(derived_contents(parsed)) \
        | {MANIFEST_NAME}


def _remote_manifest(bucket: Location) -> bytes | None:
    return _read(bucket / MANIFEST_NAME, MANIFEST_CAP)


def _sync_spool(bucket: Location, home: Path, spool: Path,
                check: Callable[[], None] = lambda: None) -> None:
    """Make the spool hold the bucket's version, or a version packed on it that a killed run
    did not finish publishing; otherwise (another machine packed, the spool is new or lost)
    download the bucket's version into it.  Either way, a journal the bucket holds and the
    spool lacks is restored (``_restore``)."""
    remote = _sha(_remote_manifest(bucket))
    try:
        local = _sha((spool / MANIFEST_NAME).read_bytes())
    except FileNotFoundError:
        local = None
    base = spool_record(home).get("base")
    if remote == local and not _has_journal(spool):  # a spool with its journal lost
        found = _restore(bucket, home, spool, remote, check)
        if found:
            state = spool_record(home)
            save_record(home, state.get("base"), (state.get("uploaded") or {}) | found)
        return
    if remote == local or remote == base:
        return  # the same version, or the spool is one ahead of it (step 3-6 left to do)
    _plain_folders(home, spool)
    if spool.exists():
        log.info("the spool of %s is not the bucket's version: downloading it", bucket)
        shutil.rmtree(spool)
    spool.mkdir(parents=True, exist_ok=True)
    uploaded = {}
    if remote is not None:
        try:
            manifest = read_manifest(bucket)
        except ManifestError as exc:
            raise OutputStateError(f"{exc}; the bucket's version cannot be built on (pack "
                                   "to another prefix)") from None
        there = files_of_ours(bucket)
        for entry in sorted(manifest.files(), key=lambda entry: entry.name):
            uploaded[entry.name] = download_checked(bucket, spool, entry.name, entry.bytes,
                                                    entry.sha256) + [there.get(entry.name, "")]
        for name in sorted(name for name in there if is_derived_file(name)):  # a pack rewrites
            uploaded[name] = download_checked(bucket, spool, name, MANIFEST_CAP, None) \
                + [there[name]]
        download_checked(bucket, spool, MANIFEST_NAME, MANIFEST_CAP, remote)
    uploaded |= _restore(bucket, home, spool, remote, check)  # killed on another machine
    save_record(home, remote, uploaded)


def _restore(bucket: Location, home: Path, spool: Path, remote: str | None,
             check: Callable[[], None]) -> dict[str, list]:
    """``s3journal.restore``, unless the journal objects are those of the run the bucket's
    version (sha256 ``remote``) committed, as its object record names it: a run killed
    between its commit and ``clear`` left them, and they are deleted, not downloaded again."""
    objects = journal_objects(bucket)
    if not objects:
        return {}
    if remote is not None:
        record = _record(bucket)
        if record.get("manifest") == remote:
            objects = clear_committed(bucket, home, str(record.get("run", "")), objects, check)
    return restore(bucket, spool, objects)


def _has_journal(spool: Path) -> bool:
    """Whether the spool's state folder holds a journal (a link there counts: the journal
    refuses it, nothing is rebuilt over it)."""
    try:
        os.lstat(DatasetDir(spool).journal)
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        return True
    return True


def publish(spool: Path, bucket: Location, home: Path,
            check: Callable[[], None] = lambda: None, run: str = "") -> bool:
    """Steps 2-6 of the module's docstring: the spool's version becomes the bucket's; True
    when it commits (the bucket held another version or none), False when it held this one.
    ``run``: the id of the run whose journal objects the bucket holds (``BucketJournal.run``),
    named in the object record, so that a run killed before it deletes them is known by the
    next as the committed run's (``_restore``)."""
    remove_stale_tmp(spool)
    manifest = (spool / MANIFEST_NAME).read_bytes()
    names = sorted(entry.name for entry in os.scandir(spool)
                   if entry.is_file(follow_symlinks=False) and entry.name != MANIFEST_NAME
                   and ours(entry.name))
    aborted = bucket.abort_uploads() if hasattr(bucket, "abort_uploads") else 0
    if aborted:  # S3's multipart uploads of a killed run
        log.info("aborted %d unfinished uploads under %s", aborted, bucket)
    state = spool_record(home)
    uploaded: dict[str, list] = state.get("uploaded") or {}
    there = files_of_ours(bucket)

    def upload(name: str) -> tuple[str, list | None]:
        return name, upload_unheld(spool, bucket, name, held, there)

    held, sent = dict(uploaded), 0
    with ThreadPoolExecutor(UPLOADS) as pool:
        for name, seen in pool.map(upload, names):
            if seen is not None:
                uploaded[name], sent = seen, sent + 1
                if sent % SAVE_EVERY == 0:  # a killed run re-sends few
                    save_record(home, state.get("base"), uploaded)
    if sent % SAVE_EVERY:
        save_record(home, state.get("base"), uploaded)

    record_object = DatasetDir(bucket).objects
    current = _remote_manifest(bucket)
    new_sha, current_sha = _sha(manifest), _sha(current)
    record = _record(bucket)
    if record.get("manifest") == new_sha:
        kept = [name for name in record.get("kept", []) if ours(name)]
        run = run or str(record.get("run") or "")  # a rerun that packed nothing: no run
    elif current is None:
        kept = []
    elif record.get("manifest") == current_sha and (named := _named(current)) is not None:
        # and what its manifest names: a record naming less (forged) would delete now what a
        # stage of the current version may be copying
        kept = sorted(named.union(name for name in record.get("names", []) if ours(name)))
    else:  # a version this code did not record: keep all it may name until the next commit
        kept = sorted(there)
    names_now = names + [MANIFEST_NAME]
    check()
    if current != manifest:
        fresh = {"manifest": new_sha, "names": names_now, "kept": kept}
        if run:
            fresh["run"] = run
        if record != fresh:
            record_object.put(json.dumps(fresh, sort_keys=True).encode())
        check()
        (bucket / MANIFEST_NAME).put(manifest)
        log.info("committed %s", bucket)
    save_record(home, new_sha, uploaded)
    keep = set(names_now) | set(kept)
    stale = sorted(set(files_of_ours(bucket)) - keep)
    if stale:
        bucket.delete(*stale)
        log.info("removed %s, which neither this version nor the previous names",
                 ", ".join(stale))
    return current != manifest
