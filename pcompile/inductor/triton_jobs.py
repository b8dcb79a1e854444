"""The Triton compile jobs a pool runs, with the software report the parent checks.

A pool worker (node daemon or Ray actor) unpickles and calls `run_triton_job`: the stock
Inductor worker compile (compat/pool_hook.py) plus the versions of torch, Triton, ptxas and
Python that built it (keys/versions.py), so the parent publishes only what its own key
describes. The two halves live on different floors (compat below keys), so they meet here.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from pcompile.compat import coordesc_ring, pool_hook
from pcompile.config import applied_env
from pcompile.inductor import store_gateway
from pcompile.keys.versions import build_software


def run_triton_job(
    kernel_name: str,
    source: str,
    extra_env: dict[str, str | None] | None,
    extra_config: dict[str, Any],
    triton_env_wanted: dict[str, str] | None = None,
    *,
    untimed: bool = False,
    store_env: dict[str, str | None] | None = None,
    job: str | None = None,
) -> pool_hook.TritonResult:
    """Worker side: compile one kernel; see pool_hook.run_triton_job for the arguments.

    The router counted this kernel's look-up, so the worker's own (Triton's cubin per config) are
    inner (store/hits.py); `untimed` carries the requester's "cannot time kernels" (a warm) into a
    shared worker, whose own environment says nothing about the requester, `store_env`
    (Settings.job_env) the requester's cache, which the worker's look-ups and writes use, and `job`:
    the requester's job id, whose event log gets what this worker records for it (events.on_behalf_of)."""
    from pcompile.events import on_behalf_of

    with applied_env(store_env), on_behalf_of(job), store_gateway.inside("kernel", untimed=untimed):
        result = pool_hook.run_triton_job(kernel_name, source, extra_env, extra_config, triton_env_wanted)
    return dataclasses.replace(result, software=build_software(pool_hook.arch_of(source)))


def compile_in_process(job: pool_hook.TritonJob) -> pool_hook.TritonResult:
    """The parent's fallback: pool_hook.compile_in_process with the same software report (and,
    like a worker's, its cubin look-ups inner)."""
    with store_gateway.inside("kernel"):
        result = pool_hook.compile_in_process(job)
    return dataclasses.replace(result, software=build_software(pool_hook.arch_of(job.source)))


def run_coordesc_ring(
    kernel_name: str,
    source: str,
    extra_env: dict[str, str | None] | None,
    extra_config: dict[str, Any],
    triton_env_wanted: dict[str, str] | None,
    steps: int,
    store_env: dict[str, str | None] | None = None,
    job: str | None = None,
) -> list[tuple[str, str]]:
    """Worker side: compile the configs coordinate-descent tuning will try first on the GPU
    (compat/coordesc_ring.py), for a warm. Returns (Triton key, kernel name) per compiled config;
    the parent publishes those groups from the Triton dir (a worker has no store of its own).
    Empty when there is no ring or none of it compiles: speculation never fails a warm."""
    def load_ring() -> Any:
        kernel = coordesc_ring.fresh_kernel(kernel_name, source)
        kernel.configs = coordesc_ring.ring(kernel, steps)  # none: Inductor raises, answered below
        return kernel

    from pcompile.events import on_behalf_of

    try:
        with applied_env(store_env), on_behalf_of(job), store_gateway.inside("kernel", untimed=True):
            return pool_hook.run_configs_job(load_ring, extra_env, extra_config, triton_env_wanted)
    except Exception:
        return []
