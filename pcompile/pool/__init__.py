"""Compile pools: where compile jobs run.

- NodePool (client.py): one daemon per node and cache dir, shared by every rank, with
  crash-isolated worker subprocesses, per-job timeouts, longest-first scheduling and an
  in-process fallback. Started on demand by the first client (launcher.py, daemon.py).
- RayPool (ray_pool.py): the same submit -> Future interface on CPU-only Ray actors.
- sizing.py: how many workers a node affords (cgroup CPU quota, memory).

This package never imports torch: the daemon stays light and the jobs bring their own code.
"""
from pcompile.pool.errors import JobLost, JobTimedOut, PoolError, PoolUnavailable, WorkerCrashed
from pcompile.pool.launcher import DaemonOptions

__all__ = [
    "DaemonOptions",
    "JobLost",
    "JobTimedOut",
    "NodePool",
    "PoolError",
    "PoolUnavailable",
    "RayPool",
    "WorkerCrashed",
]


def __getattr__(name: str):  # lazy: importing pcompile.pool must stay cheap
    if name == "NodePool":
        from pcompile.pool.client import NodePool

        return NodePool
    if name == "RayPool":
        from pcompile.pool.ray_pool import RayPool

        return RayPool
    raise AttributeError(name)
