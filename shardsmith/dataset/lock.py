"""An exclusive, self-describing lock on a directory (one pack or stage at a time).

``flock`` is released by the kernel when the holder dies, however it dies, so a lock left by
a killed run is taken over at once; the lock file names its holder (pid, host, start time) so a
refused run can say who holds it.

The lock file lives in our own state folder and is never followed out of it (``statedir``): a
link, a FIFO or a folder in its place is refused before a byte is written, and what a lock file
holds is shown only when it is a holder line shardsmith wrote, never raw.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import math
import os
import re
import socket
import threading
import time
import uuid
from contextlib import AbstractContextManager, nullcontext
from datetime import datetime
from pathlib import Path
from typing import Any

from ..atomic import naming
from ..door import STATE_CAP, Refused
from ..errors import LockedError
from ..storage import Location, is_url, scrub
from ..text import cut
from .statedir import STATE_DIR, DatasetDir, open_state_file, read_state, state_folder

log = logging.getLogger(__name__)

HOLDER_BYTES = 512  # a holder line is one short line; nothing more of a lock file is read
HOLDER = re.compile(r"pid \d{1,10} on [\x21-\x7e]{1,255} since [0-9T:+-]{10,40}")


def describe_holder(raw: bytes) -> str:
    """The holder a lock file names, when it holds a holder line shardsmith wrote; '' when
    empty; otherwise a phrase that quotes none of it (it may be anyone's file)."""
    text = raw.decode("ascii", "replace").strip()
    if not text:
        return ""
    if HOLDER.fullmatch(text):
        return text
    return "an unknown holder: its lock file holds something shardsmith did not write"


class DirectoryLock:
    """``with DirectoryLock(path, "packed"):`` holds ``path`` exclusively or raises LockedError."""

    def __init__(self, lock_file: Path, activity: str):
        self.path = lock_file
        self.activity = activity
        self._fd = -1

    def __enter__(self) -> DirectoryLock:
        state_folder(self.path.parent)
        fd = open_state_file(self.path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = describe_holder(os.pread(fd, HOLDER_BYTES, 0))
            finally:
                os.close(fd)
            if not holder:  # shared holders write nothing: a stage or an export reading it
                raise LockedError(f"{self.path.parent.parent} is being read by another "
                                  "shardsmith process (a stage or an export); rerun when it "
                                  "has finished") from None
            raise LockedError(
                f"{self.path.parent.parent} is being {self.activity} by {holder}"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            previous = describe_holder(os.pread(fd, HOLDER_BYTES, 0))
            if previous:
                log.warning("taking over the lock of a run that ended without releasing it "
                            "(%s)", previous)
            line = (f"pid {os.getpid()} on {socket.gethostname()} since "
                    f"{datetime.now().isoformat(timespec='seconds')}\n").encode("ascii",
                                                                              "replace")
            with naming(self.path):
                os.ftruncate(fd, 0)
                os.pwrite(fd, line, 0)
        except BaseException:
            os.close(fd)  # a full disk, say: do not keep the directory locked
            raise
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd >= 0:
            try:
                os.ftruncate(self._fd, 0)  # an empty lock file means: released cleanly
            finally:
                os.close(self._fd)
                self._fd = -1


class SharedLock:
    """``with SharedLock(path, "packed"):`` keeps an exclusive holder (a pack) out while a
    reader (a stage) copies; raises LockedError naming the pack that holds it.

    Where the lock file cannot be opened (a dataset without one, a read-only share) nothing is
    locked: the reader then checks afterwards whether the dataset changed.  A link, a FIFO or a
    folder in its place (or in place of the state folder) is refused (OutputStateError).
    """

    def __init__(self, lock_file: Path, activity: str):
        self.path = lock_file
        self.activity = activity
        self._handle = None

    def __enter__(self) -> SharedLock:
        if not state_folder(self.path.parent, create=False):
            return self
        try:
            handle = read_state(self.path, STATE_CAP)  # OutputStateError: not ours to follow
        except OSError:
            return self
        try:
            fcntl.flock(handle.fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = describe_holder(handle.pread(HOLDER_BYTES, 0)) or "another process"
            handle.close()
            raise LockedError(f"{self.path.parent.parent} is being {self.activity} by "
                              f"{holder}; rerun when it has finished") from None
        except OSError:
            handle.close()  # a file system without locks
            return self
        self._handle = handle
        return self

    def __exit__(self, *exc: object) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def reading(root: Location, activity: str) -> AbstractContextManager:
    """What a reader of the dataset at ``root`` holds while it reads: the ``SharedLock`` of a
    folder; nothing in a bucket, whose commit keeps the objects of the version it replaces
    until the next one (docs/storage.md)."""
    if is_url(root):
        return nullcontext()
    return SharedLock(DatasetDir(root).lock, activity)


# A lease lives this long unless renewed; the holder renews it every LEASE_RENEW seconds, so
# a holder that stops renewing (killed, cut off) frees the dataset within LEASE_SECONDS.
LEASE_SECONDS = 600
LEASE_RENEW = 120
LEASE_BYTES = 1024  # a lease object is one short JSON line; nothing more of one is read
# An expiry further ahead than this (or not a finite number) was not written by a holder
# renewing every LEASE_RENEW seconds: the lease is garbage, taken over, never quoted.
LEASE_HORIZON = 365 * 24 * 3600


class BucketLease:
    """``with BucketLease(location, "packed"):`` holds a dataset in a bucket, which has no
    flock: the lease is an object created only if absent (a conditional PUT, ``If-None-Match:
    *``), naming its holder and its expiry, renewed in the background (``If-Match`` its own
    ETag) and deleted on exit.

    A lease that has expired, or that names a process of this host that no longer runs (a
    run killed with -9), is taken over with one warning; a live one is LockedError naming
    its holder.  ``check()`` raises LockedError when a renewal found the lease taken: the
    holder then must not commit.
    """

    def __init__(self, lease: Any, activity: str, seconds: int = LEASE_SECONDS):
        self.lease = lease  # a storage.Location of a store (``put``, ``delete``)
        self.activity = activity
        self.seconds = seconds
        self.token = uuid.uuid4().hex
        self.etag: str | None = None
        self.lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _body(self) -> bytes:
        holder = (f"pid {os.getpid()} on {socket.gethostname()} since "
                  f"{datetime.now().isoformat(timespec='seconds')}")
        return json.dumps({"holder": holder, "token": self.token,
                           "expires": time.time() + self.seconds}).encode()

    def _put(self, if_match: str | None = None) -> str:
        """The lease written: created where there is none (``if_match`` None), else over the
        lease of that ETag."""
        etag = self.lease.put(self._body(), if_match=if_match, if_absent=if_match is None)
        if not etag:
            raise UnexpectedAnswer(str(self.lease))
        return etag

    def _read(self) -> tuple[dict[str, Any], str] | None:
        """The lease there now (its fields, its ETag); None when there is none."""
        try:  # any size: no more than LEASE_BYTES of it is read
            with self.lease.open_guarded(1 << 62) as handle:
                raw = handle.pread(min(handle.size, LEASE_BYTES), 0)
                etag = handle.head.get("ETag")
        except FileNotFoundError:
            return None
        except Refused:  # a prefix ("directory") of that name: no lease of ours
            return {}, ""
        try:
            fields = json.loads(raw)
            if not isinstance(fields, dict):
                fields = {}
        except (ValueError, RecursionError):  # 1,024 bytes of "[" nest past Python's limit
            fields = {}
        return fields, str(etag or "")

    def __enter__(self) -> BucketLease:
        failure = ""
        for _ in range(3):  # a race with another taker: look again, a few times
            try:
                self.etag = self._put()
                break
            except UnexpectedAnswer as error:  # a 200 without an ETag: not S3 as we know it
                raise OSError(errno.EIO, "cannot create the lease: the store answered "
                              "something unexpected (not an S3 answer: check the endpoint)",
                              error.url) from None
            except Exception as error:  # noqa: BLE001 - 412 (it exists) or a failure: look
                failure = "no such bucket" if isinstance(error, FileNotFoundError) \
                    else scrub(getattr(error, "strerror", None) or str(error)
                               or type(error).__name__)
                found = self._read()
            if found is None:
                continue
            fields, etag = found
            if fields.get("token") == self.token:  # our PUT landed; its answer was lost
                self.etag = etag
                break
            if failure and not _precondition(failure) and (not etag or "token" not in fields):
                # neither "it exists" nor a lease there: a store that does not speak S3
                raise OSError(errno.EIO, "cannot create the lease: the store answered "
                              f"something unexpected ({cut(failure, 120)})", str(self.lease))
            failure = ""
            holder = _lease_holder(fields)
            if not _stale(fields):
                raise LockedError(f"{_dataset_of(self.lease)} is being "
                                  f"{self.activity} by {holder}; its lease expires in "
                                  f"{max(0, int(_expires(fields) - time.time()))} s")
            try:
                self.etag = self._put(etag)
            except Exception:  # noqa: BLE001 - another taker was first: look again
                continue
            log.warning("taking over the lease of a run that ended without releasing it (%s)",
                        holder)
            break
        else:
            if failure:  # the store refused the PUT itself: say why
                raise OSError(errno.EIO, f"cannot create the lease: {failure}", str(self.lease))
            raise LockedError(f"{_dataset_of(self.lease)}: could not take its lease (another "
                              "run is taking it); rerun")
        self._thread = threading.Thread(target=self._renew, name="lease", daemon=True)
        self._thread.start()
        return self

    def _renew(self) -> None:
        while not self._stop.wait(min(LEASE_RENEW, self.seconds / 5)):
            try:
                self.etag = self._put(self.etag)
            except Exception:  # noqa: BLE001 - taken over, or the store failed for good
                found = self._read_quietly()
                if found is None or found[0].get("token") != self.token:
                    self.lost = True
                    return

    def _read_quietly(self) -> tuple[dict[str, Any], str] | None:
        try:
            return self._read()
        except OSError:
            return ({"token": self.token}, self.etag or "")  # unknown: try again later

    def check(self) -> None:
        """LockedError when the lease was lost (taken over after it expired)."""
        if self.lost:
            raise LockedError(f"{_dataset_of(self.lease)}: this run's lease was taken over "
                              "(it could not be renewed in time); nothing was committed")

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.etag is not None and not self.lost:
            try:
                self.lease.delete()
            except OSError as error:  # it expires anyway
                log.warning("could not release the lease %s: %s", self.lease, error.strerror)


def _precondition(failure: str) -> bool:
    """Whether a failed conditional PUT failed on its condition (412: the lease exists)."""
    return any(word in failure for word in ("pre-condition", "PreconditionFailed", "412"))


def _dataset_of(lease: Any) -> str:
    return str(lease).rsplit(f"/{STATE_DIR}/", 1)[0]


class UnexpectedAnswer(Exception):
    """A store that answered a PUT with something that is not S3's answer (no ETag)."""

    def __init__(self, url: str):
        super().__init__(url)
        self.url = url


def _expires(fields: dict[str, Any]) -> float:
    """When the lease expires; 0 (expired: garbage) unless a finite number within
    LEASE_HORIZON of now (``Infinity``, ``NaN``, 1e300: not a holder's)."""
    value = fields.get("expires")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0.0
    try:
        value = float(value)
    except OverflowError:  # an integer of 400 digits
        return 0.0
    if not math.isfinite(value) or value > time.time() + LEASE_HORIZON:
        return 0.0
    return value


def _lease_holder(fields: dict[str, Any]) -> str:
    holder = fields.get("holder")
    if isinstance(holder, str) and HOLDER.fullmatch(holder):
        return holder
    return "an unknown holder: its lease holds something shardsmith did not write"


def _stale(fields: dict[str, Any]) -> bool:
    """Expired, or held by a process of this host that no longer runs."""
    if _expires(fields) < time.time():
        return True
    holder = fields.get("holder")
    match = re.fullmatch(r"pid (\d{1,10}) on (\S+) since .*", holder) \
        if isinstance(holder, str) else None
    if match is None or match.group(2) != socket.gethostname():
        return False
    pid = int(match.group(1))
    if pid == 0:  # no process's: os.kill(0, 0) asks about this process's own group
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # OverflowError: past any pid (10 digits)
        return True
    except OSError:
        return False
    return False
