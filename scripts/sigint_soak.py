#!/usr/bin/env python3
"""Ctrl-C a pack many times, at a spread of instants, and count every way it went wrong.

    scripts/sigint_soak.py [--runs 300] [--count 40] [--workers 2] [--min-delay 0.05]
                           [--max-delay 2.0]
                           [--exit-within 30] [--seed 0] [--work build/sigint-soak]
                           [--log runs.jsonl] [--from-spawn]

A small source tree is generated once; each run starts ``shardsmith pack`` (2 workers) in a
process group of its own, as a terminal runs a foreground job, waits a delay drawn evenly
from ``--min-delay`` to ``--max-delay`` seconds after the interpreter starts running
``python -m shardsmith`` (``--from-spawn``: after its spawn), and sends SIGINT to the whole
group (what Ctrl-C does).  A run that does not exit in time has its stacks dumped (py-spy).
A run passes when the command

- exits within ``--exit-within`` seconds, with exit code 130,
- writes exactly one line on stderr (``shardsmith: error: interrupted ...``): no traceback,
  no "Exception ignored", no second line,
- leaves no process of its group behind (its loky workers, resource tracker), and
- leaves no partial file under a final name (every shard in the output is a complete tar;
  the manifest, when there is one, parses).

Runs whose pack finished before the signal took effect (exit 0, nothing on stderr) are
counted apart (neither passed nor failed).
Not a unit test: it takes minutes and its value is the count.  The summary is one line per
kind of failure, then the totals; the exit code is 1 when any run failed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Delays count from the first line of shardsmith: CPython's own start-up (site, the .pth
# files of a venv: 30-150 ms on a busy machine) comes before, and a SIGINT there is CPython's
# to report (a KeyboardInterrupt traceback from site.py).  --from-spawn measures that too.
LAUNCH = ("import os, runpy, signal, sys\n"
          "os.kill(os.getpid(), signal.SIGSTOP)\n"
          "sys.argv[0] = 'shardsmith'\n"
          "runpy.run_module('shardsmith', run_name='__main__', alter_sys=True)\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--count", type=int, default=40, help="Originals in the tree.")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--min-delay", type=float, default=0.05,
                        help="Earliest signal, seconds after the interpreter starts running "
                        "`python -m shardsmith` (before ~5 ms it is still reading the "
                        "package's code: a KeyboardInterrupt there is CPython's traceback, "
                        "before any statement of ours can handle it).")
    parser.add_argument("--max-delay", type=float, default=2.0)
    parser.add_argument("--exit-within", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=REPO / "build" / "sigint-soak")
    parser.add_argument("--log", type=Path, help="Append one JSON line per run here.")
    parser.add_argument("--from-spawn", action="store_true",
                        help="Count delays from the spawn of the interpreter, not from the "
                        "first line of shardsmith (a SIGINT during CPython's own start-up is "
                        "a traceback from site.py, out of shardsmith's reach).")
    options = parser.parse_args()

    source = options.work / "source"
    subprocess.run([sys.executable, str(REPO / "scripts" / "make_sample_tree.py"), str(source),
                    "--count", str(options.count), "--width", "1600", "--height", "1200",
                    "--kinds", "jpg,png", "--seed", "1"], check=True, stdout=subprocess.DEVNULL)
    draw = random.Random(options.seed)
    outcomes: Counter = Counter()
    examples: dict[str, str] = {}
    log = options.log.open("a") if options.log else None
    for number in range(options.runs):
        delay = draw.uniform(options.min_delay, options.max_delay)
        output = options.work / "out"
        shutil.rmtree(output, ignore_errors=True)
        failures, detail = one_run(source, output, delay, options)
        for failure in failures or ["passed"]:
            outcomes[failure] += 1
            if failure not in ("passed", "finished before the signal"):
                examples.setdefault(failure, f"run {number}, delay {delay:.3f}s: {detail}")
        if log is not None:
            log.write(json.dumps({"run": number, "delay": round(delay, 4),
                                  "failures": failures, "detail": detail}) + "\n")
            log.flush()
        if (number + 1) % 10 == 0:
            print(f"{number + 1} runs: {dict(outcomes)}", file=sys.stderr, flush=True)
    print(f"{options.runs} runs, SIGINT after {options.min_delay:g}-{options.max_delay:g} s, "
          f"{options.workers} workers:")
    for outcome, count in outcomes.most_common():
        print(f"  {count:4d}  {outcome}")
    for failure, example in examples.items():
        print(f"  first '{failure}': {example}")
    failed = sum(n for what, n in outcomes.items()
                 if what not in ("passed", "finished before the signal"))
    return 1 if failed else 0


def one_run(source: Path, output: Path, delay: float,
            options: argparse.Namespace) -> tuple[list[str], str]:
    """One pack interrupted after ``delay`` seconds: the failures seen (none: passed)."""
    logs = output.parent / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    arguments = ["pack", str(source), str(output), "--size", "64", "--shard-samples", "4",
                 "--workers", str(options.workers), "--quiet"]
    if options.from_spawn:
        argv = [sys.executable, "-m", "shardsmith", *arguments]
    else:  # the interpreter starts, stops itself, and runs `python -m shardsmith` when woken
        argv = [sys.executable, "-c", LAUNCH, *arguments]
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with open(logs / "stdout", "w") as stdout, open(logs / "stderr", "w") as stderr:
        process = subprocess.Popen(argv, cwd=REPO, stdout=stdout, stderr=stderr, env=env,
                                   start_new_session=True, preexec_fn=_default_sigint)
    group = process.pid  # a new session: its id is the group's and the session's
    if not options.from_spawn:
        while process_state(process.pid) not in ("T", None):
            time.sleep(0.001)
        os.killpg(group, signal.SIGCONT)
    time.sleep(delay)
    failures: list[str] = []
    if process.poll() is not None:
        return ["finished before the signal"], f"exit {process.returncode}"
    os.killpg(group, signal.SIGINT)
    sent = time.monotonic()
    try:
        process.wait(timeout=options.exit_within)
    except subprocess.TimeoutExpired:
        failures.append(f"no exit within {options.exit_within:g}s")
        dump_stacks(process.pid, logs / f"hang-{os.getpid()}-{int(sent)}.txt")
    took = time.monotonic() - sent
    settled = time.monotonic() + 2.0  # workers told to stop get a moment to go
    left = session_members(group)
    while left and time.monotonic() < settled:
        time.sleep(0.05)
        left = session_members(group)
    left_names = [command_line(pid) for pid in left]
    if left:
        failures.append("processes left behind")
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    if process.poll() is None:
        process.kill()
        process.wait()
    text = (logs / "stderr").read_text(errors="replace")
    lines = text.strip().splitlines()
    if process.returncode == 0 and not text.strip():
        return ["finished before the signal"], "exit 0: the signal came as it was exiting"
    if process.returncode != 130 and not failures:
        failures.append(f"exit code {process.returncode}")
    if "Traceback" in text or "Exception ignored" in text:
        failures.append("traceback on stderr")
    elif len(lines) != 1 or not lines[0].startswith("shardsmith: error: interrupted"):
        failures.append(f"{len(lines)} lines on stderr")
    failures += partial_files(output)
    detail = f"exit {process.returncode} after {took:.2f}s, left: {left_names}, " \
             f"stderr: {text.strip()[-600:]!r}"
    return failures, detail


def dump_stacks(pid: int, where: Path) -> None:
    """Every thread's stack of a hung run (py-spy, when installed), for the post-mortem."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        return
    dumped = subprocess.run([spy, "dump", "--pid", str(pid), "--locals"], capture_output=True,
                            text=True, timeout=60)
    where.write_text(dumped.stdout + dumped.stderr)
    print(f"  a hung run's stacks: {where}", file=sys.stderr, flush=True)


def process_state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _default_sigint() -> None:
    # A soak started in the background (`&`, nohup) ignores SIGINT, and a child inherits that.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def session_members(session: int) -> list[int]:
    """Processes still running in the session the pack started (orphans keep it)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, sid = fields[0], int(fields[3])
        if sid == session and state != "Z":
            members.append(int(entry.name))
    return members


def command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
    except OSError:
        return f"{pid} (gone)"


def partial_files(output: Path) -> list[str]:
    """A shard or manifest under its final name that is not whole (a temporary under its
    own name is fine: the next run removes it)."""
    problems: list[str] = []
    if not output.is_dir():
        return problems
    for shard in output.glob("*.tar"):
        try:
            with tarfile.open(shard) as archive:
                for member in archive:
                    archive.extractfile(member).read()
        except (tarfile.TarError, OSError, EOFError):
            problems.append("partial shard under its final name")
            break
    manifest = output / "manifest.json"
    if manifest.exists():
        try:
            json.loads(manifest.read_text())
        except ValueError:
            problems.append("partial manifest")
    return problems


if __name__ == "__main__":
    sys.exit(main())
