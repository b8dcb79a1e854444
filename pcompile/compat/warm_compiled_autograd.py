"""Compiled autograd (`torch._dynamo.config.compiled_autograd = True`,
`torch._dynamo.compiled_autograd._enable(...)`) on the warm's fake tensors.

Why: compiled autograd captures the backward graph while autograd runs, converting each input
tensor into its own FakeTensorMode (`AutogradCompilerInstance.begin_capture` -> `wrap_fake` ->
`from_tensor`). In the warm those inputs are the script's fakes and the script's fake mode is on
the dispatch stack, so the conversion ran under a second fake mode and failed ("Found tensor of
type FakeTensor, which is not supported by FakeTensorMode", from a RecursionError). Dynamo's own
frame conversion pops the current modes for the same reason (`_disable_current_modes` in
convert_frame); the capture here does the same: the script's fake mode is popped at the start of
the capture and put back when the capture's own context stack closes (`self.stack`, closed by
end_capture or on error), so the captured graph is the GPU job's and runs on the script's fakes.

Touched: `torch._dynamo.compiled_autograd.AutogradCompilerInstance.begin_capture(self, inputs,
sizes, scalars, origins, accumulate_grad, check_nans)` and its `stack` ExitStack (2.11.0, 2.14.1,
2.15.0), `torch._subclasses.fake_tensor.unset_fake_temporarily`.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any

import torch

from pcompile.compat.warm_runtime import mark, marked, missing

CHECKED = {"torch": "2.11.0, 2.14.1, 2.15.0"}
PRIVATE_SYMBOLS: list[tuple[str, str]] = [
    ("torch._dynamo.compiled_autograd", "AutogradCompilerInstance"),
    ("torch._subclasses.fake_tensor", "unset_fake_temporarily"),
]
_PARAMS = ["self", "inputs", "sizes", "scalars", "origins", "accumulate_grad", "check_nans"]


def check() -> list[str]:
    """Names of the private symbols this module needs that this torch lacks (empty when all is well)."""
    gone = missing(PRIVATE_SYMBOLS)
    if gone:
        return gone
    from torch._dynamo.compiled_autograd import AutogradCompilerInstance

    if list(inspect.signature(AutogradCompilerInstance.begin_capture).parameters) != _PARAMS:
        gone.append(f"torch._dynamo.compiled_autograd.AutogradCompilerInstance.begin_capture({', '.join(_PARAMS[1:])})")
    if not hasattr(AutogradCompilerInstance(lambda gm: gm), "stack"):
        gone.append("torch._dynamo.compiled_autograd.AutogradCompilerInstance().stack")
    return gone


def capture_outside_the_script_mode() -> None:
    """Compiled autograd's capture runs with the script's fake mode popped (see the module docstring)."""
    from torch._dynamo.compiled_autograd import AutogradCompilerInstance
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    original = AutogradCompilerInstance.begin_capture
    if marked(original, "capture_outside_the_script_mode"):
        return

    def begin_capture(self: Any, *args: Any, **kwargs: Any) -> Any:
        self.stack.enter_context(unset_fake_temporarily())  # first in, so last out: after the capture's own modes
        return original(self, *args, **kwargs)

    # The engine calls this from inside a compiled function's backward; torch's own begin_capture is
    # skipped by Dynamo as torch code, this wrapper must say so itself.
    wrapper = functools.wraps(original)(torch.compiler.disable(begin_capture))
    mark(wrapper, "capture_outside_the_script_mode")
    AutogradCompilerInstance.begin_capture = wrapper
