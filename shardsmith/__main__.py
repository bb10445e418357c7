"""The ``shardsmith`` command.  Interrupts are handled (held) from the first instant, so a Ctrl-C
or SIGTERM while the command starts is one line and exit 130 or 143 too (``interrupts``)."""

from __future__ import annotations

import signal
import sys

from . import interrupts  # imports only the standard library and our exceptions: instant


def run() -> None:
    interrupts.install()  # held until the command's body starts: cli releases them
    from .cli import main

    try:
        main()
    except SystemExit as exc:
        _leave(exc.code)


def _leave(code: object) -> None:
    """End the process once the command has said what it had to (one line on failure).

    A signal from here on must not add a traceback from an exit hook (loky joins its
    threads at exit), so SIGINT and SIGTERM are ignored while the interpreter winds down."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if code in (130, 143):
        # CPython sets a flag when an interrupt leaves an exec() or eval() of a string (as
        # dataclasses and namedtuples run while a module is imported) and, at exit, kills
        # itself with SIGINT instead of returning our code.  The next exec() clears it.
        exec("None")
    sys.exit(code)

if __name__ == "__main__":
    run()
