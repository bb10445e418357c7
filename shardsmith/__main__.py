"""The ``shardsmith`` command.  Signals are handled before anything heavy is imported, so a
Ctrl-C or SIGTERM in the first instants is one line too, not a traceback from an import."""

from __future__ import annotations

import os
import signal
import sys


def run() -> None:
    from .errors import Terminated

    def terminate(signum: int, frame: object) -> None:
        raise Terminated()

    signal.signal(signal.SIGTERM, terminate)
    try:
        from .cli import main
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, Terminated)
        sys.stderr.write("shardsmith: error: " + ("terminated (SIGTERM)" if terminated
                                                  else "interrupted") + " before starting\n")
        sys.stderr.flush()
        # Not sys.exit: an interrupt inside an import can leave CPython set to re-raise the
        # signal at exit, which would turn exit code 130 into death by SIGINT.
        os._exit(143 if terminated else 130)
    main()


if __name__ == "__main__":
    run()
