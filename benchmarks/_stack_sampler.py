"""Where the main thread's wall time goes, waits included: a sampled profile of its Python stack.

torch's phase timers say *which* phase grew (issue 24: pcompile's AOTAutograd phase, minus lowering,
was 4-10 s longer than stock's on the H200 with little more CPU); a CPU profile cannot see a wait.
A daemon thread reads the main thread's frame (`sys._current_frames`) every `interval` seconds and
counts each stack, innermost frames last, as `file:function` (collapsed-stack format, one line per
distinct stack: "a;b;c COUNT"), so stock's and pcompile's profiles of the same run can be diffed.
"""
from __future__ import annotations

import collections
import os
import sys
import threading
import time


class StackSampler:
    def __init__(self, interval: float = 0.02, depth: int = 400) -> None:
        self.interval, self.depth = interval, depth
        self.counts: collections.Counter[str] = collections.Counter()
        self._main = threading.main_thread().ident
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="probe-stack-sampler", daemon=True)

    def start(self) -> "StackSampler":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            frame = sys._current_frames().get(self._main)
            names = []
            while frame is not None and len(names) < self.depth:
                code = frame.f_code
                names.append(f"{_short(code.co_filename)}:{code.co_name}")
                frame = frame.f_back
            self.counts[";".join(reversed(names))] += 1

    def write(self, path: str) -> None:
        self._stop.set()
        self._thread.join(timeout=1)
        with open(path, "w") as fh:
            fh.write(f"# interval {self.interval} s\n")
            for stack, n in self.counts.most_common():
                fh.write(f"{stack} {n}\n")


def _short(filename: str) -> str:
    for marker in ("site-packages/", "dist-packages/", "/pcompile/"):
        i = filename.rfind(marker)
        if i >= 0:
            return ("pcompile/" if marker == "/pcompile/" else "") + filename[i + len(marker):]
    return os.path.basename(filename)


def start_from_env() -> StackSampler | None:
    """PROBE_STACKS=PATH: sample from now on; the caller writes PATH at the end."""
    return StackSampler(float(os.environ.get("PROBE_STACKS_INTERVAL", "0.02"))).start() if os.environ.get("PROBE_STACKS") else None
