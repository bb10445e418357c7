"""How big ``splits.group`` may be before it is compiled (docs/design.md, the caps table).

The ``regex`` module expands a counted repetition when it compiles: ``(?:(?:a{100}){100}){100}``
becomes a million nodes and ``(?:a{1000000}){1000000}`` exhausts any machine's memory before a
single path is matched, and the match-time timeout (``plan.GROUP_MATCH_SECONDS``) does not cover
compiling.  So a pattern is measured first, by a scanner that knows escapes, character classes
and groups: its length, how deep its groups nest, the product of the counted-repeat bounds on
any nesting path, and the size of the whole pattern once expanded.  ``*``, ``+`` and ``?``
expand nothing at compile time and count as one.
"""

from __future__ import annotations

import re

from ..errors import ConfigError
from ..text import shown

MAX_GROUP_PATTERN_CHARS = 1_000
MAX_GROUP_NESTING = 50  # the regex parser recurses per group: Python's stack ends near 300
MAX_GROUP_REPEAT = 10_000  # product of {m,n} bounds along one nesting path
MAX_GROUP_EXPANDED = 100_000  # pattern items once every counted repeat is expanded

# A counted repetition: {n}, {m,n}, {m,} or {,n}; anything else in braces is a literal.
_COUNTED = re.compile(r"\{(\d*)(,?)(\d*)\}")
# The opening of a plain or named group: ``(?:``, ``(?P<name>``, ``(?<name>``.
_GROUP_HEADER = re.compile(r"\(\?(?::|P?<[^\W\d]\w*>)")
# Escapes whose argument is in braces or angle brackets: \N{NAME}, \p{Letter}, \g<name>, \x{41}.
_BRACED_ESCAPES = frozenset("NpPgxuU")


def check_group_pattern(pattern: str, key: str = "splits.group") -> None:
    """Raise ConfigError (one line naming ``key``) when ``pattern`` is too big to compile safely:
    over ``MAX_GROUP_PATTERN_CHARS`` long, nested over ``MAX_GROUP_NESTING`` groups deep, or
    expanding to more than ``MAX_GROUP_REPEAT`` on one path / ``MAX_GROUP_EXPANDED`` in all."""
    if len(pattern) > MAX_GROUP_PATTERN_CHARS:
        raise ConfigError(f"{key}: the pattern is {len(pattern):,} characters long, more than "
                          f"the {MAX_GROUP_PATTERN_CHARS:,} allowed")
    depth, repeat, expanded = _measure(pattern)
    if depth > MAX_GROUP_NESTING:
        raise ConfigError(f"{key}: the pattern {shown(pattern)} nests groups {depth} deep, more "
                          f"than the {MAX_GROUP_NESTING} allowed")
    if repeat > MAX_GROUP_REPEAT or expanded > MAX_GROUP_EXPANDED:
        raise ConfigError(f"{key}: the pattern {shown(pattern)} expands to "
                          f"{_size(max(repeat, expanded))} items when compiled, more than "
                          f"{MAX_GROUP_REPEAT:,} along nested counted repeats or "
                          f"{MAX_GROUP_EXPANDED:,} in all: use + or * for large counts")


def _measure(pattern: str) -> tuple[int, int, int]:
    """(deepest group nesting, largest repeat product on one path, expanded size) of ``pattern``.

    Each open group is a frame ``[largest product inside, expanded size so far, last item's
    product, last item's size]``; a quantifier multiplies the last item, ``)`` makes the
    group the last item of its parent.
    """
    frames = [[1, 0, 0, 0]]
    deepest, position, length = 0, 0, len(pattern)
    while position < length:
        char = pattern[position]
        frame = frames[-1]
        if char == "(":
            if pattern.startswith("(?#", position):  # a comment: skipped whole
                end = pattern.find(")", position)
                position = length if end < 0 else end + 1
                continue
            frames.append([1, 0, 0, 0])
            deepest = max(deepest, len(frames) - 1)
            header = _GROUP_HEADER.match(pattern, position)  # its own syntax is not an item
            position = header.end() if header else position + 1
            continue
        if char == ")" and len(frames) > 1:
            inner = frames.pop()
            _item(frames[-1], inner[0], max(inner[1], 1))
            position += 1
            continue
        if char == "{" and (counted := _COUNTED.match(pattern, position)):
            low, _, high = counted.groups()
            _repeat(frame, max(int(low or 1), int(high or 1)))
            position = counted.end()
            continue
        if char == "\\":
            position = _escape_end(pattern, position)
        elif char == "[":
            position = _class_end(pattern, position)
        else:
            position += 1
        if char not in "|*+?^$":
            _item(frame, 1, 1)
    while len(frames) > 1:  # an unclosed group: the compiler says so, after this
        inner = frames.pop()
        _item(frames[-1], inner[0], max(inner[1], 1))
    return deepest, frames[0][0], frames[0][1]


def _item(frame: list[int], product: int, size: int) -> None:
    frame[2], frame[3] = product, size
    frame[0] = max(frame[0], product)
    frame[1] += size


def _repeat(frame: list[int], bound: int) -> None:
    """The last item of ``frame`` repeated ``bound`` times (capped: only 'too big' matters)."""
    cap = MAX_GROUP_EXPANDED * 10
    frame[1] += min(frame[3] * (bound - 1), cap)
    frame[2] = min(frame[2] * bound, cap)
    frame[3] = min(frame[3] * bound, cap)
    frame[0] = max(frame[0], frame[2])
    frame[1] = min(frame[1], cap)


def _escape_end(pattern: str, position: int) -> int:
    """Where the escape at ``position`` (a backslash) ends."""
    after = position + 2
    if position + 1 < len(pattern) and pattern[position + 1] in _BRACED_ESCAPES and \
            after < len(pattern) and pattern[after] in "{<":
        end = pattern.find("}" if pattern[after] == "{" else ">", after)
        return len(pattern) if end < 0 else end + 1
    return after


def _class_end(pattern: str, position: int) -> int:
    """Where the character class opening at ``position`` ends (after its ``]``): a ``]`` first
    (or after ``^``) is a member, escapes and POSIX classes (``[:alpha:]``) are skipped."""
    index = position + 1
    if index < len(pattern) and pattern[index] == "^":
        index += 1
    if index < len(pattern) and pattern[index] == "]":
        index += 1
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            index = _escape_end(pattern, index)
            continue
        if char == "[" and pattern.startswith("[:", index):
            end = pattern.find(":]", index + 2)
            if end >= 0:
                index = end + 2
                continue
        if char == "]":
            return index + 1
        index += 1
    return len(pattern)


def _size(count: int) -> str:
    return f"{count:,}" if count < MAX_GROUP_EXPANDED * 10 else \
        f"over {MAX_GROUP_EXPANDED * 10:,}"
