"""The journal of a pack to ``s3://`` kept in the bucket, one object per checkpoint, with the
shards uploaded while the pack runs (docs/storage.md, "Pack to s3").

The spool's journal (``journal.py``) is copied as it is written: after each durable
checkpoint, one thread uploads the checkpoint's shard and index, then the checkpoint object
``PREFIX/.shardsmith/journal/<run>/<NNNNNNNN>.json`` (``<run>``: the first 16 hex digits of the
run's digest).  Object 0 is the journal's first line; object N is its line N followed by
exactly the sample records that checkpoint accounts for (its ``samples_end`` less the one
before).  An object is PUT only after the files it names, so the bucket's objects 0..K name
shards the bucket holds; the manifest is still PUT last, by ``s3output.publish``.

A run on another machine (the spool is not the bucket's version, or holds no journal)
downloads the contiguous objects 0..K and the shards they name, and rebuilds the journal in
the spool; ``Journal.load`` then judges it as it judges a local one.  After the manifest
commit the journal objects are deleted; a run finds those of another run, or of its own beyond
where its journal stands, and deletes them before it uploads.  The object record
(``objects.json``, written before the manifest) names the run it commits, so the objects of a
run killed after its commit and before they were deleted are known as leftovers
(``clear_committed``): deleted, never restored.  A run without object 0 is the leftovers of a
run killed while its objects were deleted: deleted with an info line.
"""

from __future__ import annotations

import itertools
import logging
import queue
import re
import threading
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from ..atomic import HashingFile, fsync_directory, write_bytes_atomic
from ..dataset.manifest import ShardEntry
from ..dataset.statedir import DatasetDir, read_state, state_folder
from ..door import MANIFEST_CAP, Refused
from ..errors import ManifestError, OutputStateError
from ..schema import decode, parse
from ..storage import Location
from .journal import JOURNAL_CAP, SPOOL_CAP, MirroredLine
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

RECORDED = DatasetDir(PurePosixPath()).journals.as_posix()  # in the spool's record of uploads
OBJECT_KEY = re.compile(r"([0-9a-f]{16})/([0-9]{8})\.json")
RUN = re.compile(r"[0-9a-f]{16}")
# A checkpoint line and one shard's sample records (~300 bytes each: ~800,000 of them); a
# checkpoint past it is not copied, and a resume elsewhere stops before it.
CHECKPOINT_CAP = MANIFEST_CAP
# Checkpoints waiting for the upload thread: the pack waits beyond that, so the bucket's
# journal is never more than two shards behind the spool's.
QUEUE_DEPTH = 2
# Runs a restore tries, newest first: each costs a GET of its object 0 at least, and a bucket
# holding 3,000 planted runs would otherwise cost 3,000 GETs before the pack starts.
RUNS_TRIED = 8


def journal_folder(bucket: Location) -> Location:
    """Where the bucket's journal objects are: ``PREFIX/.shardsmith/journal``."""
    return DatasetDir(bucket).journals


def _key(run: str, number: int) -> str:
    return f"{run}/{number:08d}.json"


def _recorded(key: str) -> str:
    """The name of a journal object in the spool's record of what is uploaded."""
    return f"{RECORDED}/{key}"


def _names(runs: list[str]) -> str:
    """Up to three run ids, then " ..." (a bucket may hold thousands: one short line)."""
    return ", ".join(runs[:3]) + (" ..." if len(runs) > 3 else "")


def journal_objects(bucket: Location) -> dict[str, dict[str, Any]]:
    """key (``run/NNNNNNNN.json``) -> what the listing says of it, for the journal objects
    of ours in the bucket (one recursive listing); other names there are not ours."""
    try:
        found = journal_folder(bucket).find()
    except FileNotFoundError:
        return {}
    return {key: info for key, info in found.items() if OBJECT_KEY.fullmatch(key)}


def _delete(bucket: Location, keys: list[str], check: Callable[[], None]) -> None:
    if keys:
        check()
        journal_folder(bucket).delete(*keys)


class BucketJournal:
    """The bucket's copy of the spool's journal (``journal.JournalMirror``), uploaded in
    order on one thread.  ``check``: the lease's, called before every PUT and delete; an
    upload that fails stops the pack at its next checkpoint, or at ``finish``."""

    def __init__(self, bucket: Location, spool: Path, home: Path,
                 check: Callable[[], None]):
        self.bucket, self.spool, self.home, self.check = bucket, spool, home, check
        self.samples_path = DatasetDir(spool).samples
        self.error: BaseException | None = None
        self.run = ""
        self.number = 0  # of the next checkpoint handed over
        self._queue: queue.Queue = queue.Queue(QUEUE_DEPTH)
        self._cancelled = threading.Event()
        # the upload thread's alone
        self._state: dict[str, Any] = {}
        self._there: dict[str, str] = {}  # name -> ETag, of the bucket's files of ours
        self._held: dict[str, str] = {}  # journal key -> ETag
        self._unsaved = 0
        self._copying = True  # False once a checkpoint could not be copied: none after it
        self.committed = False  # whether the publish after the pack committed a version
        self._thread = threading.Thread(target=self._work, name="journal upload",
                                        daemon=True)
        self._thread.start()

    # The pack's side (its main thread).

    def begin(self, identity: dict[str, Any], lines: list[MirroredLine]) -> None:
        """The journal started or resumed: what the bucket holds of another run, or of this
        one past ``lines``, is deleted, then ``lines`` are copied where it lacks them."""
        self._raise()
        self.run = str(identity.get("delta", ""))[:16]
        self.number = len(lines)
        self._hand(("begin", lines))

    def checkpoint(self, line: bytes, start: int, end: int, shard: ShardEntry | None) -> None:
        """Copy one more checkpoint (after the files it names)."""
        self._raise()
        self._hand(("checkpoint", self.number, (line, start, end, shard)))
        self.number += 1

    def finish(self) -> None:
        """Wait until everything handed over is uploaded; raises what an upload raised."""
        self._hand(None)
        self._thread.join()
        self._raise()

    def cancel(self) -> None:
        """Stop (the pack failed): what is queued is dropped, the record of what was
        uploaded saved."""
        self._cancelled.set()
        self._thread.join()

    def _raise(self) -> None:
        if self.error is not None:
            raise self.error

    def _hand(self, item: Any) -> None:
        while True:
            try:
                self._queue.put(item, timeout=0.5)
                return
            except queue.Full:
                if not self._thread.is_alive():  # cannot happen but by a bug: do not hang
                    raise RuntimeError("the journal's upload thread ended early") from None

    # The upload thread.

    def _work(self) -> None:
        try:
            while not self._cancelled.is_set():
                try:
                    item = self._queue.get(timeout=0.2)
                except queue.Empty:
                    continue
                if item is None:
                    break
                if self.error is not None:
                    continue  # drained, so that the pack never waits on a full queue
                try:
                    if item[0] == "begin":
                        self._begin(item[1])
                    else:
                        self._copy(item[1], *item[2])
                except Exception as exc:  # noqa: BLE001 - raised again in the pack's thread
                    self.error = exc
        finally:
            try:
                self._save()
            except OSError as exc:
                self.error = self.error or exc

    def _begin(self, lines: list[MirroredLine]) -> None:
        self._state = spool_record(self.home)
        uploaded = self._state.setdefault("uploaded", {})
        self._there = files_of_ours(self.bucket)
        objects = journal_objects(self.bucket)
        others = sorted(key for key in objects if not key.startswith(self.run + "/"))
        beyond = sorted(key for key in objects if key.startswith(self.run + "/")
                        and int(key[17:25]) >= len(lines))
        runs = sorted({key[:16] for key in others})
        headless = [run for run in runs if _key(run, 0) not in objects]
        headed = [run for run in runs if run not in headless]
        if headed:
            log.warning("%s holds the journal of another run (%s): not resumed from; deleted",
                        journal_folder(self.bucket), _names(headed))
        if headless:
            log.info("%s: deleted the journal objects of %s, which have no object 0 (left by "
                     "a run killed while it deleted them)", journal_folder(self.bucket),
                     _names(headless))
        _delete(self.bucket, others + beyond, self.check)
        for key in others + beyond:
            uploaded.pop(_recorded(key), None)
        self._held = {key: str(info.get("ETag") or "") for key, info in objects.items()
                      if key not in others and key not in beyond}
        for number, line in enumerate(lines):
            self._copy(number, *line)

    def _copy(self, number: int, line: bytes, start: int, end: int,
              shard: ShardEntry | None) -> None:
        """Checkpoint ``number``: its shard's files, then its object, each unless held."""
        for entry in shard.files() if shard is not None else ():
            self._upload_file(entry.name)
        if not self._copying:
            return
        key = _key(self.run, number)
        size = len(line) + end - start
        if size > CHECKPOINT_CAP:
            log.warning("checkpoint %d of the journal is %s bytes, more than a checkpoint "
                        "object may hold: the bucket's journal stops before it", number,
                        f"{size:,}")
            self._copying = False
            return
        uploaded = self._state["uploaded"]
        if uploaded.get(_recorded(key)) == [size, 0, self._held.get(key)]:
            return
        records = self._samples(start, end)
        if records is None:
            self._copying = False  # the version is committed in the spool: no journal needed
            return
        self.check()
        etag = (journal_folder(self.bucket) / key).put(line + records)
        uploaded[_recorded(key)] = [size, 0, etag]
        self._held[key] = etag
        self._saved()

    def _upload_file(self, name: str) -> None:
        """A file of a checkpoint's shard, unless the bucket holds it (as ``publish``
        judges it, and recorded as it records it, so that it finds it held)."""
        self.check()
        try:
            seen = upload_unheld(self.spool, self.bucket, name, self._state["uploaded"],
                                 self._there)
        except FileNotFoundError:
            if (self.spool / name).exists():
                raise
            return  # merged away when the version was made: publish sends what it names
        if seen is not None:
            self._state["uploaded"][name] = seen
            self._there[name] = seen[2]
            self._saved()

    def _samples(self, start: int, end: int) -> bytes | None:
        """The spool's sample records ``start:end``; None when the spool no longer holds
        them (the pack committed its version in the spool, which removed its journal)."""
        try:
            with read_state(self.samples_path, SPOOL_CAP) as handle:
                if handle.size < end:
                    return None
                data = handle.pread(end - start, start)
        except (FileNotFoundError, OutputStateError):
            return None
        return data if len(data) == end - start else None

    def _saved(self) -> None:
        self._unsaved += 1
        if self._unsaved >= SAVE_EVERY:  # a killed run sends at most that many again
            self._save()

    def _save(self) -> None:
        if self._unsaved:
            save_record(self.home, self._state.get("base"), self._state["uploaded"])
            self._unsaved = 0


def clear(bucket: Location, home: Path, check: Callable[[], None]) -> None:
    """After the commit: the bucket's journal objects are deleted (of this run, or of any
    run before it), and the spool's record of them."""
    _clear(bucket, home, sorted(journal_objects(bucket)), check, every=True)


def clear_committed(bucket: Location, home: Path, run: str,
                    objects: dict[str, dict[str, Any]],
                    check: Callable[[], None]) -> dict[str, dict[str, Any]]:
    """The journal objects of ``run``, the run the bucket's version committed (its object
    record says so), are deleted with an info line: leftovers of a run killed between its
    commit and ``clear``, which a restore would download again shard by shard.  Returns the
    other objects."""
    if not RUN.fullmatch(run):
        return objects
    leftovers = sorted(key for key in objects if key.startswith(run + "/"))
    if leftovers:
        log.info("%s: deleted the %d journal objects of run %s, which the bucket's version "
                 "committed", journal_folder(bucket), len(leftovers), run)
        _clear(bucket, home, leftovers, check)
    return {key: info for key, info in objects.items() if not key.startswith(run + "/")}


def _clear(bucket: Location, home: Path, keys: list[str], check: Callable[[], None],
           every: bool = False) -> None:
    """``keys`` deleted, and the spool's record of them (``every``: of all journal objects)."""
    _delete(bucket, keys, check)
    state = spool_record(home)
    uploaded = state.get("uploaded") or {}
    gone = {_recorded(key) for key in keys}
    kept = {name: seen for name, seen in uploaded.items()
            if not (name in gone or
                    (every and name.startswith(f"{RECORDED}/")))}
    if kept != uploaded:
        save_record(home, state.get("base"), kept)


class _Damaged(Exception):
    """Why a checkpoint object is not one (it and those after it are not resumed from)."""


def restore(bucket: Location, spool: Path,
            objects: dict[str, dict[str, Any]] | None = None) -> dict[str, list]:
    """Rebuild the spool's journal from the bucket's checkpoint objects 0..K (up to the first
    missing or damaged one, with one warning) and download the shards they name (ranged,
    sha256-checked, each of the size the listing gives it).  ``objects``: the bucket's journal
    objects (``journal_objects``), listed when not given.

    Of several runs' journals, the newest (of the ``RUNS_TRIED`` newest) whose object 0 is
    the first line of a journal of ours and which restores at least one checkpoint: a planted
    or broken run does not cancel a good one.  A run without object 0 is not one (the
    leftovers of a run killed while it deleted them).  Returns the record of what it
    downloaded (name -> [size, mtime_ns, ETag]: held in the bucket).  Whether the journal is
    resumed from is ``Journal.load``'s to say."""
    objects = journal_objects(bucket) if objects is None else objects
    runs: dict[str, dict[int, dict[str, Any]]] = {}
    for key, info in objects.items():
        runs.setdefault(key[:16], {})[int(key[17:25])] = info
    candidates = sorted((run for run in runs if 0 in runs[run]), reverse=True,
                        key=lambda name: (max(str(info.get("LastModified", ""))
                                              for info in runs[name].values()), name))
    if not candidates:
        return {}
    listing = bucket.listing()
    first_warning = ""
    for run in candidates[:RUNS_TRIED]:
        restored, warning = _restore_run(bucket, spool, run, runs[run], listing)
        if restored is not None:
            if warning:
                log.warning("%s", warning)
            log.info("rebuilt the journal from %d checkpoint objects in %s",
                     sum(name.startswith(f"{RECORDED}/") for name in restored),
                     journal_folder(bucket) / run)
            return restored
        first_warning = first_warning or warning
    if first_warning:  # the newest journal of ours, which restored no checkpoint
        log.warning("%s", first_warning)
    return {}


def _restore_run(bucket: Location, spool: Path, run: str,
                 numbers: dict[int, dict[str, Any]],
                 listing: dict[str, dict[str, Any]]) -> tuple[dict[str, list] | None, str]:
    """The journal of ``run`` rebuilt in the spool when it restores at least one checkpoint:
    (its record, the warning of where it stopped or ""); (None, why) otherwise, nothing
    written but the shards downloaded."""
    spooled = DatasetDir(spool)
    state_folder(spooled.state)
    samples = HashingFile(spooled.samples)
    lines: list[bytes] = []
    records: dict[str, list] = {}
    stopped, why = None, ""  # the object the journal stops before, and why
    try:
        end = 0
        for number in itertools.count():
            target = journal_folder(bucket) / _key(run, number)
            info = numbers.get(number)
            if info is None:
                if any(found > number for found in numbers):
                    stopped, why = target, "missing"
                break
            try:
                line, rest = _checkpoint_object(target, number, run, end,
                                                sum(map(len, lines)))
                if number:
                    records.update(_shard_files(bucket, spool, line, listing, target))
            except _Damaged as exc:
                stopped, why = target, str(exc)
                break
            lines.append(line)
            samples.write(rest)
            end += len(rest)
            records[_recorded(_key(run, number))] = [len(line) + len(rest), 0,
                                                     str(info.get("ETag") or "")]
        warning = "" if stopped is None else \
            f"{stopped}: {why}; resumed from the {len(lines)} checkpoint objects before it"
        if not lines:
            samples.discard()
            log.info("%s: %s, not the first line of a journal of ours; not resumed from",
                     stopped, why)
            return None, ""
        if len(lines) == 1:  # no checkpoint: nothing to resume from
            samples.discard()
            return None, warning
        samples.publish()
        write_bytes_atomic(spooled.journal, b"".join(lines))
        fsync_directory(spooled.state)
    except BaseException:
        samples.discard()
        raise
    return records, warning


def _checkpoint_object(target: Location, number: int, run: str, end: int,
                       journal_bytes: int) -> tuple[bytes, bytes]:
    """The journal line and the sample records of checkpoint object ``number`` (the spool's
    records so far ending at ``end``); _Damaged when it is not one."""
    try:
        with target.open_guarded(CHECKPOINT_CAP) as handle:
            data = handle.read()
    except Refused as exc:
        raise _Damaged(exc.detail) from None
    except FileNotFoundError:
        raise _Damaged("deleted while it was read") from None
    cut = data.find(b"\n")
    if cut < 0:
        raise _Damaged("no whole journal line")
    line, rest = data[:cut + 1], data[cut + 1:]
    if journal_bytes + len(line) > JOURNAL_CAP:
        raise _Damaged(f"the journal would pass {JOURNAL_CAP:,} bytes")
    try:
        entry = decode(line, f"checkpoint object {number}")
    except ManifestError as exc:
        raise _Damaged(str(exc)) from None
    if not isinstance(entry, dict):
        raise _Damaged("its line is not a journal line")
    if number == 0:
        identity = entry.get("run")
        if rest or not isinstance(identity, dict) or \
                str(identity.get("delta", ""))[:16] != run:
            raise _Damaged("not the first line of this run's journal")
        return line, rest
    samples_end = entry.get("samples_end")
    if type(samples_end) is not int or samples_end < end:
        raise _Damaged("its line is not a checkpoint")
    if len(rest) != samples_end - end:
        raise _Damaged(f"it holds {len(rest):,} bytes of sample records, its checkpoint "
                       f"counts {samples_end - end:,}")
    return line, rest


def _shard_files(bucket: Location, spool: Path, line: bytes,
                 listing: dict[str, dict[str, Any]], target: Location) -> dict[str, list]:
    """The files of the shard a checkpoint line names, downloaded into the spool and checked
    against its sha256; their records.  _Damaged when one is not what the line says (another
    size than the listing's, or sha256), or not in the bucket."""
    shard = decode(line, str(target)).get("shard")
    if shard is None:
        return {}
    try:
        files = parse(ShardEntry, shard, str(target)).files()
    except ManifestError as exc:
        raise _Damaged(str(exc)) from None
    records = {}
    for entry in files:
        if not ours(entry.name):
            raise _Damaged(f"it names {entry.name!r}, not a shard of ours")
        listed = listing.get(entry.name) or {}
        if listed.get("type") != "file":
            raise _Damaged(f"its shard {entry.name} is not in the bucket")
        if int(listed.get("size") or 0) != entry.bytes:
            raise _Damaged(f"it says {entry.name} holds {entry.bytes:,} bytes, the bucket's "
                           f"holds {int(listed.get('size') or 0):,}")
        try:
            records[entry.name] = download_checked(bucket, spool, entry.name, entry.bytes,
                                                   entry.sha256) + [str(listed.get("ETag") or "")]
        except OutputStateError as exc:
            raise _Damaged(f"its shard is not in the bucket as it says ({exc})") from None
    return records
