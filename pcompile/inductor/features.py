"""What pcompile turns on inside torch, declared once: the feature registry the hooks walk.

Why a registry: each feature has the same questions to answer (does its private torch API work
here, does the user want it, when must it be on, how is it undone), and answering them by hand
in several places let features get wired at import time and modules import each other in a
circle. Here each `Feature` answers them as data; `hooks.py` walks the list, in order, at two
moments:

- `compile`: the `torch.compile` call (backend.py's import, or the inductor wrapper being built
  after `pcompile.install()`/PCOMPILE=1). A feature that acts at the call itself (Inductor's
  compiler import, paid before the first graph) installs here; one that needs the cache layers
  (backward ahead, whose worker must start early) turns the hooks on here instead of at the
  first graph.
- `layers` then `hooks`: inside `hooks.install_hooks()` (the first graph at the latest). `layers`
  are the cache layers; the hooks' summary (one warning naming every layer that stays stock) is
  written between the two; `hooks` are the features built on the layers.

A feature whose compat check fails stays off: a cache layer is named in the hooks' one warning,
another feature warns once with its own line (`warning`). A failed `install()` is the same as a
failed check, with the exception as the reason: no feature raises into a compile.
Modules behind a feature never import this registry or the hooks: the registry hands them what
they need (`Context`), so the import graph has no circle.
"""
from __future__ import annotations

import dataclasses
import threading
from typing import Any, Callable

from pcompile import compat
from pcompile.settings import DDP_AUTOGRAD_CACHE, DEBUG_FX_KEYS, INDUCTOR_LOCAL_CACHES, PROGRAMS
from pcompile.warn import warn_once

LAYERS, HOOKS, COMPILE = "layers", "hooks", "compile"
ANY_LAYER = "*"


@dataclasses.dataclass(frozen=True)
class Context:
    """What a feature's install() may use from the hooks, handed in (never imported)."""

    hooks_on: Callable[[], bool]  # install_hooks(): True if a cache layer is on


@dataclasses.dataclass(frozen=True)
class Feature:
    name: str
    #: Turns it on; returns its handle (kept in the registry while on), or False: off, silently.
    install: Callable[[Context], Any]
    #: Off unless True (settings, this machine).
    wanted: Callable[[], bool] = lambda: True
    #: compat.check() names; the first that fails keeps the feature off, as its reason.
    checks: tuple[str, ...] = ()
    #: Undo (tests). Called when its checks pass, installed in this process or not.
    uninstall: Callable[[], None] | None = None
    #: LAYERS / HOOKS: inside install_hooks(); COMPILE: at the torch.compile call.
    when: str = HOOKS
    #: Cache layers it serves: when off, they are named in the hooks' one "stay stock" warning.
    layers: tuple[str, ...] = ()
    #: Layers that must be on first (ANY_LAYER: at least one); a COMPILE feature with needs turns
    #: the hooks on at torch.compile and is installed by them.
    needs: tuple[str, ...] = ()
    #: (warn_once tag, message with {reason}) when it stays off for a reason; None: silent.
    warning: tuple[str, str] | None = None


_lock = threading.RLock()
_handles: dict[str, Any] = {}  # name -> what install() returned, while on
_kept: dict[str, Any] = {}  # name -> last handle, for the life of the process (instances own workers)


def _reason(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, Off) else f"{type(exc).__name__}: {exc}"


def wanted(name: str) -> bool:
    """The feature is wanted here (its settings, this machine)."""
    return get(name).wanted()


def get(name: str) -> Feature:
    for feature in FEATURES:
        if feature.name == name:
            return feature
    raise KeyError(f"no pcompile feature {name!r} (known: {', '.join(f.name for f in FEATURES)})")


def handle(name: str) -> Any | None:
    """What `name`'s install() returned, while it is on in this process; else None."""
    with _lock:
        return _handles.get(name)


def kept(name: str) -> Any | None:
    """Its last handle, on or since uninstalled (a worker it owns may still be winding down)."""
    with _lock:
        return _kept.get(name)


def is_on(name: str) -> bool:
    with _lock:
        return name in _handles


def _failed_check(feature: Feature) -> str | None:
    for check in feature.checks:
        reason = compat.check(check)
        if reason is not None:
            return reason
    return None


def _needs_met(feature: Feature, layers: list[str]) -> bool:
    return all((bool(layers) if need == ANY_LAYER else need in layers) for need in feature.needs)


def install(phase: str, ctx: Context, layers: list[str], stock: dict[str, str]) -> None:
    """Install every feature of `phase` (in declared order) that is wanted and whose checks and
    needs hold. Layers turned on are added to `layers`; layers left stock, with why, to `stock`."""
    for feature in FEATURES:
        if feature.when != phase and not (phase == HOOKS and feature.when == COMPILE and feature.needs):
            continue
        if is_on(feature.name) or not _needs_met(feature, layers) or not wanted(feature.name):
            continue
        _install_one(feature, ctx, layers, stock)


def _install_one(feature: Feature, ctx: Context, layers: list[str], stock: dict[str, str]) -> None:
    reason = _failed_check(feature)
    got: Any = None
    if reason is None:
        try:
            got = feature.install(ctx)
        except Exception as exc:  # off, as if its check had failed: a feature never raises into a compile
            reason = _reason(exc)
    if reason is None:
        if got is False:
            return  # declined, and said why itself (or had nothing to do)
        with _lock:
            _handles[feature.name] = _kept[feature.name] = got
        layers.extend(feature.layers)
        return
    for layer in feature.layers:
        stock[layer] = reason
    if feature.warning is not None:
        tag, message = feature.warning
        warn_once(tag, message.format(reason=reason))


def at_torch_compile(ctx: Context) -> None:
    """The torch.compile call: COMPILE features without needs install now; one with needs turns
    the hooks on (which install it)."""
    for feature in FEATURES:
        if feature.when != COMPILE or not wanted(feature.name):
            continue
        if feature.needs:
            ctx.hooks_on()
        elif not is_on(feature.name):
            _install_one(feature, ctx, [], {})


def uninstall_all() -> None:
    """Every feature back to stock (tests), in reverse order."""
    for feature in reversed(FEATURES):
        if feature.uninstall is not None and _failed_check(feature) is None:
            feature.uninstall()
        with _lock:
            _handles.pop(feature.name, None)


# ---- what each feature does (modules behind them are imported here, when first used) ---------


class Off(Exception):
    """install() found a reason to stay off; the text is the reason, as a failed check's is."""


def _install_compiler(ctx: Context) -> Any:
    """torch.compile(backend="inductor") has imported Inductor's compiler by the time it returns;
    do the same, so the first step pays for compiling, not for importing (~1-2 s)."""
    from pcompile.compat import compile_wrapper

    compile_wrapper.import_compiler()


def _install_remote(ctx: Context) -> dict[str, bool]:
    from pcompile.compat import remote_cache
    from pcompile.inductor import store_adapter

    store_adapter.install()
    # Inductor's own local caches stay in front of the store only when asked (compat/remote_cache.py)
    return remote_cache.enable_flags(replace_local=not bool(INDUCTOR_LOCAL_CACHES.get()))


def _uninstall_remote() -> None:
    from pcompile.inductor import store_adapter

    store_adapter.uninstall()


def _programs_wanted() -> bool:
    """A warm writes them too: its guards are pickled as the GPU job's real tensors
    (compat/warm_programs.py), so the job after a warm skips Dynamo as a restart does."""
    return bool(PROGRAMS.get())


def _install_programs(ctx: Context) -> bool:
    from pcompile.inductor import programs

    return programs.install()


def _uninstall_programs() -> None:
    from pcompile.inductor import programs

    programs.uninstall()


def _has_triton() -> bool:
    from pcompile.compat import gate

    return gate.triton_version() is not None  # no Triton: no Triton kernels to cache


def _install_triton(ctx: Context) -> bool:
    from pcompile.inductor import env, triton_cache  # the class must build before triton is told to use it

    return env.set_triton_manager(triton_cache.MANAGER_PATH)  # False: the user's own manager (warned)


def _uninstall_triton() -> None:
    from pcompile.inductor import env

    env.clear_triton_manager(TRITON_MANAGER)


def _install_cpp(ctx: Context) -> Any:
    from pcompile.inductor import cpp_cache

    cpp_cache.install()


def _uninstall_cpp() -> None:
    from pcompile.inductor import cpp_cache

    cpp_cache.uninstall()


def _install_isa_probe(ctx: Context) -> Any:
    from pcompile.inductor import isa_probe_cache

    isa_probe_cache.install()


def _isa_probe_wanted() -> bool:
    from pcompile.compat import cpu_isa_probe

    return cpu_isa_probe.supported()


def _uninstall_isa_probe() -> None:
    from pcompile.inductor import isa_probe_cache

    isa_probe_cache.uninstall()


def _device_index_wanted() -> bool:
    from pcompile.inductor import device_index

    return device_index.enabled()


def _install_device_index(ctx: Context) -> Any:
    """Keys as for cuda:0 and loads bound to the caller's GPU, so ranks share entries (device_index.py)."""
    from pcompile.inductor import device_index

    reason = device_index.install()
    if reason is not None:
        raise Off(reason)


def _uninstall_device_index() -> None:
    from pcompile.inductor import device_index

    device_index.uninstall()


def _install_pool(ctx: Context) -> bool:
    """Let the compile pool (pool_install.py) hook in; False: stock pool (it warned, or was told to)."""
    from pcompile.inductor import pool_install

    return pool_install.install_pool()


def _backward_ahead_wanted() -> bool:
    from pcompile import warming
    from pcompile.inductor import backward_ahead

    # The warm's prediction hooks live in the warm child only: its backward graphs stay there.
    return backward_ahead.wanted() and not warming()


def _install_backward_ahead(ctx: Context) -> Any:
    """Backward graphs compile in a worker while their forward compiles (backward_ahead.py). One
    manager per process: a reinstall (tests) gets the same one, and its worker."""
    from pcompile.compat import backward_graph
    from pcompile.inductor import backward_ahead, store_gateway

    ahead = kept("backward_ahead") or backward_ahead.BackwardAhead(lambda: wanted("backward_ahead"))
    backward_graph.install(ahead.on_partition, ahead.around_backward)
    store_gateway.add_listener(ahead.on_lookup)
    ahead.start_early()
    return ahead


def _uninstall_backward_graph() -> None:
    from pcompile.compat import backward_graph

    backward_graph.uninstall()


def _install_key_dump(ctx: Context) -> Any:
    """PCOMPILE_DEBUG_FX_KEYS=DIR: Inductor's description of every FX graph key, one file each."""
    from pcompile.compat import backward_graph

    backward_graph.dump_fx_keys(DEBUG_FX_KEYS.get())


def _install_ddp_autograd_cache(ctx: Context) -> Any:
    """AOTAutograd entries for DDPOptimizer's split graphs, which torch bypasses (compat/ddp_autograd_cache.py)."""
    from pcompile.compat import ddp_autograd_cache

    ddp_autograd_cache.on_not_stored = _ddp_entry_not_stored
    ddp_autograd_cache.install()


def _ddp_entry_not_stored(why: str) -> None:
    """Named once per process, and an event per bucket in the job's log."""
    import time

    from pcompile.events import emit
    from pcompile.warn import warn_once

    warn_once("ddp-entry-not-stored", f"pcompile: a DDP bucket's AOTAutograd entry is not stored ({why}): "
              "a restart re-traces that bucket, as stock torch does for every bucket")
    emit("ddp_entry_bypass", time.time(), 0.0, reason=why)


def _uninstall_ddp_autograd_cache() -> None:
    from pcompile.compat import ddp_autograd_cache

    ddp_autograd_cache.uninstall()


def _install_key_details(ctx: Context) -> Any:
    """Inductor's description of each graph key, saved at a miss for `pcompile explain` (keys/key_details.py)."""
    from pcompile.compat import key_details
    from pcompile.keys.key_details import record

    key_details.install(record)


def _uninstall_key_details() -> None:
    from pcompile.compat import key_details

    key_details.uninstall()


TRITON_MANAGER = "pcompile.inductor.triton_cache:StoreCacheManager"  # triton_cache.MANAGER_PATH, unimported

# ---- the registry, in install order ---------------------------------------------------------

FEATURES: tuple[Feature, ...] = (
    Feature("compiler_import", _install_compiler, when=COMPILE),
    Feature("remote", _install_remote, checks=("remote_cache",), uninstall=_uninstall_remote, when=LAYERS,
            layers=("graph", "autograd", "autotune")),
    Feature("triton", _install_triton, wanted=_has_triton, checks=("triton_cache_manager",),
            uninstall=_uninstall_triton, when=LAYERS, layers=("kernel.triton",)),
    Feature("cpp", _install_cpp, checks=("cpp_compile",), uninstall=_uninstall_cpp, when=LAYERS,
            layers=("kernel.cpp",)),
    Feature("isa_probe", _install_isa_probe, wanted=_isa_probe_wanted, checks=("cpu_isa_probe",),
            uninstall=_uninstall_isa_probe, when=LAYERS,
            layers=("kernel.isa_probe",)),
    Feature("device_index", _install_device_index, wanted=_device_index_wanted, checks=("device_index",),
            uninstall=_uninstall_device_index, when=LAYERS, needs=("graph",),
            warning=("device_index", "pcompile: entries stay per GPU index in this torch ({reason}); "
                     "ranks on other GPUs of a node compile their own")),
    Feature("key_details", _install_key_details, checks=("key_details",), uninstall=_uninstall_key_details,
            when=LAYERS, needs=("graph",)),
    Feature("pool", _install_pool, warning=("pool", "pcompile: the compile pool could not start ({reason}); "
                                            "compiling in-process")),
    Feature("backward_ahead", _install_backward_ahead, wanted=_backward_ahead_wanted, checks=("backward_graph",),
            uninstall=_uninstall_backward_graph, when=COMPILE, needs=(ANY_LAYER,),
            warning=("backward_graph", "pcompile: backward graphs compile after their forward in this torch ({reason})")),
    Feature("programs", _install_programs, wanted=_programs_wanted, checks=("dynamo_programs", "programs_aot_entries", "program_growth"),
            uninstall=_uninstall_programs, when=COMPILE, needs=(ANY_LAYER,),
            warning=("programs", "pcompile: restarts trace every frame with Dynamo in this torch ({reason})")),
    Feature("ddp_autograd_cache", _install_ddp_autograd_cache, wanted=lambda: bool(DDP_AUTOGRAD_CACHE.get()),
            checks=("ddp_autograd_cache",), uninstall=_uninstall_ddp_autograd_cache, needs=("autograd",)),
    Feature("key_dump", _install_key_dump, wanted=lambda: bool(DEBUG_FX_KEYS.get()), checks=("backward_graph",),
            needs=(ANY_LAYER,)),
)
