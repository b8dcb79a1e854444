"""The script's own tracers under the warm: `make_fx(tracing_mode="fake"/"symbolic")` sees no fake mode,
as on the GPU host.

Why: make_fx in fake or symbolic mode adopts the fake mode it detects (`detect_fake_mode(args)`:
the active one, else the one its inputs belong to) and makes its own only when there is none. In
the warm the script runs under the warm's fake mode and its CUDA tensors are that mode's fakes,
so make_fx adopted a mode that stands for eager GPU tensors and has no ShapeEnv: symbolic tracing
failed (`shape_env should be set if tracing with 'symbolic'`) and fake tracing ran on the warm's
mode (host ops for real, value reads counted). On the GPU host there is no fake mode at all. So a
trace whose detected mode is the script's runs with that mode popped (as Dynamo's frame
conversion and compiled autograd's capture pop it) and with detection not seeing it: make_fx makes
its own mode (a ShapeEnv for symbolic) and converts the script's fakes into it as it would real
GPU tensors (symbolic sizes in a symbolic trace: `_fakes_convert_as_real_tensors`). Traces inside a compile (Dynamo's TracingContext has its own mode) and real-mode
traces are untouched; `torch.export` and `torch.jit.trace` already worked.

Touched (2.11.0, 2.14.1, 2.15.0): `torch.fx.experimental.proxy_tensor._MakefxTracer.trace(self, f, *args)` and its
`tracing_mode`, which reads `torch._dynamo.utils.detect_fake_mode(args)` (re-exported from
`torch._guards`) at call time; `torch._subclasses.fake_tensor.unset_fake_temporarily`;
`FakeTensorMode.from_tensor(tensor, *, static_shapes, source, symbolic_context, trace)`, which keeps
a foreign fake's sizes static unless given a symbolic context (`meta_utils`
`sym_sizes_strides_storage_offset`); `symbolic_shapes.StatelessSymbolicContext`, `DimDynamic.DUCK`.
"""
from __future__ import annotations

import functools
import inspect
import threading
from typing import Any

import torch

from pcompile.compat.warm_runtime import mark, marked, missing

CHECKED = {"torch": "2.11.0, 2.14.1, 2.15.0"}
PRIVATE_SYMBOLS: list[tuple[str, str]] = [
    ("torch.fx.experimental.proxy_tensor", "_MakefxTracer"),
    ("torch._dynamo.utils", "detect_fake_mode"),
    ("torch._subclasses.fake_tensor", "unset_fake_temporarily"),
    ("torch._subclasses.fake_tensor.FakeTensorMode", "from_tensor"),
    ("torch.fx.experimental.symbolic_shapes", "StatelessSymbolicContext"),
    ("torch.fx.experimental.symbolic_shapes", "DimDynamic"),
]

_local = threading.local()


def check() -> list[str]:
    """Names of the private symbols this module needs that this torch lacks (empty when all is well)."""
    gone = missing(PRIVATE_SYMBOLS)
    if gone:
        return gone
    from torch.fx.experimental.proxy_tensor import _MakefxTracer

    if list(inspect.signature(_MakefxTracer.trace).parameters) != ["self", "f", "args"]:
        gone.append("torch.fx.experimental.proxy_tensor._MakefxTracer.trace(f, *args)")
    from torch._subclasses.fake_tensor import FakeTensorMode

    if list(inspect.signature(FakeTensorMode.from_tensor).parameters) != \
            ["self", "tensor", "static_shapes", "source", "symbolic_context", "trace"]:
        gone.append("torch._subclasses.fake_tensor.FakeTensorMode.from_tensor(tensor, *, static_shapes, source, "
                    "symbolic_context, trace)")
    if "torch._dynamo.utils.detect_fake_mode(" not in inspect.getsource(_MakefxTracer._init_modes_from_inputs):
        gone.append("torch.fx.experimental.proxy_tensor._MakefxTracer._init_modes_from_inputs -> "
                    "torch._dynamo.utils.detect_fake_mode")
    return gone


def tracers_see_no_script_mode(script_mode: Any) -> None:
    """make_fx traces (fake/symbolic) that would adopt `script_mode` make their own mode instead."""
    import torch._dynamo.utils as dutils
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.fx.experimental.proxy_tensor import _MakefxTracer

    _local.script_mode = script_mode
    original_detect = dutils.detect_fake_mode
    if not marked(original_detect, "tracers_see_no_script_mode"):
        @functools.wraps(original_detect)
        def detect_fake_mode(inputs: Any = None) -> Any:
            found = original_detect(inputs)
            if getattr(_local, "hiding", False) and found is _local.script_mode:
                return None
            return found

        mark(detect_fake_mode, "tracers_see_no_script_mode")
        dutils.detect_fake_mode = detect_fake_mode

    _fakes_convert_as_real_tensors()
    original_trace = _MakefxTracer.trace
    if marked(original_trace, "tracers_see_no_script_mode"):
        return

    @functools.wraps(original_trace)
    def trace(self: Any, f: Any, *args: Any) -> Any:
        if self.tracing_mode not in ("fake", "symbolic") or getattr(_local, "hiding", False) \
                or original_detect(args) is not getattr(_local, "script_mode", None):
            return original_trace(self, f, *args)
        _local.hiding = True
        try:
            with unset_fake_temporarily():
                return original_trace(self, f, *args)
        finally:
            _local.hiding = False

    mark(trace, "tracers_see_no_script_mode")
    _MakefxTracer.trace = trace


def _fakes_convert_as_real_tensors() -> None:
    """Inside a hidden trace, a script fake converted into a mode with a ShapeEnv gets symbolic sizes,
    as the real GPU tensor it stands for would: FakeTensorMode.from_tensor keeps a foreign fake's
    sizes static when no symbolic context is given, a real tensor's become duck-sized symbols."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext

    original = FakeTensorMode.from_tensor
    if marked(original, "tracers_see_no_script_mode"):
        return

    @functools.wraps(original)
    def from_tensor(self: Any, tensor: Any, *, static_shapes: Any = None, source: Any = None,
                    symbolic_context: Any = None, trace: bool = True) -> Any:
        if getattr(_local, "hiding", False) and symbolic_context is None and not static_shapes \
                and self.shape_env is not None and not self.static_shapes and source is not None \
                and getattr(tensor, "fake_mode", None) is _local.script_mode:
            dim = tensor.dim()
            symbolic_context = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DUCK] * dim,
                                                        constraint_sizes=[None] * dim)
        return original(self, tensor, static_shapes=static_shapes, source=source,
                        symbolic_context=symbolic_context, trace=trace)

    mark(from_tensor, "tracers_see_no_script_mode")
    FakeTensorMode.from_tensor = from_tensor
