"""Inductor's remote-cache plug point: `RemoteCache.backend_override_cls` and the flags that use it.

Why this API: it is the one hook through which Inductor's FX graph cache, AOTAutograd cache and
autotune caches hand pcompile opaque (key, bytes) pairs; torch keeps doing the serialisation,
the guards and the bundling of Triton kernels into graph entries, so pcompile copies no torch code.

Touched (torch 2.14.1, checked identical in 2.11.0: `torch/_inductor/remote_cache.py` lines
157/179, `RedisRemoteCache.__init__` skipping the redis import when an override is set, the
`pt2:{cache_id}::{key}:c1` key format, the `_get`/`_put` backend primitives):
  torch._inductor.remote_cache.{RemoteCache, RemoteCacheBackend, RemoteFxGraphCache,
      RemoteAOTAutogradCache, RemoteAutotuneCache, RemoteBundledAutotuneCache}
  torch._inductor.config.{fx_graph_remote_cache, autotune_remote_cache,
      bundled_autotune_remote_cache}
  torch._functorch.config.enable_remote_autograd_cache
  torch._functorch._aot_autograd.autograd_cache.AOTAutogradCache.get_remote_cache (a
      functools.cache in 2.11 and 2.14: cleared so an earlier None does not stick)
In both versions `fx_graph_remote_cache` and `autotune_remote_cache` are listed in
`_cache_config_ignore_prefix`, so turning them on does not change FX graph keys.
"""
from __future__ import annotations

from typing import Any, Callable

from pcompile.inductor.compat import CompatError, require_attr

#: pcompile layer -> the torch RemoteCache subclass whose backend it replaces.
CLASS_FOR_LAYER: dict[str, str] = {
    "graph": "RemoteFxGraphCache",
    "autograd": "RemoteAOTAutogradCache",
    "autotune": "RemoteAutotuneCache",
    "autotune_bundle": "RemoteBundledAutotuneCache",
}

#: (config module, flag) pairs pcompile turns on when the user left them at None.
_INDUCTOR_FLAGS = ("fx_graph_remote_cache", "autotune_remote_cache")
_FUNCTORCH_FLAGS = ("enable_remote_autograd_cache",)


def _module() -> Any:
    import torch._inductor.remote_cache as rc

    return rc


def check() -> None:
    rc = _module()
    base = require_attr(rc, "RemoteCache", "torch._inductor.remote_cache")
    if not hasattr(base, "backend_override_cls"):
        raise CompatError("torch._inductor.remote_cache.RemoteCache.backend_override_cls is missing")
    backend = require_attr(rc, "RemoteCacheBackend", "torch._inductor.remote_cache")
    for method in ("_get", "_put", "get", "put"):
        require_attr(backend, method, "RemoteCacheBackend")
    for cls_name in CLASS_FOR_LAYER.values():
        cls = require_attr(rc, cls_name, "torch._inductor.remote_cache")
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise CompatError(f"torch._inductor.remote_cache.{cls_name} is no longer a RemoteCache")
    import torch._functorch.config as fconfig
    import torch._inductor.config as iconfig

    for flag in _INDUCTOR_FLAGS + ("bundled_autotune_remote_cache",):
        require_attr(iconfig, flag, "torch._inductor.config")
    for flag in _FUNCTORCH_FLAGS:
        require_attr(fconfig, flag, "torch._functorch.config")


def backend_base() -> type:
    """The class a pcompile backend subclasses (bytes in, bytes out)."""
    return _module().RemoteCacheBackend


def set_backend(layer: str, factory: Callable[[], Any] | None) -> None:
    """Make every new `Remote*Cache` of `layer` talk to `factory()` (None: back to stock)."""
    cls = getattr(_module(), CLASS_FOR_LAYER[layer])
    cls.backend_override_cls = factory


def current_backend(layer: str) -> Callable[[], Any] | None:
    return getattr(_module(), CLASS_FOR_LAYER[layer]).backend_override_cls


def enable_flags() -> dict[str, bool]:
    """Turn the remote caches on where the user left them unset (None); returns what changed.

    An explicit user choice (TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE=0, a config patch) wins.
    """
    import torch._functorch.config as fconfig
    import torch._inductor.config as iconfig

    changed: dict[str, bool] = {}
    for mod, flags, prefix in ((iconfig, _INDUCTOR_FLAGS, "inductor"), (fconfig, _FUNCTORCH_FLAGS, "functorch")):
        for flag in flags:
            if getattr(mod, flag) is None:
                setattr(mod, flag, True)
                changed[f"{prefix}.{flag}"] = True
    _forget_cached_remote_caches()
    return changed


def _forget_cached_remote_caches() -> None:
    """AOTAutogradCache memoises its RemoteCache; drop it so the override applies from now on."""
    try:
        from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache
    except ImportError:
        return
    getter = getattr(AOTAutogradCache, "get_remote_cache", None)
    clear = getattr(getter, "cache_clear", None)
    if callable(clear):
        clear()


def flags_state() -> dict[str, Any]:
    """The current values of every flag pcompile may touch (for tests and `explain`)."""
    import torch._functorch.config as fconfig
    import torch._inductor.config as iconfig

    state = {f"inductor.{f}": getattr(iconfig, f) for f in _INDUCTOR_FLAGS + ("bundled_autotune_remote_cache",)}
    state.update({f"functorch.{f}": getattr(fconfig, f) for f in _FUNCTORCH_FLAGS})
    return state
