"""Object storage: datasets at ``s3://bucket/prefix``, read through fsspec and s3fs.

A dataset's location (``Location``) is either a local ``Path`` (read exactly as before: local
paths never go through fsspec) or a store's (``BACKENDS``; here ``ObjectPath``), which
answers what the commands ask of a ``Path`` (join with ``/``, ``name``, ``exists``,
``is_file``, ``resolve``, ``parents``) and opens through the guarded door (``door.open_file``
hands it to ``ObjectPath.open_guarded``):

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

import asyncio
import errno
import io
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import quote, unquote

from .errors import ConfigError
from .text import cut

SCHEME = "s3://"
# Bucket names as S3 defines them (3-63 characters, lower case, digits, dots, hyphens).
BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
SEGMENT_CAP = 1024  # S3's own limit on a whole key, in bytes
# Attempts of one request (a 503, a reset, a timeout), with botocore's jittered backoff: on a
# server failing 1 request in 100, a request fails for good with odds 1e-12; a server that does
# not answer at all is given up after ~30 s (measured, docs/storage.md).
ATTEMPTS = 6
# Seconds to wait for a connection, and for the next bytes of an answer (botocore waits 60 s
# for each, times ATTEMPTS: a server that accepts and never answers held a command ~7 min).
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 30.0
# A whole call (every attempt of its request) is given up after DEADLINE_READS read timeouts,
# plus a second per MiB it moves: a server trickling a byte a second, which no read timeout
# catches, cannot hold a bounded ranged GET forever.
DEADLINE_READS = 4
SLOWEST_RATE = 1 << 20  # bytes a second
# Calls that page through many requests (a LIST of 1,000 keys a page, a DELETE of 1,000 a
# request) get this many deadlines: a listing of a million keys is 1,000 pages.
MANY_REQUESTS = {"find": 20, "ls": 20, "rm": 20, "walk": 20}
# Options a user may hand to s3fs, each to where s3fs takes it; the two timeouts are ours.
OPTIONS = {
    "endpoint_url": "endpoint_url", "region": "region_name", "key": "key", "secret": "secret",
    "token": "token", "profile": "profile", "anon": "anon",
    "connect_timeout": "connect_timeout", "read_timeout": "read_timeout",
}
IP_ADDRESS = re.compile(r"\d{1,3}(\.\d{1,3}){3}")
SECRET_OPTIONS = ("secret", "token", "key")
SECRET_VARIABLES = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
                    "AWS_ACCESS_KEY_ID")

T = TypeVar("T")


class Location(Protocol):
    """Where a dataset (or a source) is, as the commands use it: a local ``Path``, or a
    store's location, made from its URL by the function ``BACKENDS`` names for its scheme
    (tests/test_storage_backend.py).  A store's location answers these and, to be read,
    ``open_guarded(cap, expect_size)`` (a handle like ``ObjectFile``: ``size``, ``fd`` -1,
    ``pread``, ``read``, ``stream``, ``close``, ``head``) and ``info()``; to be listed,
    ``listing()``, ``names()`` and ``find(prefix)``; to be packed to, ``put(body, if_match,
    if_absent)`` and ``delete(*names)`` (docs/storage.md, "Other stores")."""

    name: str
    parents: Any

    def __truediv__(self, name: str) -> Any: ...

    def exists(self) -> bool: ...

    def is_file(self) -> bool: ...

    def resolve(self) -> Any: ...

    def expanduser(self) -> Any: ...


def is_url(location: object) -> bool:
    """Whether ``location`` names an object store: a URL of a scheme in ``BACKENDS``, or a
    location that opens through the door without a descriptor (``open_guarded``)."""
    if isinstance(location, str):
        return location.startswith(tuple(BACKENDS))
    return hasattr(location, "open_guarded")


def location(value: str | os.PathLike | Location,
             options: Mapping[str, str] | None = None) -> Location:
    """The dataset at ``value``: its backend's location for a URL (``BACKENDS``), else
    ``Path(value)`` (untouched: a local path behaves exactly as before).  ConfigError for a
    bad URL."""
    if is_url(value) and not isinstance(value, str):
        return value  # type: ignore[return-value]
    for scheme, make in BACKENDS.items():
        if isinstance(value, str) and value.startswith(scheme):
            return make(value, options)
    unknown = re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", value) if isinstance(value, str) else None
    if unknown:  # gs://b/ds would be a local folder "gs:", quietly
        shown = cut(value, 200)
        raise ConfigError(f"{shown}: no storage backend for {unknown[0]} (known: "
                          f"{', '.join(BACKENDS)}); a local folder of that name: ./{shown}")
    if options:
        raise ConfigError("--storage: only for an s3:// dataset")
    return Path(value)  # type: ignore[arg-type]


def locate(url: str, options: Mapping[str, str] | None = None) -> ObjectPath:
    """The ``ObjectPath`` of ``s3://bucket/prefix``, with a client made from ``options`` and
    the AWS variables.  ConfigError (one line, exit 2) when the URL breaks the rules."""
    if not url.startswith(SCHEME):
        raise ConfigError(f"{url}: not an {SCHEME} URL")
    bucket, _, key = url[len(SCHEME):].partition("/")
    if "@" in bucket or ":" in bucket:  # user:secret@bucket: never echoed
        raise ConfigError(f"{SCHEME}...: credentials in the URL are refused (give them in "
                          "the AWS variables or --storage)")
    if not BUCKET.fullmatch(bucket) or ".." in bucket:
        raise ConfigError(f"{SCHEME}{cut(bucket)}: not a bucket name (3-63 characters: a-z, "
                          "0-9, dots and hyphens)")
    if IP_ADDRESS.fullmatch(bucket):
        raise ConfigError(f"{SCHEME}{bucket}: not a bucket name (S3 forbids names that look "
                          "like an IP address; give the server in AWS_ENDPOINT_URL or "
                          "--storage endpoint_url=...)")
    if key:
        check_key(key, url)
    return ObjectPath(client(options), bucket, key)


# URL scheme -> the function making a location of a URL and its storage options: a new
# backend (GCS, Azure through fsspec) is a module with such a function and its location class.
BACKENDS: dict[str, Callable[[str, Mapping[str, str] | None], Location]] = {SCHEME: locate}


def check_key(key: str, where: str) -> None:
    """ConfigError unless ``key`` is a plain relative name: segments joined by single ``/``,
    none empty, ``.`` or ``..``, no trailing ``/``, no control character."""
    segments = key.split("/")
    where = cut(where, 120)
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
        if name == "anon":
            flag(value, "--storage anon")
        elif name in ("connect_timeout", "read_timeout"):
            _seconds(value, name)
        options[name] = value
    return options


FLAGS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}


def flag(value: str, name: str = "storage.anon") -> bool:
    """``true``/``false`` (or 1/0, yes/no) as a bool; ConfigError for anything else, which
    would otherwise read as false and send the credentials a user meant to leave out."""
    try:
        return FLAGS[value.strip().lower()]
    except KeyError:
        raise ConfigError(f"{name}: expected true or false (1/0, yes/no)") from None


def client(options: Mapping[str, str] | None = None) -> Any:
    """An s3fs file system for ``options`` and the AWS variables (a fresh one: no cached
    listing or instance is shared with another dataset)."""
    try:
        import s3fs
    except ImportError:
        raise ConfigError("s3:// datasets need s3fs: pip install s3fs") from None
    options = dict(options or {})
    timeouts = {name: _seconds(options.pop(name), name)
                for name in ("connect_timeout", "read_timeout") if name in options}
    connect = timeouts.get("connect_timeout", CONNECT_TIMEOUT)
    read = timeouts.get("read_timeout", READ_TIMEOUT)
    kwargs: dict[str, Any] = {
        "skip_instance_cache": True,
        "use_listings_cache": False,  # a listing must be the bucket's now, not a minute ago
        "config_kwargs": {"retries": {"max_attempts": ATTEMPTS, "mode": "standard"},
                          "connect_timeout": connect, "read_timeout": read},
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
            kwargs["anon"] = flag(value)
        else:
            kwargs[OPTIONS[name]] = value
    secrets = tuple(value for name, value in options.items()
                    if name in SECRET_OPTIONS and value)
    secrets += _userinfo(options.get("endpoint_url", ""))
    _KNOWN_SECRETS.update(secrets)  # for the log records of the client's libraries
    try:
        filesystem = s3fs.S3FileSystem(**kwargs)
    except Exception as exc:  # noqa: BLE001 - any client error becomes one scrubbed line
        raise ConfigError("s3: cannot make a client: "
                          + scrub(str(exc) or type(exc).__name__, secrets)) from None
    return _Client(filesystem, secrets, DEADLINE_READS * read + connect)


def _seconds(value: str, name: str) -> float:
    """A timeout option: seconds, more than 0 and at most an hour; ConfigError otherwise."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= 3600:
        raise ConfigError(f"storage: {name} must be seconds, more than 0 and at most 3600")
    return seconds


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every credential we know of (options, AWS variables, the user and
    password of an endpoint URL) replaced by ``***``, and the user part of any URL in it."""
    known = [value for value in secrets if value] + list(_KNOWN_SECRETS)
    known += [os.environ[name] for name in SECRET_VARIABLES if os.environ.get(name)]
    for name in ENDPOINT_VARIABLES:
        known += _userinfo(os.environ.get(name, ""))
    for value in sorted(set(known), key=len, reverse=True):
        if len(value) >= 4:  # a shorter one would blank out ordinary words
            text = text.replace(value, "***")
    return USERINFO.sub(r"\1***@", text)


ENDPOINT_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")
# ``scheme://user:password@host``: the part before the ``@`` of a URL's authority, up to
# its LAST ``@`` within the URL (a password may hold a ``/`` or an ``@`` that its writer did
# not escape; a quote, a backtick or a blank ends the URL in a message).
USERINFO = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^\s'\"`<>]*@")
# Secrets of the clients made in this process (options and job files): the log filter
# scrubs them from every record, whichever library wrote it.
_KNOWN_SECRETS: set[str] = set()


def _userinfo(url: str) -> tuple[str, ...]:
    """The password of ``url`` (``http://user:secret@host``), as written and decoded: a
    secret wherever it appears, not only inside the URL (the user name is not one: scrubbed
    everywhere, ``minio`` would blank out host names)."""
    found = USERINFO.match(url or "")
    if not found:
        return ()
    password = found.group(0)[len(found.group(1)):-1].partition(":")[2]
    return tuple({password, unquote(password), quote(password, safe="")} - {""})


class SecretFilter(logging.Filter):
    """Scrubs every record a handler prints (ours and botocore's, aiobotocore's and s3fs's,
    which dump requests, their headers and the endpoint at debug level): each secret
    ``scrub`` knows, and the user part of every URL.  The record is rewritten in place, so
    its message, arguments and traceback never reach the handler's stream unscrubbed."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record: the handler reports it, as ever
            return True
        scrubbed = scrub(message)
        if scrubbed != message or record.args:
            record.msg, record.args = scrubbed, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = scrub(record.exc_text)
            record.exc_info = None  # formatted and scrubbed: not formatted again
        if record.stack_info:
            record.stack_info = scrub(record.stack_info)
        return True


class StoreError(OSError):
    """The store failed a request (a 5xx after every attempt, no answer, a reset): exit 1,
    whatever the command, since the input may be sound; never a ManifestError (exit 2)."""


class NoSuchBucket(FileNotFoundError):
    """The URL's bucket does not exist: said so, not "no manifest" (exit 2, as a missing
    dataset)."""


class _Client:
    """The s3fs file system and the secrets to scrub from its errors; ``call`` runs one of its
    methods and turns whatever it raises into an ``OSError`` of the object's URL."""

    __slots__ = ("fs", "secrets", "deadline")

    def __init__(self, filesystem: Any, secrets: tuple[str, ...], deadline: float = 0.0):
        self.fs = filesystem
        self.secrets = secrets
        self.deadline = deadline  # seconds for a call moving little; 0: none

    def __repr__(self) -> str:
        return "<s3 client>"

    def call(self, url: str, method: Callable[..., T], *args: Any, moves: int = 0,
             **kwargs: Any) -> T:
        """``method(*args, **kwargs)`` within the deadline of a call moving ``moves`` bytes
        (a ranged GET: its range; an upload: its file's size)."""
        deadline = self._deadline(method, args, kwargs, moves)
        try:
            if deadline:
                return method(*args, timeout=deadline, **kwargs)
            return method(*args, **kwargs)
        except FileNotFoundError as exc:
            if _no_bucket(exc):
                raise NoSuchBucket(errno.ENOENT, "the bucket does not exist (on this server: "
                                   "check the URL and AWS_ENDPOINT_URL)", cut(url, 200)) \
                    from None
            raise FileNotFoundError(errno.ENOENT, "no such object", cut(url, 200)) from None
        except PermissionError as exc:
            raise PermissionError(errno.EACCES, "access denied: "
                                  + scrub(str(exc), self.secrets), url) from None
        except Exception as exc:  # noqa: BLE001 - botocore, aiohttp: one scrubbed OSError
            if _misconfigured(exc):
                raise ConfigError(f"{cut(url, 200)}: the client refuses the store's settings "
                                  "(--storage, AWS_*): "
                                  + cut(scrub(str(exc) or type(exc).__name__, self.secrets),
                                        200)) from None
            if _timed_out(exc):
                raise StoreError(errno.ETIMEDOUT, f"object storage: no whole answer within "
                              f"{deadline:.0f} s ({ATTEMPTS} attempts); the store is down or "
                              "too slow (--storage read_timeout=...)", cut(url, 200)) from None
            detail = cut(scrub(str(exc) or type(exc).__name__, self.secrets), 200)
            raise StoreError(errno.EIO, f"object storage: {detail}", cut(url, 200)) from None

    def _deadline(self, method: Callable, args: tuple, kwargs: dict, moves: int) -> float:
        """Seconds for the whole call: a deadline only fsspec's blocking methods take."""
        if not self.deadline or not hasattr(method, "__wrapped__"):
            return 0.0
        name = getattr(method, "__name__", "").lstrip("_")
        if name in MANY_REQUESTS:
            return self.deadline * MANY_REQUESTS[name]
        if not moves and name == "cat_file":
            moves = max(0, int(kwargs.get("end") or 0) - int(kwargs.get("start") or 0))
        if not moves and name == "put_file" and args:
            try:
                moves = os.path.getsize(args[0])
            except (OSError, TypeError):
                moves = 0
        return self.deadline + moves / SLOWEST_RATE


def _timed_out(exc: BaseException) -> bool:
    """A deadline or a timeout of the client, by name (fsspec, asyncio, aiohttp, botocore)."""
    return isinstance(exc, TimeoutError) or "Timeout" in type(exc).__name__


# botocore's refusals of a setting (a profile, a region, an endpoint URL), by class name:
# no rerun fixes them.  A ValueError is a value we handed the client (botocore's bad region
# and bad endpoint, aiohttp's InvalidURL are ValueErrors).
MISCONFIGURED = frozenset({"ValueError", "ProfileNotFound", "ConfigNotFound", "ConfigParseError",
                           "InvalidConfigError", "NoRegionError", "BaseEndpointResolverError",
                           "EndpointProviderError"})


def _misconfigured(exc: BaseException) -> bool:
    """A refusal of the client's settings rather than a failure of the store."""
    return any(kind.__name__ in MISCONFIGURED for kind in type(exc).__mro__)


def _no_bucket(exc: FileNotFoundError) -> bool:
    """A whole bucket missing (s3fs says so in its text; a HEAD of a key cannot)."""
    text = str(exc)
    return "NoSuchBucket" in text or "bucket does not exist" in text.lower()


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

    # A prefix is never inside a local folder nor holds one, and has no other spelling.
    parents: tuple = ()

    def resolve(self) -> ObjectPath:
        return self

    def expanduser(self) -> ObjectPath:
        return self

    def listing(self) -> dict[str, dict[str, Any]]:
        """name -> what one LIST says of each object and prefix directly under this prefix
        (``type``: ``file`` or ``directory``, ``size``, ``ETag``); empty when there is none."""
        try:
            entries = self.client.call(str(self), self.client.fs.ls, self.path, detail=True)
        except FileNotFoundError:
            return {}
        return {str(entry["name"]).rsplit("/", 1)[-1]: entry for entry in entries}

    def names(self) -> list[str]:
        """The names of the objects directly under this prefix (not of deeper prefixes)."""
        return sorted(name for name, entry in self.listing().items()
                      if entry.get("type") == "file")

    def find(self, prefix: str = "") -> dict[str, dict[str, Any]]:
        """Key under this prefix -> what the listing says of it (as ``listing``), for every
        object at any depth whose key there starts with ``prefix``: LIST requests alone, paged
        by 1,000 keys.  FileNotFoundError when the store has no such prefix."""
        found = self.client.call(f"{self}/{prefix}", self.client.fs.find, self.path,
                                 prefix=prefix, detail=True)
        base = self.path + "/"
        return {name.removeprefix(base): dict(info) for name, info in found.items()
                if name.startswith(base) and info.get("type", "file") == "file"}

    def put(self, body: bytes | Path, if_match: str | None = None,
            if_absent: bool = False) -> str:
        """Write the object whole (``body``: bytes, or a local file sent from disk) and return
        the ETag the store gives it; a reader sees the old object or the new one, never a
        part.  ``if_absent``/``if_match``: only where there is none / over the object of that
        ETag, else an OSError naming S3's ``PreconditionFailed`` (412).  A file over two parts
        (2 x 50 MiB) goes as a multipart upload, visible only when complete: a killed run
        leaves an unfinished one, invisible to readers, that the next aborts
        (``abort_uploads``)."""
        client = self.client
        if isinstance(body, Path):
            client.call(str(self), client.fs.put_file, str(body), self.path)
            return str(client.call(str(self), client.fs.info, self.path).get("ETag") or "")
        condition = {"IfNoneMatch": "*"} if if_absent else \
            {"IfMatch": if_match} if if_match else {}
        answer = client.call(str(self), client.fs.call_s3, "put_object", Bucket=self.bucket,
                             Key=self.key, Body=body, **condition)
        return str(answer.get("ETag") or "") if isinstance(answer, dict) else ""

    def delete(self, *names: str) -> None:
        """Delete the objects ``self / name`` of ``names`` (1,000 a request), or this object
        without them."""
        if names:
            self.client.call(str(self), self.client.fs.rm, [(self / name).path for name in names])
        else:
            self.client.call(str(self), self.client.fs.rm_file, self.path)

    def abort_uploads(self) -> int:
        """Abort the multipart uploads left unfinished under this prefix (by a killed run:
        the lease holder is the only writer); returns how many.  S3's alone: a store that
        publishes nothing before it is whole has no such method."""
        client = self.client
        answer = client.call(str(self), client.fs.call_s3, "list_multipart_uploads",
                             Bucket=self.bucket, Prefix=f"{self.key}/")
        uploads = answer.get("Uploads") or []
        for upload in uploads:
            client.call(str(self), client.fs.call_s3, "abort_multipart_upload",
                        Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"])
        return len(uploads)

    def open_listed(self, size: int, cap: int) -> ObjectFile:
        """The door for an object whose ``size`` a listing just gave: no request is made
        (``Refused`` ``too_large`` over ``cap``); every read is one ranged GET whose answer
        must be of an object of that size, and of the ETag of the answers before it
        (``Refused`` ``changed`` otherwise).  ``head`` is filled from the first answer."""
        from .door import Refused

        if size > cap:
            raise Refused("too_large", f"{size:,} bytes is more than the {cap:,} allowed "
                          "for it (not read)", str(self))
        return ObjectFile(self, size, cap, listed=True)

    def get_range(self, start: int, end: int) -> tuple[bytes, dict[str, Any] | None]:
        """Bytes ``start`` to ``end`` (excluded) in one ranged GET, and what its answer said of
        the object (``ContentRange``, ``ETag``, ``LastModified``); None for the answer when
        the object now ends before ``start`` (416)."""
        client = self.client
        getter = fsspec_sync(_get_range, client.fs)
        return client.call(str(self), getter, client.fs, self.bucket, self.key, start, end,
                           moves=end - start)

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

    __slots__ = ("location", "path", "size", "cap", "fd", "head", "listed")

    def __init__(self, location: ObjectPath, size: int, cap: int,
                 head: Mapping[str, Any] | None = None, listed: bool = False):
        self.location = location
        self.head = dict(head or {})
        self.path = str(location)
        self.size = size
        self.cap = cap
        self.fd = -1  # no descriptor: callers that need one read a local file only
        self.listed = listed  # opened without a HEAD (``open_listed``): answers are checked

    def pread(self, length: int, offset: int) -> bytes:
        """``length`` bytes at ``offset`` (fewer at the end of the object)."""
        from .door import Refused

        if offset < 0 or length < 0 or offset + length > self.cap:
            raise Refused("too_large", f"a read of {length:,} bytes at {offset:,} is out of "
                          "bounds", self.path)
        end = min(offset + length, self.size)
        if end <= offset:
            return b""
        if self.listed:
            data = self._answered(offset, end)
        else:
            client = self.location.client
            data = client.call(self.path, client.fs.cat_file, self.location.path,
                               start=offset, end=end)
        if len(data) > end - offset:  # a server that ignores the range: never trusted
            raise Refused("changed", f"answered {len(data):,} bytes to a read of "
                          f"{end - offset:,}", self.path)
        return data

    def _answered(self, start: int, end: int) -> bytes:
        """A ranged GET of an object opened without a HEAD: its answer must name an object of
        the listed size and the ETag of the answers before it; ``head`` keeps what it said."""
        from .door import Refused

        data, answer = self.location.get_range(start, end)
        if answer is None:
            raise Refused("changed", f"ends before byte {start:,} now, not at the "
                          f"{self.size:,} bytes listed (rewritten since)", self.path)
        total = _whole_size(answer)
        if total is not None and total != self.size:
            raise Refused("changed", f"is not the object the listing saw ({total:,} bytes, "
                          f"not {self.size:,}: rewritten since)", self.path)
        etag = answer.get("ETag")
        if self.head.get("ETag") and not etag:
            raise Refused("changed", "the store gave no ETag with this read (it gave one "
                          "before), so it cannot be told from a rewrite", self.path)
        if self.head.get("ETag") and etag != self.head["ETag"]:
            raise Refused("changed", "was rewritten between two reads (another ETag)",
                          self.path)
        self.head = {"ETag": etag, "LastModified": answer.get("LastModified"),
                     "size": self.size, "type": "file"}
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


CONTENT_RANGE = re.compile(r"bytes \d+-\d+/(\d+)")


def _whole_size(answer: Mapping[str, Any]) -> int | None:
    """The whole object's size a ranged GET's answer gives (``Content-Range: bytes a-b/N``);
    None when it gives none (a server answering the whole object to a range: its length is
    then checked against the range by the caller)."""
    found = CONTENT_RANGE.fullmatch(str(answer.get("ContentRange") or ""))
    return int(found.group(1)) if found else None


def fsspec_sync(coroutine: Callable[..., Any], filesystem: Any) -> Callable[..., Any]:
    """``coroutine`` as a blocking call on the file system's event loop, with fsspec's own
    wrapper: it takes ``timeout=`` (the deadline ``_Client.call`` gives)."""
    from fsspec.asyn import sync_wrapper

    return sync_wrapper(coroutine, obj=filesystem)


async def _get_range(filesystem: Any, bucket: str, key: str, start: int,
                     end: int) -> tuple[bytes, dict[str, Any] | None]:
    """One ranged GET through s3fs (its ``_call_s3``: its retries of the request, botocore's
    attempts), returning the body and the answer's fields; a body cut short in transfer is
    asked for again as s3fs's ``cat_file`` does (its retryable errors, its backoff)."""
    import s3fs.core

    attempts = max(1, int(filesystem.retries))
    attempt = 0
    while True:
        try:
            answer = await filesystem._call_s3("get_object", Bucket=bucket, Key=key,
                                               Range=f"bytes={start}-{end - 1}")
        except OSError as exc:
            if _invalid_range(exc):
                return b"", None
            raise
        body = answer.pop("Body")
        try:
            return await body.read(), answer
        except s3fs.core.S3_RETRYABLE_ERRORS:
            attempt += 1
            if attempt == attempts:
                raise
            await asyncio.sleep(min(1.7 ** attempt * 0.1, 15))  # s3fs's own backoff
        finally:
            body.close()


def _invalid_range(exc: OSError) -> bool:
    """A 416 (``InvalidRange``): the object ends before the range starts.  s3fs turns
    botocore's error into an OSError and keeps it as the cause."""
    cause = exc.__cause__
    response = getattr(cause, "response", None)
    code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
    return code in ("InvalidRange", "416")
