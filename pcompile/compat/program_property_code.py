"""A frame whose code is a property's getter is named through the property: it stays in the program.

Why: a program names each frame's code by its module and qualified name (torch's
`package._get_code_source`), looked up again on install by `getattr` step by step. A property's
getter has the qualified name of the property (`PreTrainedModel.loss_function`), and `getattr` on
the class hands back the `property` object, not a function: torch raised "Cannot resolve a fully
qualified name ... Lookup scope: <property object>" and left the frame out. Every Hugging Face
causal LM calls `self.loss_function(...)`, whose getter Dynamo compiles as a frame of its own
(measured on the H200: GPT-2's job after a warm traced that frame, the program covered the rest).
Such a code is named `<property qualname>.fget` (or `.fset`/`.fdel`, `functools.cached_property`'s
`.func`) with the code source `__code__`, which torch's own `getattr` walk resolves unchanged.

Touched (torch 2.11.0, 2.14.1 and 2.15.0 read: the same in all three): the module function
`torch._dynamo.package._get_code_source(code) -> (function name, code source)`, called by
`CompilePackage._add_user_function`, and `PackageError`; `_lookup_code` walks the name with
`getattr` and the code source's `__code__` step.
"""
from __future__ import annotations

import functools
import inspect
import types
from typing import Any, Callable

from pcompile.compat import require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.14.1, 2.15.0'}

_ACCESSORS = ("fget", "fset", "fdel", "func")  # property's three, functools.cached_property's one
_saved: dict[str, Any] = {}


def check() -> None:
    from torch._dynamo import package

    require_attr(package, "_get_code_source", "torch._dynamo.package")
    require_attr(package, "PackageError", "torch._dynamo.package")
    require_attr(package, "_lookup_code", "torch._dynamo.package")
    params = list(inspect.signature(package._get_code_source).parameters)
    if params != ["code"]:
        raise AttributeError(f"torch._dynamo.package._get_code_source takes ({', '.join(params)}), not (code)")


def accessor_name(code: types.CodeType) -> tuple[str, str] | None:
    """(function name, code source) naming `code` through the property it is an accessor of, or None."""
    module = inspect.getmodule(code)
    qualname = getattr(code, "co_qualname", None)
    if module is None or not qualname or "<locals>" in qualname:
        return None
    holder: Any = module
    for part in qualname.split("."):
        holder = inspect.getattr_static(holder, part, None)
        if holder is None:
            return None
    if not isinstance(holder, (property, functools.cached_property)):
        return None
    for accessor in _ACCESSORS:
        fn = getattr(holder, accessor, None)
        if isinstance(fn, types.FunctionType) and fn.__code__ is code:
            return f"{qualname}.{accessor}", "__code__"
    return None


def install(on_error: Callable[[str], None] = lambda why: None) -> None:
    """Patch torch's naming function (idempotent); `on_error` is unused (nothing here can fail a frame
    that torch's own naming did not already fail)."""
    if _saved:
        return
    from torch._dynamo import package

    original = package._get_code_source

    def _get_code_source(code: types.CodeType) -> tuple[str, str]:
        try:
            return original(code)
        except package.PackageError:
            found = accessor_name(code)
            if found is None:
                raise
            return found

    _saved["get"] = original
    package._get_code_source = _get_code_source


def uninstall() -> None:
    if "get" in _saved:
        from torch._dynamo import package

        package._get_code_source = _saved.pop("get")
