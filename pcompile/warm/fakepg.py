"""`--world-size W`: run a torchrun-style script as one rank of W with a fake process group.

Collectives on the fake group return immediately, so DDP/FSDP wrap and trace as they would on
rank 0 of a real job and their graphs (bucketed by DDPOptimizer, or with collectives inside)
are warmed. The script's own `init_process_group(...)` call is redirected to the fake backend.
"""
from __future__ import annotations

import os
from typing import Any, Mapping


def env_for(world_size: int, rank: int = 0, inherited: Mapping[str, str] | None = None) -> dict[str, str]:
    """torchrun's variables for `rank` of `world_size` on one node, OMP_NUM_THREADS included: torchrun
    sets it to 1 for several ranks per node unless the user did, and Dynamo guards every frame on the
    thread count (its global state), so a warm that kept its own count wrote programs no rank could
    run (the DDP ranks after a warm traced every frame)."""
    env = {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_WORLD_SIZE": str(world_size),
           "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    if world_size > 1 and "OMP_NUM_THREADS" not in (inherited if inherited is not None else os.environ):
        env["OMP_NUM_THREADS"] = "1"
    return env


def install(world_size: int, rank: int = 0) -> None:
    import torch.distributed as dist

    from pcompile.compat.warm_training import collectives_on_fakes, ddp_skip_value_checks, fake_store

    ddp_skip_value_checks()
    collectives_on_fakes()

    original = dist.init_process_group

    def init_process_group(backend: Any = None, init_method: Any = None, *args: Any, **kwargs: Any) -> Any:
        for k in ("store", "world_size", "rank", "init_method"):
            kwargs.pop(k, None)
        kwargs.pop("device_id", None)  # binding a device would eagerly create a real communicator
        return original("fake", store=fake_store(), world_size=world_size, rank=rank, **kwargs)

    dist.init_process_group = init_process_group
    _ddp_noop_allreduce()


class _NoRebuildReducer:
    """DDP's C++ reducer re-buckets parameters after the first backward, copying their values;
    fake parameters have none. Bucket order only affects run-time communication, not the graphs
    Dynamo splits at compile time, so the warm keeps the first bucketing."""

    def __init__(self, reducer: Any) -> None:
        object.__setattr__(self, "_reducer", reducer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._reducer, name)

    def _rebuild_buckets(self) -> bool:
        return False


def _ddp_noop_allreduce() -> None:
    """The fake group's all-reduce completes with no value, which DDP's C++ reducer rejects.
    Give every DDP a comm hook that hands the bucket back unchanged (what an all-reduce of
    identical ranks would return); comm hooks run outside anything Dynamo traces."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    original = DDP.__init__
    if getattr(original, "_pcompile", False):
        return

    def hook(state, bucket):  # no annotations: DDP checks them, and this module's are strings
        fut = torch.futures.Future()
        fut.set_result(bucket.buffer())
        return fut

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        self.register_comm_hook(None, hook)
        self.reducer = _NoRebuildReducer(self.reducer)

    __init__._pcompile = True  # type: ignore[attr-defined]
    DDP.__init__ = __init__
