"""Training-script code that reads values the warm's fakes do not have: DDP's cross-rank
parameter checks, GradScaler's found-inf read, and the store behind the fake process group.

Part of the warm's private-torch surface (see warm_runtime.py); tests/test_warm_compat.py runs
this module's check().
"""
from __future__ import annotations

from typing import Any

from pcompile.compat.warm_runtime import mark, marked, missing

CHECKED = {"torch": "2.11.0, 2.14.1, 2.15.0 (2.15: check() and tests/test_warm*.py)"}

PRIVATE_SYMBOLS: list[tuple[str, str]] = [
    ("torch.testing._internal.distributed.fake_pg", "FakeStore"),
    ("torch.nn.parallel.distributed", "_verify_param_shape_across_processes"),
    ("torch.nn.parallel.distributed", "_sync_module_states"),
    ("torch.amp.grad_scaler.GradScaler", "_maybe_opt_step"),
]


def check() -> list[str]:
    """Names of the private symbols this module needs that this torch lacks (empty when all is well)."""
    return missing(PRIVATE_SYMBOLS)


def fake_store() -> Any:
    """A store for the "fake" process-group backend; importing the module registers the backend."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    return FakeStore()



def grad_scaler_assumes_finite() -> None:
    """GradScaler.step reads found_inf with .item() to decide whether to step; on fakes there is
    no value. Warm takes the branch a healthy step takes (finite grads: step the optimizer), so the
    optimizer step is still compiled."""
    from torch.amp.grad_scaler import GradScaler

    if marked(GradScaler._maybe_opt_step, "grad_scaler_assumes_finite"):
        return

    def _maybe_opt_step(self: Any, optimizer: Any, optimizer_state: Any, *args: Any, **kwargs: Any) -> Any:
        return optimizer.step(*args, **kwargs)

    mark(_maybe_opt_step, "grad_scaler_assumes_finite")
    GradScaler._maybe_opt_step = _maybe_opt_step


def ddp_skip_value_checks() -> None:
    """DDP's constructor compares and broadcasts parameter *values* across ranks in C++; on fake
    parameters there are none. Rank 0 of a fake group has nothing to compare with anyway."""
    import torch.nn.parallel.distributed as ddp

    ddp._verify_param_shape_across_processes = lambda *a, **k: None
    ddp._sync_module_states = lambda *a, **k: None
