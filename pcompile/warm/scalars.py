"""What a script gets when it reads a value from a fake tensor during warm.

Logging (`print(loss.item())`, f-strings, running sums) must keep working, so `.item()` and
`float()` return a `WarmScalar`: a NaN that formats and adds like a float. Deciding control flow
on it (`if loss.item() > x`, `bool(t)`, `int(t)`) cannot be right during warm, so those raise
`WarmValueError` naming the script line and the `pcompile.warming()` way around it.
"""
from __future__ import annotations

import linecache
import os
import sys
from typing import Any

_LIB_MARKERS = (os.sep + "torch" + os.sep, os.sep + "pcompile" + os.sep, os.sep + "triton" + os.sep,
                os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)
_SCRIPT: str | None = None


class WarmValueError(RuntimeError):
    """A script decided control flow on a GPU value, which does not exist during warm."""


def set_script(path: str) -> None:
    global _SCRIPT
    _SCRIPT = os.path.realpath(path)


def user_site() -> tuple[str, int, str]:
    """(file, line, source) of the innermost frame in the user's script (else in user code)."""
    frame = sys._getframe(1)
    fallback = None
    while frame is not None:
        fname = frame.f_code.co_filename
        real = os.path.realpath(fname) if not fname.startswith("<") else fname
        if _SCRIPT and real == _SCRIPT:
            return fname, frame.f_lineno, linecache.getline(fname, frame.f_lineno).strip()
        if fallback is None and not fname.startswith("<") and not any(m in real for m in _LIB_MARKERS):
            fallback = (fname, frame.f_lineno, linecache.getline(fname, frame.f_lineno).strip())
        frame = frame.f_back
    return fallback or ("<unknown>", 0, "")


def decision_error(what: str) -> WarmValueError:
    fname, line, src = user_site()
    shown = f" `{src}`" if src else ""
    return WarmValueError(
        f"{fname}:{line}:{shown} uses a GPU value to decide what to do ({what}); during `pcompile warm` tensors are "
        f"fake and have no values. Skip it while warming: `if not pcompile.warming(): ...` (pcompile.warming() is True only under `pcompile warm`)"
    )


def _refuse(what: str):
    def method(self: "WarmScalar", *args: Any) -> Any:
        raise decision_error(what)

    return method


def _keep(name: str):
    op = getattr(float, name)

    def method(self: "WarmScalar", *args: Any) -> Any:
        op(self, *[float(a) if isinstance(a, WarmScalar) else a for a in args])
        return WarmScalar()

    return method


class WarmScalar(float):
    """NaN that logs like a float and refuses to be compared or branched on."""

    def __new__(cls) -> "WarmScalar":
        return float.__new__(cls, "nan")

    __hash__ = float.__hash__
    __bool__ = _refuse("truth value of a tensor value")
    __lt__ = _refuse("comparison of a tensor value")
    __le__ = _refuse("comparison of a tensor value")
    __gt__ = _refuse("comparison of a tensor value")
    __ge__ = _refuse("comparison of a tensor value")
    __eq__ = _refuse("comparison of a tensor value")
    __ne__ = _refuse("comparison of a tensor value")
    __int__ = _refuse("int() of a tensor value")
    __index__ = _refuse("a tensor value used as an index or size")
    __float__ = float.__float__
    __repr__ = float.__repr__


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
              "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__", "__rpow__", "__neg__", "__pos__", "__abs__"):
    setattr(WarmScalar, _name, _keep(_name))


def read_fake(tensor: Any, how: str) -> Any:
    """Stand-in for a value read of a fake tensor (see module docstring)."""
    if how in ("item", "__float__"):
        return WarmScalar()
    if how == "tolist":
        if tensor.numel() > 1_000_000:
            raise decision_error(".tolist() of a large tensor")

        def build(shape: tuple[int, ...]) -> Any:
            return WarmScalar() if not shape else [build(shape[1:]) for _ in range(shape[0])]

        return build(tuple(tensor.shape))
    if how == "__bool__":
        return _raise(decision_error("truth value of a tensor"))
    if how in ("__int__", "__index__"):
        return _raise(decision_error("int() of a tensor, e.g. as a size or index"))
    return _raise(decision_error(f"{how}() of a tensor"))


def _raise(exc: BaseException) -> Any:
    raise exc
