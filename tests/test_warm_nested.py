"""Nested jagged tensors on the virtual GPU, end to end through `pcompile warm`.

A script builds `torch.nested.nested_tensor(..., layout=torch.jagged)` batches on cuda and runs a
compiled SDPA block on them, forward and backward, as pytorch/tutorials' transformer_building_blocks
does. Before pcompile/compat/warm_nested.py and the mode's eager-style nested ints it failed three
ways: no ShapeEnv for the ragged size, an NJT mixing host metadata tensors with CUDA fakes, and the
compiled output's ragged size memoised as an int on fake offsets.
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

    torch.manual_seed(0)
    lin = nn.Linear(16, 48).cuda()

    def attn(x):
        q, k, v = lin(x).chunk(3, dim=-1)
        q, k, v = (t.unflatten(-1, [2, 8]).transpose(1, 2) for t in (q, k, v))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).flatten(-2)

    f = torch.compile(attn)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    for step in range(3):
        x = torch.nested.nested_tensor([torch.randn(n, 16, device="cuda") for n in (3, 5, 2 + step)],
                                       layout=torch.jagged)
        out = f(x)
        print("padded", tuple(out.to_padded_tensor(0.0).shape), "max", x._get_max_seqlen())
        out.values().sum().backward()
        opt.step()
        opt.zero_grad()
    """)


def test_nested_jagged_batches_warm_a_compiled_sdpa_block(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT)
    cmd = [sys.executable, "-m", "pcompile.cli.main", "warm", "train.py", "--target", "h100",
           "--cache-dir", str(tmp_path / "cache"), "--json", "--steps", "2"]
    env = dict(os.environ, PCOMPILE_PROGRESS="0", PCOMPILE_DISABLE="1")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=str(tmp_path))
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-4000:]
    res = json.loads([ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1])
    assert res["report"]["status"] == "stopped" and res["report"]["steps_done"] == 2, log[-3000:]
    # the ragged sizes are the host's: (3, 5, 2) then (3, 5, 3) rows, 2 heads of 8
    assert "padded (3, 5, 16) max 5" in log, log[-3000:]
    assert res["written"]["fxgraph"] >= 2 and res["written"]["triton"] >= 1, res


STRIDED = textwrap.dedent("""\
    import torch
    from torch.profiler import profile, ProfilerActivity

    lin = torch.nn.Linear(8, 8).cuda()
    nt = torch.nested.nested_tensor([torch.randn(n, 8, device="cuda") for n in (2, 3)])  # strided layout
    try:
        lin(nt)
    except RuntimeError as e:
        print("eager op on the nested tensor refused:", type(e).__name__)
    f = torch.compile(lambda t: torch.relu(lin(t)))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
        f(torch.randn(4, 8, device="cuda"))
    print("done")
    """)


def test_strided_nested_tensor_and_cuda_profiler_run_quietly(tmp_path: Path) -> None:
    """A strided nested tensor of CUDA tensors (no fake can hold one) is made on the host and named in the
    summary; a profiler asking for CUDA activities prints no CUPTI warning (a GPU host prints none)."""
    (tmp_path / "train.py").write_text(STRIDED)
    cmd = [sys.executable, "-m", "pcompile.cli.main", "warm", "train.py", "--target", "h100",
           "--cache-dir", str(tmp_path / "cache"), "--steps", "all"]
    env = dict(os.environ, PCOMPILE_PROGRESS="0", PCOMPILE_DISABLE="1")
    env.pop("KINETO_LOG_LEVEL", None)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=str(tmp_path))
    log = out.stdout + out.stderr
    assert out.returncode == 0 and "done" in log, log[-4000:]
    assert "train.py:5: 1x aten._nested_tensor_from_tensor_list.default (a fake cannot hold it: ran on CPU)" in log, log[-3000:]
    assert "CUPTI" not in log, log[-3000:]
