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
import re
import shutil
import stat
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
    is_dataset_file,
    is_derived_file,
    objects_record,
    read_manifest,
)
from ..door import MANIFEST_CAP, Refused, open_file
from ..errors import ManifestError, OutputStateError
from ..storage import ObjectPath, locate
from ..text import cut

log = logging.getLogger(__name__)

SPOOL_VARIABLE = "SHARDSMITH_SPOOL"
LEASE_NAME = "lease"
UPLOADS = 4  # files uploaded at once
# What was uploaded is saved every SAVE_EVERY files: a run killed while uploading sends at most
# that many again, and the record (~100 bytes a file) is not rewritten per file.
SAVE_EVERY = 16
CHUNK = 8 << 20  # one ranged GET of a download: memory stays at one chunk
STATE_RECORD_CAP = 64 << 20  # ~100 bytes a file: far more files than a dataset holds
SHA256 = re.compile(r"[0-9a-f]{64}")


def ours(name: str) -> bool:
    """Whether ``name`` is one shardsmith writes beside a manifest (a shard, an index, a
    sample index, a changes file, a shard list, the label map, the manifest): only such
    objects under a dataset's prefix are ever downloaded, recorded or deleted."""
    return name == MANIFEST_NAME or is_dataset_file(name) or is_derived_file(name)


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
    _plain_folders(home, spool)
    with BucketLease(bucket / STATE_DIR / LEASE_NAME, "packed") as lease:
        _refuse_foreign(bucket)
        _sync_spool(bucket, home, spool)
        result = pack_local(replace(config, output=replace(config.output, path=str(spool))))
        lease.check()
        publish(spool, bucket, home, lease.check)
    return replace(result, published=str(bucket))


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


def _refuse_foreign(bucket: ObjectPath) -> None:
    """A prefix holding no manifest is packed only when it holds nothing but objects of
    ours (a killed first run's), as a local pack refuses a folder with files it did not
    write: OutputStateError naming up to three, nothing deleted."""
    entries = _entries(bucket)
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


def _entries(bucket: ObjectPath) -> dict[str, str]:
    """name -> type (``file``, ``directory``) of what is directly under the prefix."""
    client = bucket.client
    try:
        listing = client.call(str(bucket), client.fs.ls, bucket.path, detail=True)
    except FileNotFoundError:
        return {}
    base = bucket.path + "/"
    return {str(entry["name"]).removeprefix(base): str(entry.get("type"))
            for entry in listing}


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
    """The spool's record (``base``: the sha256 of the bucket's manifest it holds;
    ``uploaded``: name -> [size, mtime_ns, ETag]).  The spool is a cache: a record damaged
    in any field is discarded with one warning (the next publish compares and re-sends)."""
    path = home / "state.json"
    try:
        with open_file(path, STATE_RECORD_CAP) as handle:
            state = json.loads(handle.read())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, Refused):
        state = None
    if _sound_state(state):
        return state
    log.warning("%s: damaged, discarded (the spool is a cache: what is uploaded is "
                "compared again)", path)
    return {}


def _sound_state(state: object) -> bool:
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


def _remote_manifest(bucket: ObjectPath) -> bytes | None:
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
        there = _listing(bucket)
        for entry in sorted(manifest.files(), key=lambda entry: entry.name):
            _download(bucket / entry.name, spool / entry.name, entry.bytes, entry.sha256)
            found = (spool / entry.name).stat()
            uploaded[entry.name] = [found.st_size, found.st_mtime_ns, there.get(entry.name, "")]
        for name in sorted(name for name in there if is_derived_file(name)):
            _download(bucket / name, spool / name, MANIFEST_CAP, None)  # rewritten by a pack
            found = (spool / name).stat()
            uploaded[name] = [found.st_size, found.st_mtime_ns, there[name]]
        _download(bucket / MANIFEST_NAME, spool / MANIFEST_NAME, MANIFEST_CAP, remote)
    write_json_atomic(home / "state.json", {"base": remote, "uploaded": uploaded})


def _download(source: ObjectPath, final: Path, size: int, sha256: str | None) -> None:
    """``source`` into ``final`` by ranged GETs within ``size`` (the manifest's; a cap for
    the manifest itself), its sha256 checked before it takes its name: OutputStateError for
    an object that is not what the manifest says."""
    tmp = tmp_path_for(final)
    digest = hashlib.sha256()
    try:
        with source.open_guarded(size) as handle, open(tmp, "wb") as out:
            offset = 0
            while offset < handle.size:
                data = handle.pread(min(CHUNK, handle.size - offset), offset)
                if not data:
                    break
                digest.update(data)
                out.write(data)
                offset += len(data)
    except Refused as exc:
        tmp.unlink(missing_ok=True)
        raise OutputStateError(f"{exc.path}: {exc.detail}; the bucket's version is not "
                               "what its manifest says (pack to another prefix)") from None
    except FileNotFoundError:
        tmp.unlink(missing_ok=True)
        raise OutputStateError(f"{source}: named by the bucket's manifest but missing; the "
                               "bucket's version is incomplete (pack to another prefix)") \
            from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sha256 is not None and digest.hexdigest() != sha256:
        tmp.unlink(missing_ok=True)
        raise OutputStateError(f"{source}: its sha256 is not the manifest's; the bucket's "
                               "version is damaged (pack to another prefix)")
    os.replace(tmp, final)


def _listing(bucket: ObjectPath) -> dict[str, str]:
    """name -> ETag of the objects of ours directly under the prefix (one LIST); an object
    under another name is someone else's, never listed, recorded or deleted."""
    client = bucket.client
    try:
        entries = client.call(str(bucket), client.fs.ls, bucket.path, detail=True)
    except FileNotFoundError:
        return {}
    names = {entry["name"].rsplit("/", 1)[-1]: str(entry.get("ETag") or "")
             for entry in entries if entry.get("type") == "file"}
    return {name: etag for name, etag in names.items() if ours(name)}


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
    client = bucket.client
    remove_stale_tmp(spool)
    manifest = (spool / MANIFEST_NAME).read_bytes()
    names = sorted(entry.name for entry in os.scandir(spool)
                   if entry.is_file(follow_symlinks=False) and entry.name != MANIFEST_NAME
                   and ours(entry.name))
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
        kept = [name for name in record.get("kept", []) if ours(name)]
    elif current is None:
        kept = []
    elif record.get("manifest") == current_sha:
        kept = [name for name in record.get("names", []) if ours(name)]
    else:  # a version this code did not record: keep all it may name until the next commit
        kept = sorted(there)
    names_now = names + [MANIFEST_NAME]
    check()
    if current != manifest:
        fresh = {"manifest": new_sha, "names": names_now, "kept": kept}
        if record != fresh:
            client.call(str(record_object), client.fs.pipe_file, record_object.path,
                        json.dumps(fresh, sort_keys=True).encode())
        check()
        client.call(str(bucket), client.fs.pipe_file, (bucket / MANIFEST_NAME).path, manifest)
        log.info("committed %s", bucket)
    write_json_atomic(home / "state.json", {"base": new_sha, "uploaded": uploaded})
    keep = set(names_now) | set(kept)
    stale = sorted(set(_listing(bucket)) - keep)
    if stale:
        client.call(str(bucket), client.fs.rm, [(bucket / name).path for name in stale])
        log.info("removed %s, which neither this version nor the previous names",
                 ", ".join(stale))

