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


PERM_SCRIPT = textwrap.dedent("""\
    import torch
    import torch.nn as nn

    N, B = 64, 16
    labels = torch.arange(N).remainder(10).cuda()
    keep = torch.tensor([True] * N).cuda()  # which examples this run trains on (all of them)
    model = torch.compile(nn.Linear(8, 10).cuda())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def batches():
        # an on-device loader: shuffle, keep the subset, fill batches until one is full
        batch, pointer, order, epochs = torch.empty(0, dtype=torch.long, device="cuda"), N, None, 0
        while True:
            if pointer >= N:
                epochs += 1
                if epochs > 20:
                    raise SystemExit("no batch filled in 20 epochs")
                perm = torch.randperm(N, device="cuda")
                order, pointer = perm[keep[perm]], 0
            batch = torch.cat([batch, order[pointer:pointer + B - len(batch)]])
            pointer += B
            if len(batch) == B:
                yield batch
                batch = torch.empty(0, dtype=torch.long, device="cuda")

    for step, idx in enumerate(batches()):
        print(f"batch {len(idx)} label sum {int(labels[idx].sum())} of {int(labels.sum())} kept {int(keep[idx].sum())}")
        loss = nn.functional.cross_entropy(model(torch.randn(B, 8, device="cuda")), labels[idx])
        loss.backward(); opt.step(); opt.zero_grad()
    """)


def test_a_random_permutation_is_one_so_on_device_loaders_fill_their_batches(tmp_path):
    """randperm on the virtual device reads as the identity permutation: host data indexed by it
    keeps its values and a selection through it is not empty (zeros: the loader above never
    filled a batch and spun until the timeout)."""
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.py").write_text(PERM_SCRIPT)
    cmd = [sys.executable, "-m", "pcompile.cli.main", "warm", str(job / "train.py"), "--target", "h100",
           "--cache-dir", str(tmp_path / "cache"), "--json", "--steps", "2"]
    env = dict(os.environ, PCOMPILE_PROGRESS="0", PCOMPILE_DISABLE="1")
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env, cwd=str(job))
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the loader never filled a batch: {str(e.stdout)[-2000:]}")
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-3000:]
    # the first 16 of the identity permutation: labels 0..9, 0..5 (sum 60)
    assert "batch 16 label sum 60 of 276 kept 16" in log, log[-3000:]


FACTORY_SCRIPT = textwrap.dedent("""\
    import torch
    for step in range(3):
        with torch.inference_mode():  # Lightning's evaluation loop, then its dataloader checks
            junk = torch.tensor([7] * 64, device="cuda")  # freed: the next blocks reuse its memory
        del junk
        total = torch.tensor(40 + step, device="cuda")  # has_len_all_ranks: torch.tensor(len(loader), device=...)
        if total == 0:
            print("zero length")
        counts = torch.as_tensor([1, 2, 3], device="cuda")
        print(f"step {step}: {(total + 1).item()} {counts.sum().item()} {(counts * total).tolist()}")
    """)


def test_torch_tensor_made_on_the_device_keeps_its_values(tmp_path):
    """torch.tensor(data, device="cuda") copies to the device below the fake mode: the fake mode met
    a real tensor on the virtual device and took it as the shadow, so ops on it ran kernels the
    device swallows and read back whatever that memory held (zeros, or another tensor's bytes)."""
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.py").write_text(FACTORY_SCRIPT)
    code, res, log = warm(job, tmp_path / "cache")
    assert code == 0, log[-3000:]
    for step in range(3):
        assert f"step {step}: {41 + step} 6 {[40 + step, 2 * (40 + step), 3 * (40 + step)]}" in log, log[-3000:]
    assert "zero length" not in log
    assert res["report"]["reads"]["total"] == 0, res["report"]["reads"]


BREAK_SCRIPT = textwrap.dedent("""\
    import torch

    @torch.compile
    def f(x, mask):  # nn.Transformer's _detect_is_causal_mask, inside a compiled forward
        causal = torch.triu(torch.full((4, 4), float("-inf"), device=mask.device), diagonal=1)
        if bool((mask == causal).all()):  # graph break: the read runs eagerly, mid-function
            return x + 1
        return x - 1

    mask = torch.triu(torch.full((4, 4), float("-inf")), diagonal=1).to("cuda")
    for step in range(2):
        x = torch.randn(4, device="cuda", requires_grad=True)
        f(x, mask).sum().backward()
    """)


def test_a_read_after_a_graph_break_is_not_compiled(tmp_path):
    """A read of a virtual value runs pcompile's Python code where the GPU runs a C method; run
    eagerly inside a compiled function (after its graph break), Dynamo tried to compile the read's
    frames and warned "Dynamo does not know how to trace the builtin `sys._getframe`"."""
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.py").write_text(BREAK_SCRIPT)
    code, res, log = warm(job, tmp_path / "cache")
    assert code == 0, log[-3000:]
    # Triton 3.9 warns once that TRITON_DEFAULT_FP_FUSION is unset on every host that compiles a kernel
    warned = [ln for ln in log.splitlines() if "UserWarning" in ln and "TRITON_DEFAULT_FP_FUSION" not in ln]
    assert "_getframe" not in log and warned == [], log[-3000:]
    assert [ln["line"] for ln in res["report"]["reads"]["lines"]] == [6], res["report"]["reads"]
