"""What every benchmark under ``scripts/`` shares: paths, the argument parser, the cached corpus
of realistic originals, and writing the JSON report.

The scripts measure against a baseline in the same run and print medians and ratios: the
machines are shared and noisy, so a single absolute number says little.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache" / "bench"  # generated originals, kept between runs
BUILD = REPO / "build" / "bench"  # reports and scratch output

CORPUS_KINDS = {  # name: (make_sample_tree kind, width, height)
    "jpeg": ("jpg", 8000, 6000),
    "tiff16": ("gray_tif16", 3200, 3200),
    "png": ("png", 3000, 2400),
    "bmp": ("bmp", 3000, 2300),
}


def parser(doc: str, report: str, reps: int | None = 3, cache: bool = False
           ) -> argparse.ArgumentParser:
    """An argument parser described by the first paragraph of ``doc``, with ``--json`` (the
    report, ``build/bench/REPORT.json``), and ``--reps`` and ``--cache`` where asked for."""
    result = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    result.add_argument("--json", type=Path, default=BUILD / f"{report}.json",
                        help="where the report goes (default: %(default)s)")
    if reps is not None:
        result.add_argument("--reps", type=int, default=reps,
                            help="repetitions; medians are reported (default: %(default)s)")
    if cache:
        result.add_argument("--cache", type=Path, default=CACHE,
                            help="generated originals, kept between runs (default: %(default)s)")
    return result


def scratch_root() -> Path:
    """``build/``, made if missing: scratch output goes there (same disk as the checkout)."""
    root = REPO / "build"
    root.mkdir(exist_ok=True)
    return root


def write_report(path: Path, payload: Any) -> None:
    """The run's numbers as JSON at ``path``, and a line saying where."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    print(f"written: {path}")


def ensure_corpus(cache: Path, kind: str, count: int) -> Path:
    """Generate (once) ``count`` originals of ``kind`` under ``cache/KIND-WxH/a``."""
    sample_kind, width, height = CORPUS_KINDS[kind]
    root = cache / f"{kind}-{width}x{height}"
    present = len(list((root / "a").glob("*"))) if (root / "a").is_dir() else 0
    if present < count:
        print(f"generating {count - present} {kind} originals in {root} ...", file=sys.stderr)
        subprocess.run(
            [sys.executable, str(REPO / "scripts" / "make_sample_tree.py"), str(root),
             "--count", str(count), "--width", str(width), "--height", str(height),
             "--kinds", sample_kind, "--classes", "a", "--seed", "7"],
            check=True, stdout=subprocess.DEVNULL,
        )
    return root


def files_of(source: Path) -> list[Path]:
    """The originals of a generated source tree (its one class folder ``a``), sorted."""
    return sorted(path for path in (source / "a").iterdir() if path.is_file())


def link_subset(full: Path, subset: Path, count: int) -> None:
    """A source tree of the first ``count`` cached originals (hard links, no copies)."""
    target = subset / "a"
    wanted = files_of(full)[:count]
    if target.is_dir() and sorted(p.name for p in target.iterdir()) == [p.name for p in wanted]:
        return
    target.mkdir(parents=True, exist_ok=True)
    for stale in target.iterdir():
        stale.unlink()
    for path in wanted:
        os.link(path, target / path.name)
