"""Inductor's precompiled C++ headers: `codecache._precompile_header` and `CppBuilder.build`.

Why: before it loads any C++ kernel, Inductor makes sure a precompiled header exists
(`<tempdir>/torchinductor_<user>/precompiled_headers/<hash>.h.gch`, ~150 MB, ~4 s of g++ on a
2-core host), whether or not a kernel will be compiled. On a node whose kernels all come from the
store that build is the whole gap to a warm node. pcompile postpones it to the first real build
(pcompile/inductor/lazy_pch.py); this module says which builds are the header's and hooks
every build.

Touched (torch 2.11.0, 2.14.1, 2.15.0): `_precompile_header` preprocesses the header (a `CppBuilder` whose target
ends in ".i") and builds the `.gch` through the module's `_worker_compile_cpp(lock_path,
(builder,))`; every compile and link runs `CppBuilder.build(self)`; a build given the header
(`-include <hash>.h`) reads the plain header when the `.gch` is absent.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable

from pcompile.compat import CompatError, require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.14.1, 2.15.0'}

#: A precompiled header's target, and the preprocessed copy Inductor hashes first.
PCH_SUFFIX = ".gch"
PREPROCESSED_SUFFIX = ".i"
_ORIGINAL_ATTR = "_pcompile_original"


def check() -> None:
    import torch._inductor.codecache as codecache
    import torch._inductor.cpp_builder as cpp_builder

    precompile = require_attr(codecache, "_precompile_header", "torch._inductor.codecache")
    try:
        body = inspect.getsource(inspect.unwrap(precompile))
    except (OSError, TypeError) as exc:
        raise CompatError(f"cannot read codecache._precompile_header's source ({exc})") from exc
    if "_worker_compile_cpp(" not in body or "preprocessing=True" not in body:
        raise CompatError("codecache._precompile_header no longer builds through _worker_compile_cpp")
    builder = require_attr(cpp_builder, "CppBuilder", "torch._inductor.cpp_builder")
    build = require_attr(builder, "build", "CppBuilder")
    if list(inspect.signature(getattr(build, _ORIGINAL_ATTR, build)).parameters) != ["self"]:
        raise CompatError("CppBuilder.build takes arguments besides self")
    require_attr(builder, "get_target_file_path", "CppBuilder")


def install_build_hook(before: Callable[[Any], None]) -> None:
    """Call `before(builder)` ahead of every `CppBuilder.build`; idempotent."""
    from torch._inductor.cpp_builder import CppBuilder

    current = CppBuilder.build
    if getattr(current, _ORIGINAL_ATTR, None) is not None:
        return

    def build(self: Any) -> None:
        before(self)
        return current(self)

    build.__doc__ = "pcompile: a postponed precompiled header is built first (pcompile.inductor.lazy_pch)"
    setattr(build, _ORIGINAL_ATTR, current)
    CppBuilder.build = build


def uninstall_build_hook() -> None:
    from torch._inductor.cpp_builder import CppBuilder

    orig = getattr(CppBuilder.build, _ORIGINAL_ATTR, None)
    if orig is not None:
        CppBuilder.build = orig
