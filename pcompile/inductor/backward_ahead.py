"""Compile each region's backward graph in a worker process while the forward compiles.

Why: a cold training step compiles forward, then backward, one after the other, on one Python
thread (the GIL makes threads useless for lowering). The backward graph exists as soon as the
joint graph is partitioned, so pcompile ships it (compat/backward_graph.py) to a child process,
`backward_worker`, which compiles it exactly as the parent would and publishes it to the store.
When the parent reaches that backward it looks the graph up like any other: the worker's lease
makes it wait for the worker's result instead of compiling it again. The FX graph key is the
check: if the compiled forward saved its activations with other strides than the partition
predicted, the parent's key differs and it compiles the backward itself, as before.

One worker per process, reused for later regions, gone when the job ends or after two idle
minutes. It is started as soon as the process commits to pcompile (its first `torch.compile` call,
with `backend="pcompile"`, `pcompile.install()` or PCOMPILE=1), so that its ~12 s of torch imports overlap Dynamo's
tracing and the joint graph's trace instead of following them; a process whose first compile
finds everything in the store (a hot start) closes it again at once (`scope_ended`). Started
later, at the first AOTAutograd miss, it was ready only after the parent had reached the backward
(benchmarks/RESULTS.md, session 3). On by default for GPU jobs; `wanted()` says when and why.
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Iterator

from pcompile.inductor.timing import emit, now
from pcompile.settings import BACKWARD_AHEAD
from pcompile.thread_flags import is_raised, raised

log = logging.getLogger("pcompile.inductor")

#: How long the parent waits for a job the worker has taken to claim its key (a job not yet
#: taken is compiled by the parent instead: _wait_for_claim).
CLAIM_TIMEOUT_S = 60.0

#: How long a worker started early waits for a backward after a first graph that had none.
LINGER_S = 20.0

#: Fewer usable CPUs than this: the worker's lowering would take cores from the kernel compiles.
MIN_CPUS = 8


def wanted() -> bool:
    """`PCOMPILE_BACKWARD_AHEAD=1`/`0` decides; unset, on for a job that sees a CUDA device on a
    host with at least MIN_CPUS usable CPUs. Measured on the H100 (benchmarks/RESULTS.md, session 5)
    with the worker started at torch.compile, it took 15-35% off a cold first step. Its price: ~12
    CPU-s of imports per process (paid in another process, on another core) and a CUDA context on
    the job's GPU (~0.6 GB) until the job ends, the first graph proves all hits, or two idle minutes
    pass. CPU-only hosts keep it off: their C++ kernels need the cores."""
    chosen = BACKWARD_AHEAD.get()
    if chosen is None:
        return _default_on()
    return chosen


@functools.lru_cache(maxsize=None)
def _default_on() -> bool:
    from pcompile import warming

    if warming():
        return False  # the warm host's graphs stay in its warm child
    from pcompile.pool.sizing import affinity_cpus, cgroup_cpu_limit

    quota = cgroup_cpu_limit()
    if min(float(affinity_cpus()), quota if quota is not None else float("inf")) < MIN_CPUS:
        return False
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


@dataclasses.dataclass(eq=False)
class Job:
    id: int
    data: bytes
    guessed: list[Any]  # the backward's inputs as the partition predicted them (what was shipped)
    labels: list[str] = dataclasses.field(default_factory=list)  # their names, for the log
    state: str = "queued"  # queued -> sent -> claimed -> done | failed | cancelled
    key: str = ""
    error: str = ""
    seconds: float = 0.0
    changed: threading.Condition = dataclasses.field(default_factory=threading.Condition)

    def set(self, state: str, **fields: Any) -> None:
        with self.changed:
            self.state = state
            for name, value in fields.items():
                setattr(self, name, value)
            self.changed.notify_all()


class Worker:
    """The child process and the jobs sent to it, in order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.generation = 0  # bumped per started child; a reader only reports on its own child
        self.closed = 0  # the generation close() let go: it gets no more jobs
        self.alive = False
        self.ready = False
        self.proc: subprocess.Popen[bytes] | None = None
        self.jobs: dict[int, Job] = {}
        self.queue: list[Job] = []  # not yet sent: the worker takes one job at a time
        self.busy: Job | None = None
        self.next_id = 0
        self.started = 0.0

    @property
    def pid(self) -> int | None:
        """The running child's pid (for tests and logs)."""
        proc = self.proc
        return proc.pid if proc is not None else None

    def submit(self, data: bytes, guessed: list[Any]) -> Job:
        with self.lock:
            self.next_id += 1
            job = Job(self.next_id, data, guessed)
            self.jobs[job.id] = job
            self.queue.append(job)
            self._start_locked()
            self._pump_locked()
        return job

    def cancel(self, job: Job) -> bool:
        """Drop a job that has not been sent yet; True if it was dropped."""
        with self.lock:
            if job in self.queue:
                self.queue.remove(job)
                job.set("cancelled")
                return True
        return False

    def interrupt(self, job: Job) -> None:
        """Stop a sent job whose result nobody will use (KeyboardInterrupt in the worker: its
        leases are released on the way out, so nobody waits on them)."""
        with self.lock:
            if self.busy is job and self.proc is not None:
                try:
                    self.proc.send_signal(signal.SIGINT)
                except OSError:
                    pass

    def start(self) -> None:
        with self.lock:
            self._start_locked()

    def _start_locked(self) -> None:
        if self.alive:
            return
        self.generation += 1
        self.alive, self.ready, self.busy, self.proc = True, False, None, None
        self.started = now()
        env = dict(os.environ)
        env[BACKWARD_AHEAD.name] = "0"
        threading.Thread(target=self._run_child, args=(self.generation, env), name="pcompile-backward-ahead",
                         daemon=True).start()

    def _run_child(self, generation: int, env: dict[str, str]) -> None:
        """Start the child, then read its replies until it exits."""
        try:
            # Own session: a Ctrl-C meant for the job does not print a worker traceback; the
            # worker dies with its parent (PDEATHSIG) and exits at EOF on stdin.
            proc = subprocess.Popen([sys.executable, "-m", "pcompile.inductor.backward_worker"],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, start_new_session=True)
        except OSError as exc:
            log.info("pcompile: cannot start the backward worker (%s)", exc)
            self._lost(generation, f"cannot start ({exc})")
            return
        with self.lock:
            current = generation == self.generation
            if current:
                self.proc = proc
            let_go = generation == self.closed  # closed while it was being started
        if let_go:
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                proc.terminate()
                proc.wait(5)
        elif current:
            assert proc.stdout is not None
            self._read(generation, proc.stdout.fileno())
        _close(proc)
        self._lost(generation, "worker exited")

    def _pump_locked(self) -> None:
        if not self.ready or self.busy is not None or not self.queue or self.proc is None:
            return
        job = self.queue.pop(0)
        from pcompile.pool import protocol

        try:
            assert self.proc is not None and self.proc.stdin is not None
            protocol.write_frame_fd(self.proc.stdin.fileno(), {"op": "job", "id": job.id, "data": job.data})
        except (OSError, AssertionError) as exc:
            job.set("failed", error=f"worker gone ({exc})")
            return
        job.data = b""
        self.busy = job
        job.set("sent")

    def _read(self, generation: int, fd: int) -> None:
        from pcompile.pool import protocol

        while True:
            try:
                msg = protocol.read_frame_fd(fd)
            except Exception:
                return
            op = msg.get("op")
            if op == "ready":
                emit("backward_worker_start", self.started, now() - self.started, prewarm_s=msg.get("prewarm_s"),
                     how="subprocess")
                with self.lock:
                    if generation == self.generation and generation != self.closed:
                        self.ready = True
                        self._pump_locked()
            elif op == "claimed":
                job = self.jobs.get(msg["id"])
                if job is not None:
                    job.set("claimed", key=str(msg.get("key", "")))
            elif op == "done":
                job = self.jobs.pop(msg["id"], None)
                if job is not None:
                    job.set("done" if msg.get("ok") else "failed", error=str(msg.get("error", "")),
                            seconds=float(msg.get("seconds", 0.0)))
                    if not msg.get("ok"):
                        log.info("pcompile: backward compiled ahead failed (%s); the job compiles it itself",
                                 msg.get("error"))
                with self.lock:
                    self.busy = None
                    self._pump_locked()

    def _lost(self, generation: int, why: str) -> None:
        """The child is gone (idle exit, crash, kill): its unfinished job fails; queued jobs get a new child."""
        with self.lock:
            if generation != self.generation:
                return
            self.alive, self.ready, self.proc = False, False, None
            lost = [self.busy] if self.busy is not None else []
            self.busy = None
            for job in lost:
                job.set("failed", error=why)
            if self.queue:
                self._start_locked()

    def idle(self) -> bool:
        with self.lock:
            return self.busy is None and not self.queue

    def close(self, *, unused: bool = False) -> None:
        """Let the child go: EOF, so it exits between jobs. `unused`: it never got a job, so
        it is also stopped (SIGTERM) rather than left to finish its imports for nothing."""
        with self.lock:
            proc = self.proc
            self.closed, self.ready = self.generation, False  # a later job starts another child
            for job in self.queue:
                job.set("cancelled")
            self.queue.clear()
        if proc is not None:
            if unused:
                with contextlib.suppress(OSError):
                    proc.terminate()
            _close(proc)


def _close(proc: subprocess.Popen[bytes]) -> None:
    try:
        if proc.stdin is not None:
            proc.stdin.close()
    except OSError:
        pass
    proc.poll()  # reaped if it has exited


class BackwardAhead:
    """This process's speculation: its worker, the jobs shipped to it, and when to let it go.

    One per process, made and owned by the feature registry (features.py), which hands it to
    compat.backward_graph (`on_partition`, `around_backward`) and store_gateway (`on_lookup`), and
    to the backend's compile scope (`allowed`, `scope_ended`). `wanted` is the registry's answer
    (this module's `wanted()`)."""

    def __init__(self, wanted: Callable[[], bool] = wanted) -> None:
        self.wanted = wanted
        self._tls = threading.local()
        self._lock = threading.Lock()
        self._worker: Worker | None = None
        self._pending: dict[int, Job] = {}  # id(bw_module) -> its job
        self._first_scope_seen = False
        self._first_autograd_seen = False
        self._let_go = False
        self._shipped_any = False
        self._node_claim: int | bool | None = None  # early_start.claim_node()'s answer, asked once

    @property
    def started(self) -> Worker | None:
        """The worker if one was ever made (tests and logs); None before."""
        return self._worker

    def worker(self) -> Worker:
        with self._lock:
            if self._worker is None:
                self._worker = Worker()
                atexit.register(self._worker.close)
            return self._worker

    @contextlib.contextmanager
    def allowed(self) -> Iterator[None]:
        """Speculate only inside pcompile's own backend calls (other backends' graphs are not ours)."""
        with raised(self._tls, "allowed"):
            yield

    def _allowed_here(self) -> bool:
        return is_raised(self._tls, "allowed") and self.wanted()

    def start_early(self) -> None:
        """The process has committed to pcompile (the registry calls this at torch.compile): start the
        worker now, so that its imports overlap Dynamo's tracing, unless early_start.py says this
        process need not (a cache with AOTAutograd entries, another process's early worker on this
        node). Then the first AOTAutograd miss starts it (`on_lookup`); an all-hit job never does."""
        if not self.wanted():
            return
        from pcompile.inductor import early_start

        if early_start.cache_holds_autograd_entries():
            log.info("pcompile: the cache holds AOTAutograd entries; the backward worker starts at the first miss")
            return
        if self._node_claim is None:
            self._node_claim = early_start.claim_node()
        if self._node_claim is False:
            log.info("pcompile: another process on this node started a backward worker early; this one starts "
                     "at its first AOTAutograd miss")
            return
        self.worker().start()

    def scope_ended(self, outcome: str | None) -> None:
        """A backend call ended. If it was this process's first and it compiled nothing (a hot job),
        the worker started early has nothing to do, so it goes (a later miss starts it again); if
        it shipped no backward (an inference graph), it goes unless a backward comes within
        LINGER_S."""
        first, self._first_scope_seen = not self._first_scope_seen, True
        if not first:
            return
        if outcome == "hit":
            self._let_unused_worker_go("the first graph was all hits")
        elif self._worker is not None and self._worker.next_id == 0:
            # A cold inference graph: an eval pass before training (nanoGPT's train.py) is followed
            # within seconds by the training graph, whose backward a worker restarted then would
            # not take in time (H100: let go at once, restarted, ready 17 s later, after the parent
            # had reached that backward). So the worker lingers; an inference-only job lets it go.
            worker = self._worker

            def unused() -> None:
                if worker.next_id == 0:
                    self._let_unused_worker_go(f"no backward to ship {LINGER_S:.0f} s after the first graph")

            timer = threading.Timer(LINGER_S, unused)
            timer.daemon = True
            timer.start()

    def on_lookup(self, kind: str, key: str, outcome: str) -> None:
        """store_gateway calls this. An AOTAutograd entry this process must compile starts the
        worker (if start_early did not). If the process's first AOTAutograd entry is in the store
        or being compiled by another process (a hot start, or a rank that waits for another rank),
        the worker started early is let go before it has finished importing for nothing."""
        if kind != "autograd" or not self._allowed_here():
            return
        first, self._first_autograd_seen = not self._first_autograd_seen, True
        if outcome == "leased" and not self._let_go:  # (after a let-go, only a shipped backward starts one)
            self.worker().start()
        elif first and outcome in ("hit", "waiting"):
            self._let_unused_worker_go("the first AOTAutograd entry is "
                                       + ("stored" if outcome == "hit" else "another process's"))

    def _let_unused_worker_go(self, why: str) -> None:
        w = self._worker
        if w is not None and w.alive and w.idle() and not self._pending:
            log.info("pcompile: %s; closing the backward worker", why)
            self._let_go = True
            w.close(unused=True)

    def on_partition(self, part: Any) -> None:
        """compat.backward_graph calls this with every partitioned joint graph."""
        if not self._allowed_here():
            return
        if part.why_not is not None:
            log.info("pcompile: backward not compiled ahead: %s", part.why_not)
            emit("backward_ahead", now(), 0.0, outcome="skipped", reason=part.why_not)
            if not self._shipped_any:
                # The job's first training graph cannot be shipped (dynamic shapes, activation
                # checkpointing's RNG state, tensor subclasses, ...): its other graphs are most
                # likely the same kind, and an idle worker would hold its CUDA context (~0.6 GB)
                # and its imports' CPU beside the job for two minutes. A later shippable
                # backward starts one again.
                self._let_unused_worker_go(f"the first backward cannot be shipped ({part.why_not})")
            return
        from pcompile.compat import backward_graph

        t0 = now()
        guessed = part.predicted.inputs or backward_graph.placeholder_vals(part.bw_module)
        try:
            data = backward_graph.dumps(part.bw_module, guessed)
        except Exception as exc:  # not shippable: the parent compiles it as always
            log.info("pcompile: backward not compiled ahead: cannot serialise it (%s: %s)", type(exc).__name__, exc)
            emit("backward_ahead", t0, now() - t0, outcome="skipped", reason=f"{type(exc).__name__}")
            return
        self._shipped_any = True
        job = self._pending[id(part.bw_module)] = self.worker().submit(data, guessed)
        job.labels = part.predicted.labels
        emit("backward_ship", t0, now() - t0, bytes=len(data), restrided=part.predicted.restrided)

    @contextlib.contextmanager
    def around_backward(self, bw_module: Any, placeholders: list[Any]) -> Iterator[None]:
        """The parent is about to compile `bw_module` with `placeholders`: if the shipped twin was
        compiled for the same inputs and the worker has taken it, let it claim the key first (the
        parent then waits for its result through single-flight); if not, drop it and compile here
        at once. Chosen per graph: a worker still starting or busy never makes the parent wait."""
        job = self._pending.pop(id(bw_module), None)
        if job is None:
            yield
            return
        from pcompile.compat import backward_graph

        t0 = now()
        w = self.worker()
        differs = backward_graph.differing_inputs(job.guessed, placeholders, job.labels)
        job.guessed = []
        if differs:
            if not w.cancel(job):
                w.interrupt(job)
            state = "mispredicted"
            log.info("pcompile: backward compiled ahead is unusable: the compiled forward saved %d tensor(s) with "
                     "other strides than predicted (%s)", len(differs), "; ".join(differs[:3]))
        else:
            state = _wait_for_claim(w, job)
        waited = now() - t0
        hits = backward_graph.fx_cache_hits()
        yield
        used = backward_graph.fx_cache_hits() > hits and state in ("claimed", "done")
        outcome = "used" if used else ("not-used" if state in ("claimed", "done") else state)
        emit("backward_ahead", t0, now() - t0, outcome=outcome, waited_for_claim_s=round(waited, 3),
             differs=len(differs), first_difference=differs[0] if differs else "", differences=differs[:12])
        log.info("pcompile: backward compiled ahead: %s (job %s)", outcome, state)


def _wait_for_claim(w: Worker, job: Job) -> str:
    deadline = time.monotonic() + CLAIM_TIMEOUT_S
    while True:  # job.changed is never held while taking the worker's lock (its reader does the reverse)
        with job.changed:
            state = job.state
        if state not in ("queued", "sent"):
            return state
        if state == "queued" and w.cancel(job):
            # Never wait for a worker that has not taken the job: it is still starting (torch
            # imports, ~11 s; longer on a busy node) or busy with another graph, and the parent
            # would idle for it. Compiling here is never slower than without backward ahead.
            return "cancelled"
        if time.monotonic() >= deadline:
            return state
        with job.changed:
            if job.state == state:
                job.changed.wait(0.1)
