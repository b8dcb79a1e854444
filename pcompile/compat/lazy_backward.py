"""Compile the backward graph during the forward compile: functorch's
`force_non_lazy_backward_lowering`.

Why: stock AOTAutograd lowers the backward graph at the first `.backward()`, so its AOTAutograd
cache entry is written only then, long after Dynamo handed control back. pcompile's single-flight
holds a lease on the AOTAutograd key from the miss to the publish; with a lazy backward that
publish happens outside any compile pcompile can see, and other ranks would either wait on a
forward pass or compile the whole region again. Lowering the backward eagerly (the path stock
already takes whenever symints are saved for backward, and the one AOT compile uses) makes the
entry complete when the backend returns. It is part of the functorch config hashed into the
AOTAutograd key, so every pcompile process (warm host included) must agree: they all go
through `eager_backward()`. Opt out with PCOMPILE_EAGER_BACKWARD=0.

Touched (torch 2.14.1 and 2.11.0: `torch/_functorch/config.py` 377/360, read into AOTConfig by
`aot_module_simplified`; `graph_compile.py` compiling bw when the flag is set).
"""
from __future__ import annotations

import contextlib
from typing import Iterator

from pcompile.compat import require_attr
from pcompile.settings import EAGER_BACKWARD

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.14.1, 2.15.0'}



def check() -> None:
    import torch._functorch.config as fconfig

    require_attr(fconfig, "force_non_lazy_backward_lowering", "torch._functorch.config")
    require_attr(fconfig, "patch", "torch._functorch.config")


def wanted() -> bool:
    return bool(EAGER_BACKWARD.get())


@contextlib.contextmanager
def eager_backward() -> Iterator[None]:
    """Within this block AOTAutograd lowers backward graphs together with their forward."""
    if not wanted():
        yield
        return
    import torch._functorch.config as fconfig

    with fconfig.patch(force_non_lazy_backward_lowering=True):
        yield
