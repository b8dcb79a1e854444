"""A warm that could not write what it compiled fails, saying so (issue 32: on a full file system
it printed "written: 0 ... entries", then that the GPU job hits them, and exited 0).

Two signals: the child's own word that its cache dir failed (private_dir: full, read-only,
gone...) or that writes to the cache failed (the store's write errors), and, whatever the cause,
a warm that compiled something and wrote nothing at all.
"""
from __future__ import annotations

from typing import Any

#: look-up layers whose misses are compiles the warm should have written. Not autograd: a frame whose
#: analysis Dynamo restarts (TensorifyScalarRestartAnalysis) looks its AOTAutograd key up, misses and
#: never stores it, in stock too, so a second warm with everything cached still counts such a miss.
_COMPILED_LAYERS = ("graph", "kernel")


def cache_fault() -> str | None:
    """In the warm child, at its end: why its compiles did not all reach the cache, or None."""
    from pcompile.inductor import private_dir
    from pcompile.store import compose

    if private_dir.active():
        return private_dir.reason() or "the cache dir could not be used"
    st = compose.opened_store()
    errors = int(st.stats.data.get("write_errors", 0)) if st is not None else 0
    if errors:
        return f"{errors} write{'s' if errors != 1 else ''} to the cache failed"
    return None


def compiled(report: dict[str, Any], lookups: dict[str, dict[str, Any]] | None) -> int:
    """How many graphs and kernels the warm compiled (cache misses) and should have written: not
    the graphs it keeps out of the cache on purpose (a max-autotune graph left for the GPU job to
    tune: a rewarm of a store the GPU job has not tuned yet compiles it again, writes nothing, and
    did its job; graphs Inductor itself does not cache)."""
    if lookups is not None:
        graphs, kernels = (int(lookups.get(layer, {}).get("misses", 0)) for layer in _COMPILED_LAYERS)
    else:
        graphs, kernels = int((report.get("counters") or {}).get("inductor", {}).get("fxgraph_cache_miss", 0)), 0
    unwritten = int((report.get("left_for_gpu_tuning") or {}).get("fx_graph", 0))
    unwritten += sum(int(v) for v in (report.get("fx_cache_bypassed") or {}).values())
    return max(0, graphs - unwritten) + kernels


def problem(report: dict[str, Any], written: dict[str, int], lookups: dict[str, dict[str, Any]] | None,
            cache_dir: Any) -> str | None:
    """The error of a warm that ran but wrote less than it compiled, or None."""
    fault = report.get("cache_fault")
    n = compiled(report, lookups)
    if not fault and (not n or any(written.values())):
        return None
    what = "nothing" if not any(written.values()) else "less than it compiled"
    why = f" ({fault})" if fault else ""
    return (f"the warm compiled {n} graphs and kernels but wrote {what} to {cache_dir}{why}, so the GPU job will not "
            "find them there; fix the cache dir (free space, permissions) or choose another with --cache-dir, then warm again")
