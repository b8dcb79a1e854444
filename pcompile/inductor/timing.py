"""Timing spans for the compile timeline, if the events package is installed in this tree.

`pcompile.events.span` is built separately; until it exists (or if it ever raises) spans are
no-ops, so timing can never fail or slow a compile.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager

_span: Callable[..., ContextManager[Any]] | None = None
_resolved = False


def _resolve() -> Callable[..., ContextManager[Any]] | None:
    global _span, _resolved
    if not _resolved:
        _resolved = True
        try:
            from pcompile.events import span as found  # type: ignore[attr-defined]

            _span = found
        except Exception:
            _span = None
    return _span


def span(name: str, **fields: Any) -> ContextManager[Any]:
    """`with span("pcompile.graph.get", key=...):` records a timed event when events exist."""
    fn = _resolve()
    if fn is None:
        return contextlib.nullcontext()
    try:
        return fn(name, **fields)
    except Exception:
        return contextlib.nullcontext()
