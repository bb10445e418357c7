#!/usr/bin/env python3
"""Benchmark of `shardsmith export` against `cp -r` of the finished export, and of a re-export
after a 1% increment against a full export, same files, same run.

    scripts/bench_export.py [--samples N] [--increment-percent P] [--layouts yolo,coco]
                            [--reps R] [--json FILE]

A tree of N small originals (160x120 JPEG in three class folders, cached in
.cache/bench/export-160x120; two of the classes carry YOLO box files, one or two defects an
image, the third is background) is packed once (WebDataset, 128 px, train 0.9 / val 0.1,
4 MB shards; not timed).  Then P% new originals are added and the pack is run again into a
copy of the dataset: the next version, with the same samples plus the new ones.

Each round, for each layout, interleaved (a slow moment on a shared machine hits all alike):
  export      `shardsmith.ops.export.export` of the first version into a fresh DEST, in-process,
              its fsync of every file and folder included
  cp -r       `cp -r DEST/vN NEW` of that finished export folder (same files, same bytes, same
              disk), then an fsync of every file and folder of NEW: the baseline
  cp -r+sync  the same copy followed by `sync` (system-wide: it also waits for others' writes)
  re-export   the next version exported into the same DEST (the unchanged shards' files
              hard-linked, only the shards holding new samples read)
  cp -al      `cp -al DEST/vN NEW` then `sync`: a hard link of every file and nothing else, the
              kernel's floor under any re-export that gives every version a folder of its own
              (what the two targets together need of it is printed: both can hold only where
              cp -al <= cp -r / (0.8 x 10), that is where creating a file costs more than 8
              links, which on this disk depends on how busy it is)
A first round is run and dropped (a warm page cache for every one).  Medians of --reps rounds;
targets: cp -r / export >= 0.8, export / re-export >= 10.  Prints a table and writes the
numbers as JSON (build/bench/export.json).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO))  # this checkout's shardsmith, also where another is installed

from benchkit import parser, scratch_root, write_report  # noqa: E402

WIDTH, HEIGHT = 160, 120
CLASSES = ("ok", "scratch", "dent")  # make_sample_tree cycles them in this order
OBJECT_CLASSES = ("scratch", "dent")  # YOLO ids 0 and 1; "ok" images are background
TARGET_COPY, TARGET_INCREMENT = 0.8, 10.0


def ensure_originals(cache: Path, count: int) -> Path:
    """Generate (once) ``count`` 160x120 JPEG originals in three class folders."""
    root = cache / f"export-{WIDTH}x{HEIGHT}"
    present = sum(1 for name in CLASSES if (root / name).is_dir()
                  for _ in (root / name).glob("*.jpg"))
    if present < count:
        print(f"generating {count - present} originals in {root} ...", file=sys.stderr)
        subprocess.run(
            [sys.executable, str(REPO / "scripts" / "make_sample_tree.py"), str(root),
             "--count", str(count), "--width", str(WIDTH), "--height", str(HEIGHT),
             "--kinds", "jpg", "--classes", ",".join(CLASSES), "--seed", "7"],
            check=True, stdout=subprocess.DEVNULL)
    return root


def numbered(cache_root: Path) -> list[Path]:
    """The cached originals in the order they were made (their number)."""
    paths = [path for name in CLASSES for path in (cache_root / name).glob("img_*.jpg")]
    return sorted(paths, key=lambda path: path.name)


def add_originals(paths: list[Path], source: Path) -> None:
    """Hard-link ``paths`` into ``source`` (class folder kept) with a YOLO file for each
    defect image: one or two boxes at places that follow from the image's number."""
    for path in paths:
        folder = source / path.parent.name
        folder.mkdir(parents=True, exist_ok=True)
        os.link(path, folder / path.name)
        if path.parent.name not in OBJECT_CLASSES:
            continue
        number = int(path.name.split("_")[1])
        class_id = OBJECT_CLASSES.index(path.parent.name)
        lines = []
        for index in range(1 + number % 2):
            cx = 0.2 + 0.6 * ((number * 7 + index * 31) % 97) / 97
            cy = 0.2 + 0.6 * ((number * 13 + index * 17) % 89) / 89
            lines.append(f"{class_id} {cx:.6f} {cy:.6f} 0.150000 0.120000")
        (folder / f"{path.stem}.txt").write_text("\n".join(lines) + "\n")


def pack(source: Path, output: Path) -> int:
    """Pack (or update) ``output`` from ``source``; returns the samples packed."""
    from shardsmith import load_config
    from shardsmith import pack as run_pack

    result = run_pack(load_config(None, {
        "source.path": str(source), "output.path": str(output), "image.size": 128,
        "output.shard_size_mb": 4, "splits": "train=0.9,val=0.1", "run.quiet": True,
        "source.annotations.files": "yolo",
        "source.annotations.classes": list(OBJECT_CLASSES)}))
    return result.manifest.totals.packed


def fsync_tree(root: Path) -> None:
    """fsync every file and folder under ``root`` (what an export does before its switch)."""
    for directory, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def tree_size(root: Path) -> tuple[int, int]:
    """Files and bytes under ``root``."""
    files = size = 0
    for directory, _, names in os.walk(root):
        for name in names:
            files += 1
            size += os.lstat(os.path.join(directory, name)).st_size
    return files, size


def timed(function, *arguments):
    started = time.perf_counter()
    result = function(*arguments)
    return time.perf_counter() - started, result


def one_round(scratch: Path, layout: str, first: Path, second: Path) -> dict:
    """One round of one layout: seconds of each method, and what the exports did."""
    from shardsmith.ops.export import export

    dest, copy = scratch / f"dest-{layout}", scratch / f"copy-{layout}"
    for stale in (dest, copy):
        shutil.rmtree(stale, ignore_errors=True)
    subprocess.run(["sync"], check=True)  # no earlier round's dirty pages in the timings
    seconds: dict[str, float] = {}
    seconds["export"], full = timed(export, first, dest, layout, "auto", "good", "folder",
                                    None, True)
    folder = full.folder
    subprocess.run(["sync"], check=True)
    started = time.perf_counter()
    subprocess.run(["cp", "-r", str(folder), str(copy)], check=True)
    fsync_tree(copy)
    seconds["cp -r"] = time.perf_counter() - started
    shutil.rmtree(copy)
    subprocess.run(["sync"], check=True)
    started = time.perf_counter()
    subprocess.run(["cp", "-r", str(folder), str(copy)], check=True)
    subprocess.run(["sync"], check=True)
    seconds["cp -r + sync"] = time.perf_counter() - started
    files, size = tree_size(copy)
    shutil.rmtree(copy)
    subprocess.run(["sync"], check=True)
    started = time.perf_counter()
    subprocess.run(["cp", "-al", str(folder), str(copy)], check=True)
    subprocess.run(["sync"], check=True)
    seconds["cp -al"] = time.perf_counter() - started
    shutil.rmtree(copy)
    subprocess.run(["sync"], check=True)  # the re-export's syncfs must not pay for that delete
    seconds["re-export"], again = timed(export, second, dest, layout, "auto", "good",
                                        "folder", None, True)
    return {"seconds": seconds, "files": files, "bytes": size, "samples": full.samples,
            "shards_read": full.shards_read, "re_samples": again.samples,
            "re_written": again.written, "re_linked": again.linked,
            "re_shards_read": again.shards_read}


def main() -> None:
    arguments = parser(__doc__, "export", reps=None, cache=True)
    arguments.add_argument("--samples", type=int, default=10_000)
    arguments.add_argument("--increment-percent", type=float, default=1.0)
    arguments.add_argument("--layouts", default="yolo,coco")
    arguments.add_argument("--reps", "--repeats", dest="reps", type=int, default=3,
                           help="rounds after the warm-up; medians are reported "
                           "(default: %(default)s)")
    args = arguments.parse_args()
    layouts = [name.strip() for name in args.layouts.split(",") if name.strip()]
    new = max(1, round(args.samples * args.increment_percent / 100))

    originals = numbered(ensure_originals(args.cache, args.samples + new))
    rounds: dict[str, list[dict]] = {name: [] for name in layouts}
    with tempfile.TemporaryDirectory(dir=scratch_root(), prefix="bench-export-") as scratch:
        scratch = Path(scratch)
        source = scratch / "source"
        add_originals(originals[: args.samples], source)
        print(f"packing {args.samples} originals (not timed) ...", file=sys.stderr)
        packed = pack(source, scratch / "v-first")
        shutil.copytree(scratch / "v-first", scratch / "v-second", symlinks=True)
        add_originals(originals[args.samples : args.samples + new], source)
        packed_next = pack(source, scratch / "v-second")
        for number in range(args.reps + 1):  # round 0 warms the page cache and is dropped
            for layout in layouts:
                print(f"round {number}/{args.reps}: {layout} ...", file=sys.stderr)
                result = one_round(scratch, layout, scratch / "v-first", scratch / "v-second")
                if number:
                    rounds[layout].append(result)

    methods = ("export", "cp -r", "cp -r + sync", "re-export", "cp -al")
    print(f"export of {packed:,} samples ({WIDTH}x{HEIGHT} JPEG originals packed at 128 px), "
          f"then {packed_next - packed:,} new ({(packed_next - packed) / packed:.1%}); "
          f"{os.cpu_count()} cores, median of {args.reps} rounds (a shared machine: noisy)")
    print(f"{'layout':<8}{'files':>8}{'MB':>8}" + "".join(f"{name:>14}" for name in methods)
          + f"{'cp/export':>11}{'full/re':>9}")
    report: dict = {"samples": packed, "new": packed_next - packed, "reps": args.reps,
                    "layouts": {}}
    met = True
    for layout, results in rounds.items():
        medians = {name: statistics.median(result["seconds"][name] for result in results)
                   for name in methods}
        copy_ratio = medians["cp -r"] / medians["export"]
        sync_ratio = medians["cp -r + sync"] / medians["export"]
        increment_ratio = medians["export"] / medians["re-export"]
        # Both targets can hold together only if a re-export (>= cp -al) can be a tenth of an
        # export that is itself at most cp -r / 0.8.
        floor_ratio = medians["cp -al"] / medians["cp -r"]
        possible = floor_ratio <= 1 / (TARGET_COPY * TARGET_INCREMENT)
        met = met and copy_ratio >= TARGET_COPY and increment_ratio >= TARGET_INCREMENT
        last = results[-1]
        print(f"{layout:<8}{last['files']:>8,}{last['bytes'] / 1e6:>8.1f}"
              + "".join(f"{medians[name]:>13.2f}s" for name in methods)
              + f"{copy_ratio:>11.2f}{increment_ratio:>9.1f}")
        report["layouts"][layout] = {
            "files": last["files"], "bytes": last["bytes"], "medians": medians,
            "cp_over_export": copy_ratio, "cp_sync_over_export": sync_ratio,
            "full_over_reexport": increment_ratio, "links_over_cp": floor_ratio,
            "both_targets_possible": possible,
            "reexport": {key: last[key] for key in ("re_samples", "re_written", "re_linked",
                                                    "re_shards_read")},
            "shards_read": last["shards_read"], "rounds": [r["seconds"] for r in results]}
        print(f"  {layout}: re-export wrote {last['re_written']} samples from "
              f"{last['re_shards_read']} of the shards and hard-linked {last['re_linked']} "
              f"(the full export read {last['shards_read']}); cp -r + sync / export "
              f"{sync_ratio:.2f}; cp -al / cp -r {floor_ratio:.2f}: both targets "
              f"{'can' if possible else 'CANNOT'} hold on this disk in this run (they need "
              f"<= {1 / (TARGET_COPY * TARGET_INCREMENT):.3f})")
    print(f"targets: cp -r / export >= {TARGET_COPY}, full / re-export >= {TARGET_INCREMENT:g}:"
          f" {'met' if met else 'NOT met'}")
    report["targets_met"] = met
    write_report(args.json, report)


if __name__ == "__main__":
    main()
