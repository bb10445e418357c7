"""Ctrl-C and SIGTERM for the ``shardsmith`` command: raised where the command can end cleanly,
held (never lost) where it cannot.

Two places cannot: the start, before a command's body runs (click turned an interrupt while it
parsed into "Aborted!" and exit 1), and the init of a compiled module, which may clear an
exception raised by code it calls (Cython's does while it patches ``collections.abc``: a Ctrl-C
landing in simplejpeg's init was lost and the pack ran on to exit 0, about 1 in 100 Ctrl-Cs in
the first second).  A held interrupt is raised as soon as the hold ends.

Python runs signal handlers in the main thread only, so holding there is enough whichever
thread the kernel picked; a signal mask would not be (it is per thread).  Library use (the
readers, ``pack()``) never installs this: the handlers stay the caller's.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from importlib.machinery import ExtensionFileLoader

from .errors import Terminated

_holds = 0
_pending: list[int] = []


def _interrupt(signum: int, frame: object) -> None:
    if _holds:
        _pending.append(signum)
        return
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def install() -> None:
    """Handle SIGINT and SIGTERM, held until ``release()``; hold them in compiled modules'
    inits from now on."""
    global _holds
    _holds = 1
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    exec_module = ExtensionFileLoader.exec_module

    def exec_held(loader: ExtensionFileLoader, module: object) -> None:
        with held():
            exec_module(loader, module)

    ExtensionFileLoader.exec_module = exec_held


@contextlib.contextmanager
def held():
    """Interrupts arriving inside are raised on leaving (main thread; elsewhere a no-op)."""
    global _holds
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _holds += 1
    try:
        yield
    finally:
        _holds -= 1
    if not _holds:
        _raise_pending()


def release() -> None:
    """The command's body starts: raise what came meanwhile, then interrupt at once."""
    global _holds
    _holds = 0
    _raise_pending()


def _raise_pending() -> None:
    if _pending:
        signum = _pending.pop()
        _pending.clear()
        _interrupt(signum, None)
