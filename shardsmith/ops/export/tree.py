"""The folder an export is written into (``DEST/vN.partial``): files created new, never
written through a name that is there already (it may be a hard link into the current
version), folders checked to be real folders (a link planted in place of ``images/`` would
take the files out of DEST)."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import stat
import sys
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from pathlib import Path

from ...atomic import fsync_directory, naming
from ...door import FOLDER_FLAGS, Refused, kind_of, walk_folders
from ...errors import ManifestError, OutputStateError
from ...progress import Progress
from .record import ExportedFile, ExportedShard

CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
# An fsync of a small file waits on the filesystem's journal, not on the CPU, and concurrent
# ones share a commit: on ext4, 4,000 files of 4 kB took 4.5 s one after another and 0.78 s
# from 32 threads (0.55 s from 64), on a 2-core machine.
SYNC_THREADS = 32
WRITE_AHEAD = 64 << 20  # bytes given to ``write_later``'s threads and not yet written, at most
# ``linking``: threads, each given a shard's files at a time.  A link waits in the kernel with
# the GIL released (~10 us); threads link side by side, each into both of YOLO's folders.
LINK_THREADS = 4
# Not linked, the group made from its shard instead: the name is gone or is a folder there
# (EPERM, EISDIR), or is on another file system (a version folder someone mounted: every run
# would fail alike).
NOT_A_FILE = frozenset((errno.ENOENT, errno.EPERM, errno.EACCES, errno.EISDIR, errno.EXDEV))


def _load_syncfs():
    """Linux's ``syncfs(2)`` from the C library, None elsewhere (or where it is missing)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        function = libc.syncfs
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int
    return function


_SYNCFS = _load_syncfs()


class ExportTree:
    """Writes and links files under ``root``; remembers what to fsync before the commit."""

    def __init__(self, root: Path):
        self.root = root
        self._folders: set[str] = set()
        self.written: list[str] = []
        # every sample file this run writes (``write_later``): a second write of one (two
        # samples of one key) is refused, never made over the first
        self._claimed: set[str] = set()
        self._ahead: deque[tuple[Future[ExportedFile], int]] = deque()  # ``write_later``'s
        self._ahead_bytes = 0
        # (source root, relative folder) -> descriptors of it there and here (``link_samples``)
        self._link_folders: dict[tuple[Path, str], tuple[int, int]] = {}
        # A folder this run made holds only what it writes: no leftovers to look for (the
        # walk took 0.24 s of a 2.2 s re-export of 2,020 samples).
        self.fresh = not os.path.lexists(root)
        self.folder("")

    def folder(self, relpath: str) -> Path:
        """``root/relpath`` as a real folder, made where missing (each part checked once)."""
        if relpath in self._folders:
            return self.root / relpath
        if relpath:
            parent, _, _ = relpath.rpartition("/")
            self.folder(parent)
        path = self.root / relpath
        try:
            os.mkdir(path)
        except FileExistsError:
            pass
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode):
            raise OutputStateError(f"{path}: {kind_of(info.st_mode)} where the export makes a "
                                   "folder; move it away and rerun (it is not removed)")
        self._folders.add(relpath)
        return path

    def _clear(self, path: Path) -> None:
        """Make room for a new file at ``path``: a regular file of an earlier try goes (only
        its name: another name of it stays); anything else is refused."""
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return
        if not stat.S_ISREG(info.st_mode):
            raise OutputStateError(f"{path}: {kind_of(info.st_mode)} where the export writes "
                                   "a file; move it away and rerun (it is not removed)")
        os.unlink(path)

    def write(self, relpath: str, data: bytes) -> ExportedFile:
        parent, _, _ = relpath.rpartition("/")
        if parent not in self._folders:
            self.folder(parent)
        # A plain string and no look first: the create refuses a name that is there (then it
        # is cleared and created again); a Path and an lstat a file were a fifth of the time
        # spent writing 20,000 small files.
        path = os.path.join(self.root, relpath)
        try:
            fd = os.open(path, CREATE, 0o644)
        except FileExistsError:
            self._clear(Path(path))
            fd = os.open(path, CREATE, 0o644)
        try:
            with naming(path):
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                inode = os.fstat(fd).st_ino  # what a later export links only as itself
        finally:
            os.close(fd)
        self.written.append(path)
        return ExportedFile(relpath, len(data), inode)

    def write_later(self, pool: Executor, relpath: str, data: bytes) -> Future[ExportedFile]:
        """``write`` on one of ``pool``'s threads: its folders are made here first (``folder``
        is not for threads), the file's creation, writing and hashing there.  A create waits
        in the kernel with the GIL released (10,000 files of 5 kB: 2.4 to 4.7 s of system
        time on this 2-core machine), so the samples after it are parsed meanwhile."""
        if relpath in self._claimed:
            raise ManifestError(f"{self.root / relpath}: two samples of the dataset give this "
                                "file in one export (a sample key twice?): it is not written "
                                "over; nothing was switched (shardsmith verify)")
        self._claimed.add(relpath)
        parent, _, _ = relpath.rpartition("/")
        if parent not in self._folders:
            self.folder(parent)
        # the bytes handed to threads and not yet written stay bounded: the oldest write is
        # waited for (its error raised here) past WRITE_AHEAD bytes in flight
        while self._ahead and self._ahead_bytes + len(data) > WRITE_AHEAD:
            done, size = self._ahead.popleft()
            self._ahead_bytes -= size
            done.result()
        future = pool.submit(self.write, relpath, data)
        self._ahead.append((future, len(data)))
        self._ahead_bytes += len(data)
        return future

    @contextlib.contextmanager
    def linking(self, source_root: Path, groups: list[ExportedShard],
                progress: Progress) -> Iterator[Callable[[], list[ExportedShard]]]:
        """Hard-link the files of each of ``groups`` (a shard's samples) from the export folder
        ``source_root`` by a few threads, while the caller goes on (a link waits in the
        kernel, the GIL released: the changed shards are read meanwhile).  Yields a function
        that waits for the links and returns the groups all of whose files are now here as
        ``write`` made them (``as_written``).  A group with one file that is not so in the
        previous version (a link, a fifo, a file cut short or made executable there, a hard
        link to another file) is not returned: its shard is read again and every file of it
        made anew.  Leaving the block waits for every link."""
        try:
            for parent in {file.path.rpartition("/")[0] for group in groups
                           for sample in group.samples for file in sample.files}:
                self._link_folder(source_root, parent)  # before the threads link

            def link_group(group: ExportedShard) -> bool:
                done = self._link_group(source_root, group)
                if done:
                    progress.update(len(group.samples))
                return done

            with ThreadPoolExecutor(LINK_THREADS, thread_name_prefix="shardsmith-link") as pool:
                futures = [pool.submit(link_group, group) for group in groups]
                yield lambda: [group for group, future in zip(groups, futures, strict=True)
                               if future.result()]
        finally:
            self._close_links()

    def _link_group(self, source_root: Path, group: ExportedShard) -> bool:
        """``linking`` of one group, on one thread: whether every file of it is linked."""
        # linkat and fstatat by name relative to an open descriptor of each folder: 9,000
        # links of one folder took 0.13 to 0.14 s so, 0.16 to 0.18 s by full paths with an
        # lstat each.  The look after the link stays (~2 us): a link made without following
        # a symbolic link is whatever the source name is.
        folders, look, fresh = self._link_folders, os.stat, self.fresh
        for sample in group.samples:
            for file in sample.files:
                parent, _, name = file.path.rpartition("/")  # ``layouts.paths_fit`` passed
                source_fd, target_fd = folders[source_root, parent]
                if source_fd < 0:
                    return False  # no such folder in the previous version: nothing to link
                if not fresh:  # an earlier try's file there: its name goes (only ours)
                    self._clear(self.root / file.path)
                try:
                    _linkat(source_fd, target_fd, name, self.root, file.path)
                except OSError as exc:
                    if exc.errno in NOT_A_FILE:  # gone, a folder, another file system
                        return False
                    raise
                if not as_written(look(name, dir_fd=target_fd, follow_symlinks=False),
                                  file.bytes, file.inode):
                    os.unlink(name, dir_fd=target_fd)  # a link to what is there instead
                    return False
        return True

    def _link_folder(self, source_root: Path, parent: str) -> tuple[int, int]:
        """Descriptors of ``source_root/parent`` (-1 where it is no folder) and of our own
        ``parent``, made a real folder where missing; kept until ``linking`` ends."""
        folders = self._link_folders.get((source_root, parent))
        if folders is not None:
            return folders
        target = self.folder(parent)
        try:
            # a folder of the previous version swapped for a link would lend files from
            # outside DEST: no link followed anywhere on the way
            source_fd = walk_folders(os.open(source_root, FOLDER_FLAGS),
                                     parent.split("/") if parent else (),
                                     f"{source_root}/{parent}")
        except (OSError, Refused):  # missing, not a folder, a link, not ours to read
            folders = (-1, -1)
        else:
            try:
                folders = (source_fd, os.open(target, FOLDER_FLAGS))
            except BaseException:
                os.close(source_fd)
                raise
        self._link_folders[(source_root, parent)] = folders
        return folders

    def _close_links(self) -> None:
        """Close the folder descriptors ``_link_folder`` opened."""
        folders, self._link_folders = self._link_folders, {}
        for pair in folders.values():
            for fd in pair:
                if fd >= 0:
                    os.close(fd)

    def holds(self, file: ExportedFile) -> bool:
        """``file`` is there as ``write`` made it (an interrupted export's)."""
        self.folder(file.path.rpartition("/")[0])
        return still_written(self.root, file)

    def sync(self) -> None:
        """Make every file written and every folder durable before the version is switched
        to: on Linux one ``syncfs(2)`` of the filesystem (4,000 files of 2,000 samples: 0.78 s
        of fsyncs from 32 threads on a 2-core machine, one syncfs 0.06 to 0.21 s); elsewhere,
        or where it fails, an fsync of each file and folder from a pool of threads
        (``SYNC_THREADS``), the first error raised once all have finished."""
        if self._syncfs():
            return
        with ThreadPoolExecutor(max_workers=SYNC_THREADS,
                                thread_name_prefix="shardsmith-fsync") as pool:
            list(pool.map(_fsync_file, self.written))  # list(): raises the first error
            list(pool.map(fsync_directory, [self.root / relpath for relpath in self._folders]))

    def _syncfs(self) -> bool:
        """One ``syncfs`` of the filesystem holding ``root``; False when there is none or it
        reports an error (the fsyncs one by one then say which file fails, if one does)."""
        if _SYNCFS is None:
            return False
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        try:
            return _SYNCFS(fd) == 0
        finally:
            os.close(fd)

    def remove_unnamed(self, named: set[str]) -> None:
        """Remove files an earlier try with other samples left that this export does not
        name (regular files only, the export's own leftovers).  Anything else there that it
        does not name (a link, to a folder too; a FIFO) is refused, not removed: the new
        version would hold it, as no export makes it."""
        for directory, folders, files in os.walk(self.root):
            relative = os.path.relpath(directory, self.root)
            if relative == ".":
                folders[:] = [name for name in folders if name != ".export"]
                relative = ""
            for name in files + folders:  # a link to a folder is among the folders, unwalked
                relpath = f"{relative}/{name}" if relative else name
                path = Path(directory) / name
                mode = os.lstat(path).st_mode
                if relpath in named or stat.S_ISDIR(mode):
                    continue
                if not stat.S_ISREG(mode):
                    raise OutputStateError(f"{path}: {kind_of(mode)} no export makes; move it "
                                           "away and rerun (it is not removed)")
                os.unlink(path)


def _and_above(relpath: str) -> list[str]:
    """``a/b/c`` -> ``a/b/c``, ``a/b``, ``a`` (the root, "", not among them)."""
    folders = []
    while relpath:
        folders.append(relpath)
        relpath = relpath.rpartition("/")[0]
    return folders


def real_folders(root: Path, relpaths: set[str]) -> bool:
    """Every folder of ``relpaths`` in ``root``, and every one above it, is a real folder (an
    ``lstat`` of each: a file's own ``lstat`` sees through links on its way)."""
    above = {folder for relpath in relpaths for folder in _and_above(relpath)}
    for relpath in above:
        try:
            if not stat.S_ISDIR(os.lstat(root / relpath).st_mode):
                return False
        except FileNotFoundError:
            return False
    return True


def still_written(root: Path, file: ExportedFile) -> bool:
    """``root/file.path`` is the file the export wrote (``as_written``): an ``lstat``, its
    bytes not read."""
    try:
        return as_written(os.lstat(root / file.path), file.bytes, file.inode)
    except FileNotFoundError:
        return False


def as_written(info: os.stat_result, size: int, inode: int) -> bool:
    """``info`` is of the file an export wrote as ``size`` bytes in inode ``inode`` (its
    record's): regular, that size, that inode, and the permissions a create with 0o644 gives
    under some umask (0o600 to 0o644).  A file made unreadable (``chmod 000``) or executable
    in the previous version is not linked: the new version would share its mode, as a fresh
    export would not.  Nor is one swapped for a hard link to another file (the same size and
    mode, another inode): the new version would hold a file it did not write, shared with a
    name outside DEST.  The inode is compared, not the link count: a file unchanged through
    several kept versions has a link in each, so no count tells such a link from ours."""
    mode = info.st_mode
    return (info.st_ino == inode and mode & 0o170000 == stat.S_IFREG and info.st_size == size
            and mode & 0o600 == 0o600 and not mode & 0o7133)  # 0o7133: the bits 0o644 lacks


def _linkat(source_fd: int, target_fd: int, name: str, root: Path, relpath: str) -> None:
    """Hard-link ``name`` of one open folder into the other, following no link; an error
    names ``root/relpath`` (the call knew a bare name: no inode left, a read-only disk), its
    type kept (``OSError`` makes ``FileExistsError`` of EEXIST, and so on)."""
    try:
        os.link(name, name, src_dir_fd=source_fd, dst_dir_fd=target_fd, follow_symlinks=False)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, f"{root}/{relpath}") from None


def _fsync_file(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:  # the journal, gone once the record is written
        return
    try:
        with naming(path):
            os.fsync(fd)
    finally:
        os.close(fd)
