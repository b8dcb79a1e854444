"""Triton's build identity: its own content key and the ptxas it runs.

Why: a kernel entry is only valid for the Triton build and ptxas that compiled it. Triton already
hashes its sources and libtriton into `triton_key()` (its own cache key); pcompile puts that in
every kernel fingerprint instead of hashing Triton itself, and asks the CUDA backend which ptxas
it will run for an arch (it honours TRITON_PTXAS_PATH, which torch may set).

Touched (triton 3.6.0: `triton.compiler.compiler.triton_key`; 3.7-3.9: `triton.runtime.cache.
triton_key`; `triton.backends.nvidia.compiler.get_ptxas(arch)` returning an object with `.path`,
3.6-3.9).
"""
from __future__ import annotations

from typing import Callable

from pcompile.compat import CompatError

CHECKED = {"triton": "3.6.0, 3.8.0, 3.9.0"}


def _key_fn() -> Callable[[], str]:
    try:
        from triton.runtime.cache import triton_key  # triton >= 3.7
    except ImportError:
        from triton.compiler.compiler import triton_key  # triton 3.6
    return triton_key


def check() -> None:
    try:
        key = _key_fn()()
    except ImportError as exc:
        raise CompatError(f"triton_key is in neither triton.runtime.cache nor triton.compiler.compiler ({exc})") from None
    if not isinstance(key, str) or not key:
        raise CompatError(f"triton_key() returned {type(key).__name__}, expected a non-empty str")
    from triton.backends.nvidia import compiler as nvc

    if not callable(getattr(nvc, "get_ptxas", None)):
        raise CompatError("triton.backends.nvidia.compiler.get_ptxas is missing")


def triton_key() -> str:
    """Triton's hash of its own sources and libtriton (what its cache keys start from)."""
    return _key_fn()()


def ptxas_path(arch: int = 90) -> str:
    """The ptxas Triton runs for sm_`arch`."""
    import inspect

    from triton.backends.nvidia import compiler as nvc

    takes_arch = bool(inspect.signature(nvc.get_ptxas).parameters)  # triton <= 3.6: get_ptxas(), one ptxas for every arch
    tool = nvc.get_ptxas(arch) if takes_arch else nvc.get_ptxas()
    return str(tool.path)
