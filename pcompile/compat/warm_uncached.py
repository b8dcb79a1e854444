"""Graphs Inductor will not cache, and why: the warm names them in its summary.

Why: Inductor bypasses its FX graph cache for a graph it cannot serialise (a higher-order op such
as `foreach_map`, a user-defined Triton kernel it cannot hash, ...). The warm compiles such a graph
like any other, but nothing is written for it: the GPU job compiles it again whatever the warm
did (only its Triton kernels come from the cache). Without this the summary only showed fewer
graph look-ups than graphs. Inductor decides in `FxGraphCache.prepare_key`, which returns
`(None, {"cache_state": "bypass", "cache_bypass_reason": ...})`; wrapping it reads the reason
without changing the decision.

Touched: `torch._inductor.codecache.FxGraphCache.prepare_key` (a staticmethod taking
(gm, example_inputs, fx_kwargs, inputs_to_check, remote) in 2.11.0, 2.14.1 and 2.15.0).
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

from pcompile.compat.warm_runtime import mark, marked, missing

CHECKED = {"torch": "2.11.0, 2.14.1, 2.15.0"}
PRIVATE_SYMBOLS: list[tuple[str, str]] = [("torch._inductor.codecache", "FxGraphCache")]
_PARAMS = ["gm", "example_inputs", "fx_kwargs", "inputs_to_check", "remote"]


def check() -> list[str]:
    """Names of the private symbols this module needs that this torch lacks (empty when all is well)."""
    gone = missing(PRIVATE_SYMBOLS)
    if gone:
        return gone
    from torch._inductor.codecache import FxGraphCache

    fn = inspect.getattr_static(FxGraphCache, "prepare_key", None)
    if not isinstance(fn, staticmethod) or list(inspect.signature(fn.__func__).parameters) != _PARAMS:
        return [f"torch._inductor.codecache.FxGraphCache.prepare_key({', '.join(_PARAMS)}) (staticmethod)"]
    return []


_route: list[Callable[[str], None]] = []


def on_fx_cache_bypass(report: Callable[[str], None]) -> None:
    """Call `report(reason)` for each graph Inductor's FX graph cache bypasses (a later call
    replaces `report`)."""
    from torch._inductor.codecache import FxGraphCache

    _route[:] = [report]
    original = FxGraphCache.prepare_key
    if marked(original, "on_fx_cache_bypass"):
        return

    @functools.wraps(original)
    def prepare_key(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        info = out[1] if isinstance(out, tuple) and len(out) == 2 else None
        if isinstance(info, dict) and info.get("cache_state") == "bypass":
            _route[0](str(info.get("cache_bypass_reason") or "no reason given"))
        return out

    mark(prepare_key, "on_fx_cache_bypass")
    FxGraphCache.prepare_key = staticmethod(prepare_key)
