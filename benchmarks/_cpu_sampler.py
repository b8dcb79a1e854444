"""Who used the machine's CPUs during a benchmark's first step: a timeline, sampled, not guessed.

A background thread samples every `interval` seconds: the CPU time of each thread of this
process (/proc/self/task, named as Python names them; threads that start and end between two
samples are missed) and of every other process on the machine (psutil), grouped by what it is.
`timeline()` gives per-bucket CPU seconds per group, `totals()` the sums. Linux only; without
/proc or psutil it records nothing and says so.
"""
from __future__ import annotations

import os
import re
import threading
import time
from typing import Any

GROUPS = (  # (group, regex on the command line), first match wins
    ("pcompile-daemon", r"pcompile\.pool\.daemon"),
    ("pcompile-backward-worker", r"pcompile\.inductor\.backward_worker"),
    ("forkserver/pool-workers", r"multiprocessing\.forkserver|from multiprocessing"),
    ("inductor-subproc", r"torch\._inductor\.compile_worker"),
    ("gcc/ptxas/nvcc", r"(^|/)(gcc|g\+\+|cc1plus|cc1|ld|as|ptxas|nvcc|fatbinary|nvlink)( |$)"),
)


def thread_group(name: str) -> str:
    """A thread's name without its pool index ("pcompile-kernel_12" -> "pcompile-kernel")."""
    return re.sub(r"[-_ ]?\d+$", "", re.sub(r" \(.*\)$", "", name))


def thread_cpu() -> dict[int, tuple[str, float]]:
    """{native thread id: (name, CPU seconds so far)} for each live thread of this process,
    named as Python names it (else as the kernel does); {} without /proc."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, tuple[str, float]] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.find("(") + 1:stat.rfind(")")]
        fields = stat[stat.rfind(")") + 2:].split()  # utime and stime are fields 14 and 15
        out[int(tid)] = (names.get(int(tid), comm), (int(fields[11]) + int(fields[12])) / tick)
    return out


class CpuSampler:
    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.samples: list[tuple[float, dict[str, float]]] = []  # (t, cumulative CPU per group)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._main_tid = threading.get_native_id()
        self._me = os.getpid()
        self._cmd_group: dict[int, str] = {}
        self._dead: dict[str, float] = {}  # CPU of processes/threads that went away since the last sample
        self._last: dict[tuple[str, int], tuple[str, float]] = {}
        self.error: str | None = None
        try:
            import psutil

            self._psutil: Any = psutil
        except ImportError:
            self._psutil = None
            self.error = "psutil missing: other processes not sampled"

    # -- one sample -------------------------------------------------------------------
    def _threads(self) -> dict[tuple[str, int], tuple[str, float]]:
        return {("t", tid): ("main" if tid == self._main_tid else "self:" + thread_group(name), cpu)
                for tid, (name, cpu) in thread_cpu().items()}

    def _group_of(self, proc: Any) -> str:
        pid = proc.pid
        if pid not in self._cmd_group:
            try:
                cmd = " ".join(proc.cmdline()) or proc.name()
            except Exception:
                cmd = ""
            group = next((g for g, rx in GROUPS if re.search(rx, cmd)), None)
            if group is None:
                group = "other-python" if "python" in cmd else "other"
            self._cmd_group[pid] = group
        return self._cmd_group[pid]

    def _processes(self) -> dict[tuple[str, int], tuple[str, float]]:
        out: dict[tuple[str, int], tuple[str, float]] = {}
        if self._psutil is None:
            return out
        for proc in self._psutil.process_iter():
            if proc.pid == self._me:
                continue
            try:
                t = proc.cpu_times()
                out[("p", proc.pid)] = (self._group_of(proc), t.user + t.system)
            except Exception:
                continue
        return out

    def sample(self) -> None:
        now = {**self._threads(), **self._processes()}
        for k, (group, cpu) in self._last.items():  # gone since last time: keep what they had used
            if k not in now:
                self._dead[group] = self._dead.get(group, 0.0) + cpu
        self._last = now
        cum = dict(self._dead)
        for group, cpu in now.values():
            cum[group] = cum.get(group, 0.0) + cpu
        self.samples.append((time.monotonic(), cum))

    # -- lifecycle --------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sample()
            except Exception as exc:  # diagnostics never fail a benchmark
                self.error = f"{type(exc).__name__}: {exc}"
                return

    def start(self) -> "CpuSampler":
        if not os.path.isdir("/proc/self/task"):
            self.error = "no /proc: not sampled"
            return self
        self.sample()
        self._thread = threading.Thread(target=self._run, name="bench-cpu-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self.sample()

    # -- results ----------------------------------------------------------------------
    def totals(self) -> dict[str, float]:
        """CPU seconds per group between the first and the last sample (processes that existed
        before the first sample count only what they used after it)."""
        if len(self.samples) < 2:
            return {}
        first, last = self.samples[0][1], self.samples[-1][1]
        d = {g: last[g] - first.get(g, 0.0) for g in last}
        return {g: round(v, 2) for g, v in sorted(d.items(), key=lambda kv: -kv[1]) if v >= 0.05}

    def timeline(self, bucket: float = 2.0) -> list[dict[str, Any]]:
        """[{t: start of the bucket (s from the first sample), group: CPU-s in it}] for groups over 0.05.
        The sampler needs the GIL: a late sample puts what it saw in the bucket where it arrived."""
        if len(self.samples) < 2:
            return []
        t0 = self.samples[0][0]
        rows: list[dict[str, Any]] = []
        prev = self.samples[0][1]
        edge = t0 + bucket
        acc: dict[str, float] = {}
        for t, cum in self.samples[1:]:
            for g, v in cum.items():
                acc[g] = acc.get(g, 0.0) + v - prev.get(g, 0.0)
            prev = cum
            if t >= edge or t == self.samples[-1][0]:
                row: dict[str, Any] = {"t": round(edge - bucket - t0, 1)}
                row.update({g: round(v, 2) for g, v in sorted(acc.items(), key=lambda kv: -kv[1]) if v >= 0.05})
                rows.append(row)
                acc = {}
                while edge <= t:
                    edge += bucket
        return rows


__all__ = ["CpuSampler", "thread_cpu", "thread_group"]
