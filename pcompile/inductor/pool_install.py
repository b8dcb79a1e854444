"""Put pcompile's compile pool into Inductor: `install_pool()` (the hooks' `pool` feature).

Inductor's process pool is replaced by an `InductorPool`: each Triton job goes to this process's
`KernelRouter` (kernel_router.py: the store, then the pool `pool/choose.py` picks and starts);
every other callable (the readiness probe, 2.14's CuteDSL/NVGEMM jobs) runs in this process on
threads. Skipped inside pcompile's own workers, with PCOMPILE_POOL=off, with an explicit
TORCHINDUCTOR_COMPILE_THREADS=1, and where the gate or compat.pool_hook says no (one warning).
"""
from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from pcompile.inductor import store_gateway
from pcompile.inductor.kernel_router import WORKER_PRELOAD, KernelRouter, daemon_options
from pcompile.pool import choose
from pcompile.pool.choose import local_threads
from pcompile.warn import warn_once

log = logging.getLogger("pcompile.inductor.pool")


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


def _cuda_visible() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def _get_router(kind: str, address: str | None) -> KernelRouter:
    global _router, _router_pid
    if _router is None or _router_pid != os.getpid():  # a forked child needs its own connection
        _router = KernelRouter(kind, address, eager=choose.start_eagerly(_cuda_visible))
        _router_pid = os.getpid()
    return _router


_COMPILING = ("graph", "autograd")
_listening = False


def _on_lookup(kind: str, key: str, outcome: str) -> None:
    """store_gateway calls this on every lookup. A graph entry this process must build (missed, or
    leased to it) means kernels will follow: the pool comes up now (the router and, with a GPU,
    the node's daemon, while AOTAutograd and Inductor lower the graph) and the router's probes
    start. Not before: a process whose graphs all hit, or that calls torch.compile and never runs
    the compiled code (nanoGPT's sample.py --compile=True), starts nothing. Starting at the
    torch.compile call cost such jobs 1.1-2.2 s on the H200: the daemon's workers load every core."""
    if kind not in _COMPILING or outcome not in ("leased", "miss"):
        return
    from pcompile.compat import pool_hook

    if _router is None or _router_pid != os.getpid():
        pool_hook.prime_ready()  # Inductor's readiness probe: builds the pool through our factory
    if _router is not None and _router_pid == os.getpid():
        _router.warm_up_soon()


def _listen_for_first_compile() -> None:
    global _listening
    if not _listening:
        store_gateway.add_listener(_on_lookup)
        _listening = True


def install_pool() -> bool:
    """Install the pcompile Triton pool into Inductor; False (stock Inductor) when not possible.

    Idempotent. Skipped inside pcompile's own workers, with PCOMPILE_POOL=off, with an
    explicit TORCHINDUCTOR_COMPILE_THREADS=1, and on torch/triton versions the gate rejects.
    """
    chosen = choose.wanted()
    if chosen is None:
        return False
    kind, address = chosen
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
            pool_hook.install_process_pool(lambda: InductorPool(_get_router(kind, address)))
            from pcompile.compat import autotune_precompile

            autotune_precompile.install()  # marks max-autotune's candidates (kernel_router._candidate_on_disk)
            _listen_for_first_compile()
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


__all__ = ["WORKER_PRELOAD", "InductorPool", "KernelRouter", "counts", "daemon_options", "install_pool", "router",
           "uninstall_pool"]
