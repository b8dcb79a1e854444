"""Training-script code that reads values the warm's fakes do not have: DDP's cross-rank
parameter checks, GradScaler's found-inf read, the store behind the fake process group, and the
collectives torch gave no Meta kernel.

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
    ("torch.distributed._meta_registrations", "create_fakework"),
    ("torch._C", "_dispatch_get_all_op_names"),
    ("torch._C", "_dispatch_has_kernel_for_dispatch_key"),
]
_WORK = "__torch__.torch.classes.c10d.Work"
_LIBS: list[Any] = []  # a torch.library.Library's registrations last as long as the object


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


def collectives_on_fakes() -> list[str]:
    """Collectives on the warm's fake CUDA tensors run their Meta kernel; torch registers one
    answering a completed FakeWork for most c10d ops (torch/distributed/_meta_registrations.py)
    but not for the coalesced ones nor gather_into_tensor_, which then fail with "no fake impl or
    Meta kernel" (modded-nanogpt's gradient hooks call all_reduce_coalesced). Register torch's
    own answer for every c10d op that has a CUDA kernel, returns a Work and has no Meta kernel,
    its return shape read from the op's schema. Returns the op names registered."""
    import torch
    from torch.distributed._meta_registrations import create_fakework

    has = torch._C._dispatch_has_kernel_for_dispatch_key
    names = sorted(n for n in torch._C._dispatch_get_all_op_names()
                   if n.startswith("c10d::") and has(n, "CUDA") and not has(n, "Meta"))
    lib = torch.library.Library("c10d", "IMPL")
    done = []
    for name in names:
        op_name, _, overload = name.split("::", 1)[1].partition(".")
        op = getattr(getattr(torch.ops.c10d, op_name), overload or "default")
        returns = [str(r.type) for r in op._schema.returns]
        if returns[-1:] != [_WORK] or len(returns) > 2:
            continue
        first = len(returns) == 2  # (the tensors written, Work), as torch's own registrations
        lib.impl(name.split("::", 1)[1], lambda *args, _first=first: create_fakework(args, return_first_arg=_first), "Meta")
        done.append(name)
    _LIBS.append(lib)
    return done
