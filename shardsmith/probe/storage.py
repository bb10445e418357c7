"""What the storage under a source tree gives: listing rates and cold read throughput.

Listing: the parallel scan that ``pack`` runs (timed over the whole tree, since its listing is
needed anyway), then a serial walk doing the same work (one ``scandir`` per directory, one
``stat`` per candidate file), stopped after a time budget on a big tree.  The parallel walk
goes first, so on a mount that caches attributes the serial one is the one helped.

Cold reads: the sampled originals are read whole, each file by one reader, with 1, 2, 4, ...
readers at a time.  Before every round each file is dropped from this machine's page cache
(``posix_fadvise(DONTNEED)``) and ``mincore`` checks that its pages are really gone: they are
not on tmpfs, for dirty pages, or for a file another process has mapped; then the result says
the reads were not cold.  A NAS server's own cache is out of reach from here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..config import Config, SourceConfig
from ..errors import BadImage
from ..packing.originals import open_regular, open_source
from ..packing.scan import SCAN_THREADS, ScanResult, scan

READ_CHUNK = 1 << 20
MIN_LEVELS = 3  # 1, 2 and 4 readers are always measured (when the sample has that many files)
LEVEL_GAIN = 1.10  # more readers are tried while doubling them still gains 10%


@dataclass(frozen=True)
class ListingRate:
    """One walk: what it listed and how long it took (``complete``: the whole tree)."""

    directories: int
    files: int
    seconds: float
    threads: int
    complete: bool = True

    @property
    def directories_per_second(self) -> float:
        return self.directories / self.seconds if self.seconds > 0 else 0.0

    @property
    def files_per_second(self) -> float:
        return self.files / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class Listing:
    """The tree listed serially and in parallel."""

    serial: ListingRate
    parallel: ListingRate

    @property
    def speedup(self) -> float:
        serial, parallel = self.serial.files_per_second, self.parallel.files_per_second
        return parallel / serial if serial > 0 else 0.0


@dataclass(frozen=True)
class ReadLevel:
    """The sample read once with ``readers`` concurrent readers."""

    readers: int
    files: int
    bytes: int
    seconds: float
    p50_ms: float
    p99_ms: float

    @property
    def mb_per_second(self) -> float:
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0

    @property
    def files_per_second(self) -> float:
        return self.files / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class ColdReads:
    """Read throughput per concurrency; ``cold`` is False with a ``note`` saying why."""

    levels: tuple[ReadLevel, ...]
    cold: bool
    note: str
    unreadable: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    @property
    def best(self) -> ReadLevel | None:
        return max(self.levels, key=lambda level: level.mb_per_second, default=None)


def measure_listing(root: Path, config: Config, serial_seconds: float
                    ) -> tuple[Listing, ScanResult]:
    """Time the scan of a pack over the whole tree, then a serial walk for at most
    ``serial_seconds``."""
    started = time.perf_counter()
    scanned = scan_as_pack(root, config)
    parallel_seconds = time.perf_counter() - started
    folders = {relpath.rpartition("/")[0] for relpath in scanned.files.relpaths}
    parallel = ListingRate(len(folders), len(scanned.files), parallel_seconds, SCAN_THREADS)
    return Listing(serial_walk(root, config.source, serial_seconds), parallel), scanned


def scan_as_pack(root: Path, config: Config) -> ScanResult:
    """The scan ``pipeline.pack`` makes of the tree (split folders when ``splits.folder``)."""
    split_folders = tuple(name for name, _ in config.splits) if config.split_folder else ()
    return scan(root, config.source, split_folders=split_folders)


def serial_walk(root: Path, config: SourceConfig, budget_seconds: float) -> ListingRate:
    """List and stat like the scan, one call at a time: what a plain ``os.walk`` costs."""
    extensions = {"." + ext for ext in config.extensions}
    pending = deque([str(root)])
    folders_with_files = files = 0
    started = time.perf_counter()
    deadline = started + budget_seconds
    while pending:
        if time.perf_counter() > deadline:
            break
        directory = pending.popleft()
        found = 0
        try:
            with os.scandir(directory) as entries:
                listing = sorted(entries, key=lambda entry: entry.name)
        except OSError:
            continue
        for entry in listing:
            if entry.name.startswith("."):
                continue
            try:
                if entry.is_symlink() and not config.follow_symlinks:
                    continue
                if entry.is_dir():
                    pending.append(entry.path)
                elif os.path.splitext(entry.name)[1].lower() in extensions:
                    entry.stat()
                    found += 1
            except OSError:
                continue
        folders_with_files += found > 0
        files += found
    return ListingRate(folders_with_files, files, time.perf_counter() - started, 1,
                       complete=not pending)


def reader_levels(sample_size: int, cores: int) -> list[int]:
    """1, 2, 4, ... up to the sample size and twice the cores (at least 16)."""
    limit = min(sample_size, max(16, 2 * cores))
    levels, readers = [], 1
    while readers <= limit:
        levels.append(readers)
        readers *= 2
    return levels or [1]


def measure_reads(root: Path, relpaths: Sequence[str], levels: Sequence[int],
                  follow_symlinks: bool, cap: int, first: ReadLevel | None = None,
                  resident: Sequence[float] = (),
                  say: Callable[[str], None] | None = None) -> ColdReads:
    """Read the sample cold with each number of readers in ``levels``.

    Levels past the first three are measured only while doubling the readers still gains.
    ``first`` is a level already measured (the image path reads one file at a time) after
    drops that left ``resident`` shares of pages in memory.  ``cap``: ``original_cap``, as a
    pack reads; a file over it is not read (a pack rejects it ``too_large`` unread, and the
    image path measurement counts it so), so a huge or sparse file cannot stretch the probe.
    """
    paths = [os.path.join(root, relpath) for relpath in relpaths]
    results: list[ReadLevel] = [first] if first is not None else []
    resident = list(resident)
    unreadable: dict[str, str] = {}
    for readers in levels:
        if first is not None and readers == first.readers:
            continue
        if len(results) >= MIN_LEVELS and not _gained(results):
            break
        if say is not None:
            say(f"reading {len(paths)} originals cold with {readers} "
                f"reader{'s' if readers > 1 else ''}")
        resident += drop_all(paths, follow_symlinks, cap)
        level, failed = _read_all(str(root), relpaths, readers, follow_symlinks, cap)
        unreadable.update(failed)
        results.append(level)
    cold, note = _coldness(resident)
    return ColdReads(tuple(results), cold, note, tuple(sorted(unreadable.items())))


def _gained(results: list[ReadLevel]) -> bool:
    best_before = max(level.mb_per_second for level in results[:-1])
    return results[-1].mb_per_second >= LEVEL_GAIN * best_before


def _coldness(resident: list[float]) -> tuple[bool, str]:
    if not hasattr(os, "posix_fadvise"):
        return False, "not guaranteed cold: posix_fadvise is not available on this platform"
    if not resident:
        return False, ("not guaranteed cold: page cache residency cannot be checked here "
                       "(mmap refused)")
    still = sum(resident) / len(resident)
    if still > 0.05:
        return False, (f"not cold: {still:.0%} of the sampled pages stayed in memory after "
                       "the drop (tmpfs, dirty pages, or files mapped by another process): "
                       "read throughput is the memory's, not the storage's")
    return True, ("cold: each file dropped from this machine's page cache first "
                  "(a NAS server may still answer from its own cache)")


def drop_all(paths: Sequence[str], follow_symlinks: bool, cap: int) -> list[float]:
    """Drop every file from the page cache; the shares of pages still resident, where known.
    A file over ``cap`` (``original_cap``) is never read, so it is left alone: checking a
    sparse terabyte file's residency page by page would take minutes."""
    shares = (drop_from_cache(path, follow_symlinks, cap) for path in paths)
    return [share for share in shares if share is not None]


def drop_from_cache(path: str, follow_symlinks: bool, cap: int) -> float | None:
    """Ask the kernel to drop ``path`` from the page cache; returns the share of its pages
    still resident afterwards (None when that cannot be checked, the file cannot be opened or
    holds more than ``cap`` bytes)."""
    try:
        fd, info = open_regular(path, follow_symlinks, cap)
    except (OSError, BadImage):
        return None
    try:
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return resident_share(fd, info.st_size)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_whole(root: str, relpath: str, follow_symlinks: bool, buffer: bytearray,
               cap: int) -> int:
    """Read the original ``root/relpath`` to its end into ``buffer``, reused from its start
    when full (the bytes are not kept: this is for timing); returns the bytes read.  Opened
    through the door without following a link on any folder of the path (unless asked),
    refused unread (BadImage ``too_large``) when it holds more than ``cap`` bytes, and read no
    further than the size it had when opened."""
    with open_source(root, relpath, follow_symlinks, cap) as handle:
        view = memoryview(buffer)
        total = offset = 0
        while total < handle.size:
            if offset == len(view):
                offset = 0
            count = os.readv(handle.fd, [view[offset : offset + handle.size - total]])
            if not count:
                break
            total += count
            offset += count
        return total


def level_of(readers: int, reads: Sequence[tuple[int, float]], seconds: float) -> ReadLevel:
    """A ``ReadLevel`` from per-file (bytes, seconds) and the wall time of the whole round."""
    latencies = sorted(latency for _, latency in reads)
    return ReadLevel(readers, len(reads), sum(count for count, _ in reads), seconds,
                     percentile(latencies, 50) * 1000, percentile(latencies, 99) * 1000)


def _read_all(root: str, relpaths: Sequence[str], readers: int, follow_symlinks: bool,
              cap: int) -> tuple[ReadLevel, list[tuple[str, str]]]:
    local = threading.local()

    def one(relpath: str) -> tuple[int, float] | str | None:
        """(bytes, seconds) of reading one file whole, open to close: what a worker waits;
        or why it is not read."""
        if not hasattr(local, "buffer"):
            local.buffer = bytearray(READ_CHUNK)
        started = time.perf_counter()
        try:
            count = read_whole(root, relpath, follow_symlinks, local.buffer, cap)
            return count, time.perf_counter() - started
        except BadImage as exc:
            if exc.reason == "too_large":  # a pack never reads it: neither a read nor a failure
                return None
            return exc.detail
        except OSError as exc:
            return f"cannot read file: {exc.strerror or exc}"

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=readers, thread_name_prefix="shardsmith-probe") as pool:
        outcomes = list(pool.map(one, relpaths))
    seconds = time.perf_counter() - started
    reads = [outcome for outcome in outcomes if isinstance(outcome, tuple)]
    failed = [(relpath, outcome) for relpath, outcome in zip(relpaths, outcomes, strict=True)
              if isinstance(outcome, str)]
    return level_of(readers, reads, seconds), failed


def percentile(sorted_values: Sequence[float], percent: float) -> float:
    """Nearest-rank percentile of values sorted ascending (0.0 for none)."""
    if not sorted_values:
        return 0.0
    rank = max(1, -(-len(sorted_values) * percent // 100))
    return sorted_values[min(len(sorted_values), int(rank)) - 1]


# -- page cache residency (mincore) -----------------------------------------------------------

_PROT_READ, _MAP_SHARED = 0x1, 0x01


def _load_libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None or not hasattr(os, "posix_fadvise"):
        return None
    libc = ctypes.CDLL(name, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
    return libc


_LIBC = _load_libc()
_MAP_FAILED = ctypes.c_void_p(-1).value


def resident_share(fd: int, size: int) -> float | None:
    """Share of the file's pages in the page cache (``mincore``); None when it cannot be told."""
    if size <= 0:
        return 0.0
    if _LIBC is None:
        return None
    address = _LIBC.mmap(None, size, _PROT_READ, _MAP_SHARED, fd, 0)
    if address in (None, _MAP_FAILED):
        return None
    try:
        pages = -(-size // mmap.PAGESIZE)
        vector = (ctypes.c_ubyte * pages)()
        if _LIBC.mincore(address, size, vector) != 0:
            return None
        return sum(state & 1 for state in bytes(vector)) / pages
    finally:
        _LIBC.munmap(address, size)
