"""Ranks on different GPUs share FX graph, AOTAutograd and kernel entries (issue 14, item 1).

Two real processes on the virtual device exposing two GPUs, LOCAL_RANK 0 then 1, one cache dir
(one node), each running `torch.cuda.set_device(LOCAL_RANK)` and a compiled training step
through the pcompile backend on real (virtual) CUDA tensors: kernels are launched for real
through the driver API, and the virtual device refuses a launch whose module was loaded on
another device than the current one, as a real driver does. Rank 1 must compute the same keys
as rank 0, hit rank 0's entries, and run code that names only cuda:1. With the normalisation
off (PCOMPILE_DEVICE_INDEX=keep) it must miss: the test can fail.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pcompile.inductor import _testing as t
from pcompile.vdev import build, preload
from pcompile.vdev.profile import resolve

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the virtual device is Linux-only")

#: One training step compiled with backend="pcompile" on cuda:LOCAL_RANK. No matmul (cuBLAS does
#: not run on the virtual device); graph constants (arange, full_like) carry the device index.
RANK_SCRIPT = r'''
import json, os, sys
import torch

rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(rank)
torch.manual_seed(0)

from pcompile.inductor import store_gateway, device_index
from pcompile.inductor.layer_keys import store_key
lookups = []
store_gateway.add_listener(lambda kind, key, outcome: lookups.append((kind, key, outcome)))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(64))
        self.b = torch.nn.Parameter(torch.zeros(64))
        self.ln = torch.nn.LayerNorm(64)

    def forward(self, x):
        pos = torch.arange(x.shape[-1], device=x.device, dtype=x.dtype)
        h = torch.nn.functional.gelu(self.ln(x * self.w + self.b + pos))
        return torch.where(h > 0, h, torch.full_like(h, 0.5)).sum(-1)


model = Block().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
step = torch.compile(model, backend="pcompile")
for _ in range(2):
    opt.zero_grad()
    out = step(torch.randn(16, 64, device="cuda"))
    out.float().pow(2).mean().backward()
    opt.step()

from torch._dynamo.utils import counters
from torch._inductor.codecache import PyCodeCache
from pcompile.compat import device_index as compat
from pcompile.vdev import preload
wrappers = {}
for mod in PyCodeCache.modules:
    path = getattr(mod, "__file__", None)
    if path and hasattr(mod, "call"):
        wrappers[path] = sorted(compat.indices_in(open(path).read()))
keys = sorted({(k, str(store_key(k, key)[0])) for k, key, _ in lookups if k in ("graph", "autograd")})
print("RESULT " + json.dumps({
    "out_device": str(out.device),
    "grad_devices": sorted({str(p.grad.device) for p in model.parameters()}),
    "keys": keys,
    "outcomes": sorted({(k, o) for k, _, o in lookups}),
    "counters": {k: dict(counters[k]) for k in ("inductor", "aot_autograd")},
    "device_index": device_index.counts,
    "wrappers": wrappers,
    "launches": preload.stats_here().get("cuLaunchKernel", 0),
}), flush=True)
'''


@pytest.fixture(scope="module")
def lib(vdev_dir: Path) -> Path:
    return build.library()


def run_rank(lib: Path, tmp: Path, rank: int, cache: Path, **extra: str) -> dict:
    script = t.write_script(tmp, "rank_step.py", RANK_SCRIPT)
    work = tmp / f"vdev{rank}"
    work.mkdir(exist_ok=True)
    env = preload.child_env(lib, resolve("h100"), work, strict=False, base=t.clean_env(PCOMPILE_CACHE_DIR=str(cache)),
                            devices=2)
    env.update(LOCAL_RANK=str(rank), **extra)
    proc = subprocess.run([sys.executable, str(script)], env=env, cwd=str(tmp), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def test_rank1_hits_rank0_entries_and_runs_on_its_own_gpu(lib: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    r0 = run_rank(lib, tmp_path, 0, cache)
    r1 = run_rank(lib, tmp_path, 1, cache)

    assert r0["out_device"] == "cuda:0" and r1["out_device"] == "cuda:1"
    assert r1["grad_devices"] == ["cuda:1"]
    # identical graph and autograd keys: the index left them
    assert r0["keys"] and r1["keys"], (r0, r1)
    assert {k for _, k in r1["keys"]} <= {k for _, k in r0["keys"]}
    assert r0["counters"]["aot_autograd"].get("autograd_cache_miss") == 1
    assert r1["counters"]["aot_autograd"].get("autograd_cache_hit") == 1
    assert r1["counters"]["aot_autograd"].get("autograd_cache_miss", 0) == 0
    assert r1["counters"]["inductor"].get("fxgraph_cache_miss", 0) == 0
    assert r1["counters"]["inductor"].get("fxgraph_cache_hit") == 2  # forward and backward
    assert {o for _, o in r1["outcomes"]} == {"hit"}, r1["outcomes"]
    assert r1["device_index"]["rebound"] == 2 and r1["device_index"]["refused"] == 0
    # the loaded wrappers name cuda:1 only, and their kernels really launched there
    assert r1["wrappers"] and all(found == [1] for found in r1["wrappers"].values()), r1["wrappers"]
    assert r1["launches"] > 0
    # the entry's bundled kernels were re-filed for cuda:1: no recompile, rank 0's autotune winners
    assert r1["counters"]["inductor"].get("triton_bundler_load_static_autotuner") == 4
    assert not any(k.startswith("benchmarking") for k in r1["counters"]["inductor"]), r1["counters"]
    # `pcompile explain` on the two ranks' autograd keys
    a0 = next(k for kind, k in r0["keys"] if kind == "autograd")
    a1 = next(k for kind, k in r1["keys"] if kind == "autograd")
    out = subprocess.run([sys.executable, "-m", "pcompile.cli.main", "explain", a0, a1, "--cache-dir", str(cache)],
                         env=t.clean_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "identical" in out.stdout


def test_kernel_entries_from_the_pool_serve_another_gpu(lib: Path, tmp_path: Path) -> None:
    """Kernels through pcompile's pool and store (no launch-ready kernels bundled in the FX
    entry): rank 1's kernels, named for cuda:1, hit rank 0's entries and are bound to cuda:1
    (the virtual device refuses a launch of a kernel loaded on cuda:0 while cuda:1 is current)."""
    cache = tmp_path / "cache"
    pool = {"PCOMPILE_POOL": "local", "TORCHINDUCTOR_COMPILE_THREADS": "2", "TORCHINDUCTOR_USE_STATIC_CUDA_LAUNCHER": "0"}
    run_rank(lib, tmp_path, 0, cache, **pool)
    before = t.stats(cache)
    r1 = run_rank(lib, tmp_path, 1, cache, **pool)
    delta = t.layer_delta(before, t.stats(cache))
    assert delta["kernel"]["hits"] >= 4 and delta["kernel"]["misses"] == 0, delta
    assert delta["graph"] == {"hits": 2, "misses": 0} and delta["autograd"] == {"hits": 1, "misses": 0}
    assert r1["device_index"]["kernel_rebound"] == delta["kernel"]["hits"]
    assert r1["out_device"] == "cuda:1" and r1["launches"] > 0


def test_without_normalisation_rank1_compiles_again(lib: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    keep = {"PCOMPILE_DEVICE_INDEX": "keep"}
    r0 = run_rank(lib, tmp_path, 0, cache, **keep)
    r1 = run_rank(lib, tmp_path, 1, cache, **keep)
    assert r1["out_device"] == "cuda:1"
    assert not {k for _, k in r1["keys"]} & {k for _, k in r0["keys"]}
    assert r1["counters"]["aot_autograd"].get("autograd_cache_miss") == 1
    assert r1["device_index"]["normalised"] == 0


def test_with_programs_rank1_runs_on_its_own_gpu_and_keeps_its_own_program(lib: Path, tmp_path: Path) -> None:
    """PCOMPILE_PROGRAMS=1 on both ranks of a node: rank 1 hits rank 0's AOTAutograd and FX entries,
    rebound to cuda:1 (a program's bundled entry skipped the rebinding: its backward returned cuda:0
    gradients and the job failed), and a restart of each rank runs its own program."""
    cache = tmp_path / "cache"
    r0 = run_rank(lib, tmp_path, 0, cache, PCOMPILE_PROGRAMS="1")
    r1 = run_rank(lib, tmp_path, 1, cache, PCOMPILE_PROGRAMS="1")
    assert r0["out_device"] == "cuda:0" and r1["out_device"] == "cuda:1"
    assert r1["grad_devices"] == ["cuda:1"]
    assert r1["counters"]["aot_autograd"].get("autograd_cache_hit") == 1, r1["counters"]
    assert r1["device_index"]["rebound"] == 2 and r1["device_index"]["refused"] == 0, r1["device_index"]
    again = run_rank(lib, tmp_path, 1, cache, PCOMPILE_PROGRAMS="1")
    assert ["program", "hit"] in again["outcomes"], again["outcomes"]
    assert again["out_device"] == "cuda:1" and again["grad_devices"] == ["cuda:1"]
