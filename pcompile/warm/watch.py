"""The parent's watch over a warm child: progress, stalls, crashes, and the exit status to pass on.

A warm must never hang or die silently. The child (child.py) arms Python's own `faulthandler`
into a file in its work dir: on a fatal signal (SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL) it
writes every thread's Python stack there, and on STACK_SIGNAL it does the same and runs on.
The parent (this module) polls the child:

- **progress** is anything that shows the warm is moving: a finished training step (the
  progress file), CPU time used by the child or any process below it (Dynamo, Inductor, compile
  workers), a new event in the job's event log or a new entry in Inductor's cache dirs (kernels
  compiled by the node's pool daemon, which is not the child's descendant). A script waiting on
  a lock, a socket, stdin or a sleep loop shows none of these;
- **a stall** is no progress for `stall_seconds` (PCOMPILE_WARM_STALL_SECONDS, default 300,
  0 = never): the parent asks the child for its stacks, kills the child's process tree, and
  raises WarmStalled with the stacks and what to try;
- **a crash** (the child killed by a signal, or gone without its report) is named with the
  signal, the script line the stacks point at, and what to try (WarmCrashed).

No py-spy or ptrace: faulthandler is in the standard library, works while the main thread is
blocked in C code, and needs no privileges.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from pcompile.errors import PcompileError
from pcompile.settings import WARM_STALL_SECONDS

STACK_SIGNAL = signal.SIGRTMIN + 7  # not SIGUSR1/2: training frameworks (Lightning on SLURM) use those
EXIT_STALLED = 124  # as timeout(1): the command was stopped, not failed by itself
CPU_BUSY_FRACTION = 0.02  # less CPU than this share of one core over the window counts as idle


class WarmStalled(PcompileError):
    """No progress for the stall time, or past --timeout: stopped (exit 124, as timeout(1))."""

    exit_code = EXIT_STALLED


class WarmCrashed(PcompileError):
    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def stall_seconds() -> float:
    """PCOMPILE_WARM_STALL_SECONDS (the settings registry reports a bad value in one line)."""
    return float(WARM_STALL_SECONDS.get())


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def process_tree(pid: int) -> list[int]:
    """`pid` and every process below it (Linux /proc; just `pid` elsewhere)."""
    if not os.path.isdir("/proc"):
        return [pid]
    kids = _children_map()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds used by `pid`'s tree, reaped children included (utime+stime+cutime+cstime)."""
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total = 0
    for p in process_tree(pid):
        try:
            with open(f"/proc/{p}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15])
        except (OSError, ValueError, IndexError):
            continue
    return total / tick


def kill_tree(pid: int) -> None:
    """SIGKILL the child and everything it started (worker processes would outlive it otherwise)."""
    for p in reversed(process_tree(pid)):
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


def _mark(paths: list[Path]) -> tuple[float, ...]:
    """A cheap fingerprint of activity in files and directories (size and mtime; no tree walk)."""
    out: list[float] = []
    for p in paths:
        try:
            st = p.stat()
            out += [st.st_size, st.st_mtime_ns]
        except OSError:
            out += [-1, -1]
    return tuple(out)


@dataclass
class Watch:
    """Everything the parent watches of one child."""

    proc: subprocess.Popen
    progress_file: Path
    stacks_file: Path
    activity: list[Path]  # event log, Inductor cache dirs: touched by work the child waits for
    stall_seconds: float
    script: str = ""
    timeout: float | None = None
    poll: float = 0.5

    def wait(self, on_steps: Callable[[int], None]) -> int:
        """The child's return code; raises WarmStalled / PcompileError (timeout) after killing it."""
        start = last_progress = time.monotonic()
        steps = 0
        cpu = tree_cpu_seconds(self.proc.pid)
        marks = _mark(self.activity)
        next_sample = start
        while True:
            try:
                return self.proc.wait(timeout=self.poll)
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            n = len(self.progress_file.read_text().splitlines()) if self.progress_file.exists() else 0
            if n > steps:
                on_steps(n - steps)
                steps, last_progress = n, now
            if now >= next_sample:  # /proc walks every few seconds, not every poll
                next_sample = now + min(5.0, max(self.poll, self.stall_seconds / 10 or 5.0))
                cpu_now, marks_now = tree_cpu_seconds(self.proc.pid), _mark(self.activity)
                window = now - last_progress
                if marks_now != marks or cpu_now - cpu > CPU_BUSY_FRACTION * max(window, 1.0):
                    last_progress = now
                    cpu, marks = cpu_now, marks_now
            if self.timeout and now - start > self.timeout:
                stacks = self._stop()
                raise WarmStalled(f"warm did not finish within {self.timeout:.0f}s after {steps} steps; raise --timeout or "
                                  "lower --steps. Every thread's Python stack at the stop follows\n" + _indent(stacks))
            if self.stall_seconds and now - last_progress > self.stall_seconds:
                raise WarmStalled(self._stalled(now - last_progress, steps))

    def stacks(self, wait_s: float = 3.0) -> str:
        """Ask the child for every thread's Python stack (faulthandler writes it to the stacks file)."""
        size = self.stacks_file.stat().st_size if self.stacks_file.exists() else 0
        try:
            os.kill(self.proc.pid, STACK_SIGNAL)
        except OSError:
            return ""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            time.sleep(0.1)
            text = self.stacks_file.read_text(errors="replace") if self.stacks_file.exists() else ""
            if len(text) > size:
                time.sleep(0.3)  # let it finish every thread
                return self.stacks_file.read_text(errors="replace")[size:]
        return ""

    def _stop(self) -> str:
        """Every thread's stack, then the child's whole process tree killed."""
        stacks = self.stacks()
        kill_tree(self.proc.pid)
        self.proc.wait()
        return stacks

    def _stalled(self, idle: float, steps: int) -> str:
        stacks = self._stop()
        site = script_line(stacks, self.script) if stacks else None
        return (f"the warm made no progress for {idle:.0f} s (no training step, no compile, no CPU use) after {steps} steps"
                + (f"; the script waits at {site}" if site else "")
                + ". Every thread's Python stack follows. The script is waiting on something a warm does not "
                  "provide (a lock held by another process, a network peer, input on stdin, a child process): make it "
                  "skip that wait when pcompile.warming() is true, or, if it is only slow, raise "
                  f"{WARM_STALL_SECONDS.name} (now {self.stall_seconds:.0f}; 0 = never)\n" + _indent(stacks))


def _indent(text: str) -> str:
    return "".join(f"  {ln}\n" for ln in text.strip().splitlines())


_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


def script_line(stacks: str, script: str) -> str | None:
    """file:line of the innermost frame of `script` in a faulthandler dump: in the thread the
    signal interrupted (the main thread, which runs the script) first, then in any thread."""
    real = os.path.realpath(script) if script else ""
    current = stacks.find("Current thread")
    ordered = (stacks[current:] + "\n" + stacks[:current]) if current >= 0 else stacks
    for m in _FRAME.finditer(ordered):
        if real and os.path.realpath(m.group("file")) == real:
            return f"{m.group('file')}:{m.group('line')}"
    return None


def crashed(rc: int, stacks: str, script: str) -> WarmCrashed:
    """The error for a child that ended without its report: by a signal, or by its own exit."""
    site = script_line(stacks, script)
    where = f" at {site}" if site else ""
    dump = ("\n" + _indent(stacks)) if stacks.strip() else ""
    if rc < 0:
        sig = -rc
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        desc = signal.strsignal(sig) or name
        hint = {signal.SIGKILL: "killed from outside: out of memory (check `dmesg`) or a scheduler's limit; warm a smaller "
                                "configuration or give the host more memory",
                signal.SIGTERM: "stopped from outside (a scheduler, a user)"}.get(
            signal.Signals(sig) if sig in signal.Signals._value2member_map_ else None,
            "a native library crashed in the warm process; run again with PCOMPILE_VDEV_TRACE=1 to see the virtual "
            "device's native calls, and report it with the stack below")
        return WarmCrashed(f"the warm process crashed: {name} ({desc}){where}; {hint}" + dump, 128 + sig)
    return WarmCrashed(f"the warm process exited with status {rc} before reporting{where} (os._exit in the script, "
                       "or a library ending the process)" + dump, rc or 1)
