"""torch.compile modes under `pcompile warm`: reduce-overhead compiles its graphs (CUDA graph
capture itself is run-time work on the GPU and is skipped, and said so)."""
from __future__ import annotations

import sys
import textwrap

import pytest

from test_warm import STOCK, warm  # noqa: E402  (same directory)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the virtual device is Linux-only")


def test_reduce_overhead_graphs_warm_without_capture(tmp_path):
    script = tmp_path / "ro_train.py"
    script.write_text(textwrap.dedent("""\
        import torch, torch.nn as nn
        m = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64)).cuda()
        cm = torch.compile(m, mode="reduce-overhead")
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for i in range(4):
            loss = cm(torch.randn(8, 64, device="cuda")).pow(2).mean()
            loss.backward(); opt.step(); opt.zero_grad()
            print(f"loss {loss.item():.3f}")
        """))
    rc, res, log = warm(script, tmp_path / "cache", env=STOCK)
    assert rc == 0, log[-3000:]
    rep = res["report"]
    assert rep["steps_done"] == 2 and rep["counters"]["inductor"]["fxgraph_cache_miss"] == 2
    assert res["written"]["aotautograd"] == 1 and rep["cudagraphs_skipped"] >= 2
