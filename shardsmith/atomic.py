"""Publish files atomically: write under a temporary name, fsync, rename (docs/design.md,
invariant 2).

The temporary file is created new (``O_EXCL``, ``O_NOFOLLOW``): a link planted under its name is
never written through.  A folder where a temporary or final file of ours belongs is someone
else's: it is refused in one line, never removed, and ``remove_stale_tmp`` removes only regular
files.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from .door import chunks, kind_of
from .errors import OutputStateError, ShardsmithError

TMP_SUFFIX = ".tmp"


def tmp_path_for(final: Path) -> Path:
    """Hidden temporary name in the same directory (same filesystem, so rename is atomic)."""
    return final.with_name(f".{final.name}.{os.getpid()}{TMP_SUFFIX}")


class HashingFile:
    """A binary file under a temporary name that counts and hashes what is written to it.

    An OSError (a full disk, say) names the file it was writing.
    """

    def __init__(self, final: Path):
        self.final = final
        self.tmp = tmp_path_for(final)
        check_replaceable(final)
        self._handle = open_new(self.tmp)
        self._sha256 = hashlib.sha256()
        self.bytes_written = 0

    def write(self, data: bytes) -> int:
        with naming(self.final):
            self._handle.write(data)
        self._sha256.update(data)
        self.bytes_written += len(data)
        return len(data)

    def tell(self) -> int:
        return self.bytes_written

    def flush(self) -> None:
        """What was written, readable under the temporary name."""
        with naming(self.final):
            self._handle.flush()

    def publish(self) -> str:
        """fsync, rename to the final name, and return the sha256 of the content."""
        with naming(self.final):
            self._handle.flush()
            os.fsync(self._handle.fileno())
            self._handle.close()
            os.replace(self.tmp, self.final)
        return self._sha256.hexdigest()

    def discard(self) -> None:
        """Close and delete the temporary file; nothing appears under the final name."""
        try:
            self._handle.close()  # may flush into a full disk: the file goes anyway
        except OSError:
            pass
        self.tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def naming(path: Path | str) -> Iterator[None]:
    """Give an OSError without a file name (a write into a full disk) the name of ``path``."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise


def check_replaceable(final: Path) -> None:
    """Raise OutputStateError when ``final`` is a folder (a rename onto it would fail, and it is
    not ours to remove); a file or a link there is replaced by the rename, not written through."""
    try:
        info = os.lstat(final)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(final)) from None
    if stat.S_ISDIR(info.st_mode):
        raise OutputStateError(f"{final}: a folder where shardsmith writes its file "
                               f"{final.name}; move it away and rerun (it is not removed)")


def check_output_file(path: Path | str, folder: bool = True) -> Path:
    """The named output file a command writes (``sheet -o``, ``report -o``, ``pack
    --report``) as a Path, after refusing (OutputStateError, exit 2) what it must not replace.

    Where ``check_replaceable`` lets the rename replace a link (our own folders), a path a
    person named is stricter: anything there that is not a regular file (a link, a FIFO, a
    device, a socket, a folder; by ``lstat``) is left untouched and refused, as are an empty
    name and (``folder``) a missing parent folder (named, not our temporary file in it).
    """
    if not str(path):  # Path("") would be "." (the working folder)
        raise OutputStateError("the output file name is empty: give a file to write")
    final = Path(path)
    try:
        info = os.lstat(final)
    except (FileNotFoundError, NotADirectoryError):  # the folder is checked below
        info = None
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(final)) from None
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise OutputStateError(f"{final}: {kind_of(info.st_mode)} where the output file "
                               "belongs; shardsmith replaces only a regular file (it is not "
                               "touched): name a file")
    parent = final.parent
    if folder and not parent.is_dir():
        what = "not a folder" if os.path.lexists(parent) else "no such folder"
        raise OutputStateError(f"{parent}: {what}; create the folder for {final.name} first")
    return final


def open_new(path: Path) -> BinaryIO:
    """A new file at ``path`` for writing, never a link followed or an existing file reused.

    A regular file already there is a temporary of an earlier run that had the same process id:
    it is replaced.  Anything else (a folder, a link, a FIFO) raises OutputStateError.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    with naming(path):
        for _ in range(2):
            try:
                return os.fdopen(os.open(path, flags, 0o666), "wb")
            except FileExistsError:
                info = os.lstat(path)
                if not stat.S_ISREG(info.st_mode):
                    raise OutputStateError(
                        f"{path}: {kind_of(info.st_mode)} where shardsmith writes a temporary "
                        "file; move it away and rerun (it is not removed)") from None
                os.unlink(path)
        return os.fdopen(os.open(path, flags, 0o666), "wb")


class CopyMismatch(ShardsmithError):
    """A copy that does not hold what was expected of it (its ``size`` or ``sha256``): its
    temporary file is removed and nothing is published.  Each caller says what it means."""

    exit_code = 2  # a source that is not what its manifest says, as a ManifestError

    def __init__(self, final: Path, size: int, sha256: str):
        super().__init__(f"{final}: the copy holds {size:,} bytes of sha256 {sha256[:12]}..., "
                         "not what was expected")
        self.size, self.sha256 = size, sha256


def copy_verified(handle: Any, final: Path, size: int | None = None, sha256: str | None = None,
                  advance: Callable[[int], object] | None = None, sync: bool = True) -> str:
    """Copy the open file ``handle`` (a ``door.OpenFile`` or an object's ``ObjectFile``) to
    ``final``: under a temporary name in its folder, hashed while copied (``advance`` told each
    chunk's length; it may raise to stop the copy), fsynced (``sync``), checked against the
    ``size`` and ``sha256`` given (CopyMismatch) and renamed; returns the sha256.  An OSError
    of a write names ``final``; one of a read is the source's own."""
    tmp = tmp_path_for(final)
    digest, copied, out = hashlib.sha256(), 0, None
    try:
        with naming(final):
            out = open_new(tmp)
        for data in chunks(handle, handle.size):
            with naming(final):
                out.write(data)
            digest.update(data)
            copied += len(data)
            if advance is not None:
                advance(len(data))
        with naming(final):
            out.flush()
            if sync:
                os.fsync(out.fileno())
            out.close()
        if copied != (handle.size if size is None else size) \
                or sha256 not in (None, digest.hexdigest()):
            raise CopyMismatch(final, copied, digest.hexdigest())
        os.replace(tmp, final)
    except BaseException:
        if out is not None:
            with contextlib.suppress(OSError):  # flushing into a full disk: the error is above
                out.close()
        discard_tmp(tmp)
        raise
    return digest.hexdigest()


def discard_tmp(path: Path) -> None:
    """Remove the temporary file ``path`` if it is a regular file (what ``open_new`` made);
    anything else under its name is not ours."""
    try:
        if stat.S_ISREG(os.lstat(path).st_mode):
            os.unlink(path)
    except FileNotFoundError:
        pass


def write_bytes_atomic(final: Path, data: bytes) -> str:
    """Write ``data`` to ``final`` atomically; returns its sha256."""
    handle = HashingFile(final)
    try:
        handle.write(data)
        digest = handle.publish()
    except BaseException:
        handle.discard()
        raise
    fsync_directory(final.parent)
    return digest


def write_json_atomic(final: Path, payload: Any) -> str:
    """Deterministic JSON (sorted keys, 1-space indent) written atomically."""
    text = json.dumps(payload, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    return write_bytes_atomic(final, text.encode("utf-8"))


def fsync_directory(directory: Path) -> None:
    """Make renames in ``directory`` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_stale_tmp(directory: Path) -> int:
    """Delete temporary files left by an interrupted run; returns how many were removed.

    Only regular files: a folder or a link under such a name is not something we wrote."""
    removed = 0
    if directory.is_dir():
        for path in directory.glob(f".*{TMP_SUFFIX}"):
            try:
                if not stat.S_ISREG(os.lstat(path).st_mode):
                    continue
            except FileNotFoundError:
                continue
            path.unlink(missing_ok=True)
            removed += 1
    return removed

