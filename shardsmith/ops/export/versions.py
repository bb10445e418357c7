"""An export destination: ``DEST/vN/`` per exported version, ``DEST/current`` a relative link
to the newest, ``DEST/vN.partial/`` while one is written.

The commit point is the switch of ``current`` (a new link under a temporary name, renamed over
the old one): a trainer opening ``DEST/current`` sees a whole version, the old one or the new
one.  Only folders that carry an export record are ever deleted; anything else in DEST makes
the export refuse, naming it (DEST may be someone's folder).
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from ...atomic import fsync_directory
from ...door import kind_of
from ...errors import OutputStateError
from .record import RECORD_DIR, ExportRecord, read_record

CURRENT = "current"
VERSION = re.compile(r"v(?P<number>[1-9][0-9]{0,15})(?P<partial>\.partial)?")
OURS = (RECORD_DIR, CURRENT)


@dataclass
class Destination:
    """What DEST holds: exported versions (number -> record), partial folders, ``current``."""

    root: Path
    versions: dict[int, ExportRecord]
    partials: list[int]
    current: int | None

    def folder(self, number: int) -> Path:
        return self.root / f"v{number}"

    def partial(self, number: int) -> Path:
        return self.root / f"v{number}.partial"


def check_destination(root: Path) -> None:
    """DEST is a folder (or not there yet), not a link to one: refused otherwise."""
    try:
        info = os.lstat(root)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        raise OutputStateError(f"{root}: a symbolic link; export into a real folder (the "
                               "link's target would be written instead)")
    if not stat.S_ISDIR(info.st_mode):
        raise OutputStateError(f"{root}: exists and is {kind_of(info.st_mode)}, not a folder")


def survey(root: Path, layout: str) -> Destination:
    """Read DEST: every entry must be an export's; a version of another layout is refused."""
    versions: dict[int, ExportRecord] = {}
    partials: list[int] = []
    strangers = []
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        match = VERSION.fullmatch(entry.name)
        if entry.name in OURS:
            continue
        if match is None or not entry.is_dir(follow_symlinks=False):
            strangers.append(entry.name)
            continue
        number = int(match["number"])
        if match["partial"]:
            partials.append(number)
            continue
        record = read_record(Path(entry.path))
        if record is None:
            strangers.append(entry.name)
            continue
        if record.options.layout != layout:
            raise OutputStateError(f"{root}: holds a {record.options.layout} export "
                                   f"({entry.name}); one layout per destination: export the "
                                   f"{layout} layout into another folder")
        versions[number] = record
    if strangers:
        shown = ", ".join(strangers[:3]) + (f" and {len(strangers) - 3} more"
                                            if len(strangers) > 3 else "")
        raise OutputStateError(f"{root}: holds files that are not an export ({shown}); "
                               "export into an empty folder or one that holds exports only "
                               "(nothing is removed)")
    return Destination(root, versions, partials, current_version(root, versions))


def current_version(root: Path, versions: dict[int, ExportRecord]) -> int | None:
    """The version ``current`` links to; None when there is no link (or it names a version
    that is not there: the next export replaces it)."""
    path = root / CURRENT
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISLNK(info.st_mode):
        raise OutputStateError(f"{path}: {kind_of(info.st_mode)}, where shardsmith keeps a "
                               "link to the current version; move it away and rerun (it is "
                               "not removed)")
    match = VERSION.fullmatch(os.readlink(path))
    if match is None or match["partial"] or int(match["number"]) not in versions:
        return None
    return int(match["number"])


def switch_current(root: Path, target: str) -> None:
    """Point ``current`` at ``target`` (a name in ``root``) atomically: a new link under a
    temporary name renamed over the old one."""
    tmp = root / f".{CURRENT}.{os.getpid()}.tmp"
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    os.symlink(target, tmp)
    os.replace(tmp, root / CURRENT)
    fsync_directory(root)


def publish(destination: Destination, number: int) -> None:
    """Make the finished ``vN.partial`` the current version ``vN``.

    Where ``vN`` is already there (a damaged export of the same version repaired), ``current``
    points at the finished partial folder while the old one goes, so it never names a
    half-removed folder."""
    root, partial, final = destination.root, destination.partial(number), destination.folder(
        number)
    if number in destination.versions:
        switch_current(root, partial.name)
        shutil.rmtree(final)
    os.rename(partial, final)
    fsync_directory(root)
    switch_current(root, final.name)


def remove_older(destination: Destination, keep: int) -> list[int]:
    """Delete every other exported version (a folder carrying an export record) and partial
    folders of other versions that are ours (carrying ``.export``); returns the versions."""
    removed = []
    for number in sorted(destination.versions):
        if number != keep:
            shutil.rmtree(destination.folder(number))
            removed.append(number)
    for number in destination.partials:
        folder = destination.partial(number)
        if number != keep and (folder / RECORD_DIR).is_dir():
            shutil.rmtree(folder)
    fsync_directory(destination.root)
    return removed
