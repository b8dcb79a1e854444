"""Which compile pool a process uses, and starting it: PCOMPILE_POOL and its companions.

`node` (default): this node's shared daemon (client.NodePool); `ray` / `ray://ADDRESS`: CPU-only
Ray actors (ray_pool.RayPool), falling back to the node pool when Ray is missing; `local`:
threads in this process; `off`: no pool (the caller keeps stock Inductor). Every pool offers the
same `submit_job(fn, args, ..., fallback=) -> Future`, so the caller (the Inductor kernel router,
inductor/pool_install.py) never asks which one it got.
"""
from __future__ import annotations

import logging
import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from pcompile.warn import warn_once

log = logging.getLogger("pcompile.pool")

ENV_POOL = "PCOMPILE_POOL"
ENV_IDLE_EXIT = "PCOMPILE_POOL_IDLE_EXIT"
ENV_JOB_TIMEOUT = "PCOMPILE_POOL_JOB_TIMEOUT"
ENV_RAY_ACTORS = "PCOMPILE_RAY_ACTORS"
DEFAULT_IDLE_EXIT = 120.0


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name) or default)
    except ValueError:
        return default


def job_timeout() -> float:
    """A hung compile's limit in seconds (PCOMPILE_POOL_JOB_TIMEOUT)."""
    return _env_float(ENV_JOB_TIMEOUT, 600.0)


def pool_kind(raw: str | None = None) -> tuple[str, str | None]:
    """('node'|'ray'|'local'|'off', ray address or None) from PCOMPILE_POOL."""
    raw = (os.environ.get(ENV_POOL, "") if raw is None else raw).strip()
    if raw.startswith("ray://"):
        return "ray", raw
    low = raw.lower()
    if low in ("", "node", "daemon", "1", "on"):
        return "node", None
    if low == "ray":
        return "ray", None
    if low in ("local", "inprocess", "in-process", "threads"):
        return "local", None
    if low in ("off", "0", "stock", "none"):
        return "off", None
    warn_once(f"pool-kind:{raw}", f"pcompile: {ENV_POOL}={raw!r} is not node, ray, ray://ADDRESS, local or off; using node", logger=log)
    return "node", None


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

            actors = int(os.environ.get(ENV_RAY_ACTORS) or 0) or None
            # Remote actors use their own cache dirs: the parent's absolute paths mean nothing there.
            return RayPool(address, actors=actors, job_timeout=timeout, preload=preload), "ray"
        except Exception as exc:
            warn_once("ray-import", f"pcompile: Ray pool unavailable ({type(exc).__name__}: {exc}); using the node pool", logger=log)
            kind = "node"
    if kind == "node":
        from pcompile.pool.client import NodePool
        from pcompile.pool.launcher import DaemonOptions

        options = DaemonOptions(idle_exit=_env_float(ENV_IDLE_EXIT, DEFAULT_IDLE_EXIT), job_timeout=timeout, preload=preload)
        return NodePool(cache_dir, options, local_workers=local_threads(), connect_now=eager), "node"
    return LocalPool(local_threads()), kind
