"""`pcompile warm --world-size W`: a torchrun-style script runs as rank 0 of W on a fake group."""
from __future__ import annotations

import sys
import textwrap

import pytest

from test_warm import warm  # noqa: E402  (same directory)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the virtual device is Linux-only")


def test_rank0_of_8_with_collectives_warms(tmp_path):
    script = tmp_path / "dist_train.py"
    script.write_text(textwrap.dedent("""\
        import os
        import torch, torch.distributed as dist, torch.nn as nn
        dist.init_process_group(backend="nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        m = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 1)).cuda()
        cm = torch.compile(m)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for step in range(3):
            loss = cm(torch.randn(8, 32, device="cuda")).mean()
            loss.backward()
            for p in m.parameters():
                dist.all_reduce(p.grad)
            opt.step(); opt.zero_grad()
            print(f"rank {dist.get_rank()}/{dist.get_world_size()} loss {loss.item():.3f}")
        """))
    rc, res, log = warm(script, tmp_path / "cache", "--world-size", "8", env={"PCOMPILE_DISABLE": "1"})
    assert rc == 0, log[-3000:]
    assert "rank 0/8" in log
    rep = res["report"]
    assert rep["status"] == "stopped" and rep["steps_done"] == 2
    assert rep["counters"]["inductor"]["fxgraph_cache_miss"] == 2 and res["written"]["aotautograd"] == 1
