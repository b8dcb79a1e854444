"""One Inductor kernel compile as a pool job, accounted as one kernel look-up (store/hits.py).

The router (pool_install.py) looks the kernel up and counts it; the worker's own look-ups while
compiling it (Triton's cubin per config) are inner. `untimed` carries the requester's "cannot time
kernels" (a warm) into the shared worker, whose own environment says nothing about the requester.
"""
from __future__ import annotations

from typing import Any

from pcompile.inductor import flight


def run(untimed: bool, *args: Any) -> Any:
    """`pool_hook.run_triton_job(*args)` with the worker's kernel look-ups inner."""
    from pcompile.inductor.compat import pool_hook

    with flight.inside("kernel", untimed=untimed):
        return pool_hook.run_triton_job(*args)


def in_process(job: Any) -> Any:
    """`pool_hook.compile_in_process(job)`, accounted the same way."""
    from pcompile.inductor.compat import pool_hook

    with flight.inside("kernel"):
        return pool_hook.compile_in_process(job)
