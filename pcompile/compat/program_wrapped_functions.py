"""A program whose guards read a function some decorator wrapped: pickled by name and unwrapping.

Why: transformers' model forwards are decorated (`check_model_inputs`, `can_return_tuple`), and the
decorator's wrapper keeps the original as a closure variable (`func`) that Dynamo guards on
(`L['func'].__name__`). Saving a program, torch (2.11-2.14) pickles a function by its module and
qualname only when that name finds the very object; the module's `LlamaForCausalLM.forward` is the
wrapper, so the original became `_Missing` and every restart's install failed to rebuild the guard
("'_Missing' object has no attribute '__name__'"): no HF model ever ran from a program on torch
2.14.1 (measured on this host, transformers 5.24). Torch 2.15 rebuilds such functions itself. Here a
function whose name finds a wrapper that unwraps (`__wrapped__`, at most 8 steps) to it is pickled
as that name plus the number of steps; loading follows the same steps, and anything that no longer
leads to a function leaves torch's own outcome (a missing value: the guard fails to build, the
frame is traced).

Touched (torch 2.11.0 and 2.14.1 read; 2.15.0 has `GuardsStatePickler._fqn_resolves` and its own
rebuild, so nothing is patched there): `torch._dynamo.guards.GuardsStatePickler.reducer_override`
and `_Missing`.
"""
from __future__ import annotations

import importlib
import inspect
import sys
from typing import Any

from pcompile.compat import require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.14.1, 2.15.0'}

_MAX_STEPS = 8
_saved: dict[str, Any] = {}


def check() -> None:
    from torch._dynamo import guards

    require_attr(guards, "GuardsStatePickler", "torch._dynamo.guards")
    require_attr(guards.GuardsStatePickler, "reducer_override", "torch._dynamo.guards.GuardsStatePickler")
    require_attr(guards, "_Missing", "torch._dynamo.guards")


def needed() -> bool:
    """Torch before 2.15 drops such functions (2.15 rebuilds them: `_fqn_resolves`)."""
    from torch._dynamo import guards

    return not hasattr(guards.GuardsStatePickler, "_fqn_resolves")


def steps_to(obj: Any) -> tuple[str, str, int] | None:
    """(module, qualname, unwrap steps) when the function's name finds a wrapper of it, else None."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    if not isinstance(module, str) or "<locals>" in qualname or module not in sys.modules:
        return None
    found: Any = sys.modules[module]
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if found is None or found is obj:
        return None
    for steps in range(1, _MAX_STEPS + 1):
        found = getattr(found, "__wrapped__", None)
        if found is None:
            return None
        if found is obj:
            return module, qualname, steps
    return None


def unwrapped(module: str, qualname: str, steps: int) -> Any:
    """Load side of `steps_to` (named in pickles: keep its name and signature)."""
    from torch._dynamo.guards import _Missing

    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    for _ in range(steps):
        found = getattr(found, "__wrapped__", None)
    return found if inspect.isfunction(found) else _Missing("unwrapped function moved")


def install(on_error: Any = None) -> None:
    """Patch the guard pickler (idempotent; nothing on a torch that rebuilds these itself)."""
    if _saved or not needed():
        return
    from torch._dynamo import guards

    original = guards.GuardsStatePickler.reducer_override

    def reducer_override(self: Any, obj: Any) -> Any:
        if inspect.isfunction(obj):
            named = steps_to(obj)
            if named is not None:
                return unwrapped, named
        return original(self, obj)

    _saved["reducer"] = original
    guards.GuardsStatePickler.reducer_override = reducer_override  # type: ignore[method-assign]


def uninstall() -> None:
    if "reducer" in _saved:
        from torch._dynamo import guards

        guards.GuardsStatePickler.reducer_override = _saved.pop("reducer")  # type: ignore[method-assign]
