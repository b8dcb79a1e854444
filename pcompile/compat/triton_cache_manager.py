"""Triton's cache-manager knob: `TRITON_CACHE_MANAGER="module:Class"` and `FileCacheManager`.

Why this API: `triton.compile` asks the manager named by the knob for a kernel's file group
(`get_group`) before compiling and hands it the finished group (`put_group`) after, in every
process that compiles, including Inductor's compile workers, which inherit the environment
variable. pcompile subclasses `FileCacheManager` so files are always materialised in Triton's
local directory (Inductor's static launcher needs the .cubin on disk).

Touched (triton 3.8.0; checked identical in triton 3.6.0, the wheel torch 2.11.0 pins:
`triton/runtime/cache.py` CacheManager/FileCacheManager with `__init__(key, override, dump)`,
`get_group`, `put_group`, `put(data, filename, binary)`, `cache_dir`; `triton/knobs.py`
`cache.manager_class = env_class("TRITON_CACHE_MANAGER", ...)`; `triton/compiler/compiler.py`
calling get_group(f"{name}.json") then put_group(f"{name}.json", group) with group mapping file
names to absolute paths).
"""
from __future__ import annotations

import inspect
from typing import Any

from pcompile.compat import CompatError, require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'triton': '3.6.0, 3.8.0, 3.9.0'}

ENV_MANAGER = "TRITON_CACHE_MANAGER"


def check() -> None:
    try:
        import triton.runtime.cache as tcache
        from triton import knobs
    except ImportError as exc:
        raise CompatError(f"triton's cache manager API is not importable ({exc})") from None
    file_manager = require_attr(tcache, "FileCacheManager", "triton.runtime.cache")
    for method in ("get_group", "put_group", "put", "get_file"):
        require_attr(file_manager, method, "triton.runtime.cache.FileCacheManager")
    params = list(inspect.signature(file_manager.__init__).parameters)
    if params[:4] != ["self", "key", "override", "dump"]:
        raise CompatError(f"FileCacheManager.__init__ takes {params}, expected (self, key, override, dump)")
    cache = require_attr(knobs, "cache", "triton.knobs")
    require_attr(cache, "manager_class", "triton.knobs.cache")
    require_attr(tcache, "get_cache_manager", "triton.runtime.cache")
    require_attr(tcache, "_base32", "triton.runtime.cache")


def file_cache_manager() -> type:
    """The base class pcompile's manager extends."""
    import triton.runtime.cache as tcache

    return tcache.FileCacheManager


def configured_manager() -> Any:
    """What triton will instantiate right now (None: its default FileCacheManager)."""
    from triton import knobs

    return knobs.cache.manager_class


def manager_key(kernel_hash: str) -> str:
    """The key Triton builds a manager with for a compiled kernel's `hash` (`get_cache_manager`
    names the directory by the hash in base32)."""
    import triton.runtime.cache as tcache

    return tcache._base32(kernel_hash)


def local_dir() -> str | None:
    """Triton's cache dir in this process (TRITON_CACHE_DIR or its default)."""
    from triton import knobs

    return knobs.cache.dir or None
