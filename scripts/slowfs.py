#!/usr/bin/env python3
"""Read-only FUSE passthrough that behaves like a slow NAS mount, for tests and benchmarks.

    scripts/slowfs.py BACKING MOUNTPOINT [--latency-ms 1] [--bandwidth-mbps 100]
                      [--read-latency-ms 0] [--attr-timeout 0] [--direct-io] [--max-threads 64]

mounts BACKING at MOUNTPOINT in the foreground until Ctrl-C. From Python::

    with slow_mount(backing, mnt, latency=0.001, bandwidth=50e6) as fs:
        before = fs.stats()
        ...                                # walk / read under fs.mountpoint
        ops = fs.stats()                   # {"getattr": ..., "readdir": ..., "read_bytes": ...}

Behaviour:

* Every metadata operation (getattr, readdir, open, readlink, access, statfs) sleeps
  ``latency`` seconds before answering; the sleeps of concurrent callers overlap, as the round
  trips of a network filesystem do.
* Reads share one bandwidth budget (``bandwidth`` bytes/s for all readers together): each read
  books the next slot on a global timeline and sleeps until its bytes have "arrived".
  ``read_latency`` adds a fixed, overlapping delay to every read request.
* Counters per operation (plus ``read_bytes``) are served as JSON by the hidden file
  ``MOUNTPOINT/.slowfs-stats``; reading ``MOUNTPOINT/.slowfs-reset`` returns the counters and
  zeroes them. Neither name is listed by readdir, and neither is counted or delayed.
* Writes of any kind fail with EROFS.

Mount options and why:

* ``ro``: the kernel refuses every write (open for writing, create, unlink, ...) with EROFS.
* ``attr_timeout=0,entry_timeout=0,negative_timeout=0`` (``attr_timeout`` argument): the
  kernel caches no attributes, dentries or negative lookups, so every stat and every path
  component lookup is a getattr call that pays the latency. This is the worst case of NFS
  (``noac,lookupcache=none``); a default NFS mount caches attributes for 3-60 s.
* Page cache: ``kernel_cache``/``auto_cache`` stay off and every open sets ``keep_cache=0``, so
  the kernel drops a file's cached pages on each open and every open reads through the
  bandwidth cap again. Within one open the kernel page cache, readahead and mmap work as on
  NFS, and ``posix_fadvise(POSIX_FADV_DONTNEED)`` drops pages so that later reads go through
  the cap again. ``direct_io=True`` bypasses the page cache altogether (each read() syscall
  becomes one request of the caller's size, no readahead); shared mmap may then fail.
* ``max_threads=64,max_idle_threads=64`` (libfuse >= 3.12): libfuse caps its worker threads
  at 10 by default, which would serialise more than 10 concurrent callers.
* No ``default_permissions``: access() reaches the filesystem and is counted.

What a stat costs with ``attr_timeout=0``: lstat("mnt/dir/file") is 3 getattr calls (the
kernel revalidates ``dir``, looks up ``file``, then fetches its expired attributes); listing a
directory is one opendir/readdir/releasedir plus a few getattr. With ``attr_timeout=1`` the same
lstat is 1 getattr, closer to a default NFS mount.

Limits: libfuse before 3.17 never tells the kernel FUSE_PARALLEL_DIROPS, so the kernel runs
readdir and first-time lookups (names it has no dentry for yet) one at a time per directory;
different directories, and repeated lookups of known names, run in parallel. Each request
costs the Python daemon roughly 40-80 us of CPU under the GIL, so it saturates near
10-20k requests/s: size ``latency`` x concurrency so that the latency dominates.

Needs Linux with /dev/fuse, libfuse 3 (Debian: ``apt-get install -y fuse3 libfuse3-3``) and
the ctypes binding ``pip install mfusepy`` (libfuse 2 also works; fusepy is not supported).
``fuse_available()`` says why it cannot be used, for ``pytest.skip``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import errno
import functools
import importlib.util
import json
import logging
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

STATS_NAME = ".slowfs-stats"
RESET_NAME = ".slowfs-reset"
CONTROL_NAMES = frozenset({STATS_NAME, RESET_NAME})
COUNTERS = (
    "getattr", "readdir", "opendir", "releasedir", "open", "read", "read_bytes", "release",
    "readlink", "statfs", "access",
)
_STAT_FIELDS = ("st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks")
_STATVFS_FIELDS = (
    "f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail",
    "f_flag", "f_namemax",
)
_CONTROL_FH_BASE = 1 << 48  # far above any real file descriptor


class SlowFSError(RuntimeError):
    """Mounting or unmounting the slow filesystem failed."""


class _Throttle:
    """Global read bandwidth limit shared by all threads (a leaky bucket on one timeline)."""

    def __init__(self, bytes_per_second: float | None) -> None:
        self._rate = bytes_per_second
        self._lock = threading.Lock()
        self._next_free = time.monotonic()

    def transfer(self, nbytes: int) -> None:
        """Sleep until ``nbytes`` fit into the shared budget after all earlier transfers."""
        if not self._rate or nbytes <= 0:
            return
        with self._lock:
            start = max(time.monotonic(), self._next_free)
            self._next_free = start + nbytes / self._rate
            done = self._next_free
        delay = done - time.monotonic()
        if delay > 0:
            time.sleep(delay)


_thread_flags = threading.local()


def _keep_thread_state() -> None:
    """Give the calling libfuse worker thread a lasting Python thread state.

    A ctypes callback on a thread that Python did not start creates and destroys a thread state
    on every call; holding one extra PyGILState reference keeps it, which cuts the CPU cost of
    each FUSE request by about a quarter.
    """
    if not getattr(_thread_flags, "kept", False):
        _thread_flags.kept = True
        if hasattr(ctypes, "pythonapi"):
            ctypes.pythonapi.PyGILState_Ensure()


class SlowOperations:
    """mfusepy operations: a read-only passthrough of ``backing`` with delays and counters.

    Used with ``mfusepy.FUSE(..., raw_fi=True)``: open/read/release get the ``fuse_file_info``.
    """

    use_ns = True

    def __init__(
        self,
        backing: Path,
        latency: float,
        bandwidth: float | None,
        read_latency: float = 0.0,
        direct_io: bool = False,
    ) -> None:
        self.backing = os.path.realpath(backing)
        self.latency = latency
        self.read_latency = read_latency
        self.direct_io = direct_io
        self._throttle = _Throttle(bandwidth)
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(COUNTERS, 0)
        self._control: dict[int, bytes] = {}
        self._next_control_fh = _CONTROL_FH_BASE
        self.mounted = False

    # -- counters -------------------------------------------------------------------------

    def _count(self, op: str, amount: int = 1) -> None:
        _keep_thread_state()
        with self._lock:
            self._counts[op] += amount

    def _metadata(self, op: str) -> None:
        self._count(op)
        if self.latency > 0:
            time.sleep(self.latency)

    def snapshot(self, reset: bool = False) -> dict[str, int]:
        """Current counters; zero them afterwards when ``reset``."""
        with self._lock:
            counts = dict(self._counts)
            if reset:
                self._counts = dict.fromkeys(COUNTERS, 0)
        return counts

    # -- helpers --------------------------------------------------------------------------

    def _real(self, path: str) -> str:
        return os.path.join(self.backing, path.lstrip("/"))

    @staticmethod
    def _is_control(path: str | None) -> bool:
        return path is not None and path.lstrip("/") in CONTROL_NAMES and path.count("/") == 1

    def init(self, path: str) -> None:
        """Called by libfuse once the kernel has accepted the mount."""
        self.mounted = True

    # -- metadata -------------------------------------------------------------------------

    def getattr(self, path: str, fh: Any = None) -> dict[str, int]:
        """lstat of the backing path (control files: an empty read-only regular file)."""
        if self._is_control(path):
            now = time.time_ns()
            return {
                "st_mode": stat.S_IFREG | 0o444, "st_nlink": 1, "st_size": 0,
                "st_uid": os.getuid(), "st_gid": os.getgid(),
                "st_atime": now, "st_mtime": now, "st_ctime": now,
            }
        self._metadata("getattr")
        st = os.lstat(self._real(path))
        attrs = {key: getattr(st, key) for key in _STAT_FIELDS}
        attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return attrs

    def access(self, path: str, amode: int) -> int:
        """Write access is refused (EROFS); other modes follow the backing file."""
        if amode & os.W_OK:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        if self._is_control(path):
            return 0
        self._metadata("access")
        if not os.access(self._real(path), amode):
            raise OSError(errno.EACCES, os.strerror(errno.EACCES))
        return 0

    def readlink(self, path: str) -> str:
        """Target of a symbolic link in the backing tree."""
        self._metadata("readlink")
        return os.readlink(self._real(path))

    def statfs(self, path: str) -> dict[str, int]:
        """statvfs of the backing filesystem."""
        self._metadata("statfs")
        st = os.statvfs(self._real(path))
        return {key: getattr(st, key) for key in _STATVFS_FIELDS}

    def opendir(self, path: str) -> int:
        """Counted only; readdir pays the latency."""
        self._count("opendir")
        return 0

    def readdir(self, path: str, fh: int) -> list[tuple[str, int, int]]:
        """Directory entries with their file type (d_type), control files hidden."""
        self._metadata("readdir")
        entries = [(".", stat.S_IFDIR, 0), ("..", stat.S_IFDIR, 0)]
        root = path == "/"
        with os.scandir(self._real(path)) as it:
            for entry in it:
                if root and entry.name in CONTROL_NAMES:
                    continue
                if entry.is_symlink():
                    mode = stat.S_IFLNK
                elif entry.is_dir(follow_symlinks=False):
                    mode = stat.S_IFDIR
                else:
                    mode = stat.S_IFREG
                entries.append((entry.name, mode, 0))
        return entries

    def releasedir(self, path: str, fh: int) -> int:
        """Counted only."""
        self._count("releasedir")
        return 0

    # -- data -----------------------------------------------------------------------------

    def open(self, path: str, fi: Any) -> int:
        """Open the backing file read-only; control files get a JSON snapshot (direct I/O)."""
        if (fi.flags & os.O_ACCMODE) != os.O_RDONLY:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        if self._is_control(path):
            payload = json.dumps(self.snapshot(reset=path.endswith(RESET_NAME)), sort_keys=True)
            with self._lock:
                fh = self._next_control_fh
                self._next_control_fh += 1
                self._control[fh] = (payload + "\n").encode()
            fi.fh = fh
            fi.direct_io = 1  # size is unknown to the kernel: let reads reach us
            return 0
        self._metadata("open")
        fi.fh = os.open(self._real(path), os.O_RDONLY | os.O_NOFOLLOW)
        fi.direct_io = int(self.direct_io)
        fi.keep_cache = 0
        return 0

    def read(self, path: str, size: int, offset: int, fi: Any) -> bytes:
        """pread from the backing file, then wait for the shared bandwidth and read latency."""
        fh = fi.fh
        if fh >= _CONTROL_FH_BASE:
            return self._control.get(fh, b"")[offset:offset + size]
        _keep_thread_state()
        data = os.pread(fh, size, offset)
        with self._lock:
            self._counts["read"] += 1
            self._counts["read_bytes"] += len(data)
        if self.read_latency > 0:
            time.sleep(self.read_latency)
        self._throttle.transfer(len(data))
        return data

    def release(self, path: str, fi: Any) -> int:
        """Close the backing file descriptor."""
        fh = fi.fh
        if fh >= _CONTROL_FH_BASE:
            with self._lock:
                self._control.pop(fh, None)
            return 0
        self._count("release")
        os.close(fh)
        return 0


# -- mount state helpers (parent and child) -------------------------------------------------


def _mounted(mountpoint: Path) -> bool:
    """Whether a filesystem is mounted at ``mountpoint`` (also true for a dead FUSE mount)."""
    target = os.path.realpath(mountpoint)
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                fields = line.split(" ")
                point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[4])
                if point == target:
                    return True
    except OSError:
        return os.path.ismount(mountpoint)
    return False


def _run_quiet(argv: list[str]) -> bool:
    """Run a helper command; True when it exists and succeeded."""
    if shutil.which(argv[0]) is None:
        return False
    try:
        done = subprocess.run(argv, capture_output=True, timeout=15, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _unmount(mountpoint: Path, lazy: bool = False) -> bool:
    """Unmount with fusermount3, fusermount or umount; ``lazy`` detaches a busy mount."""
    point = str(mountpoint)
    commands = (
        [["fusermount3", "-u", "-z", point], ["fusermount", "-u", "-z", point],
         ["umount", "-l", point]]
        if lazy
        else [["fusermount3", "-u", point], ["fusermount", "-u", point], ["umount", point]]
    )
    for argv in commands:
        if _run_quiet(argv) or not _mounted(mountpoint):
            return True
    return not _mounted(mountpoint)


# -- parent side ------------------------------------------------------------------------------


class SlowMount:
    """A running slow mount: ``mountpoint``, ``stats()`` and ``reset()``."""

    def __init__(self, backing: Path, mountpoint: Path, process: subprocess.Popen[bytes]) -> None:
        self.backing = backing
        self.mountpoint = mountpoint
        self.process = process
        self._final: dict[str, int] | None = None

    def _read_control(self, name: str) -> dict[str, int]:
        if self._final is not None:
            return dict(self._final)
        with open(self.mountpoint / name, "rb") as f:
            return {key: int(value) for key, value in json.loads(f.read()).items()}

    def stats(self) -> dict[str, int]:
        """Operation counters since mount or the last reset (frozen once unmounted)."""
        return self._read_control(STATS_NAME)

    def cpu_seconds(self) -> float:
        """CPU time (user and system) the FUSE process has used so far; 0.0 where /proc is
        missing.  The mount runs on the caller's cores: on a small machine its CPU per request
        is what limits many requests in flight (see docs/performance.md)."""
        try:
            with open(f"/proc/{self.process.pid}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def reset(self) -> dict[str, int]:
        """Zero the counters; returns their values just before."""
        if self._final is not None:
            raise SlowFSError(f"{self.mountpoint} is no longer mounted")
        return self._read_control(RESET_NAME)

    def close(self, timeout: float = 10.0) -> None:
        """Unmount (lazily when busy) and make sure the FUSE process has ended."""
        if self._final is None:
            try:
                self._final = self.stats()
            except (OSError, ValueError):
                self._final = {}
        proc = self.process
        if proc.poll() is None and _mounted(self.mountpoint) and not _unmount(self.mountpoint):
            # Busy (a file or directory under it is still open): detach it; the FUSE process
            # cannot finish while those references live, so it gets terminated below.
            _unmount(self.mountpoint, lazy=True)
            timeout = min(timeout, 2.0)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if _mounted(self.mountpoint) and not _unmount(self.mountpoint, lazy=True):
            raise SlowFSError(f"could not unmount {self.mountpoint}")


def _tail(path: str, limit: int = 2000) -> str:
    with contextlib.suppress(OSError), open(path, "rb") as f:
        data = f.read()
        return data[-limit:].decode(errors="replace").strip()
    return ""


@contextlib.contextmanager
def slow_mount(
    backing: Path,
    mountpoint: Path,
    latency: float = 0.001,
    bandwidth: float | None = None,
    *,
    read_latency: float = 0.0,
    attr_timeout: float = 0.0,
    direct_io: bool = False,
    max_threads: int = 64,
    timeout: float = 15.0,
) -> Iterator[SlowMount]:
    """Mount backing at mountpoint in a child process; unmount (fusermount -u / umount) on exit,
    even on error.

    ``latency`` is in seconds per metadata operation, ``bandwidth`` in bytes/s shared by all
    readers (None: unlimited), ``read_latency`` in seconds per read request. Counters start at
    zero when the mount is handed out. Raises SlowFSError when the mount is not ready within
    ``timeout`` seconds, with the child's output in the message.
    """
    if latency < 0 or read_latency < 0 or attr_timeout < 0 or (bandwidth or 0) < 0:
        raise ValueError("latency, read_latency, attr_timeout and bandwidth must be >= 0")
    backing = Path(backing).absolute()
    mountpoint = Path(mountpoint).absolute()  # libfuse changes the working directory to /
    if not backing.is_dir():
        raise NotADirectoryError(f"backing directory {backing} does not exist")
    if _mounted(mountpoint):
        raise SlowFSError(f"{mountpoint} is already a mount point")
    mountpoint.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable, str(Path(__file__).resolve()), str(backing), str(mountpoint),
        "--latency-ms", repr(latency * 1e3), "--read-latency-ms", repr(read_latency * 1e3),
        "--attr-timeout", repr(attr_timeout), "--max-threads", str(max_threads),
        "--parent-pid", str(os.getpid()),
    ]
    if bandwidth:
        argv += ["--bandwidth-mbps", repr(bandwidth / 1e6)]
    if direct_io:
        argv.append("--direct-io")
    log_fd, log_path = tempfile.mkstemp(prefix="slowfs-", suffix=".log")
    try:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd, start_new_session=True
        )
    finally:
        os.close(log_fd)
    mount = SlowMount(backing, mountpoint, process)
    try:
        deadline = time.monotonic() + timeout
        while not os.path.ismount(mountpoint):
            if process.poll() is not None:
                raise SlowFSError(
                    f"slowfs exited with code {process.returncode} before {mountpoint} was "
                    f"mounted: {_tail(log_path) or 'no output'}"
                )
            if time.monotonic() > deadline:
                raise SlowFSError(
                    f"{mountpoint} not mounted after {timeout:g}s: {_tail(log_path) or 'no output'}"
                )
            time.sleep(0.02)
        mount.reset()
        yield mount
    finally:
        try:
            mount.close()
        finally:
            with contextlib.suppress(OSError):
                os.unlink(log_path)


@functools.lru_cache(maxsize=1)
def fuse_available() -> str | None:
    """None when slow mounts work here, else a one-line reason (for pytest.skip).

    The last check mounts an empty directory once, so the answer is cached.
    """
    if not sys.platform.startswith("linux"):
        return f"slowfs needs Linux FUSE (platform is {sys.platform})"
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse (as root: mknod /dev/fuse c 10 229; or modprobe fuse)"
    if not stat.S_ISCHR(os.stat("/dev/fuse").st_mode):
        return "/dev/fuse is not a character device"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "no read/write permission on /dev/fuse"
    with contextlib.suppress(OSError), open("/proc/filesystems", encoding="utf-8") as f:
        if not any(line.split()[-1:] == ["fuse"] for line in f):
            return "kernel has no fuse filesystem (modprobe fuse)"
    if os.geteuid() != 0 and not (shutil.which("fusermount3") or shutil.which("fusermount")):
        return "not root and no fusermount3 (apt-get install -y fuse3)"
    if not (ctypes.util.find_library("fuse3") or ctypes.util.find_library("fuse")):
        return "libfuse not found (apt-get install -y fuse3 libfuse3-3)"
    if importlib.util.find_spec("mfusepy") is None:
        return "python binding missing (pip install mfusepy)"
    with tempfile.TemporaryDirectory(prefix="slowfs-probe-") as tmp:
        backing, mountpoint = Path(tmp, "backing"), Path(tmp, "mnt")
        backing.mkdir()
        try:
            with slow_mount(backing, mountpoint, latency=0.0, timeout=20.0) as fs:
                os.listdir(mountpoint)
                fs.stats()
        except Exception as exc:  # any failure means: not usable here
            reason = " ".join(str(exc).split()) or type(exc).__name__
            return f"FUSE mount fails: {reason[:300]}"
    return None


# -- child side / CLI -------------------------------------------------------------------------


def _watch_parent(parent_pid: int, mountpoint: Path) -> None:
    """Unmount and exit when the process that started us is gone."""
    while os.getppid() == parent_pid:
        time.sleep(0.5)
    _unmount(mountpoint, lazy=True)
    time.sleep(5)
    os._exit(3)


def _run_foreground(args: argparse.Namespace) -> int:
    if not any(os.environ.get(k) for k in ("FUSE_LIBRARY_PATH", "FUSE_LIBRARY_NAME")):
        if ctypes.util.find_library("fuse3"):
            os.environ["FUSE_LIBRARY_NAME"] = "fuse3"  # mfusepy would prefer libfuse 2
    try:
        import mfusepy
    except (ImportError, OSError) as exc:  # mfusepy raises OSError when libfuse is missing
        print(f"slowfs: cannot load mfusepy/libfuse: {exc}", file=sys.stderr, flush=True)
        return 2

    backing, mountpoint = Path(args.backing).absolute(), Path(args.mountpoint).absolute()
    bandwidth = args.bandwidth_mbps * 1e6 if args.bandwidth_mbps else None
    ops = SlowOperations(
        backing, args.latency_ms / 1e3, bandwidth, args.read_latency_ms / 1e3, args.direct_io
    )
    if args.parent_pid is not None:
        threading.Thread(
            target=_watch_parent, args=(args.parent_pid, mountpoint), daemon=True
        ).start()
    options: dict[str, Any] = {
        "foreground": True, "debug": args.debug, "ro": True, "fsname": "slowfs",
        "subtype": "slowfs", "attr_timeout": args.attr_timeout,
        "entry_timeout": args.attr_timeout, "negative_timeout": args.attr_timeout,
    }
    if (mfusepy.fuse_version_major, mfusepy.fuse_version_minor) >= (3, 12):
        options.update(max_threads=args.max_threads, max_idle_threads=args.max_threads)
    print(
        f"slowfs: {backing} -> {mountpoint} latency={args.latency_ms}ms "
        f"bandwidth={args.bandwidth_mbps or 'unlimited'}MB/s "
        f"read_latency={args.read_latency_ms}ms libfuse {mfusepy.fuse_version_major}; "
        f"counters: cat {mountpoint / STATS_NAME}",
        file=sys.stderr, flush=True,
    )
    try:
        mfusepy.FUSE(ops, str(mountpoint), raw_fi=True, **options)
    except RuntimeError as exc:
        if not ops.mounted:
            print(f"slowfs: mount failed (libfuse error {exc})", file=sys.stderr, flush=True)
            return 1
        # libfuse returns 8 when SIGINT/SIGTERM stopped it: a normal end once mounted.
    print(f"slowfs: unmounted; counters {json.dumps(ops.snapshot())}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """CLI: mount in the foreground until Ctrl-C (or fusermount3 -u MOUNTPOINT)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("backing", help="directory to mirror read-only")
    parser.add_argument("mountpoint", help="empty directory to mount on")
    parser.add_argument("--latency-ms", type=float, default=1.0,
                        help="delay per metadata operation (default 1)")
    parser.add_argument("--bandwidth-mbps", type=float, default=None,
                        help="read bandwidth in MB/s (10**6 bytes/s) shared by all readers "
                             "(default unlimited)")
    parser.add_argument("--read-latency-ms", type=float, default=0.0,
                        help="extra delay per read request (default 0)")
    parser.add_argument("--attr-timeout", type=float, default=0.0,
                        help="kernel attribute/entry cache timeout in seconds (default 0)")
    parser.add_argument("--direct-io", action="store_true",
                        help="bypass the kernel page cache for file data")
    parser.add_argument("--max-threads", type=int, default=64,
                        help="libfuse worker threads (default 64)")
    parser.add_argument("--debug", action="store_true", help="libfuse request trace on stderr")
    parser.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="slowfs: %(levelname)s %(message)s")
    return _run_foreground(args)


if __name__ == "__main__":
    sys.exit(main())
