"""A warm's programs: their guards describe the GPU job's real tensors, not the warm's fakes.

Why: a program's guards are rebuilt in the job from the values pickled with them (torch's
`GuardsStatePickler`). In a warm those values are the script's fakes, and torch pickles a fake as
a fake: with the fake's own dispatch keys (Python, PythonTLSSnapshot, which no real tensor has),
as a plain tensor where the job has an `nn.Parameter` (a fake parameter's type is FakeTensor), and,
before torch 2.15, with its meta template made inside the warm's fake mode, which the warm's
placeholder pickling turned into a CPU tensor that the pickler then dropped as "missing". Every
warm program failed to install in the job ("'_Missing' object has no attribute 'device'"), or
would have failed its TENSOR_MATCH guards, so the job traced every frame.

Here a fake of the script's mode pickles as the real CUDA tensor it stands for: a plain meta
template (sizes, strides, dtype, requires_grad), its device, `nn.Parameter` or `torch.Tensor`, and
its dispatch keys without the Python ones. A guard the job's tensor then fails still re-traces
that frame (a wrong guess costs a trace, never a wrong result). Only the warm installs this.

Touched (2.11.0, 2.14.1, 2.15.0): `torch._dynamo.guards.GuardsStatePickler.reducer_override(obj)`,
its `guard_tree_values` (ids of the values the guards read) and
`_unpickle_tensor(meta, device, pytype, dispatch_keys_raw, grad)`;
`torch.utils._python_dispatch.is_traceable_wrapper_subclass`; `torch._C._dispatch_keys`.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

import torch

from pcompile.compat.warm_runtime import mark, marked, missing

CHECKED = {"torch": "2.11.0, 2.14.1, 2.15.0"}
PRIVATE_SYMBOLS: list[tuple[str, str]] = [
    ("torch._dynamo.guards", "GuardsStatePickler"),
    ("torch._dynamo.guards.GuardsStatePickler", "reducer_override"),
    ("torch._dynamo.guards.GuardsStatePickler", "_unpickle_tensor"),
    ("torch.utils._python_dispatch", "is_traceable_wrapper_subclass"),
    ("torch._subclasses.fake_tensor", "unset_fake_temporarily"),
    ("torch.utils._mode_utils", "no_dispatch"),
]
_UNPICKLE_ARGS = ["meta_tensor", "device", "pytype", "dispatch_keys_raw", "grad"]
#: keys a fake carries for its Python dispatch and a real tensor never has
_FAKE_ONLY_KEYS = ("Python", "PythonTLSSnapshot")


def check() -> list[str]:
    """Names of the private symbols this module needs that this torch lacks (empty when all is well)."""
    gone = missing(PRIVATE_SYMBOLS)
    if gone:
        return gone
    from torch._dynamo.guards import GuardsStatePickler

    if list(inspect.signature(GuardsStatePickler._unpickle_tensor).parameters) != _UNPICKLE_ARGS:
        gone.append("torch._dynamo.guards.GuardsStatePickler._unpickle_tensor(" + ", ".join(_UNPICKLE_ARGS) + ")")
    if "guard_tree_values" not in inspect.signature(GuardsStatePickler.__init__).parameters:
        gone.append("torch._dynamo.guards.GuardsStatePickler(guard_tree_values, ...)")
    return gone


def real_dispatch_keys(fake: torch.Tensor) -> Any:
    """The dispatch keys of the real tensor `fake` stands for."""
    keys = torch._C._dispatch_keys(fake)
    for name in _FAKE_ONLY_KEYS:
        key = getattr(torch._C.DispatchKey, name, None)
        if key is not None and keys.has(key):
            keys = keys.remove(key)
    return keys


def real_pytype(fake: torch.Tensor) -> type:
    """`nn.Parameter` for a fake parameter (its type is FakeTensor, `_is_param` says what it stands for)."""
    if getattr(fake, "_is_param", False):
        return torch.nn.Parameter
    pytype = getattr(fake, "pytype", None)
    return pytype if isinstance(pytype, type) else torch.Tensor


def reduce_as_real(pickler: Any, fake: torch.Tensor) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """What torch's pickler returns for a real tensor of `fake`'s device, sizes, strides and dtype."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.utils._mode_utils import no_dispatch

    with unset_fake_temporarily(), no_dispatch():
        meta = torch.empty_strided(tuple(fake.size()), tuple(fake.stride()), dtype=fake.dtype, device="meta",
                                   requires_grad=fake.requires_grad)
    grad = fake.grad if fake.is_leaf else None
    if grad is not None and id(grad) not in pickler.guard_tree_values:
        grad = None  # no guard reads it; torch before 2.15 could not assign its "missing" marker
    return type(pickler)._unpickle_tensor, (meta, fake.device, real_pytype(fake),
                                            real_dispatch_keys(fake).raw_repr(), grad)


def pickle_script_fakes_as_real(is_script_fake: Callable[[Any], bool]) -> None:
    """Guard state pickled in this process stands for real tensors wherever it holds a script fake."""
    from torch._dynamo.guards import GuardsStatePickler
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass

    original = GuardsStatePickler.reducer_override
    if marked(original, "warm_programs"):
        return

    @functools.wraps(original)
    def reducer_override(self: Any, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor) and is_script_fake(obj) and not is_traceable_wrapper_subclass(obj) \
                and id(obj) in self.guard_tree_values:
            return reduce_as_real(self, obj)
        return original(self, obj)

    mark(reducer_override, "warm_programs")
    GuardsStatePickler.reducer_override = reducer_override  # type: ignore[method-assign]
