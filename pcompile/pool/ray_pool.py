"""RayPool: the NodePool interface (`submit -> Future`) on CPU-only Ray actors, any host.

    pool = RayPool("ray://head:10001")             # or None: RAY_ADDRESS / a local cluster
    fut = pool.submit_job(fn, args, weight=len(src), timeout=600, label=name)

Why actors and not tasks: a compile worker pays seconds of imports (torch, Triton) once;
an actor keeps them warm across jobs, as Inductor's own workers do. Why our own dispatcher
rather than ray.util.ActorPool: ActorPool hands work out FIFO and has no per-job deadline or
actor replacement. Here each idle actor takes the heaviest waiting job (longest first), a job
past its deadline gets its actor killed and replaced (JobTimedOut), and an actor that dies
fails only its job (WorkerCrashed), like the node pool.

Results come back as bytes through Ray's object store, and the *caller* publishes them to the
pcompile store: the caller already holds the single-flight lease for the key, the actor's host
may not see this node's store tiers at all, and the caller checks the actor's software versions
against its own key before anything is published (an actor with another ptxas must not write
under this key). The bytes are small (tens of KB per kernel).
"""
from __future__ import annotations

import dataclasses
import heapq
import itertools
import logging
import os
import pickle
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from pcompile.pool.client import RemoteTraceback
from pcompile.warn import warn_once
from pcompile.pool.errors import JobTimedOut, PoolUnavailable, WorkerCrashed
from pcompile.pool.base import JobPool

log = logging.getLogger("pcompile.pool.ray")

MAX_ACTORS = 64


class CompileActor:
    """A long-lived CPU-only worker process on some host of the cluster."""

    def __init__(self, preload: tuple[str, ...] = ()) -> None:
        import importlib

        for name in preload:
            try:
                importlib.import_module(name)
            except Exception as exc:
                print(f"pcompile actor: preload {name} failed: {exc}")

    def run(self, payload: bytes) -> dict[str, Any]:
        from pcompile.pool.worker import run_job

        return run_job(payload)

    def pid(self) -> int:
        return os.getpid()


@dataclasses.dataclass(eq=False)
class _Job:
    id: int
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    payload: bytes
    weight: float
    timeout: float
    label: str
    fallback: Callable[[], Any] | None
    future: Future


class RayPool(JobPool):
    """Executor on Ray actors: longest-first, per-job timeout, crash isolation, local fallback."""

    def __init__(
        self,
        address: str | None = None,
        *,
        actors: int | None = None,
        job_timeout: float = 600.0,
        preload: tuple[str, ...] = (),
        runtime_env: dict[str, Any] | None = None,
        init_kwargs: dict[str, Any] | None = None,
        local_workers: int | None = None,
        connect_timeout: float = 60.0,
    ) -> None:
        self.address = address
        self.connect_timeout = connect_timeout
        self.requested_actors = actors
        self.job_timeout = job_timeout
        self.preload = tuple(preload)
        self.runtime_env = runtime_env
        self.init_kwargs = dict(init_kwargs or {})
        self.local_workers = local_workers or max(1, min(4, os.cpu_count() or 1))
        self._lock = threading.Condition()
        self._ids = itertools.count(1)
        self._backlog: list[tuple[float, int, _Job]] = []
        self._closed = False
        self._failed: str | None = None
        self._ready = threading.Event()
        self._local: ThreadPoolExecutor | None = None
        self.actor_count = 0
        self.counts = {"ray": 0, "local": 0, "crashed": 0, "timeout": 0}
        self._thread = threading.Thread(target=self._dispatch, name="pcompile-ray-dispatch", daemon=True)
        self._thread.start()
        # ray.init() against an unreachable address blocks for minutes; compiles must not wait.
        self._watchdog = threading.Timer(connect_timeout, self._connect_deadline)
        self._watchdog.daemon = True
        self._watchdog.start()

    def _connect_deadline(self) -> None:
        if not self._ready.is_set():
            self._fail_all(f"Ray did not come up within {self.connect_timeout:g} s")

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
        if self._closed:
            raise RuntimeError("cannot submit to a RayPool after shutdown()")
        kwargs = kwargs or {}
        future: Future = Future()
        try:
            payload = pickle.dumps((fn, tuple(args), kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            future.set_exception(exc)
            return future
        job = _Job(next(self._ids), fn, tuple(args), kwargs, payload, float(weight), float(timeout or self.job_timeout), label or getattr(fn, "__name__", "job"), fallback, future)
        with self._lock:
            if self._failed is not None:
                failed = True
            else:
                failed = False
                heapq.heappush(self._backlog, (-job.weight, job.id, job))
                self._lock.notify_all()
        if failed:
            self._run_local(job)
        return future

    def wait_ready(self, timeout: float = 120.0) -> bool:
        """True once actors exist; False if Ray could not be used (jobs then run in-process)."""
        self._ready.wait(timeout)
        return self._failed is None and self._ready.is_set()

    @property
    def mode(self) -> str:
        if self._failed is not None:
            return "local"
        return "ray" if self._ready.is_set() else "connecting"

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._closed = True
            if cancel_futures:
                for _, _, job in self._backlog:
                    job.future.cancel()
            self._lock.notify_all()
        self._watchdog.cancel()
        if wait and self._failed is None:
            self._thread.join(timeout=60)
        if self._local is not None:
            self._local.shutdown(wait=wait)

    # -- dispatcher ----------------------------------------------------------------------
    def _start_ray(self) -> tuple[Any, Any, int]:
        import ray

        if not ray.is_initialized():
            kwargs = {"ignore_reinit_error": True, "log_to_driver": False, "include_dashboard": False}
            kwargs.update(self.init_kwargs)
            address = self.address or os.environ.get("RAY_ADDRESS") or None
            if address and address.startswith("ray://"):
                kwargs.pop("include_dashboard", None)
            ray.init(address=address, **kwargs)
        count = self.requested_actors
        if not count:
            count = int(ray.cluster_resources().get("CPU", 1))
        count = max(1, min(MAX_ACTORS, count))
        options: dict[str, Any] = {"num_cpus": 1, "num_gpus": 0, "max_restarts": 0, "max_concurrency": 1}
        if self.runtime_env:
            options["runtime_env"] = self.runtime_env
        actor_cls = ray.remote(CompileActor).options(**options)
        return ray, actor_cls, count

    def _dispatch(self) -> None:
        try:
            ray, actor_cls, count = self._start_ray()
        except Exception as exc:
            self._fail_all(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            return
        if self._failed is not None:
            return  # came up after the deadline: jobs already run in-process, stay there
        self.actor_count = count
        idle = [actor_cls.remote(self.preload) for _ in range(count)]
        running: dict[Any, tuple[Any, _Job, float]] = {}
        self._ready.set()
        log.info("ray pool: %d CPU actors", count)
        while True:
            with self._lock:
                while idle and self._backlog:
                    _, _, job = heapq.heappop(self._backlog)
                    if not job.future.set_running_or_notify_cancel():
                        continue
                    actor = idle.pop()
                    ref = actor.run.remote(job.payload)
                    running[ref] = (actor, job, time.monotonic() + job.timeout)
                    self.counts["ray"] += 1
                if not running:
                    if self._closed:
                        break
                    self._lock.wait(0.5)
                    continue
            done, _ = ray.wait(list(running), num_returns=1, timeout=0.2)
            for ref in done:
                actor, job, _deadline = running.pop(ref)
                try:
                    reply = ray.get(ref)
                except Exception as exc:  # RayActorError and friends: the actor process is gone
                    self.counts["crashed"] += 1
                    job.future.set_exception(WorkerCrashed(f"{job.label}: Ray actor died while running it ({type(exc).__name__}); it was replaced"))
                    idle.append(actor_cls.remote(self.preload))
                    continue
                idle.append(actor)
                self._resolve(job, reply)
            now = time.monotonic()
            for ref, (actor, job, deadline) in list(running.items()):
                if now > deadline:
                    running.pop(ref)
                    self.counts["timeout"] += 1
                    ray.kill(actor, no_restart=True)
                    job.future.set_exception(JobTimedOut(f"{job.label}: timed out after {job.timeout:g} s on a Ray actor; the actor was killed and replaced"))
                    idle.append(actor_cls.remote(self.preload))
        for actor in idle:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:
                pass

    def _resolve(self, job: _Job, reply: dict[str, Any]) -> None:
        try:
            if reply.get("ok"):
                job.future.set_result(pickle.loads(reply["data"]))
                return
            exc: BaseException | None = None
            if reply.get("exc"):
                try:
                    exc = pickle.loads(reply["exc"])
                except Exception:
                    exc = None
            if not isinstance(exc, BaseException):
                exc = RuntimeError(str(reply.get("error")))
            if reply.get("traceback"):
                exc.__cause__ = RemoteTraceback(str(reply["traceback"]))
            job.future.set_exception(exc)
        except Exception as exc:
            if not job.future.done():
                job.future.set_exception(exc)

    def _fail_all(self, reason: str) -> None:
        if self._failed is not None:
            return
        warn_once(f"ray:{self.address}", f"pcompile: Ray pool unavailable ({reason}); compiling in-process", logger=log)
        with self._lock:
            self._failed = reason
            jobs = [job for _, _, job in self._backlog]
            self._backlog.clear()
        self._ready.set()
        for job in jobs:
            self._run_local(job)

    def _run_local(self, job: _Job) -> None:
        if not job.future.set_running_or_notify_cancel():
            return
        with self._lock:
            if self._local is None:
                self._local = ThreadPoolExecutor(self.local_workers, thread_name_prefix="pcompile-local")
            self.counts["local"] += 1

        def run() -> None:
            try:
                value = job.fallback() if job.fallback is not None else job.fn(*job.args, **job.kwargs)
            except BaseException as exc:
                job.future.set_exception(exc)
            else:
                job.future.set_result(value)

        self._local.submit(run)


__all__ = ["CompileActor", "PoolUnavailable", "RayPool"]
