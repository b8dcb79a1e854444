"""Which compile pool a process uses, and starting it: PCOMPILE_POOL and its companions.

`node` (default): this node's shared daemon (client.NodePool); `ray` / `ray://ADDRESS`: CPU-only
Ray actors (ray_pool.RayPool), falling back to the node pool when Ray is missing; `local`:
threads in this process; `off`: no pool (the caller keeps stock Inductor). Every pool offers the
same `submit_job(fn, args, ..., fallback=) -> Future`, so the caller (the Inductor kernel router,
inductor/kernel_router.py) never asks which one it got.
"""
from __future__ import annotations

import dataclasses
import logging
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from pcompile.settings import POOL, POOL_EAGER, POOL_IDLE_EXIT, POOL_JOB_TIMEOUT, POOL_WORKER, RAY_ACTORS
from pcompile.warn import warn_once

log = logging.getLogger("pcompile.pool")


def job_timeout() -> float:
    """A hung compile's limit in seconds (PCOMPILE_POOL_JOB_TIMEOUT)."""
    return float(POOL_JOB_TIMEOUT.get())


def pool_kind(raw: str | None = None) -> tuple[str, str | None]:
    """('node'|'ray'|'local'|'off', ray address or None) from PCOMPILE_POOL (or `raw`)."""
    kind = POOL.get() if raw is None else POOL.get({POOL.name: raw})
    if kind.startswith("ray://"):
        return "ray", kind
    return kind, None


def wanted() -> tuple[str, str | None] | None:
    """(kind, ray address) of the pool this process should use; None: none (inside pcompile's own
    pool workers, which compile in-process, or PCOMPILE_POOL=off)."""
    if POOL_WORKER.get():
        return None
    kind, address = pool_kind()
    return None if kind == "off" else (kind, address)


def start_eagerly(gpu_visible: Callable[[], bool]) -> bool:
    """Start the daemon when the pool is installed (PCOMPILE_POOL_EAGER decides; unset, only where
    Triton kernels are expected: `gpu_visible()`, asked of torch by the caller, as this package
    never imports torch), so its workers are warm by the first kernel. A CPU-only process (C++
    kernels only) starts none: each idle daemon holds a torch-importing forkserver."""
    chosen = POOL_EAGER.get()
    return chosen if chosen is not None else gpu_visible()


def daemon_options(preload: tuple[str, ...]) -> Any:
    """How this process would start the node daemon (also used by `pcompile warm`, which starts
    it before its sandboxed child can: a daemon must never live in the warm's file sandbox)."""
    from pcompile.pool.launcher import DaemonOptions

    return DaemonOptions(idle_exit=POOL_IDLE_EXIT.get(), job_timeout=job_timeout(), preload=preload)


class LocalPool:
    """`local` mode and the fallback for everything: threads in this process."""

    def __init__(self, workers: int) -> None:
        self._exec = ThreadPoolExecutor(max(1, workers), thread_name_prefix="pcompile-compile")
        self.mode = "local"

    def submit_job(self, fn: Callable[..., Any], args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None, *, fallback: Callable[[], Any] | None = None, **_: Any) -> Future:
        if fallback is not None:
            return self._exec.submit(fallback)
        return self._exec.submit(fn, *args, **(kwargs or {}))

    def shutdown(self, wait: bool = True, **_: Any) -> None:
        self._exec.shutdown(wait=wait)


def local_threads() -> int:
    """Threads for in-process work: as many as the node affords workers."""
    from pcompile.pool.sizing import pool_size

    return pool_size().workers


def start_pool(kind: str, address: str | None, *, cache_dir: Path, timeout: float, preload: tuple[str, ...],
               eager: bool = False) -> tuple[Any, str]:
    """(pool, the kind it really is) for `kind`: Ray falls back to the node pool with one warning.
    `preload`: modules each worker imports before its first job; `eager`: start (or connect to)
    the node daemon now rather than at the first job."""
    if kind == "ray":
        try:
            from pcompile.pool.ray_pool import RayPool

            actors = RAY_ACTORS.get() or None
            # Remote actors use their own cache dirs: the parent's absolute paths mean nothing there.
            return RayPool(address, actors=actors, job_timeout=timeout, preload=preload), "ray"
        except Exception as exc:
            warn_once("ray-import", f"pcompile: Ray pool unavailable ({type(exc).__name__}: {exc}); using the node pool", logger=log)
            kind = "node"
    if kind == "node":
        from pcompile.pool.client import NodePool

        options = dataclasses.replace(daemon_options(preload), job_timeout=timeout)
        return NodePool(cache_dir, options, local_workers=local_threads(), connect_now=eager), "node"
    return LocalPool(local_threads()), kind
