"""Text for people: byte counts, plurals, and foreign strings made safe for a terminal.

The lowest layer of the package (no shardsmith imports): every module that prints or words a
message may use it.
"""

from __future__ import annotations

import os
import re
from typing import Any


def human_bytes(count: float) -> str:
    """Bytes in the unit that fits: ``512 B``, ``3.4 MB``, ``1.20 TB`` (powers of 1000)."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(count) >= scale:
            value = count / scale
            return f"{value:,.2f} {unit}" if value < 10 else f"{value:,.1f} {unit}"
    return f"{int(count)} B"


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 file``, ``2 files``, ``1 problem``."""
    return f"{count:,} {noun if count == 1 else (nouns or noun + 's')}"


# What a terminal acts on instead of showing: C0 and C1 controls (ESC starts a sequence that
# can clear the screen or set the title; 0x9b is a one-character CSI), DEL, and the marks and
# overrides that reorder text (a name can look like another one).
_MARKS = "\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069"
_CONTROLS = re.compile(f"[\x00-\x1f\x7f-\x9f{_MARKS}]")
_CONTROLS_BUT_NEWLINE = re.compile(f"[\x00-\x09\x0b-\x1f\x7f-\x9f{_MARKS}]")


def printable(text: str, keep_newlines: bool = False) -> str:
    """``text`` (a path, a manifest string, a message quoting them) as a terminal can show it
    without acting on it: bytes that are not UTF-8 appear as ``\\xNN``, control characters
    and bidi overrides as ``\\x1b`` or ``\\u202e``.  ``keep_newlines`` leaves the line breaks
    of a whole text we wrote; a newline inside a name is escaped (it would forge a line).
    Applying it twice changes nothing."""
    try:
        text = os.fsencode(text).decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate no file name decodes to (JSON's "\\ud800")
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return (_CONTROLS_BUT_NEWLINE if keep_newlines else _CONTROLS).sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def shown(value: Any, limit: int = 60) -> str:
    """A value quoted in an error, cut to ``limit`` characters (inputs can be huge)."""
    text = repr(value) if not isinstance(value, (dict, list)) else type(value).__name__
    return cut(text, limit)


def cut(text: str, limit: int = 60) -> str:
    """``text`` cut to ``limit`` characters, marked with ``...`` when cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
