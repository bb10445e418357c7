"""Progress for people and for logs.

On a terminal: a tqdm bar (rate, ETA).  Without one (cron, CI, `| tee`): one plain line per
minute or per tenth of the job, whichever comes first, but never two within
``MIN_LINE_SECONDS`` but for the last (100%): an export of 13 samples wrote a line per sample
(each is more than a tenth); a job of a second now writes its last line only.  So logs stay
readable.  ``quiet``: nothing.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from tqdm import tqdm

LOG_INTERVAL_SECONDS = 60.0
MIN_LINE_SECONDS = 5.0


class Progress:
    """``update(n)`` as work completes; ``note`` sets a short status (e.g. rejects)."""

    def __init__(self, total: int, initial: int, unit: str, desc: str, quiet: bool,
                 stream: TextIO | None = None, unit_scale: bool = False):
        self.stream = stream or sys.stderr
        self.total, self.done, self.desc, self.unit = total, initial, desc, unit
        self.status = ""
        self._bar = None
        self._log_lines = not quiet and not self.stream.isatty()
        if not quiet and self.stream.isatty():
            self._bar = tqdm(total=total, initial=initial, unit=unit, desc=desc,
                             file=self.stream, dynamic_ncols=True, smoothing=0.1,
                             unit_scale=unit_scale, unit_divisor=1000)  # as human_bytes
        self._started = time.monotonic()
        self._initial = initial
        self._last_line = self._started
        self._last_update = self._started
        self._next_fraction = 0.1
        self._scale = 1e6 if unit_scale else 1.0
        self._lock = threading.Lock()  # stage updates from its copy threads

    def note(self, **status: object) -> None:
        self.status = ", ".join(f"{value} {key}" for key, value in status.items())
        if self._bar is not None:
            self._bar.set_postfix(status, refresh=False)

    def update(self, count: int = 1) -> None:
        with self._lock:
            self._update(count)

    def grow(self, count: int) -> None:
        """``count`` more to do: work found as the work is done."""
        with self._lock:
            self.total += count
            if self._bar is not None:
                self._bar.total = self.total
                self._bar.refresh()

    @property
    def seconds(self) -> float:
        """From the start to the last update: what the rate of a progress line is over."""
        return self._last_update - self._started

    def _update(self, count: int) -> None:
        self.done += count
        now = self._last_update = time.monotonic()
        if self._bar is not None:
            self._bar.update(count)
        elif self._log_lines:
            fraction = self.done / self.total if self.total else 1.0
            since = now - self._last_line
            finished = self.done >= self.total  # the last line, with the whole job's rate
            if since >= LOG_INTERVAL_SECONDS or (fraction >= self._next_fraction
                                                 and (since >= MIN_LINE_SECONDS or finished)):
                self._write_line(now)
                self._last_line = now
                while self._next_fraction <= fraction:
                    self._next_fraction += 0.1

    def _write_line(self, now: float) -> None:
        elapsed = now - self._started
        rate = (self.done - self._initial) / elapsed if elapsed > 0 else 0.0
        remaining = (self.total - self.done) / rate if rate > 0 else float("nan")
        eta = clock(remaining) if rate > 0 else "?"
        status = f", {self.status}" if self.status else ""
        unit = "MB" if self._scale != 1.0 else self.unit
        done, total, rate = self.done / self._scale, self.total / self._scale, rate / self._scale
        digits = 1 if self._scale != 1.0 and total < 100 else 0
        print(f"{self.desc}: {done:,.{digits}f}/{total:,.{digits}f} {unit} "
              f"({self.done / max(1, self.total):.0%}), {rate:,.1f} {unit}/s, "
              f"ETA {eta}{status}", file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def clock(seconds: float) -> str:
    """``H:MM:SS`` with as many hours as it takes (a 34-hour job shows 34:26:40, not 10:26:40)."""
    minutes, second = divmod(round(seconds), 60)
    hours, minute = divmod(minutes, 60)
    return f"{hours:02d}:{minute:02d}:{second:02d}"
