"""Inductor's Triton compile pool: substitute `AsyncCompile.process_pool`, recognise its jobs,
and run them in pcompile's workers.

Why this API: every parallel Triton compile in Inductor is one call
`AsyncCompile.process_pool().submit(_worker_compile_triton, load_kernel, extra_env, extra_config)`
with `load_kernel = partial(_load_triton_kernel_from_source, kernel_name, source_code)`, and the
pool object only needs `submit(fn, *a, **kw) -> Future` and `shutdown()`. Replacing the
factory (keeping it an `lru_cache`d staticmethod, because `after_fork()` and
`shutdown_compile_workers()` call `process_pool.cache_clear()`) routes all of them, including
codegen's pre-submits while lowering continues, without copying any Inductor code.

Touched, read in torch 2.14.1 and 2.11.0 (line numbers 2.14/2.11):
- `async_compile.AsyncCompile.process_pool` 308/255, `_get_ready`, `_ready_future`,
  `use_process_pool` (2.14 adds `_process_pool_allowed()`), `async_compile._pool_set`,
  `config.compile_threads` / `get_compile_threads()`.
- `runtime.compile_tasks._worker_compile_triton(load_kernel, extra_env, extra_config)` 198/54
  (2.14 wraps the load+precompile in `triton_helpers.skip_gpu_driver_setup()`; 2.11 does not,
  so workers here no-op `triton_helpers.set_driver_to_gpu`, else a CPU host fails with
  "Could not find an active GPU backend"), `_set_triton_ptxas_path`.
- `codecache._load_triton_kernel_from_source(kernel_name, source_code)` 4886/3829.
- The CachingAutotuner's `precompile(warm_cache_only=True)` and `prepare_for_pickle()`
  (in-process fallback only).

torch 2.15 (read against 2.15.0; the above is unchanged there) adds a thread mode:
`AsyncCompile.get_worker_pool()` returns a `thread_pool()` and submits
`_worker_compile_triton_thread` when `should_use_thread_workers()` (config.compile_worker_mode
"thread", or "auto" on free-threaded Python). Then `process_pool` is never asked, so pcompile's
pool stays out (`thread_workers()` says so); kernels still reach the store through Triton's
cache manager.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import os
import pickle
import re
import tempfile
import threading
import time
from typing import Any, Callable, Iterator

from pcompile.compat import CompatError, require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.14.1, 2.15.0'}
#: Attributes reached through helpers, which tools/private_surface.py cannot follow statically.
PRIVATE = ("torch._inductor.async_compile.AsyncCompile._ready_future",
           "torch._inductor.runtime.triton_heuristics.CachingAutotuner.precompile",
           "torch._inductor.runtime.triton_heuristics.CachingAutotuner.prepare_for_pickle",
           "torch._inductor.runtime.triton_heuristics.CachingAutotuner.restore_after_unpickle",
           "torch._inductor.runtime.triton_heuristics.CachingAutotuner.compile_results")

#: What a pool worker imports before its first job (the forkserver preloads them; kernel_router.py).
WORKER_MODULES = ("torch", "torch._inductor.runtime.compile_tasks", "torch._inductor.runtime.triton_heuristics")
_ORIGINAL = "_pcompile_original_process_pool"
_INSTALLED_FLAG = "_pcompile_pool_factory"
_DEVICE_RE = re.compile(r"DeviceProperties\(type='(\w+)', index=(\d+), multi_processor_count=(\d+), cc=(\d+)")


def _modules() -> tuple[Any, Any, Any, Any]:
    import torch._inductor.async_compile as async_compile
    import torch._inductor.codecache as codecache
    import torch._inductor.runtime.compile_tasks as compile_tasks
    import torch._inductor.runtime.triton_helpers as triton_helpers

    return async_compile, codecache, compile_tasks, triton_helpers


def check() -> None:
    """Raise CompatError naming the first private API that moved."""
    async_compile, codecache, compile_tasks, triton_helpers = _modules()
    ac = require_attr(async_compile, "AsyncCompile", "torch._inductor.async_compile")
    factory = getattr(ac, _ORIGINAL, None) or inspect.getattr_static(ac, "process_pool")
    func = getattr(factory, "__func__", factory)
    if not hasattr(func, "cache_clear"):
        raise CompatError("AsyncCompile.process_pool is no longer an lru_cache'd staticmethod")
    for name in ("_get_ready", "use_process_pool", "_ready_future"):
        require_attr(ac, name, "AsyncCompile")
    pool_set = require_attr(async_compile, "_pool_set", "torch._inductor.async_compile")
    if not hasattr(pool_set, "add"):
        raise CompatError("torch._inductor.async_compile._pool_set is not a set")
    worker = require_attr(compile_tasks, "_worker_compile_triton", "torch._inductor.runtime.compile_tasks")
    params = list(inspect.signature(worker).parameters)
    if params != ["load_kernel", "extra_env", "extra_config"]:
        raise CompatError(f"_worker_compile_triton takes {params}, expected (load_kernel, extra_env, extra_config)")
    loader = require_attr(codecache, "_load_triton_kernel_from_source", "torch._inductor.codecache")
    params = list(inspect.signature(loader).parameters)
    if params != ["kernel_name", "source_code"]:
        raise CompatError(f"_load_triton_kernel_from_source takes {params}, expected (kernel_name, source_code)")
    require_attr(compile_tasks, "_set_triton_ptxas_path", "torch._inductor.runtime.compile_tasks")
    if not hasattr(triton_helpers, "skip_gpu_driver_setup"):
        require_attr(triton_helpers, "set_driver_to_gpu", "torch._inductor.runtime.triton_helpers")


# -- the parent: recognising jobs ------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class TritonJob:
    """One `_worker_compile_triton` submission, unpacked into plain, picklable data."""

    kernel_name: str
    source: str
    extra_env: dict[str, str | None]
    extra_config: dict[str, Any]
    #: submitted by max-autotune's precompile step: its cubins must be in this host's Triton dir
    #: before the benchmark loads it (compat/autotune_precompile.py), not only in the store
    candidate: bool = False


def triton_job(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> TritonJob | None:
    """The TritonJob if (fn, args) is Inductor's Triton compile job, else None (run it locally)."""
    _, codecache, compile_tasks, _ = _modules()
    if fn is not compile_tasks._worker_compile_triton or kwargs or len(args) != 3:
        return None
    load_kernel, extra_env, extra_config = args
    if not (isinstance(load_kernel, functools.partial) and load_kernel.func is codecache._load_triton_kernel_from_source):
        return None
    if load_kernel.keywords or len(load_kernel.args) != 2:
        return None
    kernel_name, source = load_kernel.args
    from pcompile.compat.autotune_precompile import is_candidate

    return TritonJob(str(kernel_name), str(source), dict(extra_env or {}), dict(extra_config or {}), is_candidate())


def is_ready_probe(fn: Callable[..., Any]) -> bool:
    """Inductor's `_get_ready` no-op: answer it at once so `use_process_pool()` is True from the
    first kernel on (a probe that is not yet done makes Inductor compile serially)."""
    async_compile, _, _, _ = _modules()
    return fn is async_compile.AsyncCompile._get_ready


def device_of(source: str) -> tuple[str, int, int] | None:
    """(device type, cc, index) from the DeviceProperties Inductor bakes into a kernel's source."""
    match = _DEVICE_RE.search(source)
    if not match:
        return None
    return match.group(1), int(match.group(4)), int(match.group(2))


# -- the parent: installing the pool ---------------------------------------------------------
def install_process_pool(factory: Callable[[], Any]) -> None:
    """Make `AsyncCompile.process_pool()` return `factory()` (cached, with `cache_clear`)."""
    async_compile, _, _, _ = _modules()
    ac = async_compile.AsyncCompile
    if not hasattr(ac, _ORIGINAL):
        setattr(ac, _ORIGINAL, inspect.getattr_static(ac, "process_pool"))

    @functools.lru_cache(1)
    def process_pool() -> Any:
        pool = factory()
        async_compile._pool_set.add(pool)
        return pool

    setattr(process_pool, _INSTALLED_FLAG, True)
    ac.process_pool.cache_clear()
    ac.process_pool = staticmethod(process_pool)
    ac._ready_future = None


def uninstall_process_pool() -> None:
    async_compile, _, _, _ = _modules()
    ac = async_compile.AsyncCompile
    original = getattr(ac, _ORIGINAL, None)
    if original is None:
        return
    current = ac.process_pool
    if hasattr(current, "cache_clear"):
        current.cache_clear()
    ac.process_pool = original
    delattr(ac, _ORIGINAL)
    ac._ready_future = None


def thread_workers() -> bool:
    """True when Inductor compiles on its own threads and never asks `process_pool` (2.15+)."""
    async_compile, _, _, _ = _modules()
    probe = getattr(async_compile.AsyncCompile, "should_use_thread_workers", None)
    return bool(probe()) if callable(probe) else False


def installed() -> bool:
    async_compile, _, _, _ = _modules()
    return bool(getattr(async_compile.AsyncCompile.process_pool, _INSTALLED_FLAG, False))


def ensure_compile_threads(minimum: int = 2) -> int:
    """Keep Inductor on its parallel path: `compile_threads > 1` is what makes it submit to a
    process pool at all. An explicit TORCHINDUCTOR_COMPILE_THREADS=1 (serial) is respected."""
    from torch._inductor import config

    async_compile, _, _, _ = _modules()
    threads = async_compile.get_compile_threads()
    if threads <= 1 and os.environ.get("TORCHINDUCTOR_COMPILE_THREADS") is None:
        config.compile_threads = threads = minimum
    return threads


def prime_ready() -> bool:
    """Submit the readiness probe now, so the first kernel already sees a ready pool."""
    async_compile, _, _, _ = _modules()
    try:
        return bool(async_compile.AsyncCompile.use_process_pool())
    except Exception:
        return False


def set_ptxas_path() -> None:
    """Point TRITON_PTXAS_PATH where Inductor's workers will (torch/bin/ptxas when torch ships
    one, as 2.11 does), so the parent's key names the ptxas that really runs."""
    _, _, compile_tasks, _ = _modules()
    compile_tasks._set_triton_ptxas_path()


# -- workers: running jobs -------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class TritonResult:
    """What a worker sends back: the stock worker's return value, pickled, plus who built it."""

    data: bytes  # pickle.dumps((CachingAutotuner, elapsed_us)), exactly the stock worker's return
    software: dict[str, str]  # filled by the caller (inductor/triton_jobs.py: keys sit above compat)
    seconds: float
    where: str


def triton_env() -> dict[str, str]:
    """The environment variables Triton itself puts in its cache key (TRITON_DEFAULT_FP_FUSION, ...),
    as Triton normalises them. Part of the kernel key, and applied in the worker for each job:
    the daemon's environment is that of whichever rank started it."""
    try:
        from triton._C.libtriton import get_cache_invalidating_env_vars
    except ImportError:
        return {"unknown": "triton._C.libtriton.get_cache_invalidating_env_vars moved"}
    return {str(k): str(v) for k, v in get_cache_invalidating_env_vars().items()}


def _apply_triton_env(wanted: dict[str, str] | None) -> None:
    if wanted is None:
        return
    for name in triton_env():
        if name not in wanted:
            os.environ.pop(name, None)
    os.environ.update(wanted)


def arch_of(source: str) -> int | None:
    """The sm arch a kernel source targets (its DeviceProperties cc), None if not CUDA."""
    found = device_of(source)
    return found[1] if found and found[0] == "cuda" else None


_driver_patch_lock = threading.Lock()


@contextlib.contextmanager
def _no_gpu_driver_setup_in_worker() -> Iterator[None]:
    """2.11 has no skip_gpu_driver_setup(): in a process of our own, no-op set_driver_to_gpu."""
    _, _, _, triton_helpers = _modules()
    if hasattr(triton_helpers, "skip_gpu_driver_setup"):
        yield  # the stock 2.14 worker already skips it
        return
    with _driver_patch_lock:
        original = triton_helpers.set_driver_to_gpu
        triton_helpers.set_driver_to_gpu = lambda: None
        try:
            yield
        finally:
            triton_helpers.set_driver_to_gpu = original


def _no_gpu_driver_setup_in_parent() -> contextlib.AbstractContextManager[None]:
    """2.14: the stock scoped skip. 2.11: no-op set_driver_to_gpu only where it cannot work
    anyway (no CUDA device visible); with a GPU the parent keeps the real call."""
    import torch

    _, _, _, triton_helpers = _modules()
    if hasattr(triton_helpers, "skip_gpu_driver_setup"):
        return triton_helpers.skip_gpu_driver_setup()
    if torch.cuda.is_available():
        return contextlib.nullcontext()
    return _no_gpu_driver_setup_in_worker()


def own_cache_env() -> dict[str, str | None]:
    """Cache dirs for a worker on another host: the parent's absolute paths mean nothing there."""
    root = os.path.join(tempfile.gettempdir(), f"pcompile-remote-{os.getuid()}")
    return {"TORCHINDUCTOR_CACHE_DIR": os.path.join(root, "inductor"), "TRITON_CACHE_DIR": os.path.join(root, "triton")}


def run_triton_job(
    kernel_name: str,
    source: str,
    extra_env: dict[str, str | None] | None,
    extra_config: dict[str, Any],
    triton_env_wanted: dict[str, str] | None = None,
) -> TritonResult:
    """Worker side (node pool worker or Ray actor): the stock `_worker_compile_triton`.

    `extra_env=None` means "use this worker's own cache dirs" (remote hosts);
    `triton_env_wanted` is the parent's `triton_env()`, applied before compiling.
    """
    _, codecache, compile_tasks, _ = _modules()
    env = _worker_env(extra_env, triton_env_wanted)
    load_kernel = functools.partial(codecache._load_triton_kernel_from_source, kernel_name, source)
    t0 = time.perf_counter()
    with _no_gpu_driver_setup_in_worker():
        result = compile_tasks._worker_compile_triton(load_kernel, env, extra_config)
    seconds = time.perf_counter() - t0
    return TritonResult(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL), {}, seconds, f"pid {os.getpid()}")


def load_kernel_source(kernel_name: str, source: str) -> Any:
    """The parent's own load of a kernel module (its autotuner, with the Triton function a
    pickled autotuner lacks), with the GPU driver set-up skipped where it cannot work."""
    _, codecache, _, _ = _modules()
    with _no_gpu_driver_setup_in_parent():
        return codecache._load_triton_kernel_from_source(kernel_name, source)


def run_configs_job(
    load_kernel: Callable[[], Any],
    extra_env: dict[str, str | None] | None,
    extra_config: dict[str, Any],
    triton_env_wanted: dict[str, str] | None,
) -> list[tuple[str, str]]:
    """Worker side: compile the configs `load_kernel()` returns an autotuner for, with exactly the
    stock worker's environment and config (so each cubin's Triton key is the one the GPU job asks
    for). Returns (Triton cache key, kernel name) of each config that compiled: its files are in
    the job's TRITON_CACHE_DIR under that key."""
    _, _, compile_tasks, _ = _modules()
    env = _worker_env(extra_env, triton_env_wanted)
    with _no_gpu_driver_setup_in_worker():
        kernel, _ = compile_tasks._worker_compile_triton(load_kernel, env, extra_config)
    out = []
    for result in getattr(kernel, "compile_results", None) or ():
        binary = getattr(result, "kernel", None)
        if getattr(binary, "hash", None) and getattr(binary, "name", None):
            out.append((str(binary.hash), str(binary.name)))
    return out


def _worker_env(extra_env: dict[str, str | None] | None, triton_env_wanted: dict[str, str] | None) -> dict[str, Any]:
    _, _, compile_tasks, _ = _modules()
    compile_tasks._set_triton_ptxas_path()
    _apply_triton_env(triton_env_wanted)
    env = own_cache_env() if extra_env is None else dict(extra_env)
    if "TRITON_LIBDEVICE_PATH" in env and env["TRITON_LIBDEVICE_PATH"] is None:
        env.pop("TRITON_LIBDEVICE_PATH")  # 2.11's os.environ.update() cannot take None
    if not hasattr(_modules()[3], "skip_gpu_driver_setup"):
        env = {k: v for k, v in env.items() if v is not None}
    return env


def compile_in_process(job: TritonJob) -> TritonResult:
    """The fallback in the parent: what the stock worker does, minus its process-wide side
    effects (env rewrite, cache clearing) that would disturb the running compile."""
    from torch._inductor import config

    _, codecache, compile_tasks, triton_helpers = _modules()
    compile_tasks._set_triton_ptxas_path()
    changed = {k: v for k, v in job.extra_config.items() if getattr(config, k, object()) != v}
    t0 = time.perf_counter()
    with config.patch(changed) if changed else contextlib.nullcontext():
        with _no_gpu_driver_setup_in_parent():
            kernel = codecache._load_triton_kernel_from_source(job.kernel_name, job.source)
            kernel.precompile(warm_cache_only=True)
        elapsed_us = int((time.perf_counter() - t0) * 1e6)
    # The module (and this autotuner) stays in PyCodeCache for the parent's own later loads:
    # pickle it the way a worker would, then put back what pickling had to drop.
    old_values = kernel.prepare_for_pickle()
    try:
        data = pickle.dumps((kernel, elapsed_us), protocol=pickle.HIGHEST_PROTOCOL)
    finally:
        kernel.restore_after_unpickle(old_values)
    return TritonResult(data, {}, time.perf_counter() - t0, "in-process")
