"""Compile the backward graph during the forward compile: functorch's
`force_non_lazy_backward_lowering`, with stock's answer to a retained graph kept.

Why: stock AOTAutograd lowers the backward graph at the first `.backward()`, so its AOTAutograd
cache entry is written only then, long after Dynamo handed control back. pcompile's single-flight
holds a lease on the AOTAutograd key from the miss to the publish; with a lazy backward that
publish happens outside any compile pcompile can see, and other ranks would either wait on a
forward pass or compile the whole region again. Lowering the backward eagerly (the path stock
already takes whenever symints are saved for backward, and the one AOT compile uses) makes the
entry complete when the backend returns. It is part of the functorch config hashed into the
AOTAutograd key, so every pcompile process (warm host included) must agree: they all go
through `eager_backward()`. Opt out with PCOMPILE_EAGER_BACKWARD=0.

Retained graphs: a backward lowered ahead donates the forward's saved intermediates (Inductor
reuses their memory), which AOTAutograd refuses at run time when the graph is kept
(`retain_graph=True`, `create_graph=True`). Stock decides at the first backward instead: when
that one keeps the graph it lowers without donation and clears `bw_donated_idxs` for good.
`_deciding_get_or_compile` gives the same answer per compiled region: if the first backward of a region
pcompile lowered ahead keeps its graph, the donation is cleared as stock clears it and every
kept-graph backward of that region runs on private copies of the donated tensors, so the saved
ones survive for the next backward (values are the same kernels' values; memory is what stock's
undonated backward allocates instead). A first backward that frees the graph keeps the donation,
so a later retained one raises stock's own error, and a region stock itself lowers eagerly
(symints saved for backward) is left alone. Keys and cache entries are untouched.

Touched (torch 2.14.1 and 2.11.0: `torch/_functorch/config.py` 377/360, read into AOTConfig by
`aot_module_simplified`; `graph_compile.py` compiling bw when the flag is set;
`_aot_autograd/runtime_wrappers.py`: the dataclass `_AutogradBackwardCompiler(compiled_bw,
lazy_backward_info, ..., fw_metadata, ...)` and its `get_or_compile(*, saved_tensors_use_once)`,
whose result `_backward_impl` calls boxed after checking `fw_metadata.bw_donated_idxs`;
`ViewAndMutationMeta.bw_donated_idxs` / `num_symints_saved_for_bw`).
"""
from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any, Callable, Iterator

from pcompile.compat import CompatError, require_attr
from pcompile.settings import EAGER_BACKWARD

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.14.1, 2.15.0 (2.11.0 read: no _AutogradBackwardCompiler, the check fails and backwards stay lazy)'}
#: Older torch: the check fails by design and the feature stays stock (see the docstring).
SINCE_TORCH = (2, 14)

#: Attribute on an `_AutogradBackwardCompiler` pcompile lowered ahead: its first-backward state.
_STATE = "_pcompile_first_backward"
_AHEAD, _DECIDED = "ahead", "decided"
#: Attribute naming the donated indices a kept-graph backward must copy.
_COPY = "_pcompile_private_copies"

_scope = threading.local()
_install_lock = threading.Lock()


def _backward_compiler_class() -> Any:
    import torch._functorch.aot_autograd  # noqa: F401  (imported alone, runtime_wrappers is a circular import)
    from torch._functorch._aot_autograd import runtime_wrappers

    cls = getattr(runtime_wrappers, "_AutogradBackwardCompiler", None)
    if cls is None:  # 2.11: the backward is a class attribute of a function-local autograd.Function
        raise CompatError("AOTAutograd has no _AutogradBackwardCompiler (torch < 2.14): a backward lowered ahead "
                          "could not give stock's answer to retain_graph=True, so backwards stay lazy as in stock")
    return cls


def check() -> None:
    import dataclasses

    import torch._functorch.config as fconfig

    require_attr(fconfig, "force_non_lazy_backward_lowering", "torch._functorch.config")
    require_attr(fconfig, "patch", "torch._functorch.config")
    cls = _backward_compiler_class()
    from torch._functorch._aot_autograd.schemas import ViewAndMutationMeta

    require_attr(cls, "get_or_compile", "_AutogradBackwardCompiler")
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    meta = {f.name for f in dataclasses.fields(ViewAndMutationMeta)} if dataclasses.is_dataclass(ViewAndMutationMeta) \
        else set()
    if not {"compiled_bw", "fw_metadata"} <= fields or not {"bw_donated_idxs", "num_symints_saved_for_bw"} <= meta:
        raise CompatError("AOTAutograd's _AutogradBackwardCompiler / ViewAndMutationMeta no longer carry compiled_bw, "
                          "fw_metadata, bw_donated_idxs, num_symints_saved_for_bw")


def wanted() -> bool:
    return bool(EAGER_BACKWARD.get())


@contextlib.contextmanager
def eager_backward() -> Iterator[None]:
    """Within this block AOTAutograd lowers backward graphs together with their forward."""
    if not wanted():
        yield
        return
    import torch._functorch.config as fconfig

    _install_first_backward()
    depth = getattr(_scope, "depth", 0)
    _scope.depth = depth + 1
    try:
        with fconfig.patch(force_non_lazy_backward_lowering=True):
            yield
    finally:
        _scope.depth = depth


def _install_first_backward() -> None:
    """Wrap `_AutogradBackwardCompiler` once per process (idempotent)."""
    cls = _backward_compiler_class()
    with _install_lock:
        if getattr(cls, "_pcompile_wrapped", False):
            return
        cls.__init__ = _marking_init(cls.__init__)
        cls.get_or_compile = _deciding_get_or_compile(cls.get_or_compile)
        cls._pcompile_wrapped = True


def _marking_init(original: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        meta = getattr(self, "fw_metadata", None)
        if getattr(_scope, "depth", 0) and getattr(self, "compiled_bw", None) is not None \
                and not getattr(meta, "num_symints_saved_for_bw", 0):
            self.__dict__[_STATE] = _AHEAD  # lowered (or loaded) before any backward: stock would wait
    return __init__


def _deciding_get_or_compile(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def get_or_compile(self: Any, *, saved_tensors_use_once: bool) -> Any:
        if self.__dict__.get(_STATE) == _AHEAD:
            self.__dict__[_STATE] = _DECIDED
            donated = list(getattr(self.fw_metadata, "bw_donated_idxs", None) or [])
            if not saved_tensors_use_once and donated:
                _clear_donation(self)
                self.__dict__[_COPY] = donated
        compiled = original(self, saved_tensors_use_once=saved_tensors_use_once)
        donated = self.__dict__.get(_COPY)
        if donated and not saved_tensors_use_once:
            return _on_private_copies(compiled, donated)
        return compiled
    return get_or_compile


def _clear_donation(compiler: Any) -> None:
    """What stock's `_prepare_lazy_backward_context` does when the first backward keeps its graph."""
    compiler.fw_metadata.bw_donated_idxs = []
    saved = getattr(getattr(compiler, "lazy_backward_info", None), "saved_context", None)
    meta = getattr(saved, "fw_metadata", None)
    if meta is not None and hasattr(meta, "bw_donated_idxs"):
        meta.bw_donated_idxs = []


def _private_copy(t: Any) -> Any:
    import torch

    if not isinstance(t, torch.Tensor):
        return t
    try:
        return torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device).copy_(t)
    except RuntimeError:  # overlapping strides: a plain clone keeps the values
        return t.clone()


def _on_private_copies(compiled: Callable[..., Any], donated: list[int]) -> Callable[..., Any]:
    """`compiled` (boxed, as AOTAutograd calls it) fed copies of the donated inputs."""
    boxed = getattr(compiled, "_boxed_call", False)

    def run(args: list[Any]) -> Any:
        for i in donated:
            if i < len(args):
                args[i] = _private_copy(args[i])
        return compiled(args) if boxed else compiled(*args)

    run._boxed_call = True  # type: ignore[attr-defined]
    return run
