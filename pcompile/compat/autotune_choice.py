"""Choosing and publishing an autotune winner without a GPU (the warm host's "prediction").

Why: a kernel with several configs is benchmarked on the GPU at its first launch unless its
winner is cached, and a CPU-only warm cannot benchmark. What Inductor itself does when it may
not benchmark is the prediction: for reductions, the pick of
`filter_reduction_configs_for_determinism` (the config deterministic mode uses); for other
kernels, the first config (what `autotune_pointwise=False` uses). The prediction is saved through
the kernel's own `AutotuneCache.save` (same JSON, same remote key) with the local file and the
mega-cache artifact switched off for that call, so only pcompile's store sees it, and there under
a key of its own (`store_adapter.predicting`), never as a measured winner. A user-defined
`@triton.autotune` kernel gets none: Inductor has no no-benchmark choice for it, and its first
config is only the author's first guess.

Touched (torch 2.11.0 and 2.14.1, both checked):
  torch._inductor.runtime.triton_heuristics.{CachingAutotuner.save_cache_hook (bound
      AutotuneCache.save), .launchers, .compile_results, .configs, .inductor_meta,
      .heuristic_type, filter_reduction_configs_for_determinism}
  torch._inductor.runtime.hints.HeuristicType.USER_AUTOTUNE
  torch._inductor.runtime.autotune_cache.AutotuneCache.{save, local_cache, remote_cache,
      _record_artifact (2.14; 2.11 records mega-cache artifacts only inside the local branch)}
  torch._inductor.config.{max_autotune, coordinate_descent_tuning} (`tuning_mode`: whether the
      compile being served asked for tuning, so a prediction would give its speed away)
"""
from __future__ import annotations

from typing import Any, Callable

from pcompile.compat import CompatError, require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.14.1, 2.15.0'}
#: Attributes of objects Inductor hands over, which tools/private_surface.py cannot follow statically.
PRIVATE = ("torch._inductor.runtime.triton_heuristics.CachingAutotuner.save_cache_hook",
           "torch._inductor.runtime.triton_heuristics.CachingAutotuner.launchers",
           "torch._inductor.runtime.triton_heuristics.CachingAutotuner.compile_results",
           "torch._inductor.runtime.triton_heuristics.CachingAutotuner.configs",
           "torch._inductor.runtime.triton_heuristics.CachingAutotuner.inductor_meta",
           "torch._inductor.runtime.triton_heuristics.CachingAutotuner.heuristic_type",
           "torch._inductor.runtime.autotune_cache.AutotuneCache.save",
           "torch._inductor.runtime.autotune_cache.AutotuneCache.local_cache",
           "torch._inductor.runtime.autotune_cache.AutotuneCache.remote_cache",
           "torch._inductor.runtime.autotune_cache.AutotuneCache._record_artifact")

_REDUCTION_BLOCKS = ("R0_BLOCK", "R1_BLOCK", "RBLOCK")


def check() -> None:
    from torch._inductor.runtime import autotune_cache, triton_heuristics

    require_attr(triton_heuristics, "filter_reduction_configs_for_determinism", "triton_heuristics")
    require_attr(triton_heuristics, "CachingAutotuner", "triton_heuristics")
    from torch._inductor.runtime import hints

    require_attr(require_attr(hints, "HeuristicType", "hints"), "USER_AUTOTUNE", "HeuristicType")
    cache_cls = require_attr(autotune_cache, "AutotuneCache", "autotune_cache")
    for name in ("save", "read_best"):  # _record_artifact: 2.14 only (2.11 records inside the local branch)
        require_attr(cache_cls, name, "AutotuneCache")
    import inspect

    import torch._inductor.config as iconfig

    for name in ("max_autotune", "coordinate_descent_tuning"):
        require_attr(iconfig, name, "torch._inductor.config")
    params = list(inspect.signature(cache_cls.save).parameters)
    if params[:3] != ["self", "config", "time_taken_ns"] or "triton_cache_hash" not in params:
        raise CompatError(f"AutotuneCache.save{tuple(params)} changed; update pcompile/compat/autotune_choice.py")


def _candidates(autotuner: Any) -> list[tuple[Any, Any]]:
    """(config, launcher-or-None) for every config the kernel would benchmark."""
    launchers = list(getattr(autotuner, "launchers", None) or [])
    if launchers:
        return [(launcher.config, launcher) for launcher in launchers]
    results = list(getattr(autotuner, "compile_results", None) or [])
    if results:
        return [(r.config, None) for r in results]
    return [(c, None) for c in (getattr(autotuner, "configs", None) or [])]


def _cache_of(autotuner: Any) -> Any:
    """The kernel's AutotuneCache: `save_cache_hook` is its bound `save` (None without a cache)."""
    return getattr(getattr(autotuner, "save_cache_hook", None), "__self__", None)


def why_not(autotuner: Any) -> str | None:
    """Why no prediction can be filed for this kernel, or None if one can."""
    cache = _cache_of(autotuner)
    if cache is None:
        return "no autotune cache (Inductor made none for this kernel)"
    if not getattr(cache, "remote_cache", None):
        return "no remote autotune cache (pcompile's store is not Inductor's autotune backend in this process)"
    if len(_candidates(autotuner)) < 2:
        return "one config"
    if getattr(getattr(autotuner, "heuristic_type", None), "name", None) == "USER_AUTOTUNE":
        # Inductor has no no-benchmark choice for these: the author's configs are timed, as stock does
        return "a user-defined @triton.autotune kernel (the GPU job times its configs, as stock does)"
    if (getattr(autotuner, "inductor_meta", None) or {}).get("coordinate_descent_tuning"):
        return "coordinate descent tuning (its result depends on timings)"
    return None


def predict(configs: list[Any], inductor_meta: dict[str, Any]) -> Any:
    """Inductor's own no-benchmark choice among `configs`."""
    if any(any(b in c.kwargs for b in _REDUCTION_BLOCKS) for c in configs):
        from torch._inductor.runtime.triton_heuristics import filter_reduction_configs_for_determinism

        return filter_reduction_configs_for_determinism({**inductor_meta, "force_filter_reduction_configs": True},
                                                        list(configs))[0]
    return configs[0]


def publish_prediction(autotuner: Any, predicting: Callable[[], Any]) -> bool:
    """Save the predicted winner of a multi-config kernel to the remote (pcompile) cache only.

    `predicting` is a context manager under which pcompile's autotune backend files the write as a
    prediction. False when there is nothing to predict (see `why_not`).
    """
    if why_not(autotuner) is not None:
        return False
    cache = _cache_of(autotuner)
    candidates = _candidates(autotuner)
    chosen = predict([c for c, _ in candidates], dict(getattr(autotuner, "inductor_meta", None) or {}))
    launcher = next((lch for c, lch in candidates if c is chosen), None)
    saved_local = cache.local_cache
    cache.local_cache = None
    shadow = hasattr(cache, "_record_artifact")
    if shadow:
        cache._record_artifact = lambda data: None  # instance attribute: shadows the method for this call
    try:
        with predicting():
            cache.save(chosen, 0, found_by_coordesc=False,
                       triton_cache_hash=getattr(launcher, "cache_hash", None))
    finally:
        cache.local_cache = saved_local
        if shadow:
            del cache._record_artifact
    return True


def tuning_mode() -> bool:
    """Whether Inductor compiles in a tuning mode now (max-autotune, coordinate descent): its
    config is patched process-wide while torch.compile(mode=...) compiles and loads kernels, when
    their autotune winners are read. Never raises."""
    try:
        import torch._inductor.config as iconfig

        return bool(getattr(iconfig, "max_autotune", False) or getattr(iconfig, "coordinate_descent_tuning", False))
    except Exception:
        return False
