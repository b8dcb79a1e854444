"""Turn pcompile's cache hooks on, once per process, layer by layer.

Order of decisions:
1. PCOMPILE_DISABLE=1: nothing (silently; the user asked).
2. The version gate: an unknown torch/triton gets one warning and no hooks at all.
3. Cache directories (environment, inherited by compile workers).
4. Each layer whose compat module works here: graph/autograd/autotune through Inductor's
   remote-cache plug point, Triton kernels through Triton's cache manager, C++ kernels through
   Inductor's C++ build function. A layer whose private API moved stays stock, and one warning
   names all such layers: the others still work, and nothing is half-hooked.
"""
from __future__ import annotations

import dataclasses
import logging
import threading

from pcompile.compat import gate
from pcompile.warn import warn_once
from pcompile.inductor import env
from pcompile import compat
from pcompile.settings import DEBUG_FX_KEYS, DISABLE, INDUCTOR_LOCAL_CACHES

log = logging.getLogger("pcompile.inductor")



@dataclasses.dataclass
class HookState:
    decided: bool = False
    active: bool = False
    layers: tuple[str, ...] = ()
    stock: dict[str, str] = dataclasses.field(default_factory=dict)
    flags: dict[str, bool] = dataclasses.field(default_factory=dict)


state = HookState()
_lock = threading.RLock()


def disabled_by_user() -> bool:
    return bool(DISABLE.get())


def install_hooks() -> bool:
    """Idempotent. True if at least one pcompile cache layer is active in this process."""
    with _lock:
        if state.decided:
            return state.active
        state.decided = True
        if disabled_by_user() or not gate.supported():
            return False
        from pcompile.inductor import private_dir

        if private_dir.active() or not private_dir.check_at_start():
            return False  # the cache dir cannot take this job's files: stock, in a private dir
        try:
            env.set_cache_dirs()
        except Exception as exc:
            warn_once("env", f"pcompile: cannot resolve the cache directory ({exc}); compiling with stock Inductor")
            return False
        layers: list[str] = []
        stock: dict[str, str] = {}
        _install_remote(layers, stock)
        _install_triton(layers, stock)
        _install_cpp(layers, stock)
        if "graph" in layers:
            _install_device_index()
        state.layers = tuple(layers)
        state.stock = stock
        state.active = bool(layers)
        if stock:
            detail = "; ".join(f"{layer}: {why}" for layer, why in sorted(stock.items()))
            warn_once("partial", f"pcompile: these cache layers stay stock in this torch/triton ({detail}); "
                           "the other layers are cached. Please report this with your torch and triton versions")
        log.info("pcompile: hooks on for %s", ", ".join(layers) or "nothing")
        _install_pool()
        if state.active:
            _install_backward_ahead()
            _install_key_dump()
        return state.active


def _install_remote(layers: list[str], stock: dict[str, str]) -> None:
    reason = compat.check("remote_cache")
    if reason is not None:
        for layer in ("graph", "autograd", "autotune"):
            stock[layer] = reason
        return
    from pcompile.inductor import store_adapter
    from pcompile.compat import remote_cache

    store_adapter.install()
    # Inductor's own local caches stay in front of the store only when asked (compat/remote_cache.py)
    keep_local = bool(INDUCTOR_LOCAL_CACHES.get())
    state.flags = remote_cache.enable_flags(replace_local=not keep_local)
    layers.extend(["graph", "autograd", "autotune"])


def _install_triton(layers: list[str], stock: dict[str, str]) -> None:
    if gate.triton_version() is None:
        return  # no Triton: no Triton kernels to cache
    reason = compat.check("triton_cache_manager")
    if reason is None:
        try:
            from pcompile.inductor import triton_cache  # the class must build before triton is told to use it

            if env.set_triton_manager(triton_cache.MANAGER_PATH):
                layers.append("kernel.triton")
            return
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}"
    stock["kernel.triton"] = reason


def _install_cpp(layers: list[str], stock: dict[str, str]) -> None:
    reason = compat.check("cpp_compile")
    if reason is None:
        from pcompile.inductor import cpp_cache

        cpp_cache.install()
        layers.append("kernel.cpp")
    else:
        stock["kernel.cpp"] = reason


def _install_device_index() -> None:
    """Keys as for cuda:0 and loads bound to the caller's GPU, so ranks share entries (device_index.py)."""
    from pcompile.inductor import device_index

    reason = device_index.install()
    if reason is not None and device_index.enabled():
        warn_once("device_index", f"pcompile: entries stay per GPU index in this torch ({reason}); "
                       "ranks on other GPUs of a node compile their own")


def _install_pool() -> None:
    """Let the compile pool (pool_install.py) hook in."""
    try:
        from pcompile.inductor import pool_install

        pool_install.install_pool()
    except Exception as exc:
        warn_once("pool", f"pcompile: the compile pool could not start ({type(exc).__name__}: {exc}); compiling in-process")


def _install_backward_ahead() -> None:
    """Backward graphs compile in a worker while their forward compiles (backward_ahead.py)."""
    from pcompile import warming
    from pcompile.inductor import backward_ahead

    # The warm's prediction hooks live in the warm child only: its backward graphs stay there.
    if not backward_ahead.wanted() or warming():
        return
    reason = compat.check("backward_graph")
    if reason is not None:
        warn_once("backward_graph", f"pcompile: backward graphs compile after their forward in this torch ({reason})")
        return
    from pcompile.compat import backward_graph

    backward_graph.install(backward_ahead.on_partition, backward_ahead.around_backward)
    from pcompile.inductor import store_gateway

    store_gateway.add_listener(backward_ahead.on_lookup)
    backward_ahead.start_early()


def _install_key_dump() -> None:
    """PCOMPILE_DEBUG_FX_KEYS=DIR: Inductor's description of every FX graph key, one file each."""
    directory = DEBUG_FX_KEYS.get()
    if directory and compat.check("backward_graph") is None:
        from pcompile.compat import backward_graph

        backward_graph.dump_fx_keys(directory)


def uninstall_hooks() -> None:
    """Back to stock (tests). Environment variables pcompile set are left as they are."""
    with _lock:
        if compat.check("remote_cache") is None:
            from pcompile.inductor import store_adapter

            store_adapter.uninstall()
        if compat.check("cpp_compile") is None:
            from pcompile.inductor import cpp_cache

            cpp_cache.uninstall()
        env.clear_triton_manager("pcompile.inductor.triton_cache:StoreCacheManager")
        if compat.check("device_index") is None:
            from pcompile.inductor import device_index

            device_index.uninstall()
        if compat.check("backward_graph") is None:
            from pcompile.compat import backward_graph

            backward_graph.uninstall()
        state.decided = False
        state.active = False
        state.layers = ()
