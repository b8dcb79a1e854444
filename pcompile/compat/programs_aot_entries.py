"""AOTAutograd entries under Dynamo's caching precompile (programs): the same keys and the same
kind of entry as without it, so programs, warms and jobs without programs share one cache.

Touched (torch 2.11.0 and 2.14.1): `torch._functorch._aot_autograd.autograd_cache`:
autograd_cache_key (module global, wrapped; `gm._backend_id`, `AOTConfig.precompile_backend_id`
(2.14)), should_bundle_autograd_cache (module global) and AOTAutogradCache.make_entry(compiled_fw_func,
compiled_bw_func, ...) reading it, the compiled graphs' `_fx_graph_cache_key`;
`torch._functorch._aot_autograd.schemas.AOTConfig` (a dataclass).
"""
from __future__ import annotations

import inspect
from typing import Any

from pcompile.compat import CompatError, require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.14.1, 2.15.0'}

_saved: dict[str, Any] = {}


def check() -> None:
    import dataclasses

    import torch._functorch.aot_autograd  # noqa: F401  (imported alone, its submodules import circularly)
    from torch._functorch._aot_autograd import autograd_cache, schemas

    require_attr(autograd_cache, "autograd_cache_key", "torch._functorch._aot_autograd.autograd_cache")
    require_attr(autograd_cache, "should_bundle_autograd_cache", "torch._functorch._aot_autograd.autograd_cache")
    make = require_attr(autograd_cache.AOTAutogradCache, "make_entry", "AOTAutogradCache")
    if list(inspect.signature(make).parameters)[:2] != ["compiled_fw_func", "compiled_bw_func"]:
        raise CompatError("AOTAutogradCache.make_entry no longer starts with (compiled_fw_func, compiled_bw_func)")
    if not dataclasses.is_dataclass(schemas.AOTConfig):
        raise CompatError("torch._functorch._aot_autograd.schemas.AOTConfig is no longer a dataclass")


def install() -> None:
    """Both patches (idempotent)."""
    if not _saved:
        _aot_keys_as_without_programs()
        _entries_stay_unbundled()


def uninstall() -> None:
    """Back to stock (tests)."""
    if not _saved:
        return
    from torch._functorch._aot_autograd import autograd_cache as ac

    if getattr(ac.autograd_cache_key, "_pcompile_programs", False):  # still ours on top: take it off
        ac.autograd_cache_key = _saved["aot_key"]
    ac.should_bundle_autograd_cache, ac.AOTAutogradCache.make_entry = _saved["bundle"]
    _saved.clear()


def _aot_keys_as_without_programs() -> None:
    """torch bug (2.11 and 2.14.1): with caching_precompile on, the same graph gets another
    AOTAutograd key than without it, so a job with programs missed every entry a job or warm
    without them wrote (and, 2.14, every entry of an earlier job with them). Two causes:
    - Dynamo sets `gm._backend_id` (a fresh uuid name) early; torch's key clears it to None but the
      attribute keeps its early place in `gm.__dict__`, which is pickled in insertion order: without
      programs the field is created at the end. Moved to the end here, the pickles agree.
    - 2.14 hashes `aot_config.precompile_backend_id` (that uuid again) into the key; it names the
      program's slot, not anything compiled (torch clears it on save), so it is hashed as None.
    """
    import dataclasses

    from torch._functorch._aot_autograd import autograd_cache as ac

    original = ac.autograd_cache_key

    def autograd_cache_key(mod: Any, example_inputs: Any, config: Any, *args: Any, **kwargs: Any) -> Any:
        gm = getattr(mod, "gm", mod)
        fields = getattr(gm, "__dict__", None)
        if fields is not None and "_backend_id" in fields:
            fields["_backend_id"] = fields.pop("_backend_id")
        if getattr(config, "precompile_backend_id", None) is not None and dataclasses.is_dataclass(config):
            config = dataclasses.replace(config, precompile_backend_id=None)
        return original(mod, example_inputs, config, *args, **kwargs)

    autograd_cache_key._pcompile_programs = True  # type: ignore[attr-defined]
    _saved["aot_key"] = original
    ac.autograd_cache_key = autograd_cache_key


def _entries_stay_unbundled() -> None:
    """With caching_precompile on, AOTAutograd saves "bundled" entries (the compiled graphs inline)
    instead of entries that name their FX graph entries. Now that both kinds share one key
    (_aot_keys_as_without_programs), a bundled entry would reach every job: and pcompile rebinds a
    graph to the asking rank's GPU where FX entries load (compat/device_index.py), which a bundled
    entry skips: rank 1 ran rank 0's graphs and its backward returned cuda:0 gradients. So the
    entry stays the plain kind wherever its graphs have FX entries (what torch saves without
    programs); the program records that same entry as its backend, and its graphs load through FX
    entries on a restart, rebound. A graph with no FX entry keeps torch's bundled entry."""
    import inspect
    import threading

    from torch._functorch._aot_autograd import autograd_cache as ac

    original_should = ac.should_bundle_autograd_cache
    static = inspect.getattr_static(ac.AOTAutogradCache, "make_entry")
    make = static.__func__ if isinstance(static, staticmethod) else static
    plain = threading.local()

    def should_bundle_autograd_cache() -> bool:
        return False if getattr(plain, "on", False) else original_should()

    def make_entry(compiled_fw_func: Any, compiled_bw_func: Any, *args: Any, **kwargs: Any) -> Any:
        keyed = getattr(compiled_fw_func, "_fx_graph_cache_key", None) is not None and (
            compiled_bw_func is None or getattr(compiled_bw_func, "_fx_graph_cache_key", None) is not None)
        plain.on = keyed
        try:
            return make(compiled_fw_func, compiled_bw_func, *args, **kwargs)
        finally:
            plain.on = False

    _saved["bundle"] = (original_should, static)
    ac.should_bundle_autograd_cache = should_bundle_autograd_cache
    ac.AOTAutogradCache.make_entry = staticmethod(make_entry)
