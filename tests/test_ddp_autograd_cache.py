"""DDP restarts load AOTAutograd entries for DDPOptimizer's bucket-split graphs (issue 35, item 1).

Stock torch bypasses AOTAutograd's cache for these graphs ("Won't cache a graph with
fakify_first_call enabled"), so every rank re-traced every bucket on every start. A real
2-process gloo DDP job on the CPU: the second start loads every bucket's entry, and computes
what the first start and a stock run computed.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import child_env

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(sys.platform != "linux", reason="gloo on 127.0.0.1, Linux CI only")]

BUCKETS = 2

JOB = textwrap.dedent("""\
    import json, os, time
    import torch, torch.distributed as dist, torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    class Stack(nn.Module):  # the script's own module: Dynamo traces it (not nn.Sequential's frame)
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(512, 512) for _ in range(%(buckets)d))  # 1 MiB a layer

        def forward(self, x):
            for layer in self.layers:
                x = torch.relu(layer(x))
            return x

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = Stack()
    ddp = torch.compile(DDP(model, bucket_cap_mb=1), backend=os.environ["JOB_BACKEND"])  # a bucket per layer
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1 + rank)
    losses = []
    for step in range(3):
        t0 = time.perf_counter()
        loss = ddp(torch.randn(8, 512, generator=g)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    from torch._dynamo.utils import counters
    print("RESULT " + json.dumps({"rank": rank, "losses": losses, "aot": dict(counters["aot_autograd"])}), flush=True)
    dist.destroy_process_group()
    """) % {"buckets": BUCKETS}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(script: Path, env: dict[str, str], timeout: float = 500) -> list[dict]:
    """Both ranks' RESULT lines, rank 0 first."""
    port = _free_port()
    procs = []
    for rank in range(2):
        e = child_env({**env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                       "WORLD_SIZE": "2", "LOCAL_RANK": str(rank)})
        procs.append(subprocess.Popen([sys.executable, str(script)], env=e, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    results = []
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out[-4000:]
        line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
        assert line, out[-4000:]
        results.append(json.loads(line[-1][len("RESULT "):]))
    return sorted(results, key=lambda r: r["rank"])


def test_a_ddp_restart_loads_every_bucket_graph_from_aotautograd_and_computes_the_same(tmp_path, monkeypatch):
    for name in list(os.environ):
        if name.startswith(("PCOMPILE", "TORCHINDUCTOR", "TORCH_LOGS")):
            monkeypatch.delenv(name)
    script = tmp_path / "ddp_job.py"
    script.write_text(JOB)
    pc = {"JOB_BACKEND": "pcompile", "PCOMPILE_CACHE_DIR": str(tmp_path / "cache"), "PCOMPILE_EVENTS": "0",
          "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    first = run_job(script, pc)
    again = run_job(script, pc)
    stock = run_job(script, {"JOB_BACKEND": "inductor", "PCOMPILE_DISABLE": "1",
                             "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "stock")})

    for rank in range(2):
        aot = again[rank]["aot"]
        assert aot.get("autograd_cache_hit", 0) == BUCKETS, (rank, aot, first[rank]["aot"])
        assert not aot.get("autograd_cache_bypass") and not aot.get("autograd_cache_miss"), (rank, aot)
        assert again[rank]["losses"] == first[rank]["losses"] == stock[rank]["losses"], (rank, again, first, stock)
    # the first start's buckets were stored once between the two ranks, not bypassed
    assert not any(r["aot"].get("autograd_cache_bypass") for r in first), first
    assert sum(r["aot"].get("autograd_cache_saved", 0) for r in first) == BUCKETS, first


def test_with_a_lazily_lowered_backward_the_split_graphs_keep_torchs_bypass(tmp_path, monkeypatch):
    """DDP's lazy backward reads one bucket's fw_metadata per lazily compiled bucket; a hit bucket
    compiles none, so a mix of hits and misses would hand a bucket its neighbour's: stock there."""
    for name in list(os.environ):
        if name.startswith(("PCOMPILE", "TORCHINDUCTOR", "TORCH_LOGS")):
            monkeypatch.delenv(name)
    script = tmp_path / "ddp_job.py"
    script.write_text(JOB)
    lazy = run_job(script, {"JOB_BACKEND": "pcompile", "PCOMPILE_CACHE_DIR": str(tmp_path / "cache"),
                            "PCOMPILE_EVENTS": "0", "PCOMPILE_EAGER_BACKWARD": "0",
                            "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")})
    for r in lazy:
        assert r["aot"].get("autograd_cache_bypass") == BUCKETS and not r["aot"].get("autograd_cache_saved"), lazy
