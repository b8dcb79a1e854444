"""NodePool: a concurrent.futures-style executor whose workers are the node daemon's.

    pool = NodePool(cache_dir)
    fut = pool.submit(fn, *args, **kwargs)          # like Executor.submit
    fut = pool.submit_job(fn, args, weight=len(src), timeout=300, label=name,
                          fallback=lambda: fn_in_process(*args))

Why an executor: Inductor's process pool, Ray's ActorPool and the Triton hook all speak
`submit -> Future`, so the hook can swap one pool for another without knowing which it has.

Guarantees, in order of priority:
1. submit() never blocks on the daemon: connecting (or starting the daemon) runs on a thread;
   jobs wait in a local longest-first backlog meanwhile.
2. A job never fails because of pcompile: if no daemon can be had, or the daemon goes away and
   cannot be reached again, the job runs in this process (its `fallback`, else fn itself) and
   one line is logged. Only the job's own exception, a worker crash (WorkerCrashed) or a
   timeout (JobTimedOut) reach the future; the caller decides what to do with those.
3. Back-pressure: at most `window` jobs (the daemon's figure) are queued at the daemon per
   client; the rest wait here, heaviest first, so one rank cannot flood the node's queue.
"""
from __future__ import annotations

import dataclasses
import heapq
import itertools
import logging
import os
import pickle
import socket
import threading
import time
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from pcompile.pool import protocol
from pcompile.pool.errors import JobTimedOut, PoolUnavailable, WorkerCrashed
from pcompile.pool.launcher import DaemonOptions, connect, connect_or_start
from pcompile.pool.paths import PoolPaths
from pcompile.pool.base import JobPool
from pcompile.warn import warn_once

log = logging.getLogger("pcompile.pool")

MAX_RESUBMITS = 2  # a job whose daemon vanished is resent this often, then run in-process
RETRY_START_AFTER = 60.0  # after a failed start, run in-process this long before trying again

class RemoteTraceback(Exception):
    """Carries the worker-side traceback as the __cause__ of a re-raised job exception."""

    def __init__(self, tb: str) -> None:
        super().__init__(tb)
        self.tb = tb

    def __str__(self) -> str:
        return f'\n"""\n{self.tb}"""'


@dataclasses.dataclass(eq=False)
class _Pending:
    id: int
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    payload: bytes
    weight: float
    timeout: float | None
    label: str
    fallback: Callable[[], Any] | None
    future: Future
    attempts: int = 0
    started: bool = False


class _Connection:
    def __init__(self, sock: socket.socket, hello: dict[str, Any]) -> None:
        self.sock = sock
        self.hello = hello
        self.window = max(1, int(hello.get("window") or 1))
        self.pid = hello.get("pid")
        self.lock = threading.Lock()
        self.open = True

    def send(self, obj: dict[str, Any]) -> None:
        with self.lock:
            protocol.send(self.sock, obj)

    def close(self) -> None:
        self.open = False
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


_pools: "weakref.WeakSet[NodePool]" = weakref.WeakSet()


class NodePool(JobPool):
    """Executor backed by this node's shared compile daemon (see module docstring)."""

    def __init__(
        self,
        cache_dir: Path | str,
        options: DaemonOptions | None = None,
        *,
        start_timeout: float = 60.0,
        local_workers: int | None = None,
        connect_now: bool = True,
    ) -> None:
        self.cache_dir = Path(cache_dir).absolute()
        self.options = options or DaemonOptions()
        self.start_timeout = start_timeout
        self.local_workers = local_workers or max(1, min(4, os.cpu_count() or 1))
        self._ids = itertools.count(1)
        self._init_state()
        _pools.add(self)
        if connect_now:
            with self._lock:
                self._start_connecting()

    def _init_state(self) -> None:
        self._lock = threading.RLock()
        self._conn: _Connection | None = None
        self._connecting = False
        self._local_until = 0.0
        self._last_error: str | None = None
        self._backlog: list[tuple[float, int, _Pending]] = []
        self._inflight: dict[int, _Pending] = {}
        self._local: ThreadPoolExecutor | None = None
        self._closed = False
        self._pid = os.getpid()
        self.counts = {"daemon": 0, "local": 0, "resubmitted": 0}

    # -- public API ----------------------------------------------------------------------
    def submit_job(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        weight: float = 0.0,
        timeout: float | None = None,
        label: str | None = None,
        fallback: Callable[[], Any] | None = None,
    ) -> Future:
        """Queue fn(*args, **kwargs) on the node's workers; heavier jobs start first.

        `timeout` bounds the job's run time in a worker (daemon default if None); `fallback`
        is what runs in this process if the pool cannot take the job (default: fn itself).
        """
        if self._closed:
            raise RuntimeError("cannot submit to a NodePool after shutdown()")
        kwargs = kwargs or {}
        future: Future = Future()
        try:
            payload = pickle.dumps((fn, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # like ProcessPoolExecutor: an unpicklable job fails its future
            future.set_exception(exc)
            return future
        job = _Pending(next(self._ids), fn, tuple(args), kwargs, payload, float(weight), timeout, label or getattr(fn, "__name__", "job"), fallback, future)
        with self._lock:
            heapq.heappush(self._backlog, (-job.weight, job.id, job))
        self._pump()
        return future

    @property
    def mode(self) -> str:
        """'daemon' when connected, 'local' while running in-process, else 'connecting'."""
        with self._lock:
            if self._conn is not None:
                return "daemon"
            if time.monotonic() < self._local_until:
                return "local"
            return "connecting"

    @property
    def daemon_pid(self) -> int | None:
        conn = self._conn
        return conn.pid if conn else None

    def wait_connected(self, timeout: float = 60.0) -> bool:
        """Block until connected (True) or until the pool has fallen back to in-process (False)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            if self._conn is None and not self._connecting and time.monotonic() >= self._local_until:
                self._start_connecting()
        while time.monotonic() < deadline:
            mode = self.mode
            if mode != "connecting":
                return mode == "daemon"
            time.sleep(0.02)
        return False

    def status(self, timeout: float = 10.0) -> dict[str, Any]:
        """The daemon's own report (workers, queue, slots); raises PoolUnavailable if none runs."""
        return self._call({"op": "status", "id": 0}, timeout)

    def stop_daemon(self, timeout: float = 10.0) -> None:
        """Ask the daemon to exit now (tests, `pcompile` CLI); running jobs are abandoned."""
        paths = PoolPaths.for_cache_dir(self.cache_dir)
        try:
            sock, _ = connect(paths, timeout)
        except (FileNotFoundError, ConnectionRefusedError, PoolUnavailable):
            return
        with sock:
            protocol.send(sock, {"op": "stop"})

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._closed = True
            pending = [p for _, _, p in self._backlog] + list(self._inflight.values())
            if cancel_futures:
                for p in pending:
                    p.future.cancel()
        if wait:
            for p in pending:
                try:
                    p.future.exception()
                except BaseException:
                    pass
        with self._lock:
            conn, self._conn = self._conn, None
            local, self._local = self._local, None
        if conn is not None:
            conn.close()
        if local is not None:
            local.shutdown(wait=wait)

    def __enter__(self) -> "NodePool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- connection management -----------------------------------------------------------
    def _start_connecting(self) -> None:
        if self._connecting or self._conn is not None or self._closed:
            return
        self._connecting = True
        threading.Thread(target=self._connect_worker, name="pcompile-pool-connect", daemon=True).start()

    def _connect_worker(self) -> None:
        try:
            sock, hello = connect_or_start(self.cache_dir, self.options, start_timeout=self.start_timeout)
        except PoolUnavailable as exc:
            with self._lock:
                self._connecting = False
                self._last_error = str(exc)
                self._local_until = time.monotonic() + RETRY_START_AFTER
            warn_once(f"unavailable:{self.cache_dir}", f"pcompile: compile pool unavailable ({exc}); compiling in-process", logger=log)
            self._pump()
            return
        except Exception as exc:  # never let a bug here strand jobs
            with self._lock:
                self._connecting = False
                self._last_error = f"{type(exc).__name__}: {exc}"
                self._local_until = time.monotonic() + RETRY_START_AFTER
            warn_once(f"unavailable:{self.cache_dir}", f"pcompile: compile pool failed ({type(exc).__name__}: {exc}); compiling in-process", logger=log)
            self._pump()
            return
        conn = _Connection(sock, hello)
        with self._lock:
            self._connecting = False
            if self._closed:
                conn.close()
                return
            self._conn = conn
        threading.Thread(target=self._read_loop, args=(conn,), name="pcompile-pool-reader", daemon=True).start()
        self._pump()

    def _read_loop(self, conn: _Connection) -> None:
        try:
            while conn.open:
                msg = protocol.recv(conn.sock)
                if msg.get("op") == "result":
                    self._on_result(msg)
        except (protocol.ProtocolError, OSError, EOFError):
            pass
        finally:
            self._on_lost(conn)

    def _on_lost(self, conn: _Connection) -> None:
        """The daemon went away (idle exit, kill): resend what it held, or run it here."""
        with self._lock:
            if self._conn is not conn:
                return
            self._conn = None
            conn.open = False
            lost = list(self._inflight.values())
            self._inflight.clear()
            local = []
            for p in lost:
                p.attempts += 1
                if p.attempts > MAX_RESUBMITS:
                    local.append(p)
                else:
                    self.counts["resubmitted"] += 1
                    heapq.heappush(self._backlog, (-p.weight, p.id, p))
        try:
            conn.sock.close()
        except OSError:
            pass
        for p in local:
            warn_once("lost", f"pcompile: lost the compile daemon {MAX_RESUBMITS} times running {p.label}; compiling in-process", logger=log)
            self._run_local(p)
        self._pump()

    def _pump(self) -> None:
        """Move backlog jobs to the daemon while the window allows, or in-process if no daemon."""
        to_local: list[_Pending] = []
        with self._lock:
            if self._closed and not self._backlog:
                return
            conn = self._conn
            if conn is None:
                if not self._backlog:
                    return  # reconnect (or restart an idle-exited daemon) only when there is work
                if time.monotonic() < self._local_until or self._closed:
                    while self._backlog:
                        to_local.append(heapq.heappop(self._backlog)[2])
                else:
                    self._start_connecting()
            else:
                while self._backlog and len(self._inflight) < conn.window:
                    _, _, p = heapq.heappop(self._backlog)
                    if not p.started:
                        if not p.future.set_running_or_notify_cancel():
                            continue
                        p.started = True
                    self._inflight[p.id] = p
                    msg = {"op": "submit", "id": p.id, "payload": p.payload, "weight": p.weight, "timeout": p.timeout, "label": p.label}
                    try:
                        conn.send(msg)
                    except OSError:
                        break  # the reader sees the same failure and requeues _inflight
                    self.counts["daemon"] += 1
        for p in to_local:
            self._run_local(p)

    # -- outcomes ------------------------------------------------------------------------
    def _on_result(self, msg: dict[str, Any]) -> None:
        with self._lock:
            p = self._inflight.pop(msg.get("id"), None)
        if p is None:
            return
        try:
            if msg.get("ok"):
                p.future.set_result(pickle.loads(msg["data"]))
            else:
                kind = msg.get("kind")
                error = str(msg.get("error") or "unknown pool error")
                if kind == "raised":
                    p.future.set_exception(_rebuild_exception(msg))
                elif kind == "crashed":
                    p.future.set_exception(WorkerCrashed(error))
                elif kind == "timeout":
                    p.future.set_exception(JobTimedOut(error))
                else:  # the daemon could not run it at all (no worker would start, shutting down)
                    warn_once(f"daemon-unavailable:{kind}", f"pcompile: the compile daemon could not run {p.label} ({error}); compiling in-process", logger=log)
                    self._run_local(p)
        except Exception as exc:  # e.g. a result that does not unpickle here
            if not p.future.done():
                p.future.set_exception(exc)
        self._pump()

    def _run_local(self, p: _Pending) -> None:
        if not p.started:
            if not p.future.set_running_or_notify_cancel():
                return
            p.started = True
        with self._lock:
            if self._local is None:
                self._local = ThreadPoolExecutor(self.local_workers, thread_name_prefix="pcompile-local")
            local = self._local
            self.counts["local"] += 1

        def run() -> None:
            try:
                value = p.fallback() if p.fallback is not None else p.fn(*p.args, **p.kwargs)
            except BaseException as exc:
                p.future.set_exception(exc)
            else:
                p.future.set_result(value)

        try:
            local.submit(run)
        except RuntimeError:  # executor shut down (interpreter exit): run inline
            run()

    def _call(self, msg: dict[str, Any], timeout: float) -> dict[str, Any]:
        paths = PoolPaths.for_cache_dir(self.cache_dir)
        try:
            sock, _ = connect(paths, timeout)
        except (FileNotFoundError, ConnectionRefusedError):
            raise PoolUnavailable(f"no compile daemon is running for {self.cache_dir}") from None
        with sock:
            protocol.send(sock, msg)
            return protocol.recv(sock, time.monotonic() + timeout)


def _rebuild_exception(msg: dict[str, Any]) -> BaseException:
    exc: BaseException | None = None
    if msg.get("exc"):
        try:
            exc = pickle.loads(msg["exc"])
        except Exception:
            exc = None
    if not isinstance(exc, BaseException):
        exc = RuntimeError(str(msg.get("error")))
    if msg.get("traceback"):
        exc.__cause__ = RemoteTraceback(str(msg["traceback"]))
    return exc


def _after_fork_in_child() -> None:
    for pool in list(_pools):
        pool._init_state()


os.register_at_fork(after_in_child=_after_fork_in_child)
