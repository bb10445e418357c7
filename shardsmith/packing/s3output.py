"""``pack`` to ``s3://bucket/prefix``: pack into a local spool, upload, PUT the manifest last.

The spool is a local dataset folder that mirrors the bucket's version, packed by the same code
as a local output (so the bytes are the same, and the local journal makes a killed run resume
at its last shard).  Publishing a version to the bucket (docs/storage.md, "Pack to s3"):

1. the dataset's lease is taken (``BucketLease``: no flock on a bucket);
2. multipart uploads left unfinished under the prefix by a killed run are aborted;
3. every file of the spool's version the bucket does not hold yet is uploaded (a PUT, or a
   multipart upload for a large file: visible only when complete);
4. the object record (``.shardsmith/objects.json``) names the objects of the new version and
   of the version it replaces;
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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..atomic import publish_object, remove_stale_tmp, tmp_path_for, write_json_atomic
from ..config import Config
from ..dataset.lock import BucketLease
from ..dataset.manifest import (
    MANIFEST_NAME,
    OBJECTS_RECORD,
    OBJECTS_RECORD_CAP,
    STATE_DIR,
    objects_record,
)
from ..errors import OutputStateError
from ..storage import ObjectPath, locate

log = logging.getLogger(__name__)

SPOOL_VARIABLE = "SHARDSMITH_SPOOL"
LEASE_NAME = "lease"
UPLOADS = 4  # files uploaded at once
# What was uploaded is saved every SAVE_EVERY files: a run killed while uploading sends at most
# that many again, and the record (~100 bytes a file) is not rewritten per file.
SAVE_EVERY = 16


def spool_for(bucket: ObjectPath) -> Path:
    """The spool of a dataset in a bucket: ``$SHARDSMITH_SPOOL`` (default
    ``~/.cache/shardsmith/spool``) / bucket-<hash of the URL>; one spool per dataset URL."""
    root = Path(os.environ.get(SPOOL_VARIABLE)
                or Path.home() / ".cache" / "shardsmith" / "spool").expanduser()
    digest = hashlib.sha256(str(bucket).encode()).hexdigest()[:16]
    return root.resolve() / f"{bucket.bucket}-{digest}"


def pack_to_bucket(config: Config, pack_local: Callable[[Config], Any]) -> Any:
    """Pack ``config`` (its ``output.path`` an ``s3://`` URL) through a local spool with
    ``pack_local`` (``pipeline.pack`` of a local output), then publish the spool's version
    to the bucket.  Returns what ``pack_local`` returned (its ``output``: the spool), with
    ``published``: the URL."""
    bucket = locate(config.output.path, config.storage.options())
    if not bucket.key:
        raise OutputStateError(f"{bucket}: give a prefix for the dataset (s3://bucket/name)")
    home = spool_for(bucket)
    spool = home / "dataset"
    with BucketLease(bucket / STATE_DIR / LEASE_NAME, "packed") as lease:
        _sync_spool(bucket, home, spool)
        result = pack_local(replace(config, output=replace(config.output, path=str(spool))))
        lease.check()
        publish(spool, bucket, home, lease.check)
    return replace(result, published=str(bucket))


def _sha(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _read(target: ObjectPath, cap: int) -> bytes | None:
    """The bytes of a small object of ours; None when there is none."""
    try:
        with target.open_guarded(cap) as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def _state(home: Path) -> dict[str, Any]:
    try:
        state = json.loads((home / "state.json").read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def _remote_manifest(bucket: ObjectPath) -> bytes | None:
    from ..door import MANIFEST_CAP

    return _read(bucket / MANIFEST_NAME, MANIFEST_CAP)


def _sync_spool(bucket: ObjectPath, home: Path, spool: Path) -> None:
    """Make the spool hold the bucket's version, or a version packed on it that a killed run
    did not finish publishing; otherwise (another machine packed, the spool is new or lost)
    download the bucket's version into it."""
    remote = _sha(_remote_manifest(bucket))
    try:
        local = _sha((spool / MANIFEST_NAME).read_bytes())
    except FileNotFoundError:
        local = None
    base = _state(home).get("base")
    if remote == local or remote == base:
        return  # the same version, or the spool is one ahead of it (step 3-6 left to do)
    if spool.exists():
        log.info("the spool of %s is not the bucket's version: downloading it", bucket)
        shutil.rmtree(spool)
    spool.mkdir(parents=True, exist_ok=True)
    uploaded = {}
    if remote is not None:
        for name, etag in sorted(_listing(bucket).items()):
            _download(bucket / name, spool / name)
            stat = (spool / name).stat()
            uploaded[name] = [stat.st_size, stat.st_mtime_ns, etag]
    write_json_atomic(home / "state.json", {"base": remote, "uploaded": uploaded})


def _download(source: ObjectPath, final: Path) -> None:
    tmp = tmp_path_for(final)
    client = source.client
    client.call(str(source), client.fs.get_file, source.path, str(tmp))
    os.replace(tmp, final)


def _listing(bucket: ObjectPath) -> dict[str, str]:
    """name -> ETag of the objects directly under the prefix (one LIST)."""
    client = bucket.client
    try:
        entries = client.call(str(bucket), client.fs.ls, bucket.path, detail=True)
    except FileNotFoundError:
        return {}
    return {entry["name"].rsplit("/", 1)[-1]: str(entry.get("ETag") or "")
            for entry in entries if entry.get("type") == "file"}


def abort_stale_uploads(bucket: ObjectPath) -> int:
    """Abort the multipart uploads left unfinished under the prefix (by a killed run: the
    lease holder is the only writer); returns how many."""
    client = bucket.client
    answer = client.call(str(bucket), client.fs.call_s3, "list_multipart_uploads",
                         Bucket=bucket.bucket, Prefix=f"{bucket.key}/")
    uploads = answer.get("Uploads") or []
    for upload in uploads:
        client.call(str(bucket), client.fs.call_s3, "abort_multipart_upload",
                    Bucket=bucket.bucket, Key=upload["Key"], UploadId=upload["UploadId"])
    if uploads:
        log.info("aborted %d unfinished uploads under %s", len(uploads), bucket)
    return len(uploads)


def publish(spool: Path, bucket: ObjectPath, home: Path,
            check: Callable[[], None] = lambda: None) -> None:
    """Steps 2-6 of the module's docstring: the spool's version becomes the bucket's."""
    remove_stale_tmp(spool)
    manifest = (spool / MANIFEST_NAME).read_bytes()
    names = sorted(entry.name for entry in os.scandir(spool)
                   if entry.is_file(follow_symlinks=False) and entry.name != MANIFEST_NAME)
    abort_stale_uploads(bucket)
    state = _state(home)
    uploaded: dict[str, list] = state.get("uploaded") or {}
    there = _listing(bucket)

    def needed(name: str) -> bool:
        stat = (spool / name).stat()
        seen = uploaded.get(name)
        return not (isinstance(seen, list) and seen == [stat.st_size, stat.st_mtime_ns,
                                                         there.get(name)])

    def upload(name: str) -> tuple[str, list]:
        stat = (spool / name).stat()
        etag = publish_object(spool / name, bucket / name)
        return name, [stat.st_size, stat.st_mtime_ns, etag]

    todo = [name for name in names if needed(name)]
    with ThreadPoolExecutor(UPLOADS) as pool:
        for done, (name, seen) in enumerate(pool.map(upload, todo), 1):
            uploaded[name] = seen
            if done % SAVE_EVERY == 0 or done == len(todo):  # a killed run re-sends few
                write_json_atomic(home / "state.json", {"base": state.get("base"),
                                                        "uploaded": uploaded})

    record_object = bucket / STATE_DIR / OBJECTS_RECORD
    current = _remote_manifest(bucket)
    new_sha, current_sha = _sha(manifest), _sha(current)
    record = objects_record(_read(record_object, OBJECTS_RECORD_CAP))
    if record.get("manifest") == new_sha:
        kept = record.get("kept", [])
    elif current is None:
        kept = []
    elif record.get("manifest") == current_sha:
        kept = record.get("names", [])
    else:  # a version this code did not record: keep all it may name until the next commit
        kept = sorted(there)
    names_now = names + [MANIFEST_NAME]
    check()
    if current != manifest:
        fresh = {"manifest": new_sha, "names": names_now, "kept": kept}
        if record != fresh:
            client = bucket.client
            client.call(str(record_object), client.fs.pipe_file, record_object.path,
                        json.dumps(fresh, sort_keys=True).encode())
        check()
        client = bucket.client
        client.call(str(bucket), client.fs.pipe_file, (bucket / MANIFEST_NAME).path, manifest)
        log.info("committed %s", bucket)
    write_json_atomic(home / "state.json", {"base": new_sha, "uploaded": uploaded})
    keep = set(names_now) | set(kept)
    stale = sorted(set(_listing(bucket)) - keep)
    if stale:
        client = bucket.client
        client.call(str(bucket), client.fs.rm, [(bucket / name).path for name in stale])
        log.info("removed %s, which neither this version nor the previous names",
                 ", ".join(stale))

