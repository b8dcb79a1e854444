"""Progress for long work (warm, large compiles, verify, gc): a live bar on a terminal,
plain periodic lines in CI logs and Slurm output (where a redrawn bar becomes garbage).

    with progress(total=len(items), desc="warming") as p:
        for item in items:
            ...
            p.advance()
"""
from __future__ import annotations

import contextlib
import os
import sys
import time
from typing import IO, Iterator

from pcompile.settings import PROGRESS


class _Quiet:
    """Counts but prints nothing (quiet=True or PCOMPILE_PROGRESS=0)."""

    def __init__(self, total: int | None, desc: str) -> None:
        self.total, self.desc, self.done = total, desc, 0
        self.outcome = "done"  # the closing line's last word

    def fail(self, outcome: str = "failed") -> None:
        """The work did not finish: the closing line says so instead of "done"."""
        self.outcome = outcome

    def advance(self, n: int = 1) -> None:
        self.done += n

    def set_description(self, desc: str) -> None:
        self.desc = desc

    def set_total(self, total: int | None) -> None:
        self.total = total

    def close(self) -> None:
        pass


class _Plain(_Quiet):
    """One line every `interval` seconds or every 10% of the total, and a final line."""

    def __init__(self, total: int | None, desc: str, stream: IO[str], interval: float = 5.0) -> None:
        super().__init__(total, desc)
        self.stream, self.interval = stream, interval
        self.t0 = self.last_t = time.monotonic()
        self.last_decile = 0
        self.closed = False

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        decile = int(10 * self.done / self.total) if self.total else 0
        if self.total and self.done >= self.total:
            return  # the closing line reports completion
        if now - self.last_t >= self.interval or decile > self.last_decile:
            self.last_decile = max(decile, self.last_decile)
            self._line(now)

    def set_description(self, desc: str) -> None:
        self.desc = desc

    def _line(self, now: float, final: bool = False) -> None:
        self.last_t = now
        elapsed = now - self.t0
        if self.total:
            pct = 100.0 * self.done / self.total
            eta = ""
            if 0 < self.done < self.total and not final:
                eta = f", ~{elapsed * (self.total - self.done) / self.done:.0f} s left"
            text = f"{self.desc}: {self.done}/{self.total} ({pct:.0f}%) {elapsed:.1f} s{eta}"
        else:
            text = f"{self.desc}: {self.done} done, {elapsed:.1f} s"
        try:
            self.stream.write(text + ("" if not final else f" - {self.outcome}") + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._line(time.monotonic(), final=True)


class _Bar(_Quiet):
    """A rich progress bar (transient-free: the finished bar stays as a record)."""

    def __init__(self, total: int | None, desc: str, stream: IO[str]) -> None:
        super().__init__(total, desc)
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)

        self._p = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                           TimeElapsedColumn(), TimeRemainingColumn(), console=Console(file=stream),
                           refresh_per_second=8)
        self._p.start()
        self._task = self._p.add_task(desc, total=total)

    def advance(self, n: int = 1) -> None:
        self.done += n
        self._p.advance(self._task, n)

    def set_description(self, desc: str) -> None:
        self.desc = desc
        self._p.update(self._task, description=desc)

    def set_total(self, total: int | None) -> None:
        self.total = total
        self._p.update(self._task, total=total)

    def fail(self, outcome: str = "failed") -> None:
        super().fail(outcome)
        self.set_description(f"{self.desc} - {outcome}")

    def close(self) -> None:
        self._p.stop()


def _mode(stream: IO[str], quiet: bool) -> str:
    forced = PROGRESS.get()  # "plain" forces periodic lines, "off" silences, "bar" forces the bar
    if quiet or forced == "off":
        return "quiet"
    if forced in {"plain", "bar"}:
        return forced
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return "bar" if tty and os.environ.get("TERM") != "dumb" else "plain"


@contextlib.contextmanager
def progress(total: int | None, desc: str, quiet: bool = False, stream: IO[str] | None = None,
             interval: float = 5.0) -> Iterator[_Quiet]:
    """Report progress of `total` units (None if unknown) on `stream` (default stderr)."""
    stream = stream or sys.stderr
    mode = _mode(stream, quiet)
    bar: _Quiet
    if mode == "bar":
        try:
            bar = _Bar(total, desc, stream)
        except ImportError:  # rich missing: plain lines still work
            bar = _Plain(total, desc, stream, interval)
    elif mode == "plain":
        bar = _Plain(total, desc, stream, interval)
    else:
        bar = _Quiet(total, desc)
    try:
        yield bar
    except BaseException:
        bar.fail()
        raise
    finally:
        bar.close()
