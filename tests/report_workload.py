"""A real CPU training step compiled with `backend="pcompile"`, whose events (`graph_compile`,
`cache_lookup`, `kernel_compile` of its C++ kernels) are the backend's own; a helper module of
test_report.py and test_events_profiler.py, run as a script (it holds no tests).

Beside it, two worker processes each compile Triton kernels for sm_90 (no GPU needed) under
`kernel_compile` spans, as a node pool's workers would on a GPU host (this host has none), so
the report has worker lanes; a kernel already in TRITON_CACHE_DIR is a hit that saved its first
compile time (kept in a side file).

    python tests/report_workload.py --costs FILE [--workers 2]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def train_step_model():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.LayerNorm(64), torch.nn.GELU(), torch.nn.Linear(64, 8))
    x, y = torch.randn(16, 32), torch.randn(16, 8)
    return model, x, y


def compiled_step():
    """A training step (forward + backward) compiled by the pcompile backend."""
    import torch

    model, x, y = train_step_model()
    cmodel = torch.compile(model, backend="pcompile")

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
    step = compiled_step()
    with span("warm_step", step=0):
        step()
    with span("warm_step", step=1):
        step()
    rc = max((p.wait() for p in procs), default=0)
    return rc


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
