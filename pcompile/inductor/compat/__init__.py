"""Every touch of a private torch/triton API, one small module per concern.

Each module exposes `check() -> None`, which raises `CompatError` naming what moved, and the
few functions pcompile needs. Nothing outside this package imports a private torch/triton
name, so when a version breaks one, exactly one module and its test (tests/test_compat_*.py)
change. `problems()` runs every check; pcompile.inductor.hooks turns each failure into "that
layer stays stock" plus one warning.
"""
from __future__ import annotations

import importlib

#: The modules whose checks gate the hooks, in the order hooks.py installs them.
MODULES: tuple[str, ...] = (
    "remote_cache",
    "triton_cache_manager",
    "cpp_compile",
    "compile_wrapper",
    "lazy_backward",
    "cpu_isa",
    "cache_dir",
    "autotune_choice",
    "backward_graph",
    "cudnn_version",
    "device_index",
)


class CompatError(RuntimeError):
    """A private API pcompile relies on is missing or changed shape in this torch/triton."""


_results: dict[str, str | None] = {}


def check(name: str) -> str | None:
    """None if compat module `name` works with the installed torch/triton, else the reason.

    Memoised per process: the installed torch does not change under a running job.
    """
    if name not in _results:
        _results[name] = _run_check(name)
    return _results[name]


def _run_check(name: str) -> str | None:
    try:
        module = importlib.import_module(f"pcompile.inductor.compat.{name}")
        module.check()
    except CompatError as exc:
        return str(exc)
    except Exception as exc:  # an import that blew up is a moved API too
        return f"{type(exc).__name__}: {exc}"
    return None


def problems() -> dict[str, str]:
    """{module: reason} for every compat module that does not work here."""
    out: dict[str, str] = {}
    for name in MODULES:
        reason = check(name)
        if reason is not None:
            out[name] = reason
    return out


def require_attr(obj: object, name: str, where: str) -> object:
    """getattr that fails as a CompatError naming the missing attribute."""
    try:
        return getattr(obj, name)
    except AttributeError:
        raise CompatError(f"{where}.{name} is missing") from None
