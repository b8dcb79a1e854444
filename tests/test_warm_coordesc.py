"""A warm compiles the configs a GPU job's coordinate-descent tuning tries first (GPU-free).

With `coordinate_descent_tuning` on, the GPU job compiles candidate configs one by one at each
kernel's first launch. The warm cannot time them but compiles the ring around every config of
each tuned kernel; a later process with the script's config must then find every ring cubin in
the store (Triton never builds IR), and without the ring (PCOMPILE_WARM_COORDESC_STEPS=0) it must
not: the check fails when the warm skipped them.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the virtual device is Linux-only")

SCRIPT = textwrap.dedent("""\
    import torch
    import torch._inductor.config as ic
    ic.coordinate_descent_tuning = True

    def f(x, w):
        return torch.nn.functional.gelu(x @ w).softmax(-1).sum(0)

    cf = torch.compile(f)
    x = torch.randn(256, 512, device="cuda")
    w = torch.randn(512, 512, device="cuda")
    for _ in range(2):
        y = cf(x, w)
    print("done", tuple(y.shape))
    """)

# A stand-in for the GPU job's tuner: the script's config, an empty Triton dir, pcompile's store
# behind Triton's cache manager; compile each tuned kernel's ring and count Triton IR builds.
CHECK = textwrap.dedent("""\
    import json, sys
    import torch._inductor.config as ic
    ic.coordinate_descent_tuning = True
    from triton.compiler import compiler as tc
    from pcompile.compat import coordesc_ring
    from pcompile.compat.pool_hook import _no_gpu_driver_setup_in_parent

    built = []
    make_ir = tc.ASTSource.make_ir
    tc.ASTSource.make_ir = lambda self, *a, **kw: (built.append(1), make_ir(self, *a, **kw))[1]
    out = []
    for path in sys.argv[1:]:
        src = open(path).read()
        name = next(l.split("def ")[1].split("(")[0] for l in src.splitlines() if l.startswith("def triton_"))
        with _no_gpu_driver_setup_in_parent():
            k = coordesc_ring.fresh_kernel(name, src)
            k.configs = coordesc_ring.ring(k, 1)
            n = len(k.configs)
            before = len(built)
            k.precompile(warm_cache_only=True)
        out.append({"kernel": name, "ring": n, "built": len(built) - before})
    print(json.dumps(out))
    """)


def _warm(tmp: Path, cache: Path, steps: str) -> dict:
    job = tmp / "job"
    job.mkdir(exist_ok=True)
    (job / "train.py").write_text(SCRIPT)
    env = dict(os.environ, PCOMPILE_PROGRESS="0", PCOMPILE_WARM_COORDESC_STEPS=steps, CUDA_VISIBLE_DEVICES="")
    cmd = [sys.executable, "-m", "pcompile.cli.main", "warm", str(job / "train.py"), "--target", "h100",
           "--cache-dir", str(cache), "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=str(job))
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    return json.loads([ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1])


def _tuned_sources(cache: Path) -> list[str]:
    found = []
    for p in (cache / "inductor").rglob("*.py"):
        text = p.read_text(errors="replace")
        tuned = "'coordinate_descent_tuning': True" in text and "@triton_heuristics." in text
        if tuned and "def call(" not in text and "template" not in text:  # one kernel, not a graph's wrapper
            found.append(str(p))
    return found


def _check(tmp: Path, cache: Path, sources: list[str]) -> list[dict]:
    (tmp / "check.py").write_text(CHECK)
    env = dict(os.environ, PCOMPILE_CACHE_DIR=str(cache), TRITON_CACHE_DIR=str(tmp / f"triton-{cache.name}"),
               TRITON_CACHE_MANAGER="pcompile.inductor.triton_cache:StoreCacheManager", CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([sys.executable, str(tmp / "check.py"), *sources], capture_output=True, text=True,
                         timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_ring_configs_are_in_the_store_after_a_warm_and_missing_without_it(tmp_path):
    cache = tmp_path / "cache"
    res = _warm(tmp_path, cache, "1")
    cd = res["report"]["coordesc"]
    sources = _tuned_sources(cache)
    assert sources, "the warm wrote no coordinate-descent-tuned kernel"
    got = _check(tmp_path, cache, sources)
    assert sum(r["ring"] for r in got) == cd["configs"] > 0, (got, cd)
    assert all(r["built"] == 0 for r in got), got  # every candidate came from the store

    bare = tmp_path / "bare"
    res0 = _warm(tmp_path, bare, "0")
    assert res0["report"]["coordesc"]["configs"] == 0
    got0 = _check(tmp_path, bare, _tuned_sources(bare))
    assert sum(r["built"] for r in got0) == sum(r["ring"] for r in got0) > 0, got0


def test_the_warm_waits_for_candidates_only_within_its_budget(tmp_path, monkeypatch):
    """The stall watchdog counts only the warm child's CPU, not the pool's: the drain is bounded
    and says how many kernels' candidates were still compiling."""
    import time
    from concurrent.futures import Future

    from pcompile.inductor.kernel_router import KernelRouter

    monkeypatch.setenv("PCOMPILE_CACHE_DIR", str(tmp_path / "pc"))
    router = KernelRouter("local")
    try:
        done: Future = Future()
        done.set_result([])
        router._speculative = [Future(), done]  # one never finishes
        t0 = time.monotonic()
        assert router.drain_speculation(budget_s=0.3) == (0, 0, 1)
        assert time.monotonic() - t0 < 5
        assert router.drain_speculation(budget_s=0.3) == (0, 0, 0)  # drained: nothing left to wait for
    finally:
        router.shutdown()
