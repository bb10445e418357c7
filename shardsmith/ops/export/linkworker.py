"""The program a link worker runs (``links.LinkWorkers``): hard links of unchanged files from
the previous export into the new one, by name between folder descriptors it inherits.

Run as ``python -I -S linkworker.py SOURCE_FD,TARGET_FD ...`` (the standard library only, so
it starts in about 10 ms).  Reads requests from stdin, each four NUL-terminated fields: the
folder (an index into the pairs of its arguments), the size and the inode number the file was
recorded with, and the file's name; an empty field where a request begins asks for ``D`` once
the requests before it are done.  Writes one line per event:

    F NUMBER          request NUMBER (counted from 0, marks not counted) was not linked (the
                      name is gone or a folder there, a link, not as written): its sample is
                      exported from its shard instead
    D                 every request before the mark is done
    X ERRNO NUMBER    request NUMBER met an error no other file would escape (a full disk, a
                      read-only one, too many links): the worker stops

SIGINT is ignored: a Ctrl-C reaches the export, which ends its workers; a worker whose export
is gone sees stdin end and stops.
"""

from __future__ import annotations

import errno
import os
import signal
import stat
import sys

# Not linked, the sample made from its shard instead: the name is gone or is a folder there
# (EPERM, EISDIR), is in the new folder already (only a run of ours writes there), or is on
# another file system (a version folder someone mounted: every run would fail alike).
NOT_A_FILE = frozenset((errno.ENOENT, errno.EPERM, errno.EACCES, errno.EISDIR, errno.EEXIST,
                        errno.EXDEV))


def as_written(info: os.stat_result, size: int, inode: int | None) -> bool:
    """``info`` is of the file an export wrote as ``size`` bytes in inode ``inode`` (its
    record's): regular, that size, that inode, and the permissions a create with 0o644 gives
    under some umask (0o600 to 0o644).  A file made unreadable (``chmod 000``) or executable
    in the previous version is not linked: the new version would share its mode, as a fresh
    export would not.  Nor is one swapped for a hard link to another file (the same size and
    mode, another inode): the new version would hold a file it did not write, shared with a
    name outside DEST.  The inode is compared, not the link count: a file unchanged through
    several kept versions has a link in each, so no count tells such a link from ours."""
    mode = info.st_mode
    return (info.st_ino == inode and mode & 0o170000 == stat.S_IFREG and info.st_size == size
            and mode & 0o600 == 0o600 and not mode & 0o7133)  # 0o7133: the bits 0o644 lacks


def _requests(read):
    """(folder, size, inode, name) per request, None per mark, from the byte blocks ``read``
    returns until it returns none; a request cut off at the end (the export gone) is
    dropped."""
    rest, pending = b"", []
    while block := read():
        fields = (rest + block).split(b"\0")
        rest = fields.pop()
        for field in fields:
            if not pending and not field:
                yield None
                continue
            pending.append(field)
            if len(pending) == 4:
                yield int(pending[0]), int(pending[1]), int(pending[2]), pending[3]
                pending = []


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    folders = [tuple(int(fd) for fd in pair.split(",")) for pair in argv]
    link, look, unlink, say = os.link, os.stat, os.unlink, os.write
    number = 0
    for request in _requests(lambda: os.read(0, 1 << 20)):
        if request is None:
            say(1, b"D\n")
            continue
        folder, size, inode, name = request
        source, target = folders[folder]
        try:
            link(name, name, src_dir_fd=source, dst_dir_fd=target, follow_symlinks=False)
        except OSError as exc:
            if exc.errno not in NOT_A_FILE:
                say(1, b"X %d %d\n" % (exc.errno, number))
                return 1
            say(1, b"F %d\n" % number)
        else:
            # a link made without following a symbolic link is whatever the source name is
            if not as_written(look(name, dir_fd=target, follow_symlinks=False), size, inode):
                unlink(name, dir_fd=target)
                say(1, b"F %d\n" % number)
        number += 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BrokenPipeError:  # the export is gone: nothing to tell
        sys.exit(1)
