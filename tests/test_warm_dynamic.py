"""Dynamic shapes fully warmed (issue 25 part 5), GPU-free.

A small attention model is trained on two sequence lengths in turn, compiled with
`dynamic=True` or left to automatic dynamic (`dynamic=None`: static graph for the first length,
a dynamic recompile when the length changes). The warm must see both lengths (its step limit
must not stop it before the second shape), compile every graph the GPU job will look up, and a
second warm of the same script -- standing in for the GPU job, which looks up the same FX graph
and AOTAutograd keys from the same cache -- must compile nothing and hit every graph.
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
    import sys
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    dynamic = {"true": True, "auto": None}[sys.argv[1]]

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(64, 32)
            self.qkv = nn.Linear(32, 96)
            self.head = nn.Linear(32, 64)

        def forward(self, ids, labels):
            x = self.emb(ids)
            q, k, v = self.qkv(x).view(x.shape[0], x.shape[1], 3, 2, 16).unbind(2)
            y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
            x = x + y.transpose(1, 2).reshape(x.shape)
            return F.cross_entropy(self.head(x).flatten(0, 1), labels.flatten())

    model = M().cuda()
    cm = torch.compile(model, dynamic=dynamic)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(0)
    for step in range(6):
        T = (32, 16)[step % 2]  # full length, then half, in turn
        ids = torch.randint(0, 64, (2, T), generator=g)
        loss = cm(ids.cuda(), ids.cuda())
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step} T={T}")
    """)


def warm(job: Path, cache: Path, mode: str, **extra_env: str) -> tuple[int, dict, str]:
    cmd = [sys.executable, "-m", "pcompile.cli.main", "warm", str(job / "train.py"), "--target", "h100",
           "--cache-dir", str(cache), "--json", "--", mode]
    env = dict(os.environ, PCOMPILE_PROGRESS="0", PCOMPILE_DISABLE="1", TORCH_LOGS="recompiles", **extra_env)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=str(job))
    last = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    return out.returncode, json.loads(last[-1]) if last else {}, out.stdout + out.stderr


@pytest.mark.parametrize("mode", ["true", "auto"])
def test_both_lengths_are_warmed_and_a_second_run_compiles_nothing(tmp_path, mode):
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.py").write_text(SCRIPT)
    cache = tmp_path / "cache"
    rc, res, log = warm(job, cache, mode)
    assert rc == 0, log[-4000:]
    rep = res["report"]
    # the default 2 steps end at the third backward: both lengths ran forward and backward
    assert rep["steps_done"] == 2 and "step 1 T=16" in log, log[-3000:]
    c = rep["counters"]
    fx_miss, aot_saved = c["inductor"]["fxgraph_cache_miss"], c["aot_autograd"]["autograd_cache_saved"]
    aot_restarts = c["aot_autograd"]["autograd_cache_miss"] - aot_saved  # lookups Dynamo restarts: stock misses them too
    # dynamic=True: one forward and one backward graph serve both lengths; automatic dynamic: the
    # static graph for 32, then the dynamic recompile for 16 (which 32 then reuses)
    assert (fx_miss, aot_saved) == ((2, 1) if mode == "true" else (4, 2)), (c, log[-3000:])
    assert ("Recompiling" in log) == (mode == "auto"), log[-3000:]

    rc, res2, log = warm(job, cache, mode)
    c2 = res2["report"]["counters"]
    assert rc == 0, log[-3000:]
    assert c2["inductor"].get("fxgraph_cache_miss", 0) == 0 and c2["inductor"]["fxgraph_cache_hit"] == fx_miss, c2
    assert c2["aot_autograd"]["autograd_cache_hit"] == aot_saved, c2
    assert c2["aot_autograd"].get("autograd_cache_miss", 0) == aot_restarts and not c2["aot_autograd"].get("autograd_cache_saved"), c2
    assert res2["written"] == {"fxgraph": 0, "aotautograd": 0, "triton": 0}


def test_automatic_dynamic_profile_is_kept_in_the_cache_dir_for_the_next_job(tmp_path):
    """With a job id (torch.compiler.config.job_id / TORCH_COMPILE_JOB_ID), torch >= 2.6 keeps
    automatic-dynamic "code state" (torch._dynamo.pgo) in Inductor's cache dir, which pcompile points
    at <cache>/inductor: the warm writes it there, and the next job with the same job id and cache dir
    compiles the dynamic graph at once, which the warm has already compiled (no recompile, all hits).
    Without a job id torch keeps none, so stock and warm alike recompile once (test above)."""
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.py").write_text(SCRIPT)
    cache = tmp_path / "cache"
    rc, res, log = warm(job, cache, "auto", TORCH_COMPILE_JOB_ID="demo-job")
    assert rc == 0 and "Recompiling" in log, log[-3000:]
    states = list((cache / "inductor" / "dynamo").glob("code_state_demo-job*.pkl"))
    assert len(states) == 1 and str(tmp_path) not in states[0].name, states
    rc, res2, log = warm(job, cache, "auto", TORCH_COMPILE_JOB_ID="demo-job")
    c2 = res2["report"]["counters"]
    assert rc == 0 and "Recompiling" not in log, log[-3000:]
    assert c2["inductor"].get("fxgraph_cache_miss", 0) == 0 and c2["inductor"]["fxgraph_cache_hit"] == 2, c2
    assert c2["aot_autograd"].get("autograd_cache_miss", 0) == 0 and res2["written"]["fxgraph"] == 0, c2
