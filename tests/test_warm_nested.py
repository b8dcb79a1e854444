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
