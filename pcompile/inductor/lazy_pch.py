"""Precompiled C++ headers built when a compile needs them, not when a kernel is loaded.

Why: Inductor builds its precompiled header (~150 MB, ~4 s of g++ on a 2-core host) before it
loads any C++ kernel, even one whose library is already in place. A fresh node of a shared cache
(empty temp dir) whose every kernel comes from the store compiles nothing else, so that build was
the whole gap to a warm node. Here the header's build is held back and run, under Inductor's own
lock, just before the first real build of this process (any `CppBuilder.build` other than the
header's preprocessing), so every compile that could use the header still finds it; a process
that compiles nothing never builds it. Builds wait while the held-back headers are being built,
so none reads a half-written one (compat/cpp_pch.py names the torch functions).
"""
from __future__ import annotations

import os
import threading
from typing import Any, Callable, Sequence

from pcompile.compat import cpp_pch as compat

_lock = threading.Lock()
_held: dict[str, tuple[str, Sequence[Any]]] = {}  # header target -> (lock path, builders)
_build_headers: Callable[[str, Sequence[Any]], None] | None = None
_state = threading.local()


def installed() -> bool:
    return _build_headers is not None


def hold(target: str, lock_path: str, builders: Sequence[Any]) -> bool:
    """Hold back the build of precompiled header `target`; False if it is not one, or is built."""
    if _build_headers is None or not target.endswith(compat.PCH_SUFFIX) or os.path.exists(target):
        return False
    with _lock:
        _held.setdefault(target, (lock_path, builders))
    return True


def held() -> list[str]:
    with _lock:
        return sorted(_held)


def _before_build(builder: Any) -> None:
    if not _held or getattr(_state, "building", False):
        return
    try:
        target = str(builder.get_target_file_path())
    except Exception:
        target = ""
    if target.endswith((compat.PREPROCESSED_SUFFIX, compat.PCH_SUFFIX)):
        return  # the header's own steps
    build_held()


def build_held() -> None:
    """Build every held-back header now (each under Inductor's header lock)."""
    build = _build_headers
    if build is None:
        return
    with _lock:  # held throughout: a concurrent build waits until the headers are whole
        _state.building = True
        try:
            for target, (lock_path, builders) in list(_held.items()):
                try:
                    build(lock_path, builders)
                except Exception:
                    pass  # a header that fails to build: the compile reads the plain header, as without one
                del _held[target]  # only now: a build that finds nothing held never races a header's
        finally:
            _state.building = False


def install(build_headers: Callable[[str, Sequence[Any]], None]) -> None:
    """`build_headers`: Inductor's own `_worker_compile_cpp` (unwrapped)."""
    global _build_headers
    compat.install_build_hook(_before_build)
    _build_headers = build_headers


def uninstall() -> None:
    global _build_headers
    build_held()
    _build_headers = None
    compat.uninstall_build_hook()
