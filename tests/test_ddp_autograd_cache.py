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
    import hashlib, json, os, time
    import torch, torch.distributed as dist, torch.nn as nn
    from torch._dynamo.backends import distributed as ddp_backend
    from torch.nn.parallel import DistributedDataParallel as DDP

    SCALE = float(os.environ.get("JOB_SCALE", "1"))  # a constant of the first bucket's graph only
    VIEW = os.environ.get("JOB_VIEW") == "1"
    ddp_contexts = []  # DDPOptimizer's per-bucket fw_metadata stacks, watched (not changed)
    _init = ddp_backend.DDPOptimizerContext.__init__
    def _watch(self):
        _init(self)
        ddp_contexts.append(self)
    ddp_backend.DDPOptimizerContext.__init__ = _watch

    class Stack(nn.Module):  # the script's own module: Dynamo traces it (not nn.Sequential's frame)
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(512, 512) for _ in range(%(buckets)d))  # 1 MiB a layer
            self.qkv = nn.Linear(512, 1536) if VIEW else None  # shared by the layers (a bucket of its own)

        def forward(self, x):
            x = x * SCALE
            for layer in self.layers:
                x = torch.relu(layer(x))
                if VIEW:  # attention saves q, k, v for backward: one buffer at three offsets (nanoGPT's)
                    q, k, v = (t.view(8, 8, 64).transpose(0, 1) for t in self.qkv(x).split(512, 1))
                    x = torch.nn.functional.scaled_dot_product_attention(q, k, v).transpose(0, 1).reshape(8, 512)
            return x

    def not_stored():
        if os.environ["JOB_BACKEND"] != "pcompile":
            return {}
        from pcompile.compat import ddp_autograd_cache
        return dict(ddp_autograd_cache.not_stored)

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = Stack()
    if os.environ.get("JOB_INNER") == "1":  # nanoGPT's way: the model compiled, then wrapped
        ddp = DDP(torch.compile(model, backend=os.environ["JOB_BACKEND"]), bucket_cap_mb=1)
    else:
        ddp = torch.compile(DDP(model, bucket_cap_mb=1), backend=os.environ["JOB_BACKEND"])  # a bucket per layer
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1 + rank)
    losses, seconds = [], []
    for step in range(3):
        t0 = time.perf_counter()
        loss = ddp(torch.randn(8, 512, generator=g)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        seconds.append(time.perf_counter() - t0)
    params = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
    from torch._dynamo.utils import counters
    print("RESULT " + json.dumps({"rank": rank, "losses": losses, "params": params, "seconds": seconds,
                                  "ddp_stacks_left": [c.curr_bucket for c in ddp_contexts],
                                  "aot": dict(counters["aot_autograd"]), "not_stored": not_stored(),
                                  "graphs": counters["stats"]["unique_graphs"]}), flush=True)
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


def _clean_env(monkeypatch) -> None:
    for name in list(os.environ):
        if name.startswith(("PCOMPILE", "TORCHINDUCTOR", "TORCH_LOGS")):
            monkeypatch.delenv(name)


def _pcompile(tmp_path: Path, **env: str) -> dict[str, str]:
    return {"JOB_BACKEND": "pcompile", "PCOMPILE_CACHE_DIR": str(tmp_path / "cache"), "PCOMPILE_EVENTS": "0",
            "PCOMPILE_PROGRAMS": "0",  # the AOTAutograd layer itself: a program would answer first
            "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), **env}


def _stock(tmp_path: Path, **env: str) -> dict[str, str]:
    return {"JOB_BACKEND": "inductor", "PCOMPILE_DISABLE": "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "stock"), **env}


def _same_training(runs: list[list[dict]]) -> None:
    """Every run computed the same losses and, after the optimizer steps (so the backward too),
    the same parameters, rank by rank."""
    for rank in range(2):
        assert len({json.dumps(r[rank]["losses"]) for r in runs}) == 1, [r[rank]["losses"] for r in runs]
        assert len({r[rank]["params"] for r in runs}) == 1, [r[rank]["params"] for r in runs]


def test_a_ddp_restart_loads_every_bucket_graph_from_aotautograd_and_computes_the_same(tmp_path, monkeypatch):
    """With pcompile's default backward: lowered ahead on torch 2.14, lazily on 2.11."""
    _clean_env(monkeypatch)
    script = tmp_path / "ddp_job.py"
    script.write_text(JOB)
    first = run_job(script, _pcompile(tmp_path))
    again = run_job(script, _pcompile(tmp_path))
    stock = run_job(script, _stock(tmp_path))

    for rank in range(2):
        aot = again[rank]["aot"]
        assert aot.get("autograd_cache_hit", 0) == BUCKETS, (rank, aot, first[rank]["aot"])
        assert not aot.get("autograd_cache_bypass") and not aot.get("autograd_cache_miss"), (rank, aot)
    _same_training([first, again, stock])
    # the first start stored what it compiled (a lazily lowered backward's entry is written at the
    # first backward, so the other rank may compile the same bucket meanwhile), bypassing nothing
    for r in first:
        aot = r["aot"]
        assert not aot.get("autograd_cache_bypass") and aot.get("autograd_cache_saved", 0) == aot.get("autograd_cache_miss", 0), first
    assert sum(r["aot"].get("autograd_cache_saved", 0) for r in first) >= BUCKETS, first


def test_a_lazily_lowered_bucket_below_a_hit_bucket_is_lowered_with_its_own_metadata(tmp_path, monkeypatch):
    """DDP's lazy backward reads one bucket's fw_metadata per lazily lowered bucket off a stack
    (last bucket first); a hit bucket lowers nothing, so it must take its own off too, or the
    lazily lowered bucket below it would be lowered with the hit's metadata. The restart changes
    the first bucket's graph only: the second bucket hits, the first is lowered lazily."""
    _clean_env(monkeypatch)
    script = tmp_path / "ddp_job.py"
    script.write_text(JOB)
    run_job(script, _pcompile(tmp_path, PCOMPILE_EAGER_BACKWARD="0"))
    mixed = run_job(script, _pcompile(tmp_path, PCOMPILE_EAGER_BACKWARD="0", JOB_SCALE="2"))
    stock = run_job(script, _stock(tmp_path, JOB_SCALE="2"))

    for rank in range(2):
        aot = mixed[rank]["aot"]
        assert aot.get("autograd_cache_hit", 0) >= 1 and not aot.get("autograd_cache_bypass"), (rank, aot)
    assert sum(r["aot"].get("autograd_cache_miss", 0) for r in mixed) >= 1, mixed  # the changed bucket, somewhere
    # every bucket took its own metadata off DDPOptimizer's stack at its first backward, as in stock
    for r in mixed + stock:
        assert r["ddp_stacks_left"] and set(r["ddp_stacks_left"]) == {-1}, (mixed, stock)
    _same_training([mixed, stock])


def test_buckets_saving_views_of_one_buffer_hit_on_a_restart_and_compute_the_same(tmp_path, monkeypatch):
    """Attention saves q, k, v for backward as views of one projection's output at three offsets
    (nanoGPT's buckets: 8 of 26 per rank were left to torch's bypass while only plain outputs
    were stored). Their first-call fakes are rebuilt as views of one buffer, so every bucket of a
    restart hits, nothing is refused, and losses and parameters equal stock's."""
    _clean_env(monkeypatch)
    script = tmp_path / "ddp_job.py"
    script.write_text(JOB)
    first = run_job(script, _pcompile(tmp_path, JOB_VIEW="1"))
    again = run_job(script, _pcompile(tmp_path, JOB_VIEW="1"))
    stock = run_job(script, _stock(tmp_path, JOB_VIEW="1"))
    for r in first + again:
        assert not r["not_stored"], (first, again)
    for rank in range(2):
        aot = again[rank]["aot"]
        assert aot.get("autograd_cache_hit", 0) >= BUCKETS + 1, (rank, aot)  # the layers' buckets and qkv's
        assert not aot.get("autograd_cache_miss") and not aot.get("autograd_cache_bypass"), (rank, aot)
    _same_training([first, again, stock])


@pytest.mark.parametrize("how", ["ddp_compiled", "model_compiled_lazy_backward"])
def test_with_programs_a_ddp_restart_traces_nothing_and_computes_the_same(tmp_path, monkeypatch, how):
    """Issue 33 on DDP: a frame DDPOptimizer splits gets into its program (the split graph rebuilt
    around its buckets' AOTAutograd entries), so a restart with PCOMPILE_PROGRAMS=1 traces no
    graph at all: before, torch's clone of the converter dropped the package and the split graph
    had no backend artifact, so every restart traced the frame again. Both ways of wrapping
    (torch.compile(DDP(m)) and DDP(torch.compile(m)), nanoGPT's), the second with backwards
    lowered lazily, whose bucket entries are written only at the first backward."""
    _clean_env(monkeypatch)
    script = tmp_path / "ddp_job.py"
    script.write_text(JOB)
    extra = {"JOB_VIEW": "1", **({"JOB_INNER": "1", "PCOMPILE_EAGER_BACKWARD": "0"} if how != "ddp_compiled" else {})}
    first = run_job(script, _pcompile(tmp_path, PCOMPILE_PROGRAMS="1", **extra))
    again = run_job(script, _pcompile(tmp_path, PCOMPILE_PROGRAMS="1", **extra))
    stock = run_job(script, _stock(tmp_path, **extra))
    for r in first:
        assert r["graphs"] >= 1, first
    for r in again:
        assert r["graphs"] == 0, again  # Dynamo made no graph: the program ran the step
        assert not r["aot"].get("autograd_cache_miss"), again
    _same_training([first, again, stock])
