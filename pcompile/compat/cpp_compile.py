"""C++ kernels of CPU graphs: `torch._inductor.codecache._worker_compile_cpp`.

Why this API: Inductor has no remote cache for C++ kernels, and an FX graph hit on a CPU graph
still rebuilds every kernel's .so from the source embedded in the graph. Every C++ build goes
through this one module-level function, `_worker_compile_cpp(lock_path, cpp_builders)`, looked
up by name when `CppCodeCache.load_async` builds its job, so replacing the module attribute
routes all of them (pybinding kernels, wrappers, thread-pool and synchronous builds) through
pcompile. The last builder's target is the linked library; its file name is Inductor's content
key (source + optimized source + compile command line, including the vector ISA flags).

Touched (torch 2.14.1; checked identical in 2.11.0: `codecache.py` 4020/3041 signature and
body, `functools.partial(_worker_compile_cpp, lock_path, builders)` 3975/3002,
`CppBuilder.get_target_file_path`, `cpp_builder.get_cpp_compiler`).
"""
from __future__ import annotations

import functools
import inspect
import subprocess
from typing import Any, Callable, Sequence

from pcompile.compat import CompatError, require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.14.1, 2.15.0'}

_ORIGINAL_ATTR = "_pcompile_original"


def _codecache() -> Any:
    import torch._inductor.codecache as codecache

    return codecache


def check() -> None:
    codecache = _codecache()
    fn = require_attr(codecache, "_worker_compile_cpp", "torch._inductor.codecache")
    fn = getattr(fn, _ORIGINAL_ATTR, fn)
    params = list(inspect.signature(fn).parameters)
    if params != ["lock_path", "cpp_builders"]:
        raise CompatError(f"_worker_compile_cpp takes {params}, expected (lock_path, cpp_builders)")
    import torch._inductor.cpp_builder as cpp_builder

    builder = require_attr(cpp_builder, "CppBuilder", "torch._inductor.cpp_builder")
    require_attr(builder, "get_target_file_path", "CppBuilder")
    require_attr(cpp_builder, "get_cpp_compiler", "torch._inductor.cpp_builder")


def original() -> Callable[[str, Sequence[Any]], None]:
    fn = _codecache()._worker_compile_cpp
    return getattr(fn, _ORIGINAL_ATTR, fn)


def install(wrapper_factory: Callable[[Callable[[str, Sequence[Any]], None]], Callable[[str, Sequence[Any]], None]]) -> None:
    """Replace `_worker_compile_cpp` with `wrapper_factory(original)`; idempotent."""
    codecache = _codecache()
    current = codecache._worker_compile_cpp
    if getattr(current, _ORIGINAL_ATTR, None) is not None:
        return
    wrapped = wrapper_factory(current)
    setattr(wrapped, _ORIGINAL_ATTR, current)
    codecache._worker_compile_cpp = wrapped


def uninstall() -> None:
    codecache = _codecache()
    current = codecache._worker_compile_cpp
    orig = getattr(current, _ORIGINAL_ATTR, None)
    if orig is not None:
        codecache._worker_compile_cpp = orig


def target_path(builder: Any) -> str:
    return str(builder.get_target_file_path())


@functools.cache
def compiler_id() -> str:
    """The C++ compiler's identity (first line of `--version`): not part of Inductor's key."""
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        cxx = get_cpp_compiler()
    except Exception as exc:
        return f"unknown:{type(exc).__name__}"
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=20).stdout
    except Exception as exc:
        return f"{cxx}:unknown:{type(exc).__name__}"
    first = (out.strip().splitlines() or ["?"])[0]
    return f"{first}"
