"""Exceptions a user can act on; the CLI turns each into one line and an exit code."""


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
    """A manifest that is missing, unreadable or inconsistent."""


class TooManyRejectsError(ShardsmithError):
    """More inputs were rejected than ``run.max_reject_fraction`` allows."""

    exit_code = 3
