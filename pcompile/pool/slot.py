"""One worker slot of the node daemon: keeps one worker process alive and runs one job at a time on it.

A slot forks its worker from the daemon's warm forkserver, feeds it jobs from the daemon's
queue, and turns a crash or a missed deadline into a failure of exactly that job, then replaces
the worker (daemon.py owns the queue, the clients and the socket).
"""
from __future__ import annotations

import logging
import pickle
import signal
import threading
import time
from typing import TYPE_CHECKING, Any

from pcompile.pool import worker

if TYPE_CHECKING:
    from pcompile.pool.daemon import Client, Daemon

log = logging.getLogger("pcompile.pool.daemon")

WORKER_START_TIMEOUT = 300.0


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "without exiting"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


class Job:
    __slots__ = ("client", "cid", "payload", "weight", "timeout", "label", "queued_at", "started_at", "retried")

    def __init__(self, client: "Client", msg: dict[str, Any], default_timeout: float) -> None:
        self.client = client
        self.cid = msg["id"]
        self.payload: bytes = msg["payload"]
        self.weight = float(msg.get("weight") or 0.0)
        self.timeout = float(msg.get("timeout") or default_timeout)
        self.label = str(msg.get("label") or f"job {self.cid}")
        self.queued_at = time.monotonic()
        self.started_at: float | None = None
        self.retried = False


class WorkerSlot:
    """Keeps one worker subprocess alive and runs one job at a time on it."""

    def __init__(self, daemon: "Daemon", index: int) -> None:
        self.daemon = daemon
        self.index = index
        self.proc: Any = None  # a multiprocessing Process forked by the forkserver
        self.conn: Any = None  # its end of a duplex multiprocessing Pipe
        self.job: Job | None = None
        self.jobs_done = 0
        self.replaced = 0
        self.thread = threading.Thread(target=self.run, name=f"pcompile-slot-{index}", daemon=True)

    # -- worker process ------------------------------------------------------------------
    def spawn(self) -> str | None:
        """Fork a worker from the warm forkserver and wait for its ready frame; an error string on failure."""
        self.close_worker()
        ctx = self.daemon.mp
        parent, child = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=worker.serve, args=(child, tuple(self.daemon.preload)), name=f"pcompile-worker-{self.index}", daemon=False)
        try:
            proc.start()
        except Exception as exc:
            parent.close()
            child.close()
            return f"cannot start a worker ({type(exc).__name__}: {exc})"
        child.close()
        self.proc, self.conn = proc, parent
        try:
            if not parent.poll(WORKER_START_TIMEOUT):
                raise TimeoutError(f"no ready signal in {WORKER_START_TIMEOUT:g} s")
            hello = pickle.loads(parent.recv_bytes())
            if hello.get("op") != "ready":
                raise RuntimeError(f"unexpected first message {hello!r:.80}")
        except (EOFError, OSError, TimeoutError, RuntimeError, pickle.UnpicklingError) as exc:
            rc = self.kill()
            return f"worker failed to start ({describe_exit(rc)}; {type(exc).__name__}); see {self.daemon.paths.log}"
        log.info("slot %d: worker %d ready", self.index, proc.pid)
        return None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    def kill(self) -> int | None:
        """SIGKILL the worker (if still running) and return its exit code (negative: signal)."""
        proc = self.proc
        if proc is None:
            return None
        if proc.is_alive():
            try:
                proc.kill()
            except (ProcessLookupError, OSError):
                pass
        proc.join(10)
        rc = proc.exitcode
        self.close_worker()
        return rc

    def close_worker(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass
        self.conn = None
        if self.proc is not None and self.proc.exitcode is not None:
            try:
                self.proc.close()
            except ValueError:
                pass
            self.proc = None

    def stop(self) -> None:
        if self.alive() and self.conn is not None:
            try:
                self.conn.send_bytes(pickle.dumps({"op": "exit"}))
                self.proc.join(2)  # type: ignore[union-attr]
            except OSError:
                pass
        self.kill()

    # -- job loop ------------------------------------------------------------------------
    def run(self) -> None:
        failures = 0
        while not self.daemon.stopping.is_set():
            if not self.alive():
                error = self.spawn()
                if error:
                    failures += 1
                    log.error("slot %d: %s", self.index, error)
                    self._fail_next_job(error)
                    time.sleep(min(30.0, 0.5 * 2**failures))
                    continue
                failures = 0
            job = self.daemon.queue.pop(timeout=0.5)
            if job is None:
                continue
            if not job.client.alive:
                continue
            self.job = job
            try:
                self.daemon.reply(job, self.execute(job))
            finally:
                self.job = None
                self.daemon.touch()

    def _fail_next_job(self, error: str) -> None:
        job = self.daemon.queue.pop(timeout=0)
        if job is not None:
            self.daemon.reply(job, {"ok": False, "kind": "unavailable", "error": error})

    def execute(self, job: Job) -> dict[str, Any]:
        assert self.proc is not None and self.conn is not None
        pid = self.proc.pid
        job.started_at = time.monotonic()
        try:
            self.conn.send_bytes(pickle.dumps({"op": "run", "payload": job.payload}, protocol=pickle.HIGHEST_PROTOCOL))
        except OSError:
            # Died while idle: not this job's fault. Start a new worker and try once more.
            rc = self.kill()
            if job.retried:
                return {"ok": False, "kind": "crashed", "error": f"worker {pid} {describe_exit(rc)} before {job.label} started"}
            job.retried = True
            error = self.spawn()
            if error:
                return {"ok": False, "kind": "unavailable", "error": error}
            return self.execute(job)
        try:
            if not self.conn.poll(job.timeout):
                raise TimeoutError()
            reply = pickle.loads(self.conn.recv_bytes())
            self.jobs_done += 1
            reply["worker"] = pid
            return reply
        except TimeoutError:
            self.kill()
            self.replaced += 1
            return {
                "ok": False,
                "kind": "timeout",
                "error": f"{job.label}: timed out after {job.timeout:g} s in pool worker {pid}; the worker was killed and replaced",
                "worker": pid,
            }
        except (EOFError, OSError, pickle.UnpicklingError):
            rc = self.kill()
            self.replaced += 1
            return {
                "ok": False,
                "kind": "crashed",
                "error": f"{job.label}: pool worker {pid} {describe_exit(rc)} while running it; the worker was replaced",
                "worker": pid,
                "returncode": rc,
            }

    def describe(self) -> dict[str, Any]:
        job = self.job
        return {
            "slot": self.index,
            "pid": self.pid if self.alive() else None,
            "busy": job is not None,
            "label": job.label if job else None,
            "running_for": round(time.monotonic() - job.started_at, 3) if job and job.started_at else None,
            "jobs_done": self.jobs_done,
            "replaced": self.replaced,
        }
