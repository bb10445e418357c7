"""The ``shardsmith`` command.  Signals are handled before anything heavy is imported, so a
Ctrl-C or SIGTERM in the first instants is one line too, not a traceback from an import."""

from __future__ import annotations

import os
import signal
import sys

from .errors import Terminated  # a module of class statements: nothing to wait for


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


def run() -> None:
    try:
        signal.signal(signal.SIGTERM, _terminate)
        from .cli import main
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, Terminated)
        sys.stderr.write("shardsmith: error: " + ("terminated (SIGTERM)" if terminated
                                                  else "interrupted") + " before starting\n")
        sys.stderr.flush()
        # Not sys.exit: an interrupt inside an import can leave CPython set to re-raise the
        # signal at exit, which would turn exit code 130 into death by SIGINT.
        os._exit(143 if terminated else 130)
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
