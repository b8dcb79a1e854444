"""Real values for the virtual tensors a script makes from its own host data (issue 25, class 11).

Labels, masks, indices and counters a script copies to the GPU (`.to("cuda")`, `.cuda()`,
`torch.tensor(..., device="cuda")`, `torch.arange/zeros/full(..., device="cuda")`) are known on
the host. Each such fake carries a **shadow**: a real CPU tensor with its values. The warm's fake
mode (warm_fakes.new_fake_mode) calls `after()` on every op it runs on fakes: when every fake
input has a shadow, the op runs once more on the shadows on CPU and its outputs get theirs, so
`labels != -100`, `.sum()`, `nonzero()`, `torch.where(mask)`, boolean and integer indexing and
small-int arithmetic keep real values; `.item()`, `.tolist()`, `bool()`, `.cpu()` of a shadowed
fake return them (warm/reads.py), and a data-dependent branch takes the path it takes on the GPU.

What stays a placeholder (read as zeros and listed by line in the summary): anything computed
from parameters or other values the warm does not have (model outputs, compiled-graph outputs),
random ops (their CPU twin would consume the script's CPU RNG stream; `randperm` is the
exception, below), uninitialised memory (`empty*`, except with no elements: an empty tensor has
no values to lose), and tensors above SIZE_LIMIT elements (no cost for big tensors: only a
dictionary lookup per input). A write into a shadowed tensor from a placeholder drops its shadow, and so
does an in-place update inside compiled code (the graph's mutated inputs, dropped at each call).
Not covered: such a write through another view of the same storage leaves that view's shadow.

A random permutation (`torch.randperm(n, device="cuda")`, the shuffle of on-device loaders)
gets the identity permutation as its value: zeros are no permutation, so host data indexed by
one (`labels[perm]`, `keep_mask[perm]`) would turn into placeholders, selections through it
(`perm[keep_mask[perm]]`) would come out empty, and a loader that fills batches from them would
loop forever. The identity is a draw the GPU could make, its structure (every index once) is what
such code relies on, and no RNG is consumed for it.

Shadows live in a side table keyed by the fake's id with a weak reference (no attribute on the
tensor: Dynamo and torch.utils.swap_tensors see the tensor exactly as before); a module move's
swap drops the entries of both tensors first, so parameters never carry one.

Part of the warm's private-torch surface (see warm_runtime.py); tests/test_warm_compat.py runs
this module's check().
"""
from __future__ import annotations

import functools
import threading
import weakref
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from pcompile import settings
from pcompile.compat.warm_runtime import mark, marked, missing

CHECKED = {"torch": "2.11.0, 2.14.1, 2.15.0"}

PRIVATE_SYMBOLS: list[tuple[str, str]] = [
    ("torch._subclasses.fake_tensor", "FakeTensor"),
    ("torch._inductor.output_code", "CompiledFxGraph"),
]

#: largest tensor (elements) that gets a shadow: labels, masks and index tensors of a batch fit;
#: activations and weights of real models do not, and cost nothing
SIZE_LIMIT = int(settings.WARM_VALUE_LIMIT.get())
_UNINITIALISED = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted",
                            "set_", "resize_", "resize_as_"})


def check() -> list[str]:
    """Names of the private symbols this module needs that this torch lacks (empty when all is well)."""
    gone = missing(PRIVATE_SYMBOLS)
    from torch._inductor.output_code import CompiledFxGraph

    if "mutated_input_idxs" not in getattr(CompiledFxGraph, "__dataclass_fields__", {}):
        gone.append("torch._inductor.output_code.CompiledFxGraph.mutated_input_idxs")
    return gone


class Shadows:
    """id(fake) -> (weak ref to the fake, real CPU tensor with its values)."""

    def __init__(self) -> None:
        self._table: dict[int, tuple[weakref.ref, torch.Tensor]] = {}
        self._lock = threading.Lock()

    def get(self, t: Any) -> torch.Tensor | None:
        entry = self._table.get(id(t))
        if entry is None or entry[0]() is not t:
            return None
        return entry[1]

    def set(self, t: torch.Tensor, value: torch.Tensor) -> None:
        key = id(t)

        def gone(_ref: Any, key: int = key) -> None:
            with self._lock:
                cur = self._table.get(key)
                if cur is not None and cur[0]() is None:
                    del self._table[key]

        with self._lock:
            self._table[key] = (weakref.ref(t, gone), value)

    def drop(self, t: Any) -> None:
        with self._lock:
            entry = self._table.get(id(t))
            if entry is not None and entry[0]() is t:
                del self._table[id(t)]

    def __len__(self) -> int:
        return len(self._table)


SHADOWS = Shadows()


def _is_fake(x: Any) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(x, FakeTensor)


def written_tensors(func: Any, args: Any, kwargs: Any) -> list[torch.Tensor]:
    """The tensor arguments `func` writes into (in-place and out= arguments)."""
    schema = getattr(func, "_schema", None)
    out: list[torch.Tensor] = []
    if schema is None:
        return out
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            value = args[i] if i < len(args) else kwargs.get(arg.name)
            out += [v for v in (value if isinstance(value, (list, tuple)) else (value,)) if isinstance(v, torch.Tensor)]
    return out


#: ops that overwrite every element of their first argument: its old values do not matter
#: (`buf.copy_(host_labels)` into a buffer made with torch.empty gets the labels' values)
_OVERWRITING = frozenset({"copy_", "fill_", "zero_"})


def _host(x: Any) -> Any:
    if isinstance(x, torch.device) and x.type == "cuda":
        return torch.device("cpu")
    if _is_fake(x):
        return SHADOWS.get(x)
    return x


def _overwritten(func: Any, args: Any) -> Any:
    """The fake `func` overwrites whole (its first argument), if it is one of _OVERWRITING."""
    packet = getattr(func, "overloadpacket", None)
    if packet is not None and packet.__name__ in _OVERWRITING and args and _is_fake(args[0]):
        return args[0]
    return None


def eligible(func: Any, flat_inputs: list[Any], overwritten: Any = None) -> bool:
    """Whether `func` on these inputs can run on shadows: every fake input has one, no input
    is a parameter-like tensor (requires grad) or too big, and the op is neither random nor
    uninitialised memory."""
    if torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()):
        return False
    packet = getattr(func, "overloadpacket", None)
    if packet is not None and packet.__name__ in _UNINITIALISED:
        return False
    n = 0
    for x in flat_inputs:
        if not isinstance(x, torch.Tensor):
            continue
        if x is overwritten:
            n += x.numel()
        elif _is_fake(x):
            s = SHADOWS.get(x)
            if s is None:
                return False
            n += s.numel()
        elif x.requires_grad:  # a parameter moved to the device: model state stays a placeholder
            return False
        elif x.device.type == "cuda":  # a real tensor on the virtual device: never run kernels on it
            return False
        else:
            n += x.numel()
        if n > SIZE_LIMIT:
            return False
    return True


def run_on_shadows(func: Any, args: Any, kwargs: Any) -> tuple[bool, Any]:
    """(True, result of `func` on CPU with every fake replaced by its shadow), or (False, None)
    where that is not possible (see eligible) or the CPU run raises."""
    flat = tree_flatten((args, kwargs))[0]
    dst = _overwritten(func, args)
    if not eligible(func, flat, dst):
        return False, None
    try:
        host_args = tree_map(_host, args)
        if dst is not None and host_args[0] is None:  # a fresh CPU twin for the overwritten tensor
            host_args = (torch.empty_strided(tuple(dst.shape), dst.stride(), dtype=dst.dtype), *host_args[1:])
        return True, func(*host_args, **tree_map(_host, kwargs))
    except Exception:
        return False, None


def _is_device_copy(x: Any) -> bool:
    """`torch.tensor(data, device="cuda")` (and `as_tensor`) copies `data` to the device with the
    Python dispatch key excluded, so the fake mode first meets a *real* tensor on the virtual
    device, as lift_fresh's input. Its bytes came from the host (a memcpy the virtual device keeps);
    taken as its shadow, later ops ran real kernels on it, which the virtual device swallows, and
    their outputs read as whatever that memory held (Lightning's `torch.tensor(len(loader),
    device=...) == 0` read True: "Total length of DataLoader across ranks is zero")."""
    return isinstance(x, torch.Tensor) and not _is_fake(x) and x.device.type == "cuda" and x.numel() <= SIZE_LIMIT


def after(func: Any, args: Any, kwargs: Any, out: Any) -> None:
    """Called by the fake mode after it ran `func` on fakes: give `out` shadows where all inputs
    have them (output size permitting); drop the shadows of tensors written from placeholders."""
    outs = tree_flatten(out)[0]
    if any(isinstance(o, torch.Tensor) and o.numel() > SIZE_LIMIT for o in outs):
        return  # too big for a shadow; what it wrote is among its outputs, so had none either
    if outs and all(_is_fake(o) and o.numel() == 0 for o in outs):
        for f in outs:  # nothing to know: `torch.empty(0, device="cuda")`, a batch that torch.cat fills
            SHADOWS.set(f, torch.empty_strided(tuple(f.shape), f.stride(), dtype=f.dtype))
        return
    name = getattr(getattr(func, "overloadpacket", None), "__name__", "")
    if name == "lift_fresh" and args and _is_device_copy(args[0]):
        for f in outs[:1]:  # the bytes torch copied to the device below the mode (see _is_device_copy)
            if _is_fake(f):
                SHADOWS.set(f, args[0].cpu())
        return
    if name == "randperm":
        for f in outs:  # the identity permutation (see the module docstring)
            if _is_fake(f) and f.dim() == 1:
                SHADOWS.set(f, torch.arange(f.numel(), dtype=f.dtype))
        return
    ok, cpu = run_on_shadows(func, args, kwargs)
    if not ok:
        for t in written_tensors(func, args, kwargs):
            SHADOWS.drop(t)
        return
    cpu_flat = tree_flatten(cpu)[0]
    if len(cpu_flat) != len(outs):
        return
    for f, c in zip(outs, cpu_flat):
        if _is_fake(f) and isinstance(c, torch.Tensor) and tuple(f.shape) == tuple(c.shape):
            SHADOWS.set(f, c)


def to_fakes(mode: Any, cpu: Any) -> Any:
    """Fake CUDA outputs (with shadows) for a value-dependent op computed on shadows: `cpu`'s
    tensors become fakes of the same shape, dtype and strides; Python scalars stay as they are."""

    def back(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            with mode:
                f = torch.empty_strided(tuple(x.shape), x.stride(), dtype=x.dtype, device="cuda")
            SHADOWS.set(f, x)
            return f
        return x

    return tree_map(back, cpu)


def value_of(t: Any) -> torch.Tensor | None:
    """The real values of fake `t` where it has them (None: a placeholder)."""
    return SHADOWS.get(t)


def forget(*tensors: Any) -> None:
    """Drop shadows (a module move swapping a tensor: no weak reference may stay on it)."""
    for t in tensors:
        SHADOWS.drop(t)


def drop_mutated_inputs_of_compiled_graphs() -> None:
    """Compiled code writes its mutated inputs with kernels the fake mode never sees: drop their
    shadows at each call (CompiledFxGraph.mutated_input_idxs), so a stale value is never read."""
    from torch._inductor.output_code import CompiledFxGraph

    original = CompiledFxGraph.__call__
    if marked(original, "drop_mutated_inputs_of_compiled_graphs"):
        return

    @functools.wraps(original)
    def __call__(self: Any, inputs: Any) -> Any:
        idxs = getattr(self, "mutated_input_idxs", None) or ()
        if idxs and len(SHADOWS):
            for i in idxs:
                if i < len(inputs):
                    SHADOWS.drop(inputs[i])
        return original(self, inputs)

    mark(__call__, "drop_mutated_inputs_of_compiled_graphs")
    CompiledFxGraph.__call__ = __call__

