"""fp16 training with GradScaler under `pcompile warm`: the scaler's inf check has no value on
fakes (warm takes the finite branch) and Inductor's pad_mm timing has no GPU (warm decides
"don't pad" and says so), even in strict mode."""
from __future__ import annotations

import sys
import textwrap

import pytest

from test_warm import STOCK, warm  # noqa: E402  (same directory)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the virtual device is Linux-only")


def test_grad_scaler_fp16_step_warms_in_strict_mode(tmp_path):
    script = tmp_path / "amp_train.py"
    script.write_text(textwrap.dedent("""\
        import torch, torch.nn as nn
        m = nn.Linear(4095, 4097).cuda()  # misaligned and compute-bound: pad_mm wants GPU timings
        opt = torch.optim.AdamW(m.parameters())
        scaler = torch.amp.GradScaler("cuda")
        cm = torch.compile(m)
        for i in range(3):
            with torch.autocast("cuda", dtype=torch.float16):
                loss = cm(torch.randn(4096, 4095, device="cuda")).float().pow(2).mean()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            print(f"loss {loss.item():.4f} scale {scaler.get_scale()}")
        """))
    # (Linear(32, 32) on (4, 32) stopped asking for timings on 2.15: pad_mm no longer reaches its
    # benchmark for those tiny matmuls. Big shapes cost nothing here: they are fake tensors.)
    rc, res, log = warm(script, tmp_path / "cache", "--strict", env=STOCK)
    assert rc == 0, log[-3000:]
    rep = res["report"]
    assert rep["steps_done"] == 2 and rep["counters"]["inductor"]["fxgraph_cache_miss"] == 2
    assert rep["pad_mm_guessed"] >= 1
