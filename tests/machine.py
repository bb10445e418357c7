"""How many DataLoader workers a reader test starts, held to this machine's cores."""

from __future__ import annotations

import os


def cores() -> int:
    """The cores this process may run on (a container's or taskset's share, not the host's)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


# Two at least: several workers sharing out the shards is what these tests are about, and two
# workers on one core are still correct, only slower.  More than the cores is what they must not
# start: on a 2-core machine shared by several test runs, a third worker only waits its turn.
MOST_WORKERS = max(2, cores())


def worker_counts(*counts: int) -> list[int]:
    """``counts`` each held to ``MOST_WORKERS``, repeats dropped, in order: the worker counts
    to run a test with (``worker_counts(0, 1, 2, 3)`` is ``[0, 1, 2]`` on a 2-core machine)."""
    held = [min(count, MOST_WORKERS) for count in counts]
    return list(dict.fromkeys(held))
