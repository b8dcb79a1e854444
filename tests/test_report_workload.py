"""A real CPU torch.compile run instrumented with pcompile.events (no tests here; run as a script).

Until the pcompile backend records its own events, this produces genuine ones: a backend that
wraps stock Inductor in `graph_compile`/`inductor_lowering` spans and reports the FX graph and
AOTAutograd cache outcomes it caused as `cache_lookup` events (hits carry `saved_s`, the
seconds that graph took when first compiled, kept in a side file), plus two worker processes
that each compile Triton kernels for sm_90 (no GPU needed) under `kernel_compile` spans.

    python tests/test_report_workload.py --costs FILE [--workers 2]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def traced_backend(costs_file: Path | None = None):
    """A dynamo backend: stock Inductor inside pcompile spans, with cache outcomes as events."""
    import torch  # noqa: F401
    from torch._dynamo.utils import counters
    from torch._inductor.compile_fx import compile_fx

    from pcompile.events import emit, span

    costs: dict[str, float] = json.loads(costs_file.read_text()) if costs_file and costs_file.exists() else {}

    def backend(gm: Any, example_inputs: list) -> Any:
        key = "graph-" + hashlib.sha256(gm.code.encode()).hexdigest()[:16]
        before = {(s, n): counters[s][n] for s, n in _COUNTERS}
        with span("graph_compile", key=key) as g:
            t_lower = time.time()
            with span("inductor_lowering", key=key):
                fn = compile_fx(gm, example_inputs)
            t_end = time.time()
            delta = {k: counters[k[0]][k[1]] - v for k, v in before.items()}
            hits = delta[("inductor", "fxgraph_cache_hit")] + delta[("aot_autograd", "autograd_cache_hit")]
            g.outcome = "hit" if hits and not delta[("inductor", "fxgraph_cache_miss")] else "compiled"
        saved = costs.get(key)  # the graph's first compile time goes on its first hit only
        for (section, name), n in delta.items():
            layer = "fxgraph" if section == "inductor" else "aot_autograd"
            outcome = "hit" if name.endswith("_hit") else "miss"
            for _ in range(n):
                emit("cache_lookup", t_lower, min(0.002, t_end - t_lower), layer=layer, tier="local", key=key,
                     outcome=outcome, saved_s=saved if outcome == "hit" else None)
                if outcome == "hit":
                    saved = None
        if g.outcome == "compiled" and costs_file is not None:
            costs[key] = round(t_end - t_lower, 4)
            costs_file.write_text(json.dumps(costs))
        return fn

    return backend


_COUNTERS = [("inductor", "fxgraph_cache_hit"), ("inductor", "fxgraph_cache_miss"),
             ("aot_autograd", "autograd_cache_hit"), ("aot_autograd", "autograd_cache_miss")]


def train_step_model():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.LayerNorm(64), torch.nn.GELU(), torch.nn.Linear(64, 8))
    x, y = torch.randn(16, 32), torch.randn(16, 8)
    return model, x, y


def compiled_step(costs_file: Path | None = None):
    """A compiled training step (forward + backward) and its inputs."""
    import torch

    model, x, y = train_step_model()
    cmodel = torch.compile(model, backend=traced_backend(costs_file))

    def step() -> float:
        loss = torch.nn.functional.mse_loss(cmodel(x), y)
        loss.backward()
        return float(loss.detach())

    return step


def _worker(worker: int, n: int, costs_file: Path) -> None:
    """Compile `n` Triton kernels for an sm_90 target (works without a GPU), one kernel_compile event
    each; a kernel whose cubin is already in TRITON_CACHE_DIR is a hit that saved its first compile time."""
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from pcompile.events import emit, span

    @triton.jit
    def scale_add(x, y, out, n, K: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=m) * K + tl.load(y + offs, mask=m), mask=m)

    own = costs_file.with_suffix(f".w{worker}.json")
    known: dict[str, float] = json.loads(own.read_text()) if own.exists() else {}
    cache = Path(os.environ.get("TRITON_CACHE_DIR", Path.home() / ".triton" / "cache"))
    sig = {"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32", "K": "constexpr", "BLOCK": "constexpr"}
    for i in range(n):
        key = f"triton-w{worker}-k{i}"
        before = set(cache.iterdir()) if cache.is_dir() else set()
        t0 = time.time()
        with span("kernel_compile", key=key, worker=worker) as ev:
            src = ASTSource(fn=scale_add, signature=sig, constexprs={"K": float(worker * 100 + i + 1), "BLOCK": 128})
            triton.compile(src, target=GPUTarget("cuda", 90, 64))
            hit = key in known and not (set(cache.iterdir()) - before)  # nothing new written: served from cache
            ev.outcome = "hit" if hit else "compiled"
        dur = time.time() - t0
        emit("cache_lookup", t0, min(dur, 0.001), layer="triton", tier="local", key=key, worker=worker,
             outcome="hit" if hit else "miss", saved_s=known[key] if hit else None)
        if not hit:
            known[key] = round(dur, 4)
    own.write_text(json.dumps(known))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--costs", type=Path, required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--kernels", type=int, default=3)
    ap.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker is not None:
        _worker(args.worker, args.kernels, args.costs)
        return 0
    from pcompile.events import job_id, span

    job_id()  # mint/export the job id before workers start so they inherit it
    procs = [subprocess.Popen([sys.executable, __file__, "--costs", str(args.costs), "--worker", str(w),
                               "--kernels", str(args.kernels)], env=os.environ.copy()) for w in range(args.workers)]
    step = compiled_step(args.costs)
    with span("warm_step", step=0):
        step()
    with span("warm_step", step=1):
        step()
    rc = max((p.wait() for p in procs), default=0)
    return rc


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
