"""Apply the autotune winner the *requesting* process sees to a kernel that came from the store.

Why: Inductor reads a kernel's cached autotune winner where its module is loaded, i.e. in the
compile worker (`check_autotune_cache` in `cached_autotune`), and keeps only that config. A
pcompile kernel entry is the worker's pickled result, keyed by source and target only, so the
winner it holds is whatever the *building* process saw: all configs when a warm built it (every
later GPU job benchmarks and re-runs coordinate descent, although the first job published its
winner: stock hot reads it), or a warm's prediction when one existed then (every later job uses
the prediction forever, even with PCOMPILE_AUTOTUNE=benchmark, and a measured winner never
replaces it). Stock re-reads the cache in the parent only for FX-cache hits
(`CachingAutotuner.recheck_autotune_cache`, static launches only); this is that re-read, for
every compile result kind, done when the router hands a kernel back.

Touched (torch 2.11.0 and 2.14.1, both read):
  torch._inductor.runtime.triton_heuristics.{check_autotune_cache(configs, filename,
      inductor_meta[, dynamic_scale_rblock_eligible (2.14)]), triton_config_to_hashable,
      CachingAutotuner.{compile_results, filename, inductor_meta, autotune_cache_info, fn,
      _precompile_config, _could_rblock_scale (2.14)}}
"""
from __future__ import annotations

import inspect
from typing import Any, Callable

from pcompile.compat import CompatError, require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {"torch": "2.11.0, 2.14.1, 2.15.0"}
#: Attributes of objects Inductor hands over, which tools/private_surface.py cannot follow statically.
PRIVATE = ("torch._inductor.runtime.triton_heuristics.CachingAutotuner.compile_results",
           "torch._inductor.runtime.triton_heuristics.CachingAutotuner.autotune_cache_info",
           "torch._inductor.runtime.triton_heuristics.CachingAutotuner._precompile_config",
           "torch._inductor.runtime.triton_heuristics.CachingAutotuner._could_rblock_scale")


def _heuristics() -> Any:
    from torch._inductor.runtime import triton_heuristics

    return triton_heuristics


def check() -> None:
    th = _heuristics()
    fn = require_attr(th, "check_autotune_cache", "torch._inductor.runtime.triton_heuristics")
    params = list(inspect.signature(fn).parameters)
    if params[:3] != ["configs", "filename", "inductor_meta"]:
        raise CompatError(f"check_autotune_cache{tuple(params)} changed; update pcompile/compat/autotune_recheck.py")
    require_attr(th, "triton_config_to_hashable", "torch._inductor.runtime.triton_heuristics")
    require_attr(require_attr(th, "CachingAutotuner", "triton_heuristics"), "_precompile_config", "CachingAutotuner")


def _wants_recheck(autotuner: Any) -> bool:
    results = list(getattr(autotuner, "compile_results", None) or ())
    if not results:
        return False
    if (getattr(autotuner, "autotune_cache_info", None) or {}).get("autotune_cache_state") == "hit":
        return False  # the building process already applied a (measured) winner
    meta = getattr(autotuner, "inductor_meta", None) or {}
    return len(results) > 1 or bool(meta.get("coordinate_descent_tuning"))


def apply_cached_winner(autotuner: Any, reload_kernel: Callable[[], Any]) -> str | None:
    """Narrow `autotuner.compile_results` to the cached winner, as the worker of a stock job would
    have; compile the winner here when coordinate descent found it outside the entry's configs
    (`reload_kernel()` gives a freshly loaded autotuner, for its Triton function). Returns "hit",
    "compiled" (the winner compiled here) or None (no winner: the kernel benchmarks at first launch)."""
    if not _wants_recheck(autotuner):
        return None
    th = _heuristics()
    results = list(autotuner.compile_results)
    # the worker's own config list: the autotune key hashes it (AutotuneCache.create)
    configs = list(getattr(autotuner, "configs", None) or [r.config for r in results])
    kwargs: dict[str, Any] = {}
    if "dynamic_scale_rblock_eligible" in inspect.signature(th.check_autotune_cache).parameters:
        try:  # a cached property reading the kernel's meta: never let it fail the re-read
            kwargs["dynamic_scale_rblock_eligible"] = bool(autotuner._could_rblock_scale)
        except Exception:
            kwargs["dynamic_scale_rblock_eligible"] = False
    cached, _cache, info = th.check_autotune_cache(configs, autotuner.filename, autotuner.inductor_meta, **kwargs)
    if info.get("autotune_cache_state") != "hit" or len(cached) != 1:
        return None
    best = cached[0]
    found_by_coordesc = getattr(best, "found_by_coordesc", False)
    wanted = th.triton_config_to_hashable(best)
    for result in results:
        if th.triton_config_to_hashable(result.config) == wanted:
            result.config.found_by_coordesc = found_by_coordesc
            autotuner.compile_results = [result]
            autotuner.autotune_cache_info = info
            return "hit"
    if getattr(getattr(autotuner, "fn", None), "fn", None) is None:
        autotuner.fn = reload_kernel().fn
    autotuner.compile_results = [autotuner._precompile_config(best)]
    autotuner.autotune_cache_info = info
    return "compiled"
