"""Graphs Inductor will not cache, and why: the warm names them in its summary.

Why: Inductor bypasses its FX graph cache for a graph it cannot serialise (a higher-order op such
as `foreach_map`, a user-defined Triton kernel it cannot hash, ...). The warm compiles such a graph
like any other, but nothing is written for it: the GPU job compiles it again whatever the warm
did (only its Triton kernels come from the cache). Without this the summary only showed fewer
graph look-ups than graphs. Inductor decides in `FxGraphCache.prepare_key`, which returns
`(None, {"cache_state": "bypass", "cache_bypass_reason": ...})`; wrapping it reads the reason
without changing the decision.

AOTAutograd's cache has its own bypasses (a graph input whose key cannot be pickled, e.g. a
nested jagged tensor's symbolic ragged size; DDPOptimizer's split graphs); it only logs the reason
(`log.info("Bypassing autograd cache due to: %s", e)`), so a filter on that logger reads it, and
the summary names it instead of guessing.

Touched: `torch._inductor.codecache.FxGraphCache.prepare_key` (a staticmethod taking
(gm, example_inputs, fx_kwargs, inputs_to_check, remote) in 2.11.0, 2.14.1 and 2.15.0); the
logger `torch._functorch._aot_autograd.autograd_cache` and its bypass message (2.14.1).
"""
from __future__ import annotations

import functools
import inspect
import logging
from typing import Any, Callable

from pcompile.compat.warm_runtime import mark, marked, missing

CHECKED = {"torch": "2.11.0, 2.14.1, 2.15.0"}
PRIVATE_SYMBOLS: list[tuple[str, str]] = [("torch._inductor.codecache", "FxGraphCache"),
                                          ("torch._functorch._aot_autograd.autograd_cache", "log")]
_AOT_LOGGER = "torch._functorch._aot_autograd.autograd_cache"
_AOT_BYPASS = "Bypassing autograd cache due to: %s"
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


_aot_route: list[Callable[[str], None]] = []


class _AotBypassFilter(logging.Filter):
    """Reads AOTAutograd's bypass reason; passes on only what the logger's own level would."""

    def __init__(self, floor: int) -> None:
        super().__init__()
        self.floor = floor

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == _AOT_BYPASS and record.args and _aot_route:
            args = record.args if isinstance(record.args, tuple) else (record.args,)
            _aot_route[0](str(args[0]) or type(args[0]).__name__)
        return record.levelno >= self.floor


def on_aot_cache_bypass(report: Callable[[str], None]) -> None:
    """Call `report(reason)` for each graph AOTAutograd's cache bypasses (a later call replaces
    `report`). The logger is opened to INFO for the filter only: records below its former level
    are dropped by the filter, so nothing new is printed."""
    _aot_route[:] = [report]
    log = logging.getLogger(_AOT_LOGGER)
    if any(isinstance(f, _AotBypassFilter) for f in log.filters):
        return
    floor = log.getEffectiveLevel()
    log.addFilter(_AotBypassFilter(floor))
    if floor > logging.INFO:
        log.setLevel(logging.INFO)
