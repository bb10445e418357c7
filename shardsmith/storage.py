"""Object storage: datasets at ``s3://bucket/prefix``, read through fsspec and s3fs.

A dataset's location is either a local ``Path`` (read exactly as before: local paths never go
through fsspec) or an ``ObjectPath``, which joins names with ``/`` like a ``Path`` and opens
through the guarded door (``door.open_file`` hands it to ``ObjectPath.open_guarded``):

* an object is read by ranged GETs within the size its listing gives and the cap of its kind,
  never by an unbounded read; a prefix (a "directory") is ``Refused`` ``not_a_file`` and a
  missing object a ``FileNotFoundError``, as locally;
* keys obey the rules of file names: no ``..`` or ``.``, no empty segment, no trailing ``/``;
* endpoint, credentials and region come from the standard AWS variables (``AWS_ENDPOINT_URL``
  for MinIO) or from storage options (``--storage KEY=VALUE``) handed to s3fs.  They
  are kept in the client alone: an ``ObjectPath`` prints as its URL, and every error of the
  client reaches us as an ``OSError`` whose text has each known secret replaced by ``***``.
"""

from __future__ import annotations

import errno
import io
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from .errors import ConfigError

SCHEME = "s3://"
# Bucket names as S3 defines them (3-63 characters, lower case, digits, dots, hyphens).
BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
SEGMENT_CAP = 1024  # S3's own limit on a whole key, in bytes
# Attempts of one request (a 503, a reset, a timeout), with botocore's jittered backoff: on a
# server failing 1 request in 100, a request fails for good with odds 1e-12; a server that does
# not answer at all is given up after ~30 s (measured, docs/storage.md).
ATTEMPTS = 6
# Options a user may hand to s3fs, each to where s3fs takes it.
OPTIONS = {
    "endpoint_url": "endpoint_url", "region": "region_name", "key": "key", "secret": "secret",
    "token": "token", "profile": "profile", "anon": "anon",
}
SECRET_OPTIONS = ("secret", "token", "key")
SECRET_VARIABLES = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
                    "AWS_ACCESS_KEY_ID")

T = TypeVar("T")


def is_url(location: object) -> bool:
    """Whether ``location`` names an object store (an ``s3://`` URL or an ``ObjectPath``)."""
    return isinstance(location, ObjectPath) or (
        isinstance(location, str) and location.startswith(SCHEME))


def location(value: str | os.PathLike | ObjectPath,
             options: Mapping[str, str] | None = None) -> Path | ObjectPath:
    """The dataset at ``value``: an ``ObjectPath`` for an ``s3://`` URL, else ``Path(value)``
    (untouched: a local path behaves exactly as before).  ConfigError for a bad URL."""
    if isinstance(value, ObjectPath):
        return value
    if is_url(value):
        return locate(str(value), options)
    if options:
        raise ConfigError("--storage: only for an s3:// dataset")
    return Path(value)


def locate(url: str, options: Mapping[str, str] | None = None) -> ObjectPath:
    """The ``ObjectPath`` of ``s3://bucket/prefix``, with a client made from ``options`` and
    the AWS variables.  ConfigError (one line, exit 2) when the URL breaks the rules."""
    if not url.startswith(SCHEME):
        raise ConfigError(f"{url}: not an {SCHEME} URL")
    bucket, _, key = url[len(SCHEME):].partition("/")
    if "@" in bucket or ":" in bucket:  # user:secret@bucket: never echoed
        raise ConfigError(f"{SCHEME}...: credentials in the URL are refused (give them in "
                          "the AWS variables or --storage)")
    if not BUCKET.fullmatch(bucket):
        raise ConfigError(f"{SCHEME}{bucket}: not a bucket name (3-63 characters: a-z, 0-9, "
                          "dots and hyphens)")
    if key:
        check_key(key, url)
    return ObjectPath(client(options), bucket, key)


def check_key(key: str, where: str) -> None:
    """ConfigError unless ``key`` is a plain relative name: segments joined by single ``/``,
    none empty, ``.`` or ``..``, no trailing ``/``, no control character."""
    segments = key.split("/")
    if any(segment in ("", ".", "..") for segment in segments):
        raise ConfigError(f"{where}: an object key with an empty, '.' or '..' segment or a "
                          "trailing '/' (keys follow the rules of file names)")
    if len(key.encode("utf-8", "surrogateescape")) > SEGMENT_CAP:
        raise ConfigError(f"{where}: an object key longer than {SEGMENT_CAP} bytes")
    if any(ord(char) < 32 or ord(char) == 127 for char in key):
        raise ConfigError(f"{where}: an object key with a control character")


def parse_options(pairs: Iterable[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings (``--storage``) as a mapping; ConfigError naming the key
    (never the value: it may be a secret) for an unknown one."""
    options = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals:
            raise ConfigError("--storage: expected KEY=VALUE (keys: "
                              + ", ".join(OPTIONS) + ")")
        if name not in OPTIONS:
            raise ConfigError(f"--storage: unknown key {name!r} (keys: "
                              + ", ".join(OPTIONS) + ")")
        options[name] = value
    return options


def client(options: Mapping[str, str] | None = None) -> Any:
    """An s3fs file system for ``options`` and the AWS variables (a fresh one: no cached
    listing or instance is shared with another dataset)."""
    try:
        import s3fs
    except ImportError:
        raise ConfigError("s3:// datasets need s3fs: pip install s3fs") from None
    options = dict(options or {})
    kwargs: dict[str, Any] = {
        "skip_instance_cache": True,
        "use_listings_cache": False,  # a listing must be the bucket's now, not a minute ago
        "config_kwargs": {"retries": {"max_attempts": ATTEMPTS, "mode": "standard"}},
    }
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        kwargs["endpoint_url"] = endpoint
    for name, value in options.items():
        if name not in OPTIONS:
            raise ConfigError(f"storage: unknown key {name!r}")
        if name == "region":
            kwargs.setdefault("client_kwargs", {})["region_name"] = value
        elif name == "anon":
            kwargs["anon"] = value.lower() in ("1", "true", "yes")
        else:
            kwargs[OPTIONS[name]] = value
    secrets = tuple(value for name, value in options.items()
                    if name in SECRET_OPTIONS and value)
    try:
        filesystem = s3fs.S3FileSystem(**kwargs)
    except Exception as exc:  # noqa: BLE001 - any client error becomes one scrubbed line
        raise ConfigError("s3: cannot make a client: "
                          + scrub(str(exc) or type(exc).__name__, secrets)) from None
    return _Client(filesystem, secrets)


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every credential we know of (options, AWS variables) replaced by ``***``."""
    known = [value for value in secrets if value]
    known += [os.environ[name] for name in SECRET_VARIABLES if os.environ.get(name)]
    for value in sorted(set(known), key=len, reverse=True):
        if len(value) >= 4:  # a shorter one would blank out ordinary words
            text = text.replace(value, "***")
    return text


class _Client:
    """The s3fs file system and the secrets to scrub from its errors; ``call`` runs one of its
    methods and turns whatever it raises into an ``OSError`` of the object's URL."""

    __slots__ = ("fs", "secrets")

    def __init__(self, filesystem: Any, secrets: tuple[str, ...]):
        self.fs = filesystem
        self.secrets = secrets

    def __repr__(self) -> str:
        return "<s3 client>"

    def call(self, url: str, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            return method(*args, **kwargs)
        except FileNotFoundError:
            raise FileNotFoundError(errno.ENOENT, "no such object", url) from None
        except PermissionError as exc:
            raise PermissionError(errno.EACCES, "access denied: "
                                  + scrub(str(exc), self.secrets), url) from None
        except Exception as exc:  # noqa: BLE001 - botocore, aiohttp: one scrubbed OSError
            detail = scrub(str(exc) or type(exc).__name__, self.secrets)
            raise OSError(errno.EIO, f"object storage: {detail}", url) from None


class ObjectPath:
    """An object (or a prefix) in a bucket; ``/`` joins a name as ``Path`` does, and ``str``
    gives the URL (never a credential)."""

    __slots__ = ("client", "bucket", "key")

    def __init__(self, client: _Client, bucket: str, key: str):
        self.client = client
        self.bucket = bucket
        self.key = key

    def __truediv__(self, name: str) -> ObjectPath:
        check_key(name, f"{self}/{name}")
        return ObjectPath(self.client, self.bucket, f"{self.key}/{name}" if self.key else name)

    def __str__(self) -> str:
        return f"{SCHEME}{self.path}"

    def __repr__(self) -> str:
        return f"ObjectPath({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ObjectPath) and (self.bucket, self.key) == (other.bucket,
                                                                              other.key)

    def __hash__(self) -> int:
        return hash((self.bucket, self.key))

    @property
    def path(self) -> str:
        """The bucket and key, as fsspec takes them."""
        return f"{self.bucket}/{self.key}" if self.key else self.bucket

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1] if self.key else self.bucket

    def info(self) -> dict[str, Any]:
        """What the store says of it (``type``, ``size``); FileNotFoundError when absent."""
        return self.client.call(str(self), self.client.fs.info, self.path)

    def exists(self) -> bool:
        """Whether an object (not a prefix) of this name exists."""
        try:
            return self.info().get("type") == "file"
        except FileNotFoundError:
            return False

    def is_file(self) -> bool:
        return self.exists()

    def names(self) -> list[str]:
        """The names of the objects directly under this prefix (not of deeper prefixes)."""
        try:
            listing = self.client.call(str(self), self.client.fs.ls, self.path, detail=True)
        except FileNotFoundError:
            return []
        return sorted(entry["name"].rsplit("/", 1)[-1] for entry in listing
                      if entry.get("type") == "file")

    def open_guarded(self, cap: int, expect_size: int | None = None) -> ObjectFile:
        """The door's ``open_file`` for an object: Refused (``not_a_file``, ``too_large``,
        ``changed``) or OSError (missing, unreachable), as for a local file."""
        from .door import Refused

        info = self.info()
        if info.get("type") != "file":
            raise Refused("not_a_file", "is not an object (a prefix: a \"directory\")",
                          str(self))
        size = int(info.get("size") or 0)
        if size > cap:
            raise Refused("too_large", f"{size:,} bytes is more than the {cap:,} allowed "
                          "for it (not read)", str(self))
        if expect_size is not None and size != expect_size:
            raise Refused("changed", "is not the object the listing saw (another size)",
                          str(self))
        return ObjectFile(self, size, cap, info)


class ObjectFile:
    """An object opened through the door: its ``size`` when opened; every read is a ranged GET
    within it (``pread`` in chunks: memory stays at one chunk, whatever the object's size).
    ``head``: what the store said of it when opened (``ETag``, ``LastModified``)."""

    __slots__ = ("location", "path", "size", "cap", "fd", "head")

    def __init__(self, location: ObjectPath, size: int, cap: int,
                 head: Mapping[str, Any] | None = None):
        self.location = location
        self.head = dict(head or {})
        self.path = str(location)
        self.size = size
        self.cap = cap
        self.fd = -1  # no descriptor: callers that need one read a local file only

    def pread(self, length: int, offset: int) -> bytes:
        """``length`` bytes at ``offset`` (fewer at the end of the object)."""
        from .door import Refused

        if offset < 0 or length < 0 or offset + length > self.cap:
            raise Refused("too_large", f"a read of {length:,} bytes at {offset:,} is out of "
                          "bounds", self.path)
        end = min(offset + length, self.size)
        if end <= offset:
            return b""
        client = self.location.client
        data = client.call(self.path, client.fs.cat_file, self.location.path, start=offset,
                           end=end)
        if len(data) > end - offset:  # a server that ignores the range: never trusted
            raise Refused("changed", f"answered {len(data):,} bytes to a read of "
                          f"{end - offset:,}", self.path)
        return data

    def read(self) -> bytes:
        """Every byte, in one ranged GET; ``Refused`` (``changed``) when the object shrank
        since it was opened."""
        from .door import Refused

        data = self.pread(self.size, 0)
        if len(data) != self.size:
            raise Refused("changed", f"shrank below the {self.size:,} bytes it had when "
                          "opened (being rewritten?)", self.path)
        return data

    def stream(self, chunk: int = 8 << 20) -> io.BufferedReader:
        """A binary reader over the object, one ranged GET of ``chunk`` bytes at a time."""
        return io.BufferedReader(_RangeReader(self), buffer_size=chunk)

    def close(self) -> None:
        pass

    def __enter__(self) -> ObjectFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _RangeReader(io.RawIOBase):
    def __init__(self, handle: ObjectFile):
        self.handle = handle
        self.offset = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.handle.pread(min(len(buffer), self.handle.size - self.offset), self.offset)
        buffer[:len(data)] = data
        self.offset += len(data)
        return len(data)
