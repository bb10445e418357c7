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
from ...text import shown
from .layouts import check_record_paths
from .record import (
    RECORD_CAP,
    RECORD_DIR,
    RECORD_NAME,
    ExportRecord,
    RecordHead,
    read_head,
    read_record,
)

CURRENT = "current"
VERSION = re.compile(r"v(?P<number>[1-9][0-9]{0,15})(?P<partial>\.partial)?")
# an old version on its way out: renamed (atomic) before it is deleted, so a deletion cut short
# leaves a name no export reads, removed by the next run
REMOVING = re.compile(r"\.v[1-9][0-9]{0,15}\.removing")
# the new ``current`` link of a switch killed before its rename (``switch_current``): ours when
# it is a link to a version's name, removed by the next run
SWITCHING = re.compile(r"\.current\.[0-9]{1,10}\.tmp")
OURS = (RECORD_DIR, CURRENT)


@dataclass
class Destination:
    """What DEST holds: exported versions (number -> its record's head), partial folders,
    ``current``."""

    root: Path
    versions: dict[int, RecordHead]
    partials: list[int]
    current: int | None
    removing: list[str]  # ``.vN.removing`` folders a deletion cut short left
    switching: list[str]  # ``.current.PID.tmp`` links a switch cut short left

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


def survey(root: Path, layout: str, cap: int = RECORD_CAP) -> Destination:
    """Read DEST: every entry must be an export's; a version of another layout is refused.
    Each version's record is read for its head (``cap``: the largest record read)."""
    versions: dict[int, RecordHead] = {}
    partials: list[int] = []
    strangers = []
    removing = []
    switching = []
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        match = VERSION.fullmatch(entry.name)
        if entry.name in OURS:
            continue
        if REMOVING.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False):
            removing.append(entry.name)
            continue
        if SWITCHING.fullmatch(entry.name) and entry.is_symlink() \
                and VERSION.fullmatch(os.readlink(entry.path)):
            switching.append(entry.name)
            continue
        if match is None or not entry.is_dir(follow_symlinks=False):
            strangers.append(entry.name)
            continue
        number = int(match["number"])
        if match["partial"]:
            if _holds_a_record_folder(Path(entry.path)) is False:  # ``.export``: not ours
                strangers.append(entry.name)
            else:
                partials.append(number)
            continue
        head = read_head(Path(entry.path), cap)
        if head is None:
            strangers.append(entry.name)
            continue
        if head.options.layout != layout:
            raise OutputStateError(f"{root}: holds a {head.options.layout} export "
                                   f"({entry.name}); one layout per destination: export the "
                                   f"{layout} layout into another folder")
        versions[number] = head
    if strangers:
        shown = ", ".join(strangers[:3]) + (f" and {len(strangers) - 3} more"
                                            if len(strangers) > 3 else "")
        raise OutputStateError(f"{root}: holds files that are not an export ({shown}); "
                               "export into an empty folder or one that holds exports only "
                               "(nothing is removed)")
    return Destination(root, versions, partials, current_version(root, versions, partials),
                       removing, switching)


def current_version(root: Path, versions: dict[int, RecordHead],
                    partials: list[int]) -> int | None:
    """The version ``current`` links to; None when there is no link.

    A link shardsmith did not make (to anything but a ``vN`` of DEST) is refused, never
    replaced: it is someone's.  A link to ``vN.partial`` is ours: ``publish`` points there
    while it repairs a damaged ``vN``, and a run cut short there leaves it."""
    path = root / CURRENT
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISLNK(info.st_mode):
        raise OutputStateError(f"{path}: {kind_of(info.st_mode)}, where shardsmith keeps a "
                               "link to the current version; move it away and rerun (it is "
                               "not removed)")
    target = os.readlink(path)
    match = VERSION.fullmatch(target)
    number = None if match is None else int(match["number"])
    if match is not None and not match["partial"] and number in versions:
        return number
    if match is not None and match["partial"] and (number in versions or number in partials):
        return None
    raise OutputStateError(f"{path}: a link to {shown(target)}, not to an exported version "
                           "of this folder; move it away and rerun (it is not replaced)")


def current_record(destination: Destination, cap: int = RECORD_CAP) -> ExportRecord:
    """The whole record of the current version (there is one)."""
    folder = destination.folder(destination.current)
    record = read_record(folder, cap)
    if record is None:  # gone since the survey
        raise OutputStateError(f"{folder}: its export record is gone; move it away and rerun")
    return record


def check_paths(destination: Destination, record: ExportRecord) -> None:
    """Every path of the current version's ``record`` is one its layout gives its sample, and
    none is named twice: OutputStateError otherwise."""
    problem = check_record_paths(record.options, record.classes, record.object_classes,
                                 record.samples(), [file.path for file in record.shared])
    if problem is not None:
        folder = destination.folder(destination.current)
        raise OutputStateError(f"{folder / RECORD_DIR / RECORD_NAME}: {problem}: the record is "
                               f"damaged; move {folder} away and rerun")


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
        _remove(root, final)
    os.rename(partial, final)
    fsync_directory(root)
    switch_current(root, final.name)


def finish_publish(destination: Destination, cap: int = RECORD_CAP) -> bool:
    """Finish a ``publish`` cut short while it repaired a damaged ``vN``: ``current`` links to
    ``vN.partial`` only once that folder is written whole and synced, so a run that finds it
    so moves it into place before anything writes into a folder a trainer may be reading (it
    would be exported again in place).  Returns whether it did."""
    if destination.current is not None:
        return False
    try:
        match = VERSION.fullmatch(os.readlink(destination.root / CURRENT))
    except OSError:  # no link
        return False
    if match is None or not match["partial"]:
        return False
    number = int(match["number"])
    if number not in destination.partials \
            or read_head(destination.partial(number), cap) is None:
        return False
    publish(destination, number)
    return True


def remove_older(destination: Destination, current: int, keep: int) -> list[int]:
    """Delete exported versions (folders carrying an export record) but ``current`` and the
    ``keep - 1`` highest others (the one before it, when versions only grow: a training run
    started on it keeps its files),
    the partial folders of other versions that are ours (carrying ``.export``), and what a
    deletion or a switch of ``current`` cut short left; returns the versions deleted."""
    root = destination.root
    for name in destination.removing:
        shutil.rmtree(root / name)
    for name in destination.switching:
        (root / name).unlink(missing_ok=True)
    others = sorted((number for number in destination.versions if number != current),
                    reverse=True)
    removed = sorted(others[keep - 1:])
    for number in removed:
        _remove(root, destination.folder(number))
    for number in destination.partials:
        folder = destination.partial(number)
        if number != current and _holds_a_record_folder(folder):
            _remove(root, folder)
    fsync_directory(root)
    return removed


def _holds_a_record_folder(folder: Path) -> bool | None:
    """Whether ``folder`` holds a real ``.export`` folder (a link to one is not: followed, it
    had a user's ``vN.partial`` deleted whole); None when it holds no ``.export`` at all."""
    try:
        info = os.lstat(folder / RECORD_DIR)
    except FileNotFoundError:
        return None
    return stat.S_ISDIR(info.st_mode)


def _remove(root: Path, folder: Path) -> None:
    """Delete ``folder`` under a name no export reads (``.vN.removing``, an atomic rename
    first): a deletion cut short never leaves a half version where one is expected."""
    number = VERSION.fullmatch(folder.name)["number"]
    doomed = root / f".v{number}.removing"
    if os.path.lexists(doomed):
        shutil.rmtree(doomed)
    os.rename(folder, doomed)
    fsync_directory(root)
    shutil.rmtree(doomed)
