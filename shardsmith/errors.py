"""Every exception shardsmith raises on purpose.

Errors a user can act on derive from ``ShardsmithError``; the CLI turns each into one line on
stderr and its ``exit_code``.  Two exceptions stay inside the library: ``BadImage`` becomes a
``Reject`` at the image boundary, and ``ShardFormatError`` becomes a problem line of ``verify``
or a ``CorruptSampleError`` of a reader.
"""

from __future__ import annotations


class ShardsmithError(Exception):
    """Base class; ``exit_code`` is what the CLI returns for it."""

    exit_code = 1


class ConfigError(ShardsmithError):
    """A bad option, file or path, found before any work starts."""

    exit_code = 2


class OutputStateError(ShardsmithError):
    """The output directory holds something a run must not silently replace."""

    exit_code = 2


class ManifestError(ShardsmithError):
    """A manifest or sample index that is missing, malformed or names what it must not."""

    exit_code = 2


class TooManyRejectsError(ShardsmithError):
    """More inputs were rejected than ``run.max_reject_fraction`` allows."""

    exit_code = 3


class LockedError(ShardsmithError):
    """Another run holds the lock of a dataset or destination."""


class StageError(ShardsmithError):
    """A copy that could not be verified, a full disk, or a dataset that changed meanwhile."""


class SourceUnavailableError(ShardsmithError):
    """The originals a dataset was packed from cannot be reached (the NAS is not mounted)."""


class CorruptSampleError(ShardsmithError):
    """A sample in a shard that cannot be read or decoded (named by shard and key)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (cron, systemd, Kubernetes), handled like Ctrl-C: finished work is kept."""


class ShardFormatError(Exception):
    """A shard whose bytes do not parse as its format (truncated, bad CRC, bad member)."""


class BadImage(Exception):
    """Raised inside the image path; ``process`` turns it into a ``Reject`` with ``reason``."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
