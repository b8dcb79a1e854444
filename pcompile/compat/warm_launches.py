"""Executing compiled code on the warm's fakes: wrapper allocations build fakes, Triton kernels are
loaded but never launched, constant folding and tensor printing never read device memory, and
CUDA graph capture is skipped.

Part of the warm's private-torch surface (see warm_runtime.py); tests/test_warm_compat.py runs
this module's check().
"""
from __future__ import annotations

import functools
import os
from typing import Any, Callable

import torch

from pcompile.compat.warm_fakes import active_fake_mode, is_fake
from pcompile.compat.warm_runtime import mark, marked, missing, untraced
from pcompile.compat.warm_timings import inside_graph_compile

CHECKED = {"torch": "2.11.0, 2.14.1, 2.15.0 (2.15: check() and tests/test_warm*.py)"}

PRIVATE_SYMBOLS: list[tuple[str, str]] = [
    ("torch._C._dynamo.guards", "_empty_strided_cuda"),
    ("torch._C._dynamo.guards", "_empty_strided_cpu"),
    ("torch._C._dynamo.guards", "_reinterpret_tensor"),
    ("torch._C._dynamo.guards", "assert_alignment"),
    ("torch._inductor.runtime.triton_heuristics", "CachingAutotuner"),
    ("torch._inductor.fx_passes.joint_graph", "UniformValueConstantFolder"),
    ("torch._inductor.constant_folding", "ConstantFolder"),
    ("torch._tensor_str", "_str"),
    ("torch._inductor.output_code.CompiledFxGraph", "__call__"),
    ("torch._inductor.cudagraph_trees", "cudagraphify_impl"),
    ("torch._inductor.compile_fx", "cudagraphify_impl"),
    ("torch.utils._python_dispatch", "TorchDispatchMode"),
    ("torch._subclasses.fake_tensor", "FakeTensor"),
    ("torch._subclasses.fake_tensor", "unset_fake_temporarily"),
]

#: Inductor's GPU_ALIGN_BYTES: the alignment its kernels assume of their inputs
GPU_ALIGN_BYTES = 16


def check() -> list[str]:
    """Names of the private symbols this module needs that this torch lacks (empty when all is well)."""
    return missing(PRIVATE_SYMBOLS)


def alias_without_base(t: torch.Tensor, size: Any, stride: Any, offset: int) -> torch.Tensor:
    """A tensor on `t`'s storage that is not an autograd view of `t`, as the C++ helper makes.

    Why not a view: `torch.as_strided` would set `_base`; Dynamo then traces the next frame's input
    through `x._base` and names its symbols after the base, so the warm's graph keys differ from the
    GPU job's (a padded logits slice fed to the loss: `s1` in the warm, `s21` on the GPU).

    Why built directly, as the C++ helper builds it (a meta tensor set onto the fake's storage, then
    wrapped): a compiled graph's wrapper reinterprets a buffer for almost every extern kernel and
    view, and through the fake mode (`new_empty` + `set_`, two full dispatches) each cost ~30x
    this, so a compiled call took more host time than the eager ops it replaces. Scripts that time
    compiled against eager with CUDA events (the host's clock here) then took another branch than
    on the GPU (the torch.compile tutorial asserts the speedup and stopped before its training).
    """
    fast = fake_on_meta(getattr(t, "fake_mode", None), t.device, (*size, offset), stride, lambda: torch.empty(
        (0,), dtype=t.dtype, device="meta").set_(t.untyped_storage(), offset, size, stride))
    if fast is not None:
        return fast
    return t.new_empty((0,)).set_(t.untyped_storage(), offset, size, stride)


def fake_on_meta(mode: Any, device: Any, size: Any, stride: Any, meta: Callable[[], torch.Tensor]) -> Any:
    """A fake of `mode` on `device` around the meta tensor `meta()` builds outside every mode: what
    the mode's own dispatch would return for a fresh buffer or alias, without the dispatch. None
    where that is not safe to do directly (no fake mode, symbolic sizes): go through the mode."""
    from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily

    if mode is None or not all(type(v) is int for v in (*size, *stride)):
        return None
    with unset_fake_temporarily():
        elem = meta()
    return FakeTensor(mode, elem, device)


def route_wrapper_allocations() -> None:
    """Inductor's generated wrappers allocate through C++ helpers that bypass the dispatcher and
    would hand real (garbage) device buffers to the next op. Under the script's fake mode, build
    fakes instead; outside it, keep stock behaviour. Must run before any compiled module loads."""
    g = torch._C._dynamo.guards
    if getattr(g, "_pcompile_routed", False):
        return

    def empty_like_device(device: str, original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        def empty_strided(size: Any, stride: Any, dtype: torch.dtype, *rest: Any) -> torch.Tensor:
            mode = active_fake_mode()
            if mode is None:
                return original(size, stride, dtype, *rest)
            if device == "cuda":  # built directly, as alias_without_base says why
                fast = fake_on_meta(mode, device, size, stride, lambda: torch.empty_strided(
                    size, stride, dtype=dtype, device="meta"))
                if fast is not None:
                    return fast
            return torch.empty_strided(size, stride, dtype=dtype, device=device)  # CPU: a real buffer

        return empty_strided

    g._empty_strided_cuda = empty_like_device("cuda", g._empty_strided_cuda)
    g._empty_strided_cpu = empty_like_device("cpu", g._empty_strided_cpu)
    if hasattr(g, "_empty_strided_cpu_pinned"):
        g._empty_strided_cpu_pinned = empty_like_device("cpu", g._empty_strided_cpu_pinned)

    original_reinterpret = g._reinterpret_tensor

    def reinterpret_tensor(t: torch.Tensor, size: Any, stride: Any, offset: int = 0) -> torch.Tensor:
        if is_fake(t):
            return alias_without_base(t, size, stride, t.storage_offset() + offset)
        return original_reinterpret(t, size, stride, offset)

    g._reinterpret_tensor = reinterpret_tensor
    original_alignment = g.assert_alignment

    def assert_alignment(t: torch.Tensor, *args: Any) -> None:
        if is_fake(t):
            return None
        return original_alignment(t, *args)

    g.assert_alignment = assert_alignment
    if hasattr(g, "copy_if_misaligned"):  # newer wrappers realign inputs in C++, which reads the pointer
        original_copy = g.copy_if_misaligned

        def copy_if_misaligned(t: torch.Tensor, *args: Any) -> torch.Tensor:
            # A fake's storage starts aligned (warm_storage), so its offset decides, as in Inductor's
            # own check; the C++ read printed "Accessing the data pointer of FakeTensor ... almost
            # definitely a bug in your code" on the user's terminal at every warm's first call.
            if is_fake(t) and t.storage_offset() * t.element_size() % GPU_ALIGN_BYTES == 0:
                return t
            return original_copy(t, *args)  # misaligned: the stock copy, on the fake mode

        g.copy_if_misaligned = copy_if_misaligned
    g._pcompile_routed = True


def kernel_id(autotuner: Any) -> str:
    """A kernel's name is only unique within its graph (`triton_per_fused_mul_sum_0` recurs across
    graphs with other sources); its code-cache file is named by a hash of its source. Keyed by
    name, a second kernel of the same name went unpredicted until a later warm found it."""
    name = getattr(getattr(autotuner, "fn", None), "__name__", "?")
    filename = getattr(autotuner, "filename", None)
    return f"{name} {os.path.basename(filename)}" if filename else f"{name} @{id(autotuner):x}"


def skip_kernel_launches(on_unselected: Callable[[str, int, Any], None]) -> None:
    """CachingAutotuner.run launches (and, with several configs, benchmarks) a Triton kernel. On
    the virtual device it must do neither; `on_unselected(name, n_configs, autotuner)` sees kernels
    whose autotune winner could therefore not be measured (and may predict one); `name` is
    `kernel_id`'s, one per kernel source."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    if marked(CachingAutotuner.run, "skip_kernel_launches"):
        return

    def run(self: Any, *args: Any, **kwargs: Any) -> None:
        if not getattr(self, "launchers", None):
            self.precompile()  # as stock run() does first: loads the cubins, launches nothing
        if len(self.launchers or ()) > 1 and inside_graph_compile():
            # a module Inductor benchmarks while compiling (fusion choices): its timing is faked
            # (fake_gpu_timings), so its first config stands in, as one picked launcher would
            self.launchers = self.launchers[:1]
            return None
        n = len(getattr(self, "launchers", None) or getattr(self, "compile_results", None) or self.configs or [])
        if n > 1:
            on_unselected(kernel_id(self), n, self)
        return None

    mark(run, "skip_kernel_launches")
    CachingAutotuner.run = run


class _OnCpu(torch.utils._python_dispatch.TorchDispatchMode):
    """Evaluates every op on CPU: real device tensors are copied over, device=cuda becomes cpu."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        from torch.utils._pytree import tree_map

        def to_cpu(x: Any) -> Any:
            if isinstance(x, torch.Tensor) and x.device.type == "cuda" and not is_fake(x):
                return x.cpu()
            if isinstance(x, torch.device) and x.type == "cuda":
                return torch.device("cpu")
            return x

        args, kwargs = tree_map(to_cpu, (args, kwargs or {}))
        return func(*args, **kwargs)


def fold_constants_on_cpu() -> None:
    """Inductor's joint-graph pass `constant_fold_uniform_value` evaluates small tensors on the
    device and reads them back; here that would fold stale memory into kernels. Evaluate the
    folder on CPU (the replacement nodes take their device from the graph, not the value)."""
    from torch._inductor.constant_folding import ConstantFolder
    from torch._inductor.fx_passes.joint_graph import UniformValueConstantFolder

    if marked(UniformValueConstantFolder.__init__, "fold_constants_on_cpu"):
        return
    original_init = UniformValueConstantFolder.__init__
    original_run = ConstantFolder.run

    @functools.wraps(original_init)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        with _OnCpu():
            original_init(self, *args, **kwargs)

    @functools.wraps(original_run)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(self, UniformValueConstantFolder):
            return original_run(self, *args, **kwargs)
        with _OnCpu():
            return original_run(self, *args, **kwargs)

    mark(init, "fold_constants_on_cpu")
    UniformValueConstantFolder.__init__ = init
    ConstantFolder.run = run


def placeholder_repr_for_device_tensors() -> None:
    """Printing a real CUDA tensor reads device memory (garbage here; torch 2.11's guard builder
    does it for optimizer state and once allocated 24 GB). Print a placeholder instead."""
    import torch._tensor_str as ts

    original = ts._str
    if marked(original, "placeholder_repr_for_device_tensors"):
        return

    def _str(self: torch.Tensor, *, tensor_contents: Any = None) -> str:
        if self.device.type == "cuda" and not is_fake(self):
            return f"tensor(<no values on the pcompile virtual device>, size={tuple(self.shape)}, dtype={self.dtype}, device='{self.device}')"
        return original(self, tensor_contents=tensor_contents)

    mark(_str, "placeholder_repr_for_device_tensors")
    ts._str = untraced(_str)


def no_cuda_graph_capture(on_skip: Callable[[], None]) -> None:
    """mode="reduce-overhead": the graphs compile exactly as on the GPU (cudagraphs is part of
    their key), but capture happens on their first runs, which here would record nothing real.
    Run the compiled callable directly instead; capture is run-time work with nothing to cache."""
    import torch._inductor.compile_fx as cfx
    import torch._inductor.cudagraph_trees as trees

    if marked(trees.cudagraphify_impl, "no_cuda_graph_capture"):
        return

    def skip(model: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[..., Any]:
        on_skip()
        return model

    mark(skip, "no_cuda_graph_capture")
    trees.cudagraphify_impl = skip
    cfx.cudagraphify_impl = skip


_run_hooks: list[Callable[[], None]] = []


def on_compiled_run(hook: Callable[[], None]) -> None:
    """Call `hook()` each time an Inductor-compiled graph (forward or backward, compiled here or
    loaded from the cache) runs: what the warm's step count needs to know ("did compiled code run
    in this step?"). A later call replaces the hook."""
    from torch._inductor.output_code import CompiledFxGraph

    _run_hooks[:] = [hook]
    if marked(CompiledFxGraph.__call__, "on_compiled_run"):
        return
    original = CompiledFxGraph.__call__

    def __call__(self: Any, inputs: Any) -> Any:
        for h in _run_hooks:
            h()
        return original(self, inputs)

    mark(__call__, "on_compiled_run")
    CompiledFxGraph.__call__ = __call__
