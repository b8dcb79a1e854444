"""Whether a PyTorch profiler records, and whether a dispatch mode (fake/proxy tracing) is active.

Why: pcompile mirrors its spans into the profiler as `record_function` ranges, but
`record_function` costs ~10 us even with no profiler on, and inside a make_fx/proxy trace it
would be recorded into the traced graph (changing graph hashes, so cache keys). Both checks are
private: `torch.autograd._profiler_enabled()` and `torch.utils._python_dispatch.
_get_current_dispatch_mode()`. Neither imports torch: events are written before torch is.

Touched (torch 2.14.1 and 2.15.0: both functions unchanged, no arguments).
"""
from __future__ import annotations

import sys
from typing import Any, Callable

from pcompile.compat import CompatError

CHECKED = {"torch": "2.14.1, 2.15.0"}
#: Reached through sys.modules (no import), which tools/private_surface.py cannot follow statically.
PRIVATE = ("torch.autograd._profiler_enabled",)


def probes() -> tuple[Callable[[], bool], Callable[[], Any]] | None:
    """(profiler_enabled, current_dispatch_mode) once torch is imported; None before or if moved."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    enabled = getattr(getattr(torch, "autograd", None), "_profiler_enabled", None)
    try:
        from torch.utils._python_dispatch import _get_current_dispatch_mode as mode
    except Exception:
        mode = None
    if enabled is None:
        return None
    return enabled, (mode or (lambda: None))


def check() -> None:
    import torch  # noqa: F401

    found = probes()
    if found is None:
        raise CompatError("torch.autograd._profiler_enabled is missing")
    try:
        from torch.utils._python_dispatch import _get_current_dispatch_mode  # noqa: F401
    except ImportError:
        raise CompatError("torch.utils._python_dispatch._get_current_dispatch_mode is missing") from None
    if found[0]() is not False:
        raise CompatError("torch.autograd._profiler_enabled() is not False with no profiler running")
