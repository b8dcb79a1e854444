"""The kernel router: each Triton job Inductor hands its compile pool, resolved through the store.

For each `_worker_compile_triton` job (codegen pre-submits while lowering continues, and the
module-load calls), `KernelRouter.resolve`:

1. computes key = make_key("kernel", source, fingerprint(target from the source's
   DeviceProperties, ptxas=True, extra={artifact, extra_config, libdevice})) (layer_keys.py),
2. asks the store gateway (`store_gateway.get_or_compute`, the one way in for every Inductor
   layer): a hit in any tier returns the stored pickle; a miss takes the single-flight lease, so
   each kernel compiles once across ranks and hosts,
3. compiles on the pool chosen by PCOMPILE_POOL (pool/choose.py): `node` (default: this node's
   shared daemon), `ray` / `ray://ADDRESS` (CPU-only Ray actors), `local` (threads in this process),
4. stores exactly what the stock worker returns, pickled, and returns the unpickled
   `(CachingAutotuner, elapsed_us)`, so Inductor's own `get_result` runs unchanged.

Nothing here raises into a compile because of pcompile: pool trouble means in-process compile
plus one warning; store trouble means compile without caching plus one warning.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import logging
import pickle
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from pcompile.compat import coordesc_ring, pool_hook
from pcompile.config import Settings
from pcompile.inductor import device_index, layer_keys, store_gateway, triton_jobs
from pcompile.inductor import env as inductor_env
from pcompile.keys.key import Key, KeyInputs
from pcompile.pool import choose
from pcompile.pool.choose import job_timeout, start_pool
from pcompile.pool.errors import JobTimedOut, PoolError, WorkerCrashed
from pcompile.settings import WARM_COORDESC_STEPS
from pcompile.store.entry import Entry
from pcompile.warn import warn_once

log = logging.getLogger("pcompile.inductor.pool")

BLOB = "result"
WORKER_PRELOAD = (*pool_hook.WORKER_MODULES, "pcompile.inductor.triton_jobs", "pcompile.inductor.worker_prewarm")


def daemon_options() -> Any:
    """How this process would start the node daemon (pool/choose.py; `pcompile warm` starts it
    before its sandboxed child can: a daemon must never live in the warm's file sandbox)."""
    return choose.daemon_options(WORKER_PRELOAD)


class KernelRouter:
    """Resolves Triton jobs through the store and a compile pool; one per process."""

    def __init__(self, kind: str, address: str | None = None, settings: Settings | None = None, eager: bool = False) -> None:
        from pcompile.compat import pool_hook

        self.hook = pool_hook
        self.settings = settings or Settings.from_env()
        self.kind = kind
        self.timeout = job_timeout()
        self.counts = {"hit": 0, "waited": 0, "compiled": 0, "uncached": 0, "fallback": 0}
        self._counts_lock = threading.Lock()
        self._waiters = ThreadPoolExecutor(64, thread_name_prefix="pcompile-kernel")
        self._fp_lock = threading.Lock()
        self._warming = False
        self._speculative: list[Future] = []
        self.eager = eager
        self.jobs = self._make_pool(kind, address)

    # -- pools ---------------------------------------------------------------------------
    def _make_pool(self, kind: str, address: str | None) -> Any:
        pool, self.kind = start_pool(kind, address, cache_dir=self.settings.cache_dir, timeout=self.timeout,
                                     preload=WORKER_PRELOAD, eager=self.eager)
        return pool

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
            if outcome == "hit" and job.candidate and not store_gateway.cannot_time():
                value = self._candidate_on_disk(job, built)
            device = self.hook.device_of(job.source)
            device_index.bind_kernel(value[0], device[2] if device else None)
            self._apply_cached_winner(job, value[0], built)
            if outcome == "compiled":  # a hit's candidates were compiled where it was
                self._compile_coordesc_ring(job)
            return value
        finally:
            _emit_kernel_event(job, t0, outcome, self.kind, built)

    # -- speculation: the configs a GPU job's coordinate-descent tuning compiles --------------
    def _compile_coordesc_ring(self, job: Any) -> None:
        """In a warm only (its host has idle cores; a GPU job's pool serves its critical path):
        queue, behind every real kernel, the compile of the configs the GPU job's tuner tries
        first (compat/coordesc_ring.py). Not in threads of this process (`local`): they would
        contend with the script for the GIL; nor on Ray actors, whose store is their host's."""
        steps = WARM_COORDESC_STEPS.get()
        if steps < 1 or self.kind != "node" or not store_gateway.cannot_time() or not coordesc_ring.wanted(job.source):
            return
        future = self.jobs.submit_job(
            triton_jobs.run_coordesc_ring,
            (job.kernel_name, job.source, self._job_env(job), job.extra_config, self.hook.triton_env(), steps),
            {"store_env": self.settings.job_env(), "job": _job_id()},
            weight=-1.0, timeout=self.timeout, label=f"{job.kernel_name} (tuner candidates)",
            fallback=lambda: [],
        )
        with self._counts_lock:
            self._speculative.append(future)

    def drain_speculation(self, budget_s: float | None = None) -> tuple[int, int, int]:
        """Wait up to `budget_s` in all for the queued candidate compiles (a warm calls this before
        it reports): (kernels whose candidates were compiled, configs compiled, jobs not done in time).
        Bounded, because the warm's stall watchdog sees only the child's own CPU, not the pool's."""
        with self._counts_lock:
            pending, self._speculative = self._speculative, []
        from pcompile.inductor.triton_cache import publish_compiled_elsewhere

        deadline = None if budget_s is None else time.monotonic() + budget_s
        kernels = configs = late = 0
        for future in pending:
            try:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                compiled = list(future.result(timeout=left) or ())
            except TimeoutError:
                late += 1
                continue
            except Exception:
                continue
            n = sum(bool(publish_compiled_elsewhere(key, name)) for key, name in compiled)
            kernels += n > 0
            configs += n
        return kernels, configs, late

    def _apply_cached_winner(self, job: Any, kernel: Any, built: dict[str, Any]) -> None:
        """A kernel from the store holds the winner its builder saw (none, when a warm built it):
        apply the one this process sees, as a stock worker loading the module here would
        (compat/autotune_recheck.py). Not in a warm: nothing launches there. Never fails a job:
        without a winner the kernel benchmarks at its first launch, as it would have."""
        if store_gateway.cannot_time() or job.candidate:
            return
        from pcompile.compat import autotune_recheck

        def reload() -> Any:
            return self.hook.load_kernel_source(job.kernel_name, job.source)

        try:
            applied = autotune_recheck.apply_cached_winner(kernel, reload)
        except Exception as exc:
            warn_once("autotune-recheck", f"pcompile: could not apply a cached autotune winner ({type(exc).__name__}: {exc}); "
                      "such kernels benchmark at their first launch", logger=log)
            return
        if applied:
            built["autotune"] = applied

    def _candidate_on_disk(self, job: Any, built: dict[str, Any]) -> tuple[Any, int]:
        """A max-autotune candidate the store already had: run its compile on the pool anyway,
        as stock's precompile step does, so its cubins land in the Triton dir the benchmark loads
        it from (Triton's own store look-ups make that a copy, not a compile). Answering from the
        store alone made the benchmark compile every candidate serially in its timing loop
        (compat/autotune_precompile.py). Not in a warm: its timings are faked, nothing loads."""
        try:
            fp = self.key_for(job)[2]
        except Exception:
            fp = None
        if not job.extra_env.get("TRITON_CACHE_DIR"):
            from pcompile.compat.autotune_precompile import local_triton_dir

            device = self.hook.device_of(job.source)
            job = dataclasses.replace(job, extra_env={**job.extra_env, "TRITON_CACHE_DIR": local_triton_dir(device[2] if device else 0)})
        # a Ray actor compiles into its own host's dirs: this host's must be filled here
        result = triton_jobs.compile_in_process(job) if self.kind == "ray" else self.compile(job, fp)
        self._count("candidate")
        built.update(candidate=True, worker=result.where, worker_s=round(result.seconds, 6))
        return pickle.loads(result.data)

    def _resolve(self, job: Any, built: dict[str, Any]) -> tuple[tuple[Any, int], str]:
        try:
            key, inputs, fp = self.key_for(job)
        except Exception as exc:
            warn_once("kernel-store-open", f"pcompile: kernel cache unavailable ({type(exc).__name__}: {exc}); compiling without it", logger=log)
            self._count("uncached")
            return pickle.loads(self.compile(job, None).data), "compiled"

        def compute() -> Any:
            result = self.compile(job, fp)
            built.update(key=str(key), worker=result.where, worker_s=round(result.seconds, 6))
            meta = {"kernel": job.kernel_name, "built_by": result.where, "pool": self.kind, "worker_seconds": round(result.seconds, 6)}
            return Entry(key, {BLOB: result.data}, inputs, meta=meta, compile_seconds=result.seconds)

        try:  # the gateway every Inductor layer goes through: single-flight, accounting, events
            got = store_gateway.get_or_compute(key, compute, artifact="inductor_kernel", kernel=job.kernel_name)
        except (PoolError, OSError) as exc:
            warn_once("store-compute", f"pcompile: kernel cache failed ({type(exc).__name__}: {exc}); compiling without it", logger=log)
            self._count("uncached")
            return pickle.loads(self.compile(job, None).data), "compiled"
        if got is None:  # no store in this process (the gateway warned once)
            self._count("uncached")
            return pickle.loads(self.compile(job, None).data), "compiled"
        entry, outcome = got
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
        env = None if self.kind == "ray" else self._job_env(job)
        if self.kind == "ray" and job.extra_env.get("TRITON_LIBDEVICE_PATH"):
            return self._fallback(job)  # a custom libdevice path exists only on this host
        future = self.jobs.submit_job(
            triton_jobs.run_triton_job,
            (job.kernel_name, job.source, env, job.extra_config, json.loads(fp["x.triton_env"]) if fp else self.hook.triton_env()),
            {"untimed": store_gateway.cannot_time(), "store_env": self.settings.job_env(), "job": _job_id()},
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

    def _job_env(self, job: Any) -> dict[str, str | None]:
        """The job's cache dirs; the node daemon's workers run outside a warm's file sandbox."""
        return inductor_env.for_outside_worker(job.extra_env, self.settings) if self.kind == "node" else job.extra_env

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


def _job_id() -> str | None:
    """This job's id, for a pool worker to record its events in this job's log (never raises)."""
    try:
        from pcompile.events import job_id

        return job_id()
    except Exception:
        return None
