"""Where does a cold torch.compile spend its time on CPU: lowering vs kernel compilation?

Why: the pool can only speed up kernel compilation (Triton / C++). If lowering dominates, only
graph-level concurrency or graph-cache hits move the first-step time (DESIGN.md, point 1).

Two measurements, each in a fresh process with empty caches (FX graph and AOTAutograd caches off):

  cpu     A small GPT training step (fwd + bwd) on CPU tensors with stock Inductor: C++ kernels.
          C++ build seconds are timed around every `_worker_compile_cpp` job.
  triton  The same GPT's forward on fake CUDA tensors (Python-spoofed H100, as in
          tools/capture_triton_kernels.py): Inductor lowers and generates Triton kernels for
          sm_90; `AsyncCompile.triton` only records each source during the compile, and the
          kernels are then compiled serially with the stock worker function, timed per kernel.

    python tools/measure_compile_split.py            # both, JSON on the last line
    python tools/measure_compile_split.py cpu|triton
    PCOMPILE_DUMP_KERNELS=k.json python tools/measure_compile_split.py triton   # also save the sources
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

LAYERS, DIM, HEADS, SEQ, BATCH, VOCAB = 4, 256, 4, 128, 4, 2048


def gpt():
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
            self.qkv, self.proj = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
            self.fc, self.out = nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)
            # a buffer, not a torch.ones() in forward: Inductor constant-folds the latter on the
            # device, which a driverless host cannot do
            self.register_buffer("mask", torch.ones(SEQ, SEQ, dtype=torch.bool).triu(1))

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
            q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (c // HEADS) ** -0.5
            att = att.masked_fill(self.mask[:t, :t], float("-inf")).softmax(-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, c))
            return x + self.out(nn.functional.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb, self.pos = nn.Embedding(VOCAB, DIM), nn.Embedding(SEQ, DIM)
            self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
            self.ln, self.head = nn.LayerNorm(DIM), nn.Linear(DIM, VOCAB)

        def forward(self, idx):
            x = self.emb(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln(x))

    return GPT()


def _metrics() -> dict[str, float]:
    from torch._dynamo.utils import compilation_time_metrics

    return {k: round(sum(v), 3) for k, v in sorted(compilation_time_metrics.items()) if sum(v) >= 0.05}


def measure_cpu() -> dict:
    import torch
    import torch._inductor.codecache as codecache

    builds: list[tuple[float, float]] = []
    original = codecache._worker_compile_cpp

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            builds.append((t0, time.perf_counter()))

    codecache._worker_compile_cpp = timed
    torch.manual_seed(0)
    model = gpt()
    step = torch.compile(lambda idx: model(idx).float().logsumexp(-1).mean())
    idx = torch.randint(0, VOCAB, (BATCH, SEQ))
    t0 = time.perf_counter()
    loss = step(idx)
    t_fwd = time.perf_counter() - t0
    loss.backward()
    total = time.perf_counter() - t0
    busy = sum(b - a for a, b in builds)
    # union of build intervals: wall time during which at least one C++ build ran
    wall, end = 0.0, 0.0
    for a, b in sorted(builds):
        if b > end:
            wall += b - max(a, end)
            end = b
    return {
        "case": "cpu training step (C++ kernels)",
        "first_step_s": round(total, 3),
        "forward_incl_compile_s": round(t_fwd, 3),
        "cpp_builds": len(builds),
        "cpp_build_cpu_s": round(busy, 3),
        "cpp_build_wall_s": round(wall, 3),
        "cpp_share_of_first_step": round(wall / total, 3),
        "compile_threads": torch._inductor.config.compile_threads,
        "dynamo_timed": _metrics(),
    }


def measure_triton() -> dict:
    import functools

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import capture_triton_kernels as cap
    import torch
    import torch._inductor.async_compile as async_compile
    from torch._subclasses.fake_tensor import FakeTensorMode

    sources: list[tuple[str, str]] = []

    def record(self, kernel_name, source_code, device_str="cuda"):
        sources.append((kernel_name, source_code))
        return None

    async_compile.AsyncCompile.triton = record
    torch._inductor.config.compile_threads = 1  # lowering alone, serially: no pool involved
    # This pass evaluates small constants on the device, which a driverless host cannot do.
    torch._inductor.config.joint_graph_constant_folding = False
    mode = FakeTensorMode()
    with mode, torch.device("cuda"):
        model = gpt()
        idx = torch.randint(0, VOCAB, (BATCH, SEQ))
    cap._spoof_cuda()
    t0 = time.perf_counter()
    with mode, torch.no_grad():
        try:
            torch.compile(model)(idx)
        except Exception as exc:  # running the compiled code needs a driver; compilation is over by then
            if not sources:
                raise
            print(f"(expected after compile) {type(exc).__name__}", file=sys.stderr)
    lowering = time.perf_counter() - t0
    metrics = _metrics()
    from torch._inductor.codecache import _load_triton_kernel_from_source
    from torch._inductor.runtime.compile_tasks import _worker_compile_triton

    from pcompile.compat import pool_hook

    per_kernel = []
    t1 = time.perf_counter()
    for name, src in dict.fromkeys(sources):
        k0 = time.perf_counter()
        with pool_hook._no_gpu_driver_setup_in_worker():
            _worker_compile_triton(functools.partial(_load_triton_kernel_from_source, name, src), {}, {"use_static_triton_launcher": True})
        per_kernel.append(round(time.perf_counter() - k0, 3))
    triton = time.perf_counter() - t1
    dump = os.environ.get("PCOMPILE_DUMP_KERNELS")
    if dump:  # tools/bench_pool.py reuses these real kernels
        with open(dump, "w") as f:
            json.dump({"torch": torch.__version__, "kernels": [{"name": n, "source": src} for n, src in dict.fromkeys(sources)]}, f)
    return {
        "case": "gpt forward on fake cuda (Triton kernels, sm_90)",
        "compile_without_triton_s": round(lowering, 3),
        "triton_kernels": len(per_kernel),
        "triton_compile_serial_s": round(triton, 3),
        "triton_share_if_serial": round(triton / (triton + lowering), 3),
        "per_kernel_s": sorted(per_kernel, reverse=True),
        "dynamo_timed": metrics,
    }


def main(argv: list[str]) -> int:
    which = argv[1] if len(argv) > 1 else "both"
    if which == "both":
        results = []
        for case in ("cpu", "triton"):
            env = dict(os.environ)
            with tempfile.TemporaryDirectory() as tmp:
                env.update(
                    {
                        "TORCHINDUCTOR_CACHE_DIR": os.path.join(tmp, "inductor"),
                        "TRITON_CACHE_DIR": os.path.join(tmp, "triton"),
                        "TORCHINDUCTOR_FX_GRAPH_CACHE": "0",
                        "TORCHINDUCTOR_AUTOGRAD_CACHE": "0",
                    }
                )
                out = subprocess.run([sys.executable, __file__, case], env=env, capture_output=True, text=True)
                if out.returncode != 0:
                    print(out.stderr[-3000:], file=sys.stderr)
                    return 1
                results.append(json.loads(out.stdout.strip().splitlines()[-1]))
        for r in results:
            print(json.dumps(r, indent=1))
        import torch

        print(json.dumps({"torch": torch.__version__, "cpus": len(os.sched_getaffinity(0)), "results": results}))
        return 0
    result = measure_cpu() if which == "cpu" else measure_triton()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
