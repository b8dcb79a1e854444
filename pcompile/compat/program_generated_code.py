"""A frame whose code was generated with `exec` is named through the function that holds it: it
stays in the program.

Why: torch names a frame's code by the module its file belongs to (`inspect.getmodule(code)` in
`CompilePackage._add_user_function`). Code made by `exec` has the file "<string>" and no module:
torch raised "Cannot find module for code <code object __init__ ..., file "<string>">" and the frame
was left out of the program. A dataclass's `__init__` is such code, and every Hugging Face model
returns a `ModelOutput` dataclass: GPT-2's job after a warm (H200, session 8) traced that frame while
the program covered the rest.
Such a code is named by a function that holds it (found among the code's referrers): its
`__module__`, and its `__qualname__` walked with `getattr` from that module (as torch's own
`_lookup_code` walks it on install) must lead back to the same code. The code source is `__code__`.
A code no such function holds (a lambda, a function reached only through a dict) stays unnamed.

Touched (torch 2.11.0, 2.14.1 and 2.15.0 read: the same in all three):
`CompilePackage._add_user_function(self, code)`, which calls `_get_code_source` and then
`inspect.getmodule`; `CompilePackage._add_function(code, python_module, function_name=,
code_source=)`; `_FunctionId`; `PackageError`.
"""
from __future__ import annotations

import gc
import inspect
import sys
import types
from typing import Any, Callable

from pcompile.compat import require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.14.1, 2.15.0'}

_saved: dict[str, Any] = {}


def check() -> None:
    from torch._dynamo import package

    klass = require_attr(package, "CompilePackage", "torch._dynamo.package")
    require_attr(package, "PackageError", "torch._dynamo.package")
    require_attr(package, "_FunctionId", "torch._dynamo.package")
    for name, params in (("_add_user_function", ["self", "code"]),
                         ("_add_function", ["self", "python_code", "python_module", "function_name", "code_source",
                                            "install_to_global"])):
        got = list(inspect.signature(require_attr(klass, name, "torch._dynamo.package.CompilePackage")).parameters)
        if got != params:
            raise AttributeError(f"CompilePackage.{name} takes ({', '.join(got)}), not ({', '.join(params)})")


def holder_name(code: types.CodeType) -> tuple[str, str] | None:
    """(module name, qualified name) of a function holding `code` that `getattr` finds again from
    its module, or None. Only asked for codes torch could not name (a referrer scan per code)."""
    for holder in gc.get_referrers(code):
        if not isinstance(holder, types.FunctionType) or holder.__code__ is not code:
            continue
        module = sys.modules.get(getattr(holder, "__module__", None) or "")
        qualname = getattr(holder, "__qualname__", "") or ""
        if module is None or not qualname or "<" in qualname:  # <locals>, <lambda>: not reachable by name
            continue
        found: Any = module
        for part in qualname.split("."):
            found = getattr(found, part, None)
            if found is None:
                break
        if found is not None and getattr(found, "__code__", None) is code:
            return module.__name__, qualname
    return None


def install(on_error: Callable[[str], None] = lambda why: None) -> None:
    """Patch CompilePackage._add_user_function (idempotent); `on_error` is unused (a code this
    cannot name fails as torch failed it)."""
    if _saved:
        return
    from torch._dynamo import package

    klass = package.CompilePackage
    original = klass._add_user_function

    def _add_user_function(self: Any, code: types.CodeType) -> None:
        try:
            return original(self, code)
        except package.PackageError:
            found = holder_name(code)
            if found is None:
                raise
            self._add_function(code, found[0], function_name=package._FunctionId(found[1]), code_source="__code__")

    _saved["add"] = original
    klass._add_user_function = _add_user_function  # type: ignore[method-assign]


def uninstall() -> None:
    if "add" in _saved:
        from torch._dynamo import package

        package.CompilePackage._add_user_function = _saved.pop("add")  # type: ignore[method-assign]
