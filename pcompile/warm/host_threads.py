"""The CPU thread count the GPU job's torch runs with, given to the warm child.

Why: Dynamo guards every frame on torch's intra-op thread count (its global state: Inductor
generates its C++ kernels for that count), and the warm writes each frame's program under the
warm's own count. torch's default is one thread per core, so a warm host with another core count
than the GPU node wrote programs whose global-state guard every job there failed: the job traced
every frame (torchrun's ranks, which run with OMP_NUM_THREADS=1, are fakepg.env_for's). `pcompile
profile` records the GPU host's count (`host.cpu_threads`, vdev/capture.py), and the warm child
sets it with `torch.set_num_threads`: OMP_NUM_THREADS would not do, torch caps it at this host's
cores. A profile without it (a built-in board profile, an older capture) leaves the warm's count.
"""
from __future__ import annotations

from typing import Any, Mapping

VARIABLE = "OMP_NUM_THREADS"  # the user's (or torchrun's) own choice: the job runs with it too


def threads_for(profile_data: Mapping[str, Any], world_size: int, inherited: Mapping[str, str]) -> int | None:
    """The count the warm child sets; None where the user set OMP_NUM_THREADS, torchrun sets it
    (several ranks), or the profile does not say."""
    if world_size > 1 or VARIABLE in inherited:
        return None
    threads = (profile_data.get("host") or {}).get("cpu_threads")
    if isinstance(threads, int) and not isinstance(threads, bool) and threads > 0:
        return threads
    return None


def source(profile_data: Mapping[str, Any], world_size: int, inherited: Mapping[str, str]) -> str:
    """Where the warm child's count comes from, for the summary."""
    if world_size > 1 and VARIABLE not in inherited:
        return "torchrun"
    if VARIABLE in inherited:
        return "OMP_NUM_THREADS"
    return "profile" if threads_for(profile_data, world_size, inherited) else "this host"


def note(count: int | None, came_from: str | None) -> str:
    """One summary line where the programs guard on this host's own count: '' otherwise."""
    if came_from != "this host" or not count:
        return ""
    return (f"the programs written guard on this host's {count} CPU threads (the profile does not record the GPU "
            "host's): a GPU job with another count traces its frames with Dynamo (its compiled graphs still hit); "
            "a profile from `pcompile profile` on the GPU host records the count")


def apply(threads: int | None) -> None:
    """In the warm child, before the script runs (the script's own set_num_threads still wins)."""
    if threads:
        import torch

        torch.set_num_threads(int(threads))
