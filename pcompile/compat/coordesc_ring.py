"""The configs coordinate-descent tuning tries first, so that a warm can compile them ahead.

Why: with `coordinate_descent_tuning` on (gpt-fast sets it), a GPU job tunes each kernel at its
first launch by compiling candidate configs one after another in the main process (gpt-fast:
83 compiles, ~17 s on the H100). A warm host cannot time candidates, but it can compile them:
the tuner's first round moves every tunable field one step up and one step down from the config
it starts from (one of the kernel's own configs, whichever autotuning picks), and a second round
starts one step away. Compiling that ring around every config of the kernel for the GPU's target
puts the cubins in the store, and the GPU job's candidate compiles become Triton cache hits. The
tuner's own functions name the fields and the neighbours, so the ring follows Inductor's rules.

Touched (torch 2.11.0 and 2.14.1, both read; 2.15.0: its tests and the warm test pass):
  torch._inductor.runtime.coordinate_descent_tuner.{get_field, set_field,
      CoordescTuner.tunable_fields, .get_neighbour_values, .is_valid_config}
  torch._inductor.runtime.triton_heuristics.{CachingAutotuner.coordesc_tuner, .configs,
      .inductor_meta, .heuristic_type, HeuristicType}
  torch._inductor.codecache.PyCodeCache.{write, load_by_key_path(attrs=...)} (a fresh module:
      `attrs` not None keeps it out of the module cache, so the job's own autotuner is untouched)
"""
from __future__ import annotations

import copy
import inspect
from typing import Any

from pcompile.compat import CompatError, require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.14.1, 2.15.0'}
#: Attributes of objects Inductor hands over, which tools/private_surface.py cannot follow statically.
PRIVATE = ("torch._inductor.runtime.triton_heuristics.CachingAutotuner.coordesc_tuner",
           "torch._inductor.runtime.triton_heuristics.CachingAutotuner.configs",
           "torch._inductor.runtime.triton_heuristics.CachingAutotuner.inductor_meta",
           "torch._inductor.runtime.triton_heuristics.CachingAutotuner.heuristic_type")

#: How a kernel's source says the tuner will run (Inductor writes the key only when it is on).
MARKER = "'coordinate_descent_tuning': True"
#: Kernels the tuner leaves alone (CachingAutotuner.coordinate_descent_tuning).
_NOT_TUNED = ("TEMPLATE", "USER_AUTOTUNE", "FIXED")


def check() -> None:
    from torch._inductor import codecache
    from torch._inductor.runtime import coordinate_descent_tuner as cdt
    from torch._inductor.runtime import triton_heuristics

    for name in ("get_field", "set_field"):
        require_attr(cdt, name, "coordinate_descent_tuner")
    tuner = require_attr(cdt, "CoordescTuner", "coordinate_descent_tuner")
    for name in ("tunable_fields", "get_neighbour_values", "is_valid_config"):
        require_attr(tuner, name, "CoordescTuner")
    params = list(inspect.signature(tuner.get_neighbour_values).parameters)
    if params[:3] != ["self", "name", "orig_val"]:
        raise CompatError(f"CoordescTuner.get_neighbour_values{tuple(params)} changed; update pcompile/compat/coordesc_ring.py")
    heuristics = require_attr(triton_heuristics, "HeuristicType", "triton_heuristics")
    for name in _NOT_TUNED:
        require_attr(heuristics, name, "HeuristicType")
    cache = require_attr(codecache, "PyCodeCache", "codecache")
    if "attrs" not in inspect.signature(cache.load_by_key_path).parameters:
        raise CompatError("PyCodeCache.load_by_key_path lost `attrs`; update pcompile/compat/coordesc_ring.py")


def wanted(source: str) -> bool:
    """Whether this kernel source will be coordinate-descent tuned on the GPU."""
    return MARKER in source


def fresh_kernel(kernel_name: str, source: str) -> Any:
    """A new CachingAutotuner from `source`, never the cached one a compile already used."""
    from torch._inductor.codecache import PyCodeCache

    key, path = PyCodeCache.write(source)
    return getattr(PyCodeCache.load_by_key_path(key, path, attrs={}), kernel_name)


def ring(autotuner: Any, steps: int = 1) -> list[Any]:
    """Configs `steps` single-field moves away from any of the kernel's configs (not themselves)."""
    from torch._inductor.runtime.coordinate_descent_tuner import get_field, set_field
    from torch._inductor.runtime.triton_heuristics import HeuristicType

    meta = getattr(autotuner, "inductor_meta", None) or {}
    if not meta.get("coordinate_descent_tuning") or steps < 1:
        return []
    if autotuner.heuristic_type in tuple(getattr(HeuristicType, n) for n in _NOT_TUNED):
        return []
    tuner = autotuner.coordesc_tuner
    seen = {_identity(c) for c in autotuner.configs or ()}
    frontier, out = list(autotuner.configs or ()), []
    for _ in range(steps):
        nxt = []
        for config in frontier:
            for field in tuner.tunable_fields:
                value = get_field(config, field)
                if value is None:
                    continue
                for new in tuner.get_neighbour_values(field, value):
                    candidate = copy.deepcopy(config)
                    set_field(candidate, field, new)
                    ident = _identity(candidate)
                    if ident in seen or not tuner.is_valid_config(candidate):
                        continue
                    seen.add(ident)
                    nxt.append(candidate)
        out += nxt
        frontier = nxt
    return out


def _identity(config: Any) -> tuple[Any, ...]:
    return (tuple(sorted(config.kwargs.items())), config.num_warps, config.num_stages)
