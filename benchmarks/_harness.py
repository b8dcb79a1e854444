"""Running benchmark cases in fresh processes and measuring them from outside.

Each case is a new `python benchmarks/_case.py` with its own cache directories; the parent
adds what a child cannot see about itself: its rusage (os.wait4, which includes compile
workers it reaped), wall time, and machine-wide CPU time (/proc/stat), which also catches
compile daemons that outlive or are not children of any one process.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CASE = HERE / "_case.py"
_SCRUB = ("PCOMPILE_SHARED_DIR", "PCOMPILE_REMOTE", "PCOMPILE_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID",
          "RANK", "LOCAL_RANK", "WORLD_SIZE", "PCOMPILE", "PCOMPILE_READ_ONLY")


@dataclasses.dataclass
class Options:
    models: list[str]
    steps: int = 10
    device: str | None = None
    amp: str = "auto"
    ranks: int = 4
    repeats: int = 1  # warm and hot scenarios: pairs compared by their medians
    timeout_s: float = 1200.0
    work_dir: Path = Path("/tmp")
    log_dir: Path | None = None
    warm_args: list[str] = dataclasses.field(default_factory=list)
    stock_remote: bool = True
    cold_variants: list[tuple[str, dict[str, str]]] = dataclasses.field(default_factory=list)  # extra pcompile cold cases
    hot_variants: list[tuple[str, dict[str, str]]] = dataclasses.field(default_factory=list)  # extra pcompile hot cases
    deadline: float | None = None  # time.monotonic() by which everything must have ended
    verbose: bool = True

    def time_left(self) -> float:
        return float("inf") if self.deadline is None else self.deadline - time.monotonic()

    def case_timeout(self) -> float:
        return max(1.0, min(self.timeout_s, self.time_left() - 5))


@dataclasses.dataclass
class Dirs:
    """One set of cache directories; a case that should start cold gets a new one."""

    root: Path

    @property
    def inductor(self) -> Path:
        return self.root / "inductor"

    @property
    def triton(self) -> Path:
        return self.root / "triton"

    @property
    def pcompile(self) -> Path:
        return self.root / "pcompile"

    def env(self, pcompile_dir: Path | None = None) -> dict[str, str]:
        return {"TORCHINDUCTOR_CACHE_DIR": str(self.inductor), "TRITON_CACHE_DIR": str(self.triton),
                "PCOMPILE_CACHE_DIR": str(pcompile_dir or self.pcompile)}


def machine_cpu_s() -> float | None:
    """Busy CPU seconds of the whole machine since boot (all cores), from /proc/stat."""
    try:
        with open("/proc/stat") as fh:
            f = [int(x) for x in fh.readline().split()[1:]]
        busy = f[0] + f[1] + f[2] + sum(f[5:8])  # user nice system irq softirq steal
        return busy / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def base_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def case_cmd(model: str, backend: str, opts: Options, result: Path | None, device: str | None = None) -> list[str]:
    cmd = [str(CASE), "--model", model, "--backend", backend, "--steps", str(opts.steps), "--amp", opts.amp]
    if device or opts.device:
        cmd += ["--device", device or opts.device]
    if result is not None:
        cmd += ["--result", str(result)]
    return cmd


@dataclasses.dataclass
class Launch:
    label: str
    argv: list[str]
    env: dict[str, str]
    result: Path | None = None


def run_together(launches: list[Launch], opts: Options) -> list[dict[str, Any]]:
    """Start all launches at once; wait for each (rusage via wait4); merge each child's result JSON."""
    log_dir = opts.log_dir or opts.work_dir
    log_dir.mkdir(parents=True, exist_ok=True)
    if opts.time_left() < 15:  # starting now could only end in a kill
        return [{"label": ln.label, "error": "skipped: time budget spent"} for ln in launches]
    timeout = opts.case_timeout()
    cpu0 = machine_cpu_s()
    t0 = time.monotonic()
    procs = []
    for ln in launches:
        log = log_dir / f"{ln.label}.log"
        fh = open(log, "w")
        p = subprocess.Popen(ln.argv, env=ln.env, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
        procs.append((ln, p, fh, log))
    outs: dict[int, dict[str, Any]] = {}
    pending = {p.pid: (ln, p, fh, log) for ln, p, fh, log in procs}
    while pending:
        for pid in list(pending):
            ln, p, fh, log = pending[pid]
            got, status, ru = os.wait4(pid, os.WNOHANG)
            if got == 0:
                continue
            p.returncode = os.waitstatus_to_exitcode(status)
            outs[pid] = {"rc": p.returncode, "wall_s": round(time.monotonic() - t0, 3),
                         "rusage_cpu_s": round(ru.ru_utime + ru.ru_stime, 3)}
            fh.close()
            del pending[pid]
        if pending and time.monotonic() - t0 > timeout:
            for pid, (ln, p, fh, log) in pending.items():
                _kill_tree(p)
                outs[pid] = {"rc": None, "wall_s": round(time.monotonic() - t0, 3), "timeout": True,
                             "error": f"timed out after {timeout:.0f} s"}
                fh.close()
            pending = {}
        time.sleep(0.05)
    cpu1 = machine_cpu_s()
    results = []
    for ln, p, fh, log in procs:
        r: dict[str, Any] = {"label": ln.label, "log": str(log)}
        if ln.result is not None and ln.result.exists():
            try:
                r.update(json.loads(ln.result.read_text()))
            except ValueError:
                r["error"] = "unreadable result file"
        r.update(outs.get(p.pid, {}))
        if r.get("rc") not in (0, None) and "error" not in r:
            r["error"] = f"exit code {r['rc']}: {_tail(log)}"
        if r.get("timeout"):
            r["error"] = r.get("error") or "timeout"
        results.append(r)
    if cpu0 is not None and cpu1 is not None:
        for r in results:
            r["machine_cpu_s_all"] = round(cpu1 - cpu0, 2)  # every process of this launch group together
    return results


def run_one(launch: Launch, opts: Options) -> dict[str, Any]:
    r = run_together([launch], opts)[0]
    if opts.verbose:
        _say(f"  {launch.label}: " + (f"ERROR {r['error'][:300]}" if r.get("error") else
                                       f"first step {r.get('first_step_s')} s, steady {r.get('steady_step_s')} s, "
                                       f"process {r.get('wall_s')} s"))
    return r


def _kill_tree(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)  # the case runs in its own session: its group is ours to end
    except (ProcessLookupError, PermissionError):
        pass
    try:
        os.waitpid(p.pid, 0)
    except ChildProcessError:
        pass


def _tail(log: Path, n: int = 600) -> str:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(lines[-4:])[-n:]


def _say(msg: str) -> None:
    print(msg, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Redis:
    """A throwaway redis-server on 127.0.0.1 (no persistence), if the binary exists."""

    def __init__(self, work: Path) -> None:
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.reason = ""
        binary = shutil.which("redis-server")
        if not binary:
            self.reason = "redis-server not found (apt-get install redis-server)"
            return
        self.port = free_port()
        work.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", str(work), "--maxmemory", "8gb"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.1)
        self.reason = "redis-server did not answer PING"
        self.stop()

    @property
    def url(self) -> str | None:
        return f"redis://127.0.0.1:{self.port}/0" if self.proc else None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None


class GpuWatch:
    """Polls nvidia-smi while a process tree runs; says whether any of its pids used the GPU."""

    def __init__(self, root_pid_getter) -> None:
        self.available = shutil.which("nvidia-smi") is not None
        self.seen: set[int] = set()
        self._root = root_pid_getter
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> "GpuWatch":
        if self.available:
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self.available:
            self._thread.join(5)

    def _tree(self) -> set[int]:
        try:
            import psutil

            pids = set()
            for root in self._root():
                pr = psutil.Process(root)
                pids.add(root)
                pids.update(c.pid for c in pr.children(recursive=True))
            return pids
        except Exception:
            return set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                                     capture_output=True, text=True, timeout=10).stdout
                gpu_pids = {int(x) for x in out.split() if x.strip().isdigit()}
                self.seen |= gpu_pids & self._tree()
            except Exception:
                pass
            self._stop.wait(1.0)

    def verdict(self) -> str:
        if not self.available:
            return "not checked (no nvidia-smi)"
        return f"yes: pids {sorted(self.seen)}" if self.seen else "no"


def run_warm(label: str, argv: list[str], env: dict[str, str], opts: Options) -> dict[str, Any]:
    """Run `pcompile warm ...` (CPU-only work), watching that it never appears on the GPU."""
    log_dir = opts.log_dir or opts.work_dir
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{label}.log"
    t0 = time.monotonic()
    cpu0 = machine_cpu_s()
    with open(log, "w") as fh:
        p = subprocess.Popen(argv, env=env, stdout=fh, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
        with GpuWatch(lambda: [p.pid]) as watch:
            try:
                rc = p.wait(timeout=opts.case_timeout())
            except subprocess.TimeoutExpired:
                _kill_tree(p)
                rc = None
    cpu1 = machine_cpu_s()
    r: dict[str, Any] = {"label": label, "log": str(log), "rc": rc, "wall_s": round(time.monotonic() - t0, 3),
                         "gpu_used_by_warm": watch.verdict()}
    if cpu0 is not None and cpu1 is not None:
        r["machine_cpu_s_all"] = round(cpu1 - cpu0, 2)
    if rc != 0:
        r["error"] = "timed out" if rc is None else f"pcompile warm exit code {rc}: {_tail(log)}"
    if opts.verbose:
        _say(f"  {label}: " + (f"ERROR {r['error'][:300]}" if r.get("error") else f"{r['wall_s']} s"))
    return r


def python() -> str:
    return sys.executable
