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

The store's node-local tier replaces Inductor's own local FX graph and AOTAutograd caches
(`fx_graph_cache`, `enable_autograd_cache` turned off, both 2.11 and 2.14: a lookup then goes
local=False, remote=True; AOTAutograd's cacheability check accepts "fx_graph_cache or remote").
Otherwise a local hit would never reach the store: entries made before pcompile, or evicted by
its GC, would be served on this node but never published, and other nodes would get AOTAutograd
entries whose graphs are missing. `fx_graph_cache` is in `_cache_config_ignore_prefix` too.

The local flags are turned off only for the span of each graph compile (`local_twins_off`), not
once at install: `enable_autograd_cache` is hashed into every AOTAutograd key, and a script that
sets it at import (gpt-fast) would otherwise leave it True where the hooks came first (a warm)
and False where they came at its `torch.compile` (the GPU job): different keys, a miss.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

from pcompile.compat import CompatError, require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.14.1, 2.15.0'}
#: Names reached through helpers or loops, which tools/private_surface.py cannot follow statically.
PRIVATE = ("torch._inductor.remote_cache.RemoteFxGraphCache", "torch._inductor.remote_cache.RemoteAOTAutogradCache",
           "torch._inductor.remote_cache.RemoteAutotuneCache", "torch._inductor.remote_cache.RemoteBundledAutotuneCache",
           "torch._inductor.remote_cache.RemoteCache.backend_override_cls",
           "torch._inductor.config.fx_graph_remote_cache", "torch._inductor.config.autotune_remote_cache",
           "torch._inductor.config.bundled_autotune_remote_cache", "torch._inductor.config.fx_graph_cache",
           "torch._functorch.config.enable_remote_autograd_cache", "torch._functorch.config.enable_autograd_cache")

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

    for flag in _INDUCTOR_FLAGS + ("bundled_autotune_remote_cache", "fx_graph_cache"):
        require_attr(iconfig, flag, "torch._inductor.config")
    for flag in _FUNCTORCH_FLAGS + ("enable_autograd_cache",):
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


#: remote flag -> (config module, local flag it replaces, env var a user disables the layer with)
_LOCAL_TWIN = {
    "fx_graph_remote_cache": ("inductor", "fx_graph_cache", "TORCHINDUCTOR_FX_GRAPH_CACHE"),
    "enable_remote_autograd_cache": ("functorch", "enable_autograd_cache", "TORCHINDUCTOR_AUTOGRAD_CACHE"),
}


def enable_flags(replace_local: bool = True) -> dict[str, bool]:
    """Turn the remote caches on where the user left them unset (None); returns what changed.

    An explicit user choice wins: a remote flag already True/False, or the layer switched off
    by its environment variable (TORCHINDUCTOR_FX_GRAPH_CACHE=0), is left alone. With
    `replace_local`, Inductor's local FX graph / AOTAutograd caches are turned off while each
    graph compiles (`local_twins_off`), so every lookup and every publish goes through the store.
    """
    import os

    global _replace_local
    modules = _config_modules()
    changed: dict[str, bool] = {}
    for prefix, flags in (("inductor", _INDUCTOR_FLAGS), ("functorch", _FUNCTORCH_FLAGS)):
        mod = modules[prefix]
        for flag in flags:
            if getattr(mod, flag) is not None:
                continue
            twin = _LOCAL_TWIN.get(flag)
            if twin is not None and os.environ.get(twin[2], "").strip() == "0":
                continue
            setattr(mod, flag, True)
            changed[f"{prefix}.{flag}"] = True
    _replace_local = replace_local
    _forget_cached_remote_caches()
    return changed


_replace_local = False


def _config_modules() -> dict[str, Any]:
    import torch._functorch.config as fconfig
    import torch._inductor.config as iconfig

    return {"inductor": iconfig, "functorch": fconfig}


@contextlib.contextmanager
def local_twins_off() -> Iterator[list[str]]:
    """For one graph compile: each local cache whose remote twin is on is off (see the module
    docstring), whatever order the script and pcompile's install set them in; put back after.
    Yields the flags it turned off."""
    if not _replace_local:
        yield []
        return
    modules = _config_modules()
    turned: list[tuple[Any, str]] = []
    for remote, (prefix, local, _env) in _LOCAL_TWIN.items():
        owner = modules["inductor"] if remote in _INDUCTOR_FLAGS else modules["functorch"]
        mod = modules[prefix]
        if getattr(owner, remote) and getattr(mod, local):
            setattr(mod, local, False)
            turned.append((mod, local))
    try:
        yield [f"{'inductor' if m is modules['inductor'] else 'functorch'}.{f}" for m, f in turned]
    finally:
        for mod, flag in turned:
            if getattr(mod, flag) is False:  # the script did not change it inside the compile
                setattr(mod, flag, True)


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

    state = {f"inductor.{f}": getattr(iconfig, f) for f in _INDUCTOR_FLAGS + ("bundled_autotune_remote_cache", "fx_graph_cache")}
    state.update({f"functorch.{f}": getattr(fconfig, f) for f in _FUNCTORCH_FLAGS + ("enable_autograd_cache",)})
    return state
