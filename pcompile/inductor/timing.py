"""Timing events for `pcompile report`, if the events package is present (guarded import).

Kinds used here (pcompile.events vocabulary): graph_compile (one backend call), cache_lookup
(layer, tier="store", outcome hit|miss, saved_s on hits), lease_wait (time spent waiting for
another process's compile), kernel_compile (a C++ or Triton build pcompile saw run). If the
events package is missing or misbehaves, everything here is a no-op: timing never fails a compile.
"""
from __future__ import annotations

import time
from typing import Any, Callable

_span: Callable[..., Any] | None = None
_emit: Callable[..., None] | None = None
_resolved = False


class _Null:
    """Accepts what a real span accepts (`with`, attribute sets) and records nothing."""

    def __enter__(self) -> "_Null":
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False

    def __setattr__(self, name: str, value: Any) -> None:
        pass


_NULL = _Null()


def _resolve() -> None:
    global _span, _emit, _resolved
    if _resolved:
        return
    _resolved = True
    try:
        from pcompile import events

        _span = getattr(events, "span", None)
        _emit = getattr(events, "emit", None)
    except Exception:
        _span = _emit = None


def span(kind: str, **fields: Any) -> Any:
    """`with span("cache_lookup", layer=...) as ev: ...; ev.outcome = "hit"`."""
    _resolve()
    if _span is None:
        return _NULL
    try:
        return _span(kind, **fields)
    except Exception:
        return _NULL


def emit(kind: str, start: float, dur: float, **fields: Any) -> None:
    """An event timed elsewhere; `start` is a time.perf_counter() or time.time() reading."""
    _resolve()
    if _emit is None:
        return
    try:
        _emit(kind, start, dur, **fields)
    except Exception:
        pass


def now() -> float:
    return time.perf_counter()
