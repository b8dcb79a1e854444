"""Mirroring spans into the PyTorch profiler, at no cost when no profiler runs.

`record_function` costs ~10 us even with no profiler active, and inside a make_fx/proxy trace
it would be recorded into the traced graph (changing graph hashes and so cache keys). So a
range is opened only when a profiler is on and no dispatch mode (fake/proxy tracing) is active.
The two checks use private torch names, owned by pcompile/compat/profiler_state.py
(tests/test_compat_profiler_state.py fails loudly if they move).
"""
from __future__ import annotations

import sys
from typing import Any, Callable


def _probe() -> tuple[Callable[[], bool], Callable[[], Any]] | None:
    from pcompile.compat.profiler_state import probes

    return probes()


_checks: tuple[Callable[[], bool], Callable[[], Any]] | bool | None = None  # False: probed, unusable


def open_range(kind: str) -> Any:
    """An entered record_function for `pcompile::<kind>`, or None when none should be opened."""
    global _checks
    if "torch" not in sys.modules:
        return None
    if _checks is None:
        _checks = _probe() or False
    if _checks is False:
        return None
    enabled, mode = _checks  # type: ignore[misc]
    if not enabled() or mode() is not None:
        return None
    import torch

    rf = torch.profiler.record_function(f"pcompile::{kind}")
    rf.__enter__()
    return rf


def close_range(rf: Any) -> None:
    rf.__exit__(None, None, None)


def available() -> bool:
    """True when this torch exposes the checks (tests assert it, so a torch upgrade that moves them is noticed)."""
    import torch  # noqa: F401

    return _probe() is not None
