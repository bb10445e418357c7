"""The unchanged samples' files hard-linked from the previous export: by worker processes
(``linkworker``) while the export goes on reading the sample index, exporting the new samples
from their shards and writing its record (``LinkWorkers``); else in this process once every
sample is known (``LinksHere``).

Why processes: a link is about 10 us of kernel time; 20,000 of them (a YOLO export of 10,000
samples) were 0.19 to 0.30 s, half of a re-export after a 1% increment.  Threads could not
put them beside the export's Python: a thread back from ``link`` waits for the GIL (up to the
5 ms switch interval) while another parses, and 20,000 links from a thread beside 0.2 s of
parsing took as long as the two one after the other.  Two workers, each given whole folders
(links into one folder take turns on its lock), link YOLO's images and labels side by side:
a re-export after a 1% increment took a median of 0.32 s instead of 0.37 s (6 alternating
runs, docs/performance.md, "Export").
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ...errors import OutputStateError
from ...progress import Progress
from .record import ExportedFile, ExportedSample
from .tree import ExportTree

WORKER = Path(__file__).with_name("linkworker.py")
# Two: a worker a core on the 2-core machine measured; a third only takes turns with the
# export for the cores (and YOLO has two large folders to give out, images and labels).
WORKERS = 2
PIPE_BYTES = 1 << 20  # requests the export may be ahead of a worker (~20,000) without waiting
MARK_EVERY = 1024  # samples between the workers' progress marks
THREADS, CHUNK = 4, 1024  # ``LinksHere``: threads, and samples a chunk


def start(tree: ExportTree, source_root: Path, candidates: Iterable[ExportedSample],
          progress: Progress) -> LinkWorkers | LinksHere:
    """Links into ``tree`` from the version in ``source_root``: by workers into a folder this
    run made (``candidates``, the samples that may be sent, tell the folders and about how
    many files each), else here (an earlier try's folder, where a name may be taken already;
    or where no worker starts: no interpreter known, or one frozen into an application that
    would not run the worker's program)."""
    if tree.fresh and sys.executable and not getattr(sys, "frozen", False):
        folders = Counter(file.path.rpartition("/")[0] for sample in candidates
                          for file in sample.files)
        try:
            return LinkWorkers(tree, source_root, folders, progress)
        except OSError:  # no process to start (a limit reached): linked here, the folders
            # made for the workers still removed when left empty
            return LinksHere(tree, source_root, progress, folders)
    return LinksHere(tree, source_root, progress)


class _Links:
    """What both kinds of links share: ``send`` samples whose files are to be linked (their
    paths the layout's, ``layouts.paths_fit``), then ``finish``: (the samples all of whose
    files are linked, the keys of the others, to be exported from their shards instead)."""

    def __init__(self, tree: ExportTree, source_root: Path, progress: Progress,
                 folders: Iterable[str] = ()):
        self.tree, self.source_root, self.progress = tree, source_root, progress
        self.folders = sorted(folders)  # made ahead: the export removes those left empty
        self.keys: set[str] = set()  # of the samples sent
        self.samples: list[ExportedSample] = []

    def _take(self, samples: Iterable[ExportedSample]) -> list[ExportedSample]:
        taken = list(samples)
        self.samples += taken
        self.keys.update(sample.key for sample in taken)
        return taken

    def close(self) -> None:
        """Close the folders opened to link from and into."""
        self.tree.close()


class LinkWorkers(_Links):
    """Links made by worker processes as the samples are sent.  ``close`` (on errors and
    signals too) ends them."""

    def __init__(self, tree: ExportTree, source_root: Path, folders: dict[str, int],
                 progress: Progress):
        """``folders``: each folder of the files to link -> about how many; each worker is
        given whole folders, the largest first to the least loaded."""
        super().__init__(tree, source_root, progress, folders)
        self._failed: set[int] = set()  # sample numbers
        self._error: tuple[int, ExportedFile] | None = None  # errno, file
        self._lock = threading.Lock()  # the reader threads'
        self._marked = 0  # samples sent before the last mark
        self._counted = 0  # samples before the last mark every worker is past (progress)
        loads = [0] * min(WORKERS, max(1, len(folders)))
        owned: list[list[str]] = [[] for _ in loads]
        for folder in sorted(folders, key=lambda name: (-folders[name], name)):
            least = loads.index(min(loads))
            loads[least] += folders[folder]
            owned[least].append(folder)
        # folder -> (worker, its number there); a folder missing from the previous version
        # is given to no one: its samples are exported from their shards
        self._route: dict[str, tuple[int, int]] = {}
        self._workers: list[_Worker] = []
        try:
            for names in owned:
                pairs = []
                for name in names:
                    pair = tree.link_folder(source_root, name)
                    if pair[0] >= 0:
                        self._route[name] = (len(self._workers), len(pairs))
                        pairs.append(pair)
                if pairs:
                    self._workers.append(_Worker(pairs, self._heard))
        except BaseException:
            self.close()
            raise

    def send(self, samples: Iterable[ExportedSample]) -> None:
        route, workers = self._route, self._workers
        batches: list[list[str]] = [[] for _ in workers]
        first = len(self.samples)
        for number, sample in enumerate(self._take(samples), first):
            for file in sample.files:
                parent, _, name = file.path.rpartition("/")
                where = route.get(parent)
                if where is None:
                    self._failed.add(number)
                    continue
                worker, folder = where
                batches[worker].append(f"{folder}\0{file.bytes}\0{file.inode}\0{name}\0")
                workers[worker].owners.append((number, file))
        mark = len(self.samples) - self._marked >= MARK_EVERY
        for worker, batch in zip(workers, batches, strict=True):
            if mark:
                batch.append("\0")
                worker.marks.append(len(self.samples))
            worker.send(os.fsencode("".join(batch)))  # one encode a batch
        if mark:
            self._marked = len(self.samples)

    def _heard(self, worker: _Worker, line: bytes) -> None:
        """A worker's line (on its reader thread): a mark, a file not linked, an error."""
        kind, _, rest = line.partition(b" ")
        with self._lock:
            if kind == b"D":  # the samples before a mark every worker is past are done
                worker.heard += 1
                if all(other.heard >= worker.heard for other in self._workers):
                    self._count(worker.marks[worker.heard - 1])
            elif kind == b"F":
                self._failed.add(worker.owners[int(rest)][0])
            elif kind == b"X" and self._error is None:
                code, _, number = rest.partition(b" ")
                self._error = (int(code), worker.owners[int(number)][1])

    def _count(self, boundary: int) -> None:
        """Progress: the linked samples before ``boundary`` not counted yet (a sample not
        linked counts when it is made from its shard; every failure before a mark is heard
        before it)."""
        failed = sum(1 for number in self._failed if self._counted <= number < boundary)
        self.progress.update(boundary - self._counted - failed)
        self._counted = boundary

    def finish(self) -> tuple[list[ExportedSample], set[str]]:
        """Wait for the workers; an error one met is raised, naming the file.  Each worker's
        last line is the mark after every request: a worker that ends without it (killed, or
        not the program it should be) has not linked what it was sent."""
        try:
            for worker in self._workers:
                worker.marks.append(len(self.samples))
                worker.send(b"\0")
                worker.send(None)
            codes = [worker.wait() for worker in self._workers]
            answered = all(worker.heard == len(worker.marks) for worker in self._workers)
        finally:
            self.close()
        if self._error is not None:
            code, file = self._error
            raise OSError(code, os.strerror(code), f"{self.tree.root}/{file.path}")
        if not answered or any(codes):
            raise OutputStateError(f"{self.tree.root}: a process linking unchanged files "
                                   f"{_ended(codes)} before it was done; rerun (the export "
                                   "resumes)")
        self._count(len(self.samples))
        failed = self._failed
        linked = [sample for number, sample in enumerate(self.samples) if number not in failed]
        return linked, {self.samples[number].key for number in failed}

    def close(self) -> None:
        """End the workers (killed when still at work) and close the folders.  Their
        ``Popen`` objects go here, with Ctrl-C held until they are gone: one freed later, as
        the export returns, could take the interrupt in its ``__del__``, which prints it and
        drops it."""
        with _signals_held():
            for worker in self._workers:
                worker.kill()
            self._workers = []
        super().close()


def _ended(codes: list[int]) -> str:
    """How the first worker that failed ended, in words."""
    code = next((code for code in codes if code), 0)
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"ended with exit {code}"


@contextlib.contextmanager
def _signals_held():
    """SIGINT and SIGTERM held (delivered on leaving) in this thread, where POSIX allows."""
    held = {signal.SIGINT, signal.SIGTERM}
    try:
        before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    except (AttributeError, OSError):
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


class _Worker:
    """One ``linkworker`` process, and the thread reading its lines."""

    def __init__(self, pairs: list[tuple[int, int]],
                 heard: Callable[[_Worker, bytes], None]):
        self.owners: list[tuple[int, ExportedFile]] = []  # request -> its sample and file
        self.marks: list[int] = []  # samples sent before each mark
        self.heard = 0  # marks heard back
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-S", str(WORKER), *(f"{s},{t}" for s, t in pairs)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            pass_fds=[fd for pair in pairs for fd in pair])
        try:
            fcntl.fcntl(self.process.stdin.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        except (OSError, AttributeError):  # not Linux, or over the system's pipe limit
            pass
        self._reader = threading.Thread(target=self._read, args=(heard,), daemon=True,
                                        name="shardsmith-link-reader")
        self._reader.start()

    def _read(self, heard: Callable[[_Worker, bytes], None]) -> None:
        for line in self.process.stdout:
            heard(self, line.rstrip(b"\n"))

    def send(self, data: bytes | None) -> None:
        """Requests to the worker; None: no more."""
        stdin = self.process.stdin
        try:
            if data is None:
                stdin.close()
            else:
                stdin.write(data)
                stdin.flush()
        except BrokenPipeError:  # the worker stopped: what it said, or its exit, tells why
            pass

    def wait(self) -> int:
        code = self.process.wait()
        self._reader.join()
        return code

    def kill(self) -> None:
        process = self.process
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdin, process.stdout):
            try:
                stream.close()
            except OSError:  # unsent requests of a killed worker
                pass


class LinksHere(_Links):
    """The links made in this process once every sample is sent: by a few threads, a chunk
    of samples each (``ExportTree.link_samples``, which also links over a file an earlier
    try left)."""

    def send(self, samples: Iterable[ExportedSample]) -> None:
        self._take(samples)

    def finish(self) -> tuple[list[ExportedSample], set[str]]:
        tree, source, samples = self.tree, self.source_root, self.samples

        def link_chunk(chunk: list[ExportedSample]) -> list[ExportedSample]:
            done = tree.link_samples(source, chunk)
            self.progress.update(len(done))
            return done

        try:
            for folder in {file.path.rpartition("/")[0] for sample in samples
                           for file in sample.files}:
                tree.link_folder(source, folder)  # by one thread, before the threads link
            with ThreadPoolExecutor(THREADS, thread_name_prefix="shardsmith-link") as pool:
                linked = [sample for done in pool.map(link_chunk, [
                    samples[start:start + CHUNK] for start in range(0, len(samples), CHUNK)])
                    for sample in done]
        finally:
            self.close()
        keys = {sample.key for sample in linked}
        return linked, {sample.key for sample in samples if sample.key not in keys}
