"""Values a script branches on (issue 25 class 11), end to end through `pcompile warm`.

Labels copied to the GPU keep their real values through the ops a loss function applies to
them, so `n = valid.sum().item(); if n == 0: return constant` takes the GPU job's path and the
compiled loss and its backward are warmed; `torch.where`/`nonzero` indexing gives the real
number of rows, so the compiled loss is warmed at the shapes the GPU job will see. Model outputs
stay placeholders: a branch on one is still listed in the summary, and a branch on the host
data is not. A second warm compiles nothing.
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
    import torch.nn as nn
    import torch.nn.functional as F

    V = 32
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(V, 16), nn.Linear(16, V)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ce = torch.compile(lambda logits, y: F.cross_entropy(logits, y, ignore_index=-100))

    def loss_fn(logits, labels):
        valid = labels != -100
        n = valid.sum().item()
        if n == 0:
            return torch.zeros((), device=logits.device)  # "no valid tokens": no graph to backward
        idx = torch.where(valid.view(-1))[0]
        rows = logits.view(-1, V)[idx]
        print(f"valid tokens {n}, rows {rows.shape[0]}, nonzero {torch.nonzero(valid).shape[0]}")
        return ce(rows, labels.view(-1)[idx])

    g = torch.Generator().manual_seed(1)
    for step in range(4):
        tokens = torch.randint(0, V, (4, 8), generator=g)
        labels = tokens.clone()
        labels[:, : 2 + step] = -100  # prompt tokens masked: a different count every step
        logits = model(tokens.cuda())
        loss = loss_fn(logits, labels.to("cuda"))
        if logits.mean().item() > 1e6:  # a branch on a model output: still a placeholder
            print("diverged")
        loss.backward()
        opt.step()
        opt.zero_grad()
    """)


def warm(job: Path, cache: Path) -> tuple[int, dict, str]:
    cmd = [sys.executable, "-m", "pcompile.cli.main", "warm", str(job / "train.py"), "--target", "h100",
           "--cache-dir", str(cache), "--json", "--steps", "3"]
    env = dict(os.environ, PCOMPILE_PROGRESS="0", PCOMPILE_DISABLE="1")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=str(job))
    last = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    return out.returncode, json.loads(last[-1]) if last else {}, out.stdout + out.stderr


def test_branches_on_host_data_take_the_gpu_path_and_warm_the_compiled_loss(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.py").write_text(SCRIPT)
    cache = tmp_path / "cache"
    rc, res, log = warm(job, cache)
    assert rc == 0, log[-4000:]
    rep = res["report"]
    assert rep["status"] == "stopped" and rep["steps_done"] == 3, log[-3000:]
    # the real counts: 32 labels, 2+step of 8 masked in each of 4 rows
    for step, n in enumerate((24, 20, 16)):
        assert f"valid tokens {n}, rows {n}, nonzero {n}" in log, log[-3000:]
    c = rep["counters"]
    assert c["inductor"]["fxgraph_cache_miss"] >= 2 and c["aot_autograd"]["autograd_cache_miss"] >= 1, c
    assert res["written"]["fxgraph"] >= 2 and res["written"]["aotautograd"] >= 1
    lines = {ln["source"] for ln in rep["reads"]["lines"]}
    assert any("logits.mean().item()" in s for s in lines), lines  # the placeholder branch is listed
    assert not any("valid" in s or "nonzero" in s or "rows" in s for s in lines), lines  # host data is not
    assert any("logits.mean().item()" in ln for ln in res["lines"])

    rc, res2, log = warm(job, cache)
    c = res2["report"]["counters"]
    assert rc == 0 and c["inductor"].get("fxgraph_cache_miss", 0) == 0 and c["aot_autograd"].get("autograd_cache_miss", 0) == 0, log[-3000:]
    assert res2["written"] == {"fxgraph": 0, "aotautograd": 0, "triton": 0}
