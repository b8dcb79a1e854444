"""A frame installed from a program whose guards fail on a call is named, with the failing guard.

Why: a program's frames run without Dynamo while their guards pass. When a call fails them,
Dynamo traces the frame as if there were no program: right, but silent. A job after a warm whose
programs every call failed (the warm host's CPU thread count, warm/host_threads.py) looked like a
job without programs, and the GPU tier's job after a warm counted a converted frame nobody could
name (session 8). When Dynamo compiles a frame whose code holds precompiled entries (a program's),
each entry's guards are asked which part failed (`check_verbose`, as torch's own
`fail_on_recompile` stance asks them) and the caller is told once per code.

The hook is `_compile`, below the frame walk in `ConvertFrameAssert.__call__` that looks for a
non-recursive `torch._dynamo.disable` wrapper behind the convert_frame.py frames: a wrapper of
`ConvertFrame.__call__` would sit in that walk and hide the disable wrapper from it.

Touched (torch 2.11.0, 2.14.1 and 2.15.0 read: the same in all three):
`torch._dynamo.convert_frame._compile(code, globals, locals, ...)`, called by name from
`ConvertFrameAssert.__call__` with the frame's code and `f_locals` first;
`torch._C._dynamo.eval_frame._debug_get_precompile_entries(code)`, whose entries have a
`guard_manager` with `check_verbose(f_locals)` (`.result`, `.verbose_code_parts`).
"""
from __future__ import annotations

import inspect
import types
from typing import Any, Callable

from pcompile.compat import require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.14.1, 2.15.0'}
#: Attributes of objects torch hands over, which tools/private_surface.py cannot follow statically.
PRIVATE = ("torch._C._dynamo.eval_frame._PrecompileEntry.guard_manager",)

_PARAMS = ["code", "globals", "locals"]
_saved: dict[str, Any] = {}
_told: set[int] = set()  # codes already reported (by id: a code lives as long as its function)


def check() -> None:
    from torch._C._dynamo import eval_frame
    from torch._dynamo import convert_frame

    require_attr(eval_frame, "_debug_get_precompile_entries", "torch._C._dynamo.eval_frame")
    params = list(inspect.signature(require_attr(convert_frame, "_compile", "torch._dynamo.convert_frame")).parameters)
    if params[:3] != _PARAMS:
        raise AttributeError(f"torch._dynamo.convert_frame._compile takes ({', '.join(params[:3])}, ...), "
                             f"not ({', '.join(_PARAMS)}, ...)")


def failing_guard(code: types.CodeType, f_locals: dict[str, Any]) -> str | None:
    """Why the code's precompiled entries do not take this call (the first failing guard of each),
    or None: the code has no such entry, or one of them passes."""
    from torch._C._dynamo.eval_frame import _debug_get_precompile_entries

    entries = _debug_get_precompile_entries(code)
    if not entries:
        return None
    reasons: list[str] = []
    for entry in entries:
        info = entry.guard_manager.check_verbose(f_locals)
        if getattr(info, "result", False):
            return None
        parts = [str(p) for p in (getattr(info, "verbose_code_parts", None) or ())]
        reasons.append(parts[0] if parts else "a guard failed")
    return "; ".join(dict.fromkeys(" ".join(r.split()) for r in reasons))


def install(on_failure: Callable[[types.CodeType, str], None]) -> None:
    """Patch convert_frame._compile (idempotent): `on_failure(code, reason)` once per code. Never
    changes a compile: the diagnosis's own errors are dropped."""
    if _saved:
        return
    from torch._dynamo import convert_frame

    original = convert_frame._compile

    def _compile(code: types.CodeType, globals: Any, locals: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            if id(code) not in _told:
                reason = failing_guard(code, locals)
                if reason is not None:
                    _told.add(id(code))
                    on_failure(code, reason)
        except Exception:
            pass
        return original(code, globals, locals, *args, **kwargs)

    _saved["compile"] = original
    convert_frame._compile = _compile  # type: ignore[assignment]


def uninstall() -> None:
    if "compile" in _saved:
        from torch._dynamo import convert_frame

        convert_frame._compile = _saved.pop("compile")  # type: ignore[assignment]
    _told.clear()
