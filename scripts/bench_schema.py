#!/usr/bin/env python3
"""How fast the sample index is validated: shardsmith's own readers (``schema.line_reader``,
what ``iter_sample_index`` uses, and ``json`` + ``schema.parse``, what the journal uses)
against a bare msgspec Struct and pydantic v2, strict, on the same lines.

    scripts/bench_schema.py [--lines N] [--reps R] [--json FILE]

Every reader and command streams the sample index line by line, so the cost per line is what
a 1M-sample ``inspect``, ``stage`` or increment pays.  Each library parses and type-checks a
line into a frozen record (strict: no "1" for 1) and runs the same name checks (the sample
key and shard patterns).  Medians of R rounds, interleaved; microseconds a line and the ratio
to ``json`` + ``schema.parse``.  msgspec and pydantic are imported only when installed (a
row says when not).  Run against an older checkout (``PYTHONPATH=OLD``), where the schema
module was a hand-written validator (~16 us a line) without ``line_reader``, to compare releases.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from benchkit import REPO, parser, write_report  # noqa: E402

sys.path.insert(0, str(REPO))
from shardsmith import schema  # noqa: E402
from shardsmith.dataset.manifest import SAMPLE_KEY, SHARD_NAME, SampleRecord  # noqa: E402
from shardsmith.schema import parse  # noqa: E402


def sample_lines(count: int) -> list[bytes]:
    """Lines as a pack writes them (sorted keys, compact), with varied values."""
    lines = []
    for number in range(count):
        record = {"key": f"lot{number % 97:03d}_img{number:07d}_{number * 2654435761 % 16**8:08x}",
                  "path": f"lot{number % 97:03d}/img{number:07d}.jpg", "label": number % 5,
                  "split": "train" if number % 10 else "val",
                  "shard": f"{'train' if number % 10 else 'val'}-{number // 1000:06d}.tar",
                  "width": 512, "height": 384, "jpeg_bytes": 40_000 + number % 9000,
                  "source_size": 19_000_000 + number, "source_mtime_ns": 1_700_000_000 * 10**9,
                  "source_digest": f"xxh3:{number * 11400714819323198485 % 2**128:032x}"}
        lines.append((json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode())
    return lines


def _checked(key: str, shard: str) -> None:
    if SAMPLE_KEY.fullmatch(key) is None or SHARD_NAME.fullmatch(shard) is None:
        raise ValueError("a name that is not ours")


def json_and_parse(lines: list[bytes]) -> None:
    for line in lines:
        parse(SampleRecord, json.loads(line), "line")


def shardsmith_reader():
    """``schema.line_reader``: decode, type checks and the record's own name checks."""
    if not hasattr(schema, "line_reader"):
        return None
    read = schema.line_reader(SampleRecord)

    def run(lines: list[bytes]) -> None:
        for line in lines:
            read(line, "line")

    return run


def msgspec_reader():
    try:
        import msgspec
    except ImportError:
        return None

    class Record(msgspec.Struct, frozen=True):
        key: str
        path: str
        label: int
        split: str
        shard: str
        width: int
        height: int
        jpeg_bytes: int
        source_size: int
        source_mtime_ns: int
        source_digest: str = ""
        group: str | None = None
        annotation_digest: str | None = None

    decode = msgspec.json.Decoder(Record).decode

    def run(lines: list[bytes]) -> None:
        for line in lines:
            record = decode(line)
            _checked(record.key, record.shard)

    return run


def pydantic_reader():
    try:
        import pydantic
    except ImportError:
        return None

    class Record(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(strict=True, frozen=True)
        key: str
        path: str
        label: int
        split: str
        shard: str
        width: int
        height: int
        jpeg_bytes: int
        source_size: int
        source_mtime_ns: int
        source_digest: str = ""
        group: str | None = None
        annotation_digest: str | None = None

    validate = Record.model_validate_json

    def run(lines: list[bytes]) -> None:
        for line in lines:
            record = validate(line)
            _checked(record.key, record.shard)

    return run


def strictness(reader) -> bool:
    """True when the reader refuses ``"label": "1"`` (a string where an integer belongs)."""
    line = sample_lines(1)[0].replace(b'"label":0', b'"label":"1"')
    try:
        reader([line])
    except Exception:  # each library raises its own validation error
        return True
    return False


BASE = "json + schema.parse"


def main() -> None:
    arguments = parser(__doc__, "schema")
    arguments.add_argument("--lines", type=int, default=200_000)
    options = arguments.parse_args()
    lines = sample_lines(options.lines)
    readers = {BASE: json_and_parse, "schema.line_reader": shardsmith_reader(),
               "msgspec (Struct, strict)": msgspec_reader(),
               "pydantic v2 (strict)": pydantic_reader()}
    times: dict[str, list[float]] = {name: [] for name, run in readers.items() if run}
    for _ in range(options.reps):
        for name in times:
            started = time.perf_counter()
            readers[name](lines)
            times[name].append((time.perf_counter() - started) / len(lines) * 1e6)
    base = statistics.median(times[BASE])
    print(f"{options.lines:,} sample index lines, medians of {options.reps} interleaved rounds")
    print(f"{'reader':<28}{'us/line':>9}{'vs base':>10}{'1M lines':>10}  strict")
    rows = []
    for name, run in readers.items():
        if run is None:
            print(f"{name:<28}  not installed")
            continue
        per_line = statistics.median(times[name])
        strict = strictness(run)
        print(f"{name:<28}{per_line:>9.2f}{base / per_line:>9.1f}x{per_line:>9.1f}s  "
              f"{'yes' if strict else 'NO'}")
        rows.append({"reader": name, "us_per_line": per_line, "speedup": base / per_line,
                     "strict": strict})
    write_report(options.json, {"lines": options.lines, "rows": rows})


if __name__ == "__main__":
    main()
