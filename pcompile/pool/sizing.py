"""How many compile workers this node can afford: cgroup CPU quota and available memory.

Why not os.cpu_count(): in a container or a Slurm/Kubernetes job the host may have 128 cores
while this job is allowed 8, and every rank on the node would otherwise start 32 workers
(torch issue #190941). Each worker imports torch and Triton and peaks around a gigabyte while
compiling, so memory caps the count as well.

Every reader takes the filesystem root it reads from, so tests can point it at a directory of
real files shaped like /sys/fs/cgroup and /proc/self/cgroup.
"""
from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

from pcompile.settings import POOL_MEM_PER_WORKER, POOL_WORKERS

DEFAULT_MEM_PER_WORKER: int = POOL_MEM_PER_WORKER.default
MAX_WORKERS = 32  # Inductor's own ceiling for compile_threads


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _cgroup_paths(proc_cgroup: Path) -> dict[str, str]:
    """Controller -> path of this process's cgroup; '' is the unified (v2) hierarchy."""
    out: dict[str, str] = {}
    text = _read(proc_cgroup) or ""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _hid, controllers, path = parts
        if controllers == "":
            out[""] = path
        for name in controllers.split(","):
            if name:
                out[name] = path
    return out


def _ancestors(root: Path, rel: str) -> list[Path]:
    """root/rel, then each parent up to root: a limit anywhere above us applies too."""
    rel = rel.strip("/")
    parts = rel.split("/") if rel else []
    dirs = [root.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]
    return dirs


def _v2_cpu(dirs: list[Path]) -> float | None:
    best: float | None = None
    for d in dirs:
        raw = _read(d / "cpu.max")
        if not raw:
            continue
        fields = raw.split()
        if len(fields) >= 1 and fields[0] != "max":
            try:
                quota = int(fields[0])
                period = int(fields[1]) if len(fields) > 1 else 100_000
            except ValueError:
                continue
            if quota > 0 and period > 0:
                cpus = quota / period
                best = cpus if best is None else min(best, cpus)
    return best


def _v1_cpu(dirs: list[Path]) -> float | None:
    best: float | None = None
    for d in dirs:
        quota, period = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
        if not quota or not period:
            continue
        try:
            q, p = int(quota), int(period)
        except ValueError:
            continue
        if q > 0 and p > 0:
            cpus = q / p
            best = cpus if best is None else min(best, cpus)
    return best


def cgroup_cpu_limit(root: Path | str = "/sys/fs/cgroup", proc_cgroup: Path | str = "/proc/self/cgroup") -> float | None:
    """CPUs this process may use per the cgroup quota (v2 cpu.max, else v1 CFS), or None if unlimited.

    A v2 mount has cpu.max files in the process's own cgroup directory; v1 mounts each
    controller under root/<controller list> (cpu,cpuacct or cpu). The tightest limit on the
    path from the process's cgroup up to the root wins.
    """
    root, proc_cgroup = Path(root), Path(proc_cgroup)
    paths = _cgroup_paths(proc_cgroup)
    if "" in paths:
        limit = _v2_cpu(_ancestors(root, paths[""]))
        if limit is not None:
            return limit
    rel = paths.get("cpu", paths.get("cpuacct"))
    for mount in ("cpu,cpuacct", "cpu", "cpuacct,cpu"):
        base = root / mount
        if base.is_dir():
            limit = _v1_cpu(_ancestors(base, rel or "/"))
            if limit is not None:
                return limit
    return None


def cgroup_memory_available(root: Path | str = "/sys/fs/cgroup", proc_cgroup: Path | str = "/proc/self/cgroup") -> int | None:
    """Bytes left under the cgroup memory limit (v2 memory.max - memory.current), or None."""
    root, proc_cgroup = Path(root), Path(proc_cgroup)
    paths = _cgroup_paths(proc_cgroup)
    best: int | None = None
    if "" in paths:
        for d in _ancestors(root, paths[""]):
            limit, current = _read(d / "memory.max"), _read(d / "memory.current")
            if limit and limit != "max" and current:
                try:
                    left = max(0, int(limit) - int(current))
                except ValueError:
                    continue
                best = left if best is None else min(best, left)
    if best is None and "memory" in paths:
        for d in _ancestors(root / "memory", paths["memory"]):
            limit, usage = _read(d / "memory.limit_in_bytes"), _read(d / "memory.usage_in_bytes")
            if limit and usage:
                try:
                    lim = int(limit)
                except ValueError:
                    continue
                if lim >= 1 << 60:  # v1 spells "unlimited" as a huge number
                    continue
                left = max(0, lim - int(usage))
                best = left if best is None else min(best, left)
    return best


@dataclasses.dataclass(frozen=True)
class PoolSize:
    """The chosen worker count and the limits that produced it (shown by `status`)."""

    workers: int
    cpus: float
    cpu_source: str
    memory_available: int | None
    mem_per_worker: int
    reason: str


def affinity_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def system_memory_available() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:
        return None


def pool_size(
    *,
    cgroup_root: Path | str = "/sys/fs/cgroup",
    proc_cgroup: Path | str = "/proc/self/cgroup",
    mem_per_worker: int | None = None,
    affinity: int | None = None,
    memory_available: int | None = None,
    override: int | None = None,
) -> PoolSize:
    """Workers = min(CPU quota, CPUs in our affinity mask, available memory / per-worker budget), >= 1.

    `override` (or PCOMPILE_POOL_WORKERS) wins outright. Arguments left as None are read from
    this machine: cgroup files under `cgroup_root`, sched_getaffinity, psutil.
    """
    if mem_per_worker is None:
        mem_per_worker = POOL_MEM_PER_WORKER.get()
    if override is None:
        override = POOL_WORKERS.get()
    affinity = affinity if affinity is not None else affinity_cpus()
    quota = cgroup_cpu_limit(cgroup_root, proc_cgroup)
    cpus, source = (float(affinity), "affinity") if quota is None or quota >= affinity else (quota, "cgroup cpu quota")
    mem = memory_available
    if mem is None:
        sys_mem = system_memory_available()
        cg_mem = cgroup_memory_available(cgroup_root, proc_cgroup)
        candidates = [m for m in (sys_mem, cg_mem) if m is not None]
        mem = min(candidates) if candidates else None
    if override is not None:
        return PoolSize(max(1, int(override)), cpus, source, mem, mem_per_worker, f"{POOL_WORKERS.name}={override}")
    by_cpu = max(1, math.floor(cpus + 1e-9))
    by_mem = max(1, mem // mem_per_worker) if mem is not None and mem_per_worker > 0 else by_cpu
    workers = max(1, min(by_cpu, by_mem, MAX_WORKERS))
    if workers == by_cpu and by_cpu <= by_mem:
        reason = f"{cpus:g} CPUs ({source})"
    else:
        reason = f"{(mem or 0) / 1024**3:.1f} GiB available / {mem_per_worker / 1024**3:.1f} GiB per worker"
    if workers == MAX_WORKERS and min(by_cpu, by_mem) > MAX_WORKERS:
        reason = f"capped at {MAX_WORKERS}"
    return PoolSize(workers, cpus, source, mem, mem_per_worker, reason)
