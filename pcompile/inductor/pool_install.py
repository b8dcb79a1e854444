"""Route Inductor's parallel Triton compiles through pcompile's store and compile pool.

`install_pool()` (called by pcompile.inductor's install()) replaces Inductor's process pool with
an `InductorPool`. For each `_worker_compile_triton` job Inductor submits (codegen pre-submits
while lowering continues, and the module-load calls), it:

1. computes key = make_key("kernel", source, fingerprint(target from the source's
   DeviceProperties, ptxas=True, extra={artifact, extra_config, libdevice})),
2. calls `store.get_or_compute(key, compile)`: a hit in any tier returns the stored pickle; a
   miss takes the single-flight lease, so each kernel compiles once across ranks and hosts,
3. compiles on the pool chosen by PCOMPILE_POOL (pool/choose.py): `node` (default: this node's
   shared daemon), `ray` / `ray://ADDRESS` (CPU-only Ray actors), `local` (threads in this process),
4. stores exactly what the stock worker returns, pickled, and resolves Inductor's future with
   the unpickled `(CachingAutotuner, elapsed_us)`, so Inductor's own `get_result` runs unchanged.

Every other callable (the readiness probe, 2.14's CuteDSL/NVGEMM jobs) runs in this process on
threads. Nothing here raises into a compile because of pcompile: pool trouble means in-process
compile plus one warning; store trouble means compile without caching plus one warning.
"""
from __future__ import annotations

import functools
import json
import logging
import os
import pickle
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from pcompile.config import Settings
from pcompile.inductor import device_index, layer_keys, triton_jobs
from pcompile.compat import pool_hook
from pcompile.keys.key import Key, KeyInputs
from pcompile.warn import warn_once
from pcompile.pool import choose
from pcompile.pool.choose import job_timeout, local_threads, pool_kind, start_pool
from pcompile.pool.errors import JobTimedOut, PoolError, WorkerCrashed
from pcompile.settings import POOL_EAGER, POOL_WORKER

log = logging.getLogger("pcompile.inductor.pool")

BLOB = "result"
WORKER_PRELOAD = (*pool_hook.WORKER_MODULES, "pcompile.inductor.triton_jobs", "pcompile.inductor.worker_prewarm")


def daemon_options() -> Any:
    """How this process would start the node daemon (pool/choose.py; `pcompile warm` starts it
    before its sandboxed child can: a daemon must never live in the warm's file sandbox)."""
    return choose.daemon_options(WORKER_PRELOAD)


class KernelRouter:
    """Resolves Triton jobs through the store and a compile pool; one per process."""

    def __init__(self, kind: str, address: str | None = None, settings: Settings | None = None, store: Any = None, eager: bool = False) -> None:
        from pcompile.compat import pool_hook

        self.hook = pool_hook
        self.settings = settings or Settings.from_env()
        self.kind = kind
        self._store = store
        self.timeout = job_timeout()
        self.counts = {"hit": 0, "waited": 0, "compiled": 0, "uncached": 0, "fallback": 0}
        self._counts_lock = threading.Lock()
        self._waiters = ThreadPoolExecutor(64, thread_name_prefix="pcompile-kernel")
        self._fp_lock = threading.Lock()
        self._warming = False
        self.eager = eager
        self.jobs = self._make_pool(kind, address)

    # -- pools ---------------------------------------------------------------------------
    def _make_pool(self, kind: str, address: str | None) -> Any:
        pool, self.kind = start_pool(kind, address, cache_dir=self.settings.cache_dir, timeout=self.timeout,
                                     preload=WORKER_PRELOAD, eager=self.eager)
        return pool

    @property
    def store(self) -> Any:
        if self._store is None:
            from pcompile.store.compose import default_store

            self._store = default_store()
        return self._store

    # -- keys ----------------------------------------------------------------------------
    def key_for(self, job: Any) -> tuple[Key, KeyInputs, dict[str, str]]:
        """The kernel's key (layer_keys.pool_kernel_key: one place for every layer's keys)."""
        return layer_keys.pool_kernel_key(job.source, job.extra_env, job.extra_config)

    def warm_up(self) -> None:
        """Run the slow version probes (ptxas, Triton's env) before the first kernel arrives."""
        try:
            layer_keys.pool_kernel_fingerprint("warmup", ())
            self.hook.triton_env()
        except Exception:
            pass

    def warm_up_soon(self) -> None:
        """warm_up() on a thread, once. Called at the first graph this process must compile, not
        at install: in a process whose graphs all hit, the probes' ~0.5 s of Python would only
        compete for the GIL with Dynamo's tracing of the first step (profiled: ResNet-50 hot)."""
        with self._fp_lock:
            if self._warming:
                return
            self._warming = True
        threading.Thread(target=self.warm_up, name="pcompile-pool-warmup", daemon=True).start()

    # -- resolving one job ---------------------------------------------------------------
    def submit(self, job: Any) -> Future:
        return self._waiters.submit(self.resolve, job)

    def resolve(self, job: Any) -> tuple[Any, int]:
        """(CachingAutotuner, elapsed_us) for `job`, from the store or freshly compiled, bound to
        the device the job's source names (an entry may come from a rank on another GPU)."""
        t0 = time.time()
        outcome = "error"
        built: dict[str, Any] = {}
        try:
            value, outcome = self._resolve(job, built)
            device = self.hook.device_of(job.source)
            device_index.bind_kernel(value[0], device[2] if device else None)
            return value
        finally:
            _emit_kernel_event(job, t0, outcome, self.kind, built)

    def _resolve(self, job: Any, built: dict[str, Any]) -> tuple[tuple[Any, int], str]:
        try:
            key, inputs, fp = self.key_for(job)
            store = self.store
        except Exception as exc:
            warn_once("kernel-store-open", f"pcompile: kernel cache unavailable ({type(exc).__name__}: {exc}); compiling without it", logger=log)
            self._count("uncached")
            return pickle.loads(self.compile(job, None).data), "compiled"

        def compute() -> Any:
            from pcompile.store.entry import Entry

            result = self.compile(job, fp)
            built.update(key=str(key), worker=result.where, worker_s=round(result.seconds, 6))
            meta = {"kernel": job.kernel_name, "built_by": result.where, "pool": self.kind, "worker_seconds": round(result.seconds, 6)}
            return Entry(key, {BLOB: result.data}, inputs, meta=meta, compile_seconds=result.seconds)

        try:
            t0 = time.time()
            entry, outcome = store.get_or_compute(key, compute)
            _emit_lookup(job, key, t0, outcome, entry)
        except (PoolError, OSError) as exc:
            warn_once("store-compute", f"pcompile: kernel cache failed ({type(exc).__name__}: {exc}); compiling without it", logger=log)
            self._count("uncached")
            return pickle.loads(self.compile(job, None).data), "compiled"
        self._count(outcome)
        built.setdefault("key", str(key))
        if outcome != "compiled":
            built["saved_s"] = round(entry.compile_seconds, 6)
            built["waited"] = outcome == "waited"
        try:
            return pickle.loads(entry.blobs[BLOB]), ("compiled" if outcome == "compiled" else "hit")
        except Exception as exc:  # e.g. an entry from an incompatible build that slipped through
            warn_once("unpickle", f"pcompile: cached kernel {key} does not load here ({type(exc).__name__}: {exc}); recompiling in-process", logger=log)
            self._count("fallback")
            return pickle.loads(triton_jobs.compile_in_process(job).data), "compiled"

    def compile(self, job: Any, fp: dict[str, str] | None) -> Any:
        """A TritonResult from the pool, or from this process if the pool cannot deliver."""
        env = None if self.kind == "ray" else job.extra_env
        if self.kind == "ray" and job.extra_env.get("TRITON_LIBDEVICE_PATH"):
            return self._fallback(job)  # a custom libdevice path exists only on this host
        from pcompile.inductor import store_gateway

        future = self.jobs.submit_job(
            triton_jobs.run_triton_job,
            (job.kernel_name, job.source, env, job.extra_config, json.loads(fp["x.triton_env"]) if fp else self.hook.triton_env()),
            {"untimed": store_gateway.cannot_time()},
            weight=float(len(job.source)),
            timeout=self.timeout,
            label=job.kernel_name,
            fallback=functools.partial(self._fallback, job),
        )
        try:
            result = future.result()
        except (WorkerCrashed, JobTimedOut) as exc:
            warn_once(f"crash:{job.kernel_name}", f"pcompile: {exc}; compiling {job.kernel_name} in-process instead", logger=log)
            return self._fallback(job)
        if fp is not None and not self._same_build(result.software, fp):
            warn_once("software", f"pcompile: a worker runs other software ({result.software}) than this process; compiling in-process", logger=log)
            return self._fallback(job)
        return result

    def _fallback(self, job: Any) -> Any:
        self._count("fallback")
        return triton_jobs.compile_in_process(job)

    @staticmethod
    def _same_build(software: dict[str, str], fp: dict[str, str]) -> bool:
        same = all(software.get(name) == fp.get(name) for name in ("torch", "triton", "ptxas", "python"))
        return same and software.get("triton_env") == fp.get("x.triton_env")

    def _count(self, outcome: str) -> None:
        with self._counts_lock:
            self.counts[outcome] = self.counts.get(outcome, 0) + 1

    def shutdown(self) -> None:
        self._waiters.shutdown(wait=False)
        self.jobs.shutdown(wait=False)


def _emit_kernel_event(job: Any, start: float, outcome: str, pool: str, built: dict[str, Any]) -> None:
    """One `kernel_compile` event per Triton job for `pcompile report` (never raises)."""
    try:
        from pcompile.events import emit

        emit("kernel_compile", start, time.time() - start, kernel=job.kernel_name, artifact="triton", pool=pool, outcome=outcome, **built)
    except Exception:
        pass


def _emit_lookup(job: Any, key: Key, start: float, outcome: str, entry: Any) -> None:
    """The kernel look-up as a `cache_lookup` event (the store's stats counted it already)."""
    try:
        from pcompile.events import emit

        hit = outcome != "compiled"
        extra = {"saved_s": entry.compile_seconds} if hit else {}
        emit("cache_lookup", start, time.time() - start if hit else 0.0, layer="kernel", tier="store", key=str(key),
             artifact="inductor_kernel", kernel=job.kernel_name, outcome="hit" if hit else "miss", **extra)
    except Exception:
        pass


class InductorPool:
    """What `AsyncCompile.process_pool()` returns: `submit(fn, *args, **kwargs) -> Future`."""

    def __init__(self, router: KernelRouter) -> None:
        self.router = router
        self.hook = router.hook
        self._local: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        if self.hook.is_ready_probe(fn):
            future: Future = Future()
            future.set_result(fn(*args, **kwargs))
            return future
        job = self.hook.triton_job(fn, args, kwargs)
        if job is not None:
            return self.router.submit(job)
        with self._lock:
            if self._local is None:
                self._local = ThreadPoolExecutor(local_threads(), thread_name_prefix="pcompile-other")
        return self._local.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *args: Any, **kwargs: Any) -> None:
        """Inductor calls this at exit and on `shutdown_compile_workers()`; the shared router
        (and the node daemon) outlive it, the daemon exits on its own when idle."""
        local, self._local = self._local, None
        if local is not None:
            local.shutdown(wait=wait)

    # SubprocPool's extras, for code that calls them on whatever pool it gets.
    def wakeup(self) -> None:
        return None

    def quiesce(self) -> None:
        return None


_router: KernelRouter | None = None
_router_pid: int | None = None
_install_lock = threading.Lock()


def router() -> KernelRouter | None:
    return _router


def _start_eagerly() -> bool:
    """Start the daemon at install time only where Triton kernels are expected (a CUDA device is
    visible, real or virtual), so its workers are warm by the first kernel; a CPU-only process
    (C++ kernels only) starts none: each idle daemon holds a torch-importing forkserver."""
    chosen = POOL_EAGER.get()
    if chosen is not None:
        return chosen
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def _get_router(kind: str, address: str | None) -> KernelRouter:
    global _router, _router_pid
    if _router is None or _router_pid != os.getpid():  # a forked child needs its own connection
        _router = KernelRouter(kind, address, eager=_start_eagerly())
        _router_pid = os.getpid()
    return _router


_COMPILING = ("graph", "autograd")
_listening = False


def _on_lookup(kind: str, key: str, outcome: str) -> None:
    """store_gateway calls this on every lookup: a graph entry this process must build (missed, or
    leased to it) means kernels will follow, so the router's probes start now."""
    if kind in _COMPILING and outcome in ("leased", "miss") and _router is not None and _router_pid == os.getpid():
        _router.warm_up_soon()


def _listen_for_first_compile() -> None:
    global _listening
    if not _listening:
        from pcompile.inductor import store_gateway

        store_gateway.add_listener(_on_lookup)
        _listening = True


def install_pool() -> bool:
    """Install the pcompile Triton pool into Inductor; False (stock Inductor) when not possible.

    Idempotent. Skipped inside pcompile's own workers, with PCOMPILE_POOL=off, with an
    explicit TORCHINDUCTOR_COMPILE_THREADS=1, and on torch/triton versions the gate rejects.
    """
    if POOL_WORKER.get():
        return False
    kind, address = pool_kind()
    if kind == "off":
        return False
    with _install_lock:
        try:
            from pcompile.compat import CompatError, pool_hook
            from pcompile.compat.gate import unsupported_reason

            reason = unsupported_reason()
            if reason:
                warn_once("pool-gate", f"pcompile: {reason}; Triton kernels compile with stock Inductor", logger=log)
                return False
            try:
                pool_hook.check()
            except CompatError as exc:
                warn_once("pool-compat", f"pcompile: Inductor's compile pool API changed ({exc}); Triton kernels compile with stock Inductor", logger=log)
                return False
            if pool_hook.ensure_compile_threads() <= 1:
                return False  # the user asked for serial compiles
            if pool_hook.thread_workers():
                warn_once("pool-threads", "pcompile: Inductor compiles Triton kernels on threads here (compile_worker_mode "
                          "'thread' or free-threaded Python), not through a process pool: pcompile's pool is not used; "
                          "kernels still go through the store", logger=log)
                return False
            pool_hook.set_ptxas_path()
            if pool_hook.installed():
                return True
            _get_router(kind, address)  # with a GPU: start the daemon now (its own process), while Dynamo traces
            _listen_for_first_compile()
            pool_hook.install_process_pool(lambda: InductorPool(_get_router(kind, address)))
            pool_hook.prime_ready()
            return True
        except Exception as exc:  # never break a compile over the pool
            warn_once("pool-install", f"pcompile: could not install the compile pool ({type(exc).__name__}: {exc}); using stock Inductor", logger=log)
            return False


def uninstall_pool() -> None:
    global _router
    with _install_lock:
        try:
            from pcompile.compat import pool_hook

            pool_hook.uninstall_process_pool()
        except Exception:
            pass
        if _router is not None:
            _router.shutdown()
            _router = None


def counts() -> dict[str, int]:
    """Outcomes so far in this process: hit / waited / compiled / uncached / fallback."""
    return dict(_router.counts) if _router is not None else {}


__all__ = ["InductorPool", "KernelRouter", "counts", "install_pool", "router", "uninstall_pool"]
