"""Inductor's own description of each FX graph and AOTAutograd key it computes, kept for
`pcompile explain` (which input shape, dtype or config value changed between two keys).

Touches (torch 2.11.0, 2.14.1, 2.15.0):
  torch._inductor.codecache.compiled_fx_graph_hash(gm, example_inputs, ...) -> (key, debug_lines)
  torch._functorch._aot_autograd.autograd_cache.autograd_cache_key(mod, example_inputs, ...) -> (key, debug_lines)
      both looked up by module global at their one call site; wrapped to hand (key, debug_lines)
      to a recorder. `debug_lines` are Inductor's "[hash] field: value" lines (the graph's code,
      each input's TensorMetadata, every config value the key covers).
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

from pcompile.compat import CompatError, require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {"torch": "2.11.0, 2.14.1, 2.15.0"}

PRIVATE = ["torch._inductor.codecache.compiled_fx_graph_hash",
           "torch._functorch._aot_autograd.autograd_cache.autograd_cache_key"]

_MARK = "_pcompile_key_details"
_installed: dict[str, tuple[Any, str, Any]] = {}


def _modules() -> tuple[Any, Any]:
    import torch._functorch._aot_autograd.autograd_cache as autograd_cache
    import torch._inductor.codecache as codecache

    return codecache, autograd_cache


def check() -> None:
    codecache, autograd_cache = _modules()
    for owner, name, where in ((codecache, "compiled_fx_graph_hash", "torch._inductor.codecache"),
                               (autograd_cache, "autograd_cache_key", "torch._functorch._aot_autograd.autograd_cache")):
        fn = inspect.unwrap(require_attr(owner, name, where))
        params = list(inspect.signature(fn).parameters)
        if len(params) < 2 or params[1] != "example_inputs":
            raise CompatError(f"{where}.{name} takes {params}, expected (gm, example_inputs, ...)")
        ret = str(inspect.signature(fn).return_annotation)
        if "list[str]" not in ret and "List[str]" not in ret:
            raise CompatError(f"{where}.{name} returns {ret}, expected (key, debug lines)")


def install(record: Callable[[str, list[str]], None]) -> None:
    """Hand every (key, debug lines) either function returns to `record` (idempotent; never raises into torch)."""
    codecache, autograd_cache = _modules()
    for owner, name in ((codecache, "compiled_fx_graph_hash"), (autograd_cache, "autograd_cache_key")):
        current = getattr(owner, name)
        if getattr(current, _MARK, False):
            continue

        def wrap(orig: Callable[..., Any]) -> Callable[..., Any]:
            @functools.wraps(orig)
            def wrapped(*args: Any, **kwargs: Any) -> Any:
                result = orig(*args, **kwargs)
                try:
                    key, lines = result
                    record(str(key), list(lines))
                except Exception:
                    pass
                return result
            setattr(wrapped, _MARK, True)
            return wrapped

        setattr(owner, name, wrap(current))
        _installed[name] = (owner, name, current)


def uninstall() -> None:
    for owner, name, original in _installed.values():
        setattr(owner, name, original)
    _installed.clear()
