"""C++ kernels of CPU graphs in pcompile's store (layer kernel).

Inductor builds every C++ library through `_worker_compile_cpp(lock_path, builders)`; the last
builder's target (`<inductor cache>/<xx>/<key>.main.so` and the like) is named by Inductor's
content key, which already covers the source and the full compile command line. The wrapper:
an existing target is left to Inductor (its local cache); otherwise the store's copy is
written into place atomically, or, on a miss, Inductor builds it under this process's lease
and the library is published. A hit skips intermediate object files entirely. Only libraries are stored (not precompiled
headers or objects); a precompiled header is built when a compile needs it (lazy_pch.py).
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable, Sequence

from pcompile.inductor import lazy_pch, store_gateway
from pcompile.compat import cpp_compile as compat
from pcompile.inductor.layer_keys import store_key
from pcompile.settings import DISABLE

BLOB = "lib"
#: Only linked libraries go to the store. Precompiled headers (.h.gch, tens of MB, valid only for
#: the exact compiler and header path) and object files stay in Inductor's local directories.
LIBRARY_SUFFIXES = (".so", ".dylib", ".dll", ".pyd")


def _inductor_key(target: str) -> str:
    return f"cpp:{os.path.basename(target)}"


def materialise(target: str, data: bytes | None, mode: int = 0o755) -> bool:
    """Put `data` at `target` whole (a temp file renamed into place), or not at all."""
    if not data:
        return False
    directory = os.path.dirname(target) or "."
    tmp = os.path.join(directory, f".{os.path.basename(target)}.pcompile.{os.getpid()}.tmp")
    try:
        os.makedirs(directory, exist_ok=True)
        with open(tmp, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
        return True
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        return False


def _backfill(ikey: str, target: str) -> None:
    """Publish a library only Inductor's local cache holds, so other nodes can get it too."""
    if store_gateway.present("cpp", ikey):
        return
    try:
        with open(target, "rb") as handle:
            data = handle.read()
    except OSError:
        return
    if data:
        store_gateway.publish("cpp", ikey, {BLOB: data}, meta={"source": "inductor.cpp", "file": os.path.basename(target), "backfill": True},
                       compile_seconds=0.0, compiled=False)


def make_wrapper(original: Callable[[str, Sequence[Any]], None]) -> Callable[[str, Sequence[Any]], None]:
    def _worker_compile_cpp(lock_path: str, cpp_builders: Sequence[Any]) -> None:
        if not cpp_builders or DISABLE.get():
            return original(lock_path, cpp_builders)
        try:
            target = compat.target_path(cpp_builders[-1])
        except Exception:
            return original(lock_path, cpp_builders)
        if lazy_pch.hold(target, lock_path, cpp_builders):  # a precompiled header: built when a compile needs it
            return None
        ikey = _inductor_key(target)
        if not target.endswith(LIBRARY_SUFFIXES):
            return original(lock_path, cpp_builders)
        if os.path.exists(target):  # Inductor's local cache has it (made before pcompile, or by it)
            result = original(lock_path, cpp_builders)  # under Inductor's lock: waits out a build in progress
            _backfill(ikey, target)
            return result
        entry = store_gateway.lookup("cpp", ikey, single_flight=True)
        if entry is not None and materialise(target, entry.blobs.get(BLOB)):
            return None
        t0 = time.perf_counter()
        try:
            result = original(lock_path, cpp_builders)
            try:
                with open(target, "rb") as handle:
                    data = handle.read()
            except OSError:
                data = b""
            if data:
                store_gateway.publish("cpp", ikey, {BLOB: data}, meta={"source": "inductor.cpp", "file": os.path.basename(target)},
                               compile_seconds=time.perf_counter() - t0)
            return result
        finally:
            try:
                store_gateway.release(store_key("cpp", ikey)[0])
            except Exception:
                pass

    _worker_compile_cpp.__doc__ = "pcompile: C++ kernel builds through the store (see pcompile.inductor.cpp_cache)"
    return _worker_compile_cpp


def install() -> None:
    from pcompile import compat as checks

    compat.install(make_wrapper)
    if checks.check("cpp_pch") is None:  # else headers are built as Inductor asks, up front
        lazy_pch.install(compat.original())


def uninstall() -> None:
    lazy_pch.uninstall()
    compat.uninstall()
