"""The folder an export is written into (``DEST/vN.partial``): files created new, never
written through a name that is there already (it may be a hard link into the current
version), folders checked to be real folders (a link planted in place of ``images/`` would
take the files out of DEST)."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from ...atomic import fsync_directory, naming
from ...door import Refused, kind_of, open_file
from ...errors import OutputStateError
from .record import ExportedFile

CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
HASH_CHUNK = 8 << 20


class ExportTree:
    """Writes and links files under ``root``; remembers what to fsync before the commit."""

    def __init__(self, root: Path):
        self.root = root
        self._folders: set[str] = set()
        self.written: list[Path] = []
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
        self.folder(parent)
        path = self.root / relpath
        self._clear(path)
        with naming(path):
            fd = os.open(path, CREATE, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
        self.written.append(path)
        return ExportedFile(relpath, len(data), hashlib.sha256(data).hexdigest())

    def link(self, source_root: Path, file: ExportedFile) -> bool:
        """Hard-link ``file`` from the export folder ``source_root``; False (nothing linked)
        when the file there is not a regular file of its recorded size."""
        source = source_root / file.path
        try:
            info = os.lstat(source)
        except FileNotFoundError:
            return False
        if not stat.S_ISREG(info.st_mode) or info.st_size != file.bytes:
            return False
        parent, _, _ = file.path.rpartition("/")
        self.folder(parent)
        target = self.root / file.path
        try:
            if os.lstat(target).st_ino == info.st_ino:
                return True
        except FileNotFoundError:
            pass
        self._clear(target)
        os.link(source, target, follow_symlinks=False)
        return True

    def holds(self, file: ExportedFile) -> bool:
        """``file`` is there with its recorded size and sha256 (an interrupted export's)."""
        path = self.root / file.path
        parent, _, _ = file.path.rpartition("/")
        self.folder(parent)
        try:
            with open_file(path, max(file.bytes, 1)) as handle:
                if handle.size != file.bytes:
                    return False
                digest, offset = hashlib.sha256(), 0
                while offset < file.bytes:
                    chunk = handle.pread(min(HASH_CHUNK, file.bytes - offset), offset)
                    if not chunk:
                        return False
                    digest.update(chunk)
                    offset += len(chunk)
        except FileNotFoundError:
            return False
        except Refused as exc:
            if exc.reason == "too_large":
                return False
            raise OutputStateError(f"{path}: {exc.detail}, where the export keeps a file; "
                                   "move it away and rerun (it is not removed)") from None
        return digest.hexdigest() == file.sha256

    def sync(self) -> None:
        """fsync every file written and every folder: the version is durable before it is
        switched to."""
        for path in self.written:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError:  # the journal, gone once the record is written
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        for relpath in sorted(self._folders, key=len, reverse=True):
            fsync_directory(self.root / relpath)

    def remove_unnamed(self, named: set[str]) -> None:
        """Remove files an earlier try with other samples left that this export does not
        name (regular files and links only: they are the export's own leftovers)."""
        for directory, folders, files in os.walk(self.root):
            relative = os.path.relpath(directory, self.root)
            if relative == ".":
                folders[:] = [name for name in folders if name != ".export"]
                relative = ""
            for name in files:
                relpath = f"{relative}/{name}" if relative else name
                path = Path(directory) / name
                if relpath not in named and stat.S_ISREG(os.lstat(path).st_mode):
                    os.unlink(path)
