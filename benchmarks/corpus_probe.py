"""Run an unchanged script and measure its first step from the outside (GPU benchmark of the corpus).

    python benchmarks/corpus_probe.py --out RESULT.json --steps N -- SCRIPT [ARGS...]

The script runs as `__main__` (cwd and argv as given). The step boundary is the same one
`pcompile warm` uses, `torch.autograd.backward`, which user code calls eagerly once per step:
step k ends when backward k returns (after a device synchronize), and the script is stopped at
backward N+1. Scripts without a backward (inference) run to their end; their "first step" is
then the whole run (measured the same way for stock and pcompile, so the ratio still compares). Written to RESULT.json:
first-step seconds (from the script's start), per-step seconds, the loss passed to each backward,
Dynamo/Inductor/AOTAutograd cache counters, and the compile time torch recorded.
"""
from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import time
from typing import Any


class _Stop(BaseException):
    pass


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("rest", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    rest = a.rest[1:] if a.rest[:1] == ["--"] else a.rest
    script, args = rest[0], rest[1:]

    t_start = time.perf_counter()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _stack_sampler import start_from_env

    sys.path.pop(0)
    sampler = start_from_env()
    import torch

    autoloaded = bool(os.environ.get("PCOMPILE") == "1" and os.environ.get("TORCHINDUCTOR_CACHE_DIR"))
    if os.environ.get("PCOMPILE") == "1":
        import pcompile

        pcompile.install()  # what PCOMPILE=1's autoload does; explicit, so the benchmark never runs stock by accident

    marks: list[float] = []
    losses: list[float | None] = []
    original = torch.autograd.backward

    def backward(tensors: Any, *bargs: Any, **kwargs: Any) -> Any:
        if len(marks) >= a.steps:
            raise _Stop()
        loss = tensors[0] if isinstance(tensors, (list, tuple)) else tensors
        result = original(tensors, *bargs, **kwargs)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        marks.append(time.perf_counter() - t_start)
        try:
            losses.append(float(loss.detach().float().mean()))
        except Exception:
            losses.append(None)
        return result

    torch.autograd.backward = backward
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    status = "completed"
    try:
        runpy.run_path(script, run_name="__main__")
    except _Stop:
        status = "stopped"
    except SystemExit as exc:
        status = "completed" if exc.code in (0, None) else f"exit {exc.code}"
    wall = time.perf_counter() - t_start
    from torch._dynamo.utils import counters

    c = {k: dict(v) for k, v in counters.items() if k in ("inductor", "aot_autograd", "stats", "frames")}
    steps = [marks[0]] + [b - a_ for a_, b in zip(marks, marks[1:])] if marks else []
    result = {"status": status, "pcompile_autoloaded": autoloaded, "wall_s": wall, "first_step_s": marks[0] if marks else wall,
              "step_s": steps, "losses": losses, "counters": c,
              "fx": [c.get("inductor", {}).get("fxgraph_cache_hit", 0), c.get("inductor", {}).get("fxgraph_cache_hit", 0) + c.get("inductor", {}).get("fxgraph_cache_miss", 0)],
              "frames": int(c.get("frames", {}).get("total", 0)),
              "aot": [c.get("aot_autograd", {}).get("autograd_cache_hit", 0), c.get("aot_autograd", {}).get("autograd_cache_hit", 0) + c.get("aot_autograd", {}).get("autograd_cache_miss", 0)]}
    result.update(_phases())
    if sampler is not None:
        sampler.write(os.environ["PROBE_STACKS"])
    with open(a.out, "w") as fh:
        json.dump(result, fh)
    print("probe:", json.dumps({k: result[k] for k in ("status", "first_step_s", "fx", "aot")}), flush=True)
    return 0


def _phases() -> dict[str, Any]:
    """Where the compile time went (issue 24): torch's own phase timers, summed per phase (nested
    timers overlap, so they are not a sum), and CPU-seconds of this process and its children."""
    import resource

    out: dict[str, Any] = {}
    try:
        from torch._dynamo.utils import compilation_time_metrics

        out["phases_s"] = {k: round(sum(v), 3) for k, v in compilation_time_metrics.items() if v}
    except Exception as exc:  # a torch without the table: say so, measure the rest
        out["phases_s"] = {"unavailable": str(exc)}
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    out["cpu_s"] = {"self": round(me.ru_utime + me.ru_stime, 2), "children": round(kids.ru_utime + kids.ru_stime, 2)}
    return out


if __name__ == "__main__":
    sys.exit(main())
