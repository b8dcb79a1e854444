"""Turn pcompile's cache hooks on, once per process, layer by layer.

Order of decisions:
1. PCOMPILE_DISABLE=1: nothing (silently; the user asked).
2. The version gate: an unknown torch/triton gets one warning and no hooks at all. A removed
   setting still in the environment gets one line (settings.REMOVED).
3. Cache directories (environment, inherited by compile workers).
4. Each feature of the registry (features.py), in its order: first the cache layers whose compat
   module works here (graph/autograd/autotune through Inductor's remote-cache plug point, Triton
   kernels through Triton's cache manager, C++ kernels through Inductor's C++ build function).
   A layer whose private API moved stays stock, and one warning names all such layers: the others
   still work, and nothing is half-hooked. Then the features built on the layers (the compile
   pool, backward ahead, ...), each off with its own warning when its check fails.
`at_torch_compile()` runs the registry's features that act at the torch.compile call.
"""
from __future__ import annotations

import dataclasses
import logging
import threading

from pcompile.compat import gate
from pcompile.inductor import env, features
from pcompile.settings import DISABLE, warn_removed
from pcompile.warn import warn_once

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
        warn_removed()  # a variable pcompile deleted: one line, not silence
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
        ctx = features.Context(hooks_on=install_hooks)
        features.install(features.LAYERS, ctx, layers, stock)
        state.layers = tuple(layers)
        state.stock = stock
        state.flags = features.handle("remote") or {}
        state.active = bool(layers)
        if stock:
            detail = "; ".join(f"{layer}: {why}" for layer, why in sorted(stock.items()))
            warn_once("partial", f"pcompile: these cache layers stay stock in this torch/triton ({detail}); "
                           "the other layers are cached. Please report this with your torch and triton versions")
        log.info("pcompile: hooks on for %s", ", ".join(layers) or "nothing")
        features.install(features.HOOKS, ctx, layers, stock)
        return state.active


def at_torch_compile() -> None:
    """The process just called torch.compile (backend.py's import, or the inductor wrapper being
    built): the features that must act before Dynamo wraps the model (features.COMPILE)."""
    from pcompile.inductor import bytecode

    bytecode.enable_from_env()  # backend="pcompile" without install(): Inductor's imports come next
    features.at_torch_compile(features.Context(hooks_on=install_hooks))
    install_hooks()  # the compile is certain now: caches on, pool (GPU hosts) warming while Dynamo traces


def uninstall_hooks() -> None:
    """Back to stock (tests). Environment variables pcompile set are left as they are."""
    with _lock:
        features.uninstall_all()
        state.decided = False
        state.active = False
        state.layers = ()
