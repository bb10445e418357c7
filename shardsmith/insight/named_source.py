"""The originals that ``sheet``, ``report`` and ``inspect --quality`` read again: only under a
source the user names.

A dataset directory is untrusted (docs/design.md, invariant 7), and so is the ``source`` its
manifest records: a forged manifest recording ``/`` with reject paths of its choosing would
otherwise have a contact sheet draw the start of a credentials file, or a report embed a
thumbnail of any image on the machine, in a picture that gets shared.  The path check holds
either way; what matters is who chose the root it checks against.  So originals are read
only under the source given on the command line (``--source``) or in the job file given with
``--config``; without one nothing outside the dataset is read, and one note says how to name
it (quoting the recorded source as a hint, never using it).

Under a named root every path read from the dataset is still checked
(``originals.original_path``: plain, relative, not leading out through a link) and opened one
folder at a time with no link followed (``originals.read_under_root``).  A source in a store
(``s3://``, any ``storage.BACKENDS`` scheme) is read through its location's door
(``open_guarded``), within the same caps.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from ..door import MIB, Refused, open_file
from ..errors import BadImage, ConfigError, ManifestError, SourceUnavailableError
from ..packing.originals import check_relpath, original_path, read_under_root
from ..storage import Location, is_url, location
from ..text import shown

MAX_ORIGINAL_BYTES = 512 * MIB  # a reject larger than this is shown by its reason
# Rejects whose original the sheet and the report do not read, and what the report says
# instead: nothing to see (an empty file, a folder, a link), or too much to decode.
NOT_READ = {"empty": "an empty file", "too_large": "too large to show",
            "unreadable": "unreadable", "not_a_file": "not a regular file"}


@dataclass(frozen=True)
class Originals:
    """Where originals may be read: a real local folder, a bucket prefix, or nowhere
    (``root`` None) and why, in one line."""

    root: str | Location | None
    why_not: str = ""

    def check(self, relpath: str) -> None:
        """ManifestError when ``relpath`` (from the dataset) is not a plain path under the
        root; nothing to check without a root."""
        if isinstance(self.root, str):
            original_path(self.root, relpath)
        elif self.root is not None:
            self._object(relpath)

    def read(self, relpath: str, max_bytes: int) -> bytes:
        """The bytes of the original ``relpath`` under the root: SourceUnavailableError
        without one; ManifestError for a path that is refused; FileNotFoundError, OSError or
        BadImage (not a regular file or object, more than ``max_bytes``) otherwise."""
        if self.root is None:
            raise SourceUnavailableError(self.why_not)
        if isinstance(self.root, str):
            return read_under_root(self.root, relpath, max_bytes)
        try:
            with open_file(self._object(relpath), max_bytes) as handle:
                return handle.read()
        except Refused as exc:
            raise BadImage("too_large" if exc.reason == "too_large" else "not_a_file",
                           exc.detail) from None

    def _object(self, relpath: str) -> Location:
        check_relpath(relpath)
        try:
            return self.root / relpath
        except ConfigError:
            raise ManifestError(f"the path {shown(relpath)} is not a key under the source "
                                f"{self.root} (refused)") from None


def not_named(recorded: str) -> Originals:
    """No source named: nothing is read, and the note says how to name one."""
    hint = f" (the dataset records {shown(recorded)})" if recorded else ""
    return Originals(None, "the originals are not read: no source was named; give the folder "
                     f"or s3:// URL they were packed from with --source{hint}, or the job "
                     "file with --config (a dataset alone never decides what is read outside "
                     "it)")


def named_originals(named: str | None, recorded: str = "",
                    storage: Mapping[str, str] | None = None) -> Originals:
    """The originals under the source the user ``named`` (a folder, or a store's URL read
    with ``storage`` options); ``recorded``: the manifest's source, only quoted in the note
    when nothing is named.  ConfigError for a malformed URL; a folder that is not there is an
    ``Originals`` without a root saying so."""
    if not named:
        return not_named(recorded)
    if is_url(named):
        return Originals(location(named, storage))
    if not os.path.isdir(named):
        return Originals(None, f"the originals are not reachable: {shown(named)} (--source) "
                         "is not a directory here; mount it and rerun")
    return Originals(os.path.realpath(named))
