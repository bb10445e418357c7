"""The output directory before a pack: the dataset to build on, or what a fresh build may
remove (shardsmith's own files only; anything else is refused).

Ours means a regular file under a name we write: a folder named ``train-000000.tar`` or
``.keep.tmp`` (or a link, a FIFO) is someone else's, whatever its name, and is never removed.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from ..config import Config
from ..dataset.manifest import (
    ANNOTATION_RULES,
    MANIFEST_NAME,
    STATE_DIR,
    Manifest,
    is_dataset_file,
    is_derived_file,
    read_manifest,
)
from ..errors import OutputStateError
from ..text import shown


def previous_dataset(output: Path, config: Config) -> Manifest | None:
    """The finished dataset in ``output`` to build on, or None for a fresh build.

    Raises OutputStateError when it was packed with other settings (unless --overwrite):
    a class list that only grew (``source.annotations.classes`` appended to) is the same
    settings, one that moved or lost a class is refused, saying why.
    """
    if config.run.overwrite or not (output / MANIFEST_NAME).exists():
        return None
    manifest = read_manifest(output)
    if manifest.fingerprint != config.fingerprint():
        before = configured_classes(manifest)
        if before is None or manifest.fingerprint != config.fingerprint(before):
            changed = ", ".join(_changed_keys(manifest.config, config.dataset_settings()))
            raise OutputStateError(
                f"{output} holds a dataset packed with different settings "
                f"({changed or 'version'}); pass --overwrite to replace it, or choose a new "
                "output directory"
            )
        check_classes_appended(output, before, config.source.annotations.classes)
    if manifest.format != config.output.format:
        raise OutputStateError(f"{output} holds {manifest.format} shards; pass --overwrite "
                               "to replace them")
    if manifest.rules is not None and manifest.rules > ANNOTATION_RULES:
        raise OutputStateError(
            f"{output} holds objects derived by annotation rules {manifest.rules}, newer than "
            f"this shardsmith's {ANNOTATION_RULES}; pack it with a newer release (or pass "
            "--overwrite to rebuild it with these rules)")
    return manifest


def configured_classes(manifest: Manifest) -> tuple[str, ...] | None:
    """The ``source.annotations.classes`` a dataset was packed with (its manifest's
    ``config``), or None when the settings it records hold no list of names there."""
    settings: Any = manifest.config
    for key in ("source", "annotations"):
        if not isinstance(settings, dict):
            return None
        settings = settings.get(key, {})
    if not isinstance(settings, dict):
        return None
    classes = settings.get("classes", [])
    if not isinstance(classes, list) or not all(isinstance(name, str) for name in classes):
        return None
    return tuple(classes)


def check_classes_appended(output: Path, before: tuple[str, ...],
                           now: tuple[str, ...]) -> None:
    """Refuse a class list that does not begin with the dataset's (OutputStateError): a
    YOLO id or an index-mask value is a position in it, and the packed samples' object ids
    were given by it, so a class moved or removed would change what every id means."""
    if tuple(now[: len(before)]) == tuple(before):
        return
    at = next((number for number, (old, new) in enumerate(zip(before, now, strict=False))
               if old != new), min(len(before), len(now)))
    found = shown(now[at], 40) if at < len(now) else "nothing"
    raise OutputStateError(
        f"{output}: source.annotations.classes must begin with the dataset's "
        f"{len(before)} classes in their order, but YOLO id {at} is {found}, not "
        f"{shown(before[at], 40)}: annotation files name classes by position and packed "
        "samples keep their ids, so ids must not move; append new classes at the end, or "
        "pass --overwrite to rebuild")


def _changed_keys(old: dict, new: dict, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two settings trees."""
    changed = []
    for key in sorted(set(old) | set(new)):
        before, after = old.get(key), new.get(key)
        if isinstance(before, dict) and isinstance(after, dict) and key != "splits":
            changed += _changed_keys(before, after, f"{prefix}{key}.")
        elif before != after:
            changed.append(f"{prefix}{key}")
    return changed


def clear_previous_output(output: Path) -> None:
    """Remove an earlier dataset's files (ours only) before a fresh run; refuse foreign files."""
    ours, foreign = [], []
    for entry in sorted(output.iterdir()):
        name = entry.name
        if name == STATE_DIR:
            continue  # holds our lock; the journal in it is started afresh
        try:
            mode = os.lstat(entry).st_mode
        except FileNotFoundError:
            continue
        regular = stat.S_ISREG(mode)
        our_name = name == MANIFEST_NAME or is_dataset_file(name) or is_derived_file(name) \
            or (name.startswith(".") and name.endswith(".tmp"))
        if our_name and regular:
            ours.append(entry)
        else:
            foreign.append(f"{name}/" if stat.S_ISDIR(mode) else name)
    if foreign:
        shown = ", ".join(foreign[:3]) + (" ..." if len(foreign) > 3 else "")
        raise OutputStateError(
            f"{output} is not empty and holds files shardsmith did not write ({shown}); "
            "choose an empty or new output directory"
        )
    (output / MANIFEST_NAME).unlink(missing_ok=True)  # first: the directory stops being one
    for entry in ours:
        entry.unlink(missing_ok=True)
