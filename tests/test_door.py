"""``shardsmith.door``, the one guarded door for every file shardsmith reads: what it opens,
what it refuses (and why, before reading a byte), how ``open_beneath`` walks a path; its
chunked reads, and the verified copy (``atomic.copy_verified``) built on them."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from shardsmith import door
from shardsmith.atomic import CopyMismatch, copy_verified
from shardsmith.door import Identity, Refused, chunks, open_beneath, open_file, read_file, sha256_of

REPO = Path(__file__).resolve().parents[1]
KIB = 1024


def refusal(call, *args, **kwargs) -> Refused:
    with pytest.raises(Refused) as caught:
        call(*args, **kwargs)
    return caught.value


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def in_a_fresh_process(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in another interpreter: a door that blocked would hang that one, which the
    timeout turns into a failure instead of a hung test run."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO,
                          capture_output=True, text=True, timeout=30,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def test_a_regular_file_is_read_whole_within_its_cap(tmp_path):
    path = write(tmp_path / "a.bin", b"x" * 1000)

    assert read_file(path, 1000) == b"x" * 1000


def test_a_fifo_opens_without_blocking_and_is_refused_as_not_a_file(tmp_path):
    fifo = tmp_path / "pipe.jpg"
    os.mkfifo(fifo)

    process = in_a_fresh_process(f"""
        from shardsmith.door import Refused, open_file
        try:
            open_file({str(fifo)!r}, 1 << 20)
        except Refused as exc:
            print(exc.reason, exc.detail)
    """)

    assert process.returncode == 0, process.stderr
    assert process.stdout.strip() == "not_a_file is not a regular file (a FIFO)"


def test_a_symlink_is_refused_unless_asked_to_follow(tmp_path):
    target = write(tmp_path / "target.bin", b"data")
    link = tmp_path / "link.bin"
    link.symlink_to(target)

    assert refusal(open_file, link, 1 << 20).reason == "link"
    assert read_file(link, 1 << 20, follow_symlinks=True) == b"data"


def test_a_link_to_dev_zero_is_refused_and_followed_is_not_a_regular_file(tmp_path):
    link = tmp_path / "zero.jpg"
    link.symlink_to("/dev/zero")

    assert refusal(open_file, link, 1 << 20).reason == "link"
    followed = refusal(open_file, link, 1 << 20, follow_symlinks=True)
    assert followed.reason == "not_a_file"
    assert "character device" in followed.detail


def test_a_directory_is_refused_as_not_a_file(tmp_path):
    (tmp_path / "folder.jpg").mkdir()

    refused = refusal(open_file, tmp_path / "folder.jpg", 1 << 20)

    assert refused.reason == "not_a_file" and "directory" in refused.detail


def test_a_file_over_its_cap_is_refused_before_a_byte_is_read(tmp_path, monkeypatch):
    path = tmp_path / "huge.jpg"
    with open(path, "wb") as handle:
        handle.truncate(64 * 1024 * KIB)  # sparse: 64 MiB of nothing on disk
    reads = []
    real_read = os.read
    monkeypatch.setattr(os, "read", lambda fd, n: reads.append(n) or real_read(fd, n))

    refused = refusal(read_file, path, 1024 * KIB)

    assert refused.reason == "too_large"
    assert "67,108,864 bytes" in refused.detail and "not read" in refused.detail
    assert reads == []


def test_a_file_that_grows_while_read_is_refused_as_changed(tmp_path):
    path = write(tmp_path / "growing.bin", b"a" * 100)

    with open_file(path, 1 << 20) as handle:
        with open(path, "ab") as writer:
            writer.write(b"b" * 100)
        refused = refusal(handle.read)

    assert refused.reason == "changed" and "100 bytes" in refused.detail


def test_a_file_with_the_identity_the_listing_saw_opens(tmp_path):
    path = write(tmp_path / "seen.bin", b"12345")
    info = path.stat()

    with open_file(path, 1 << 20, expect=Identity(info.st_ino, info.st_size)) as handle:
        assert handle.read() == b"12345"


@pytest.mark.parametrize("what", ["another inode", "another size"])
def test_a_file_that_is_not_the_one_the_listing_saw_is_refused_as_changed(tmp_path, what):
    path = write(tmp_path / "seen.bin", b"12345")
    info = path.stat()
    seen = Identity(info.st_ino + 1, info.st_size) if what == "another inode" \
        else Identity(info.st_ino, info.st_size + 1)

    assert refusal(open_file, path, 1 << 20, expect=seen).reason == "changed"


def test_pread_reads_within_the_file_and_refuses_past_the_cap(tmp_path):
    path = write(tmp_path / "a.bin", bytes(range(100)))

    with open_file(path, 100) as handle:
        assert handle.pread(10, 5) == bytes(range(5, 15))
        assert refusal(handle.pread, 10, 95).reason == "too_large"


def test_open_beneath_opens_a_plain_path_under_the_root(tmp_path):
    write(tmp_path / "root" / "cats" / "young" / "a.jpg", b"pixels")

    with open_beneath(str(tmp_path / "root"), "cats/young/a.jpg", 1 << 20) as handle:
        assert handle.read() == b"pixels"
        assert handle.path == str(tmp_path / "root" / "cats" / "young" / "a.jpg")


def test_open_beneath_refuses_a_folder_swapped_for_a_link_and_names_it(tmp_path):
    root = tmp_path / "root"
    write(root / "cats" / "young" / "a.jpg", b"inside")
    write(tmp_path / "outside" / "a.jpg", b"outside")
    (root / "cats" / "young").rename(tmp_path / "moved")
    (root / "cats" / "young").symlink_to(tmp_path / "outside")
    assert read_file(root / "cats" / "young" / "a.jpg", 1 << 20) == b"outside"  # O_NOFOLLOW
    # guards the last name only

    refused = refusal(open_beneath, str(root), "cats/young/a.jpg", 1 << 20)

    assert refused.reason == "link"
    assert "'cats/young'" in refused.detail


def test_open_beneath_refuses_a_link_as_the_last_name(tmp_path):
    root = tmp_path / "root"
    write(tmp_path / "outside.jpg", b"outside")
    (root / "cats").mkdir(parents=True)
    (root / "cats" / "a.jpg").symlink_to(tmp_path / "outside.jpg")

    assert refusal(open_beneath, str(root), "cats/a.jpg", 1 << 20).reason == "link"


@pytest.mark.parametrize("relpath", ["", "../outside.jpg", "cats/../../outside.jpg", "/etc/passwd",
                                     "cats//a.jpg", "./a.jpg"])
def test_open_beneath_refuses_a_path_that_is_not_plain(tmp_path, relpath):
    (tmp_path / "root").mkdir()
    write(tmp_path / "outside.jpg", b"outside")

    assert refusal(open_beneath, str(tmp_path / "root"), relpath, 1 << 20).reason == "not_a_file"


def test_open_beneath_applies_the_cap_to_the_file_it_reaches(tmp_path):
    write(tmp_path / "root" / "cats" / "big.jpg", b"x" * 2000)

    assert refusal(open_beneath, str(tmp_path / "root"), "cats/big.jpg", 1000).reason \
        == "too_large"


def test_chunks_read_a_range_in_reads_of_at_most_a_chunk_and_stop_where_the_file_ends(
        tmp_path, monkeypatch):
    data = os.urandom(10 * KIB)
    monkeypatch.setattr(door, "CHUNK", 4 * KIB)
    with open_file(write(tmp_path / "f", data), 64 * KIB) as handle:
        assert [len(part) for part in chunks(handle, len(data))] == [4096, 4096, 2048]
        assert b"".join(chunks(handle, 9000, 1000)) == data[1000:9000]
        assert b"".join(chunks(handle.fd, 64 * KIB, 5000)) == data[5000:]  # a descriptor too
        assert sha256_of(handle, 64 * KIB) == hashlib.sha256(data).hexdigest()


def test_a_verified_copy_is_published_with_its_sha256_and_leaves_no_temporary(tmp_path):
    data = os.urandom(100 * KIB)
    source, final = write(tmp_path / "source", data), tmp_path / "out" / "copy"
    final.parent.mkdir()
    with open_file(source, len(data)) as handle:
        digest = copy_verified(handle, final, len(data), hashlib.sha256(data).hexdigest())
    assert digest == hashlib.sha256(data).hexdigest() and final.read_bytes() == data
    assert os.listdir(final.parent) == ["copy"]


@pytest.mark.parametrize("expected", ["size", "sha256"])
def test_a_copy_that_is_not_what_was_expected_is_removed_and_never_published(tmp_path,
                                                                              expected):
    data = os.urandom(10 * KIB)
    source, final = write(tmp_path / "source", data), tmp_path / "out" / "copy"
    final.parent.mkdir()
    with open_file(source, len(data)) as handle, pytest.raises(CopyMismatch) as caught:
        copy_verified(handle, final, len(data) + (expected == "size"),
                      "0" * 64 if expected == "sha256" else None)
    assert caught.value.size == len(data)
    assert caught.value.sha256 == hashlib.sha256(data).hexdigest()
    assert os.listdir(final.parent) == []


def test_a_link_planted_under_the_spool_download_s_temporary_name_is_not_written_through(
        tmp_path):
    """The spool's download of a bucket's file opened its temporary file with ``open(..,
    "wb")``: a link under that name made it fill the file the link points to."""
    from shardsmith.atomic import tmp_path_for
    from shardsmith.errors import OutputStateError
    from shardsmith.packing.spool import download_checked

    class LocalObject:  # an object whose guarded open is a local file's
        def __init__(self, path: Path):
            self.path = path

        def __truediv__(self, name: str) -> LocalObject:
            return LocalObject(self.path / name)

        def open_guarded(self, cap: int):
            return open_file(self.path, cap)

    data = os.urandom(KIB)
    outside = write(tmp_path / "outside", b"not yours")
    source, final = write(tmp_path / "bucket" / "copy", data), tmp_path / "spool" / "copy"
    final.parent.mkdir()
    os.symlink(outside, tmp_path_for(final))
    with pytest.raises(OutputStateError, match="symbolic link"):
        download_checked(LocalObject(source.parent), final.parent, final.name, len(data),
                         hashlib.sha256(data).hexdigest())
    assert outside.read_bytes() == b"not yours" and not final.exists()
