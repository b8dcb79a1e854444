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
    # with pcompile installed in the warm child when the inductor integration is present
    rc, res, log = warm(script, tmp_path / "cache", "--world-size", "8")
    assert rc == 0, log[-3000:]
    assert "rank 0/8" in log
    rep = res["report"]
    assert rep["status"] == "stopped" and rep["steps_done"] == 2
    assert rep["counters"]["inductor"]["fxgraph_cache_miss"] == 2
    assert rep["counters"]["aot_autograd"].get("autograd_cache_saved", 0) + res["written"]["aotautograd"] >= 1
    # kernels with several configs get Inductor's no-benchmark choice filed as a prediction
    assert rep["autotune_unselected"] and rep["autotune_predicted"] == len(rep["autotune_unselected"])
    assert "predicted" in log


def test_compiled_ddp_rank0_of_4_warms(tmp_path):
    """torch.compile(DDP(model)): DDP's value checks and bucket rebuild are skipped on fakes,
    all-reduce returns the bucket, and Dynamo's DDPOptimizer graphs are compiled."""
    script = tmp_path / "ddp_train.py"
    script.write_text(textwrap.dedent("""\
        import os
        import torch, torch.distributed as dist, torch.nn as nn
        from torch.nn.parallel import DistributedDataParallel as DDP

        class MLP(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Linear(64, 256)
                self.b = nn.Linear(256, 64)

            def forward(self, x):
                return self.b(torch.nn.functional.gelu(self.a(x)))

        dist.init_process_group(backend="nccl")
        rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(rank)
        model = MLP().cuda()
        ddp = torch.compile(DDP(model, device_ids=[rank]))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            loss = ddp(torch.randn(16, 64, device="cuda")).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            print(f"rank {dist.get_rank()}/{dist.get_world_size()} step {step} loss {loss.item():.3f}")
        """))
    rc, res, log = warm(script, tmp_path / "cache", "--world-size", "4", env={"PCOMPILE_DISABLE": "1"})
    assert rc == 0, log[-3000:]
    rep = res["report"]
    assert rep["status"] == "stopped" and rep["steps_done"] == 2
    assert rep["counters"]["inductor"]["fxgraph_cache_miss"] == 2 and res["written"]["aotautograd"] == 1
    assert not any("AOTAutograd of" in ln for ln in res["lines"])


def test_ddp_bucket_split_graphs_are_reported_as_not_cached_by_torch(tmp_path):
    """Dynamo's DDPOptimizer compiles one graph per gradient bucket with fakify_first_call, and
    torch's AOTAutograd cache bypasses those (build-nanogpt on 2 ranks: 30 bypasses): the summary
    says so instead of leaving the layer out of its look-ups."""
    script = tmp_path / "ddp_buckets.py"
    script.write_text(textwrap.dedent("""\
        import os
        import torch, torch.distributed as dist, torch.nn as nn
        from torch.nn.parallel import DistributedDataParallel as DDP
        dist.init_process_group(backend="nccl")
        rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(rank)
        class Stack(nn.Module):  # a module of the script's own: Dynamo skips nn.Sequential's frame
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList(nn.Linear(512, 512) for _ in range(4))  # 1 MiB a layer

            def forward(self, x):
                for layer in self.layers:
                    x = torch.relu(layer(x))
                return x

        model = Stack().cuda()
        ddp = torch.compile(DDP(model, device_ids=[rank], bucket_cap_mb=1))  # a bucket per layer
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            ddp(torch.randn(8, 512, device="cuda")).mean().backward()
            opt.step()
            opt.zero_grad()
        """))
    rc, res, log = warm(script, tmp_path / "cache", "--world-size", "2", env={"PCOMPILE_DISABLE": "1"})
    assert rc == 0, log[-3000:]
    bypassed = res["report"]["counters"]["aot_autograd"].get("autograd_cache_bypass", 0)
    assert bypassed >= 2 and any(ln.startswith(f"not warmed: AOTAutograd of {bypassed} graphs") for ln in res["lines"]), res["lines"]


def test_collectives_torch_gave_no_meta_kernel_run_on_the_fake_group(tmp_path):
    """The coalesced collectives and gather_into_tensor have no Meta kernel in torch, so on the
    warm's fake tensors they failed ("no fake impl or Meta kernel"): modded-nanogpt all-reduces its
    gradient buckets with all_reduce_coalesced from post-accumulate-grad hooks."""
    script = tmp_path / "coalesced.py"
    script.write_text(textwrap.dedent("""\
        import os, warnings
        import torch, torch.distributed as dist, torch.nn as nn
        warnings.simplefilter("ignore", FutureWarning)  # torch deprecates the coalesced calls
        dist.init_process_group(backend="nccl")
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        m = nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 1)).cuda()
        params = list(m.parameters())
        handles = []
        def hook(p):
            if p is params[0]:
                handles.append(dist.all_reduce_coalesced([q.grad for q in params], op=dist.ReduceOp.AVG, async_op=True))
        for p in params:
            p.register_post_accumulate_grad_hook(hook)
        opt = torch.optim.SGD(params, lr=0.1)
        for step in range(3):
            m(torch.randn(4, 16, device="cuda")).mean().backward()
            for h in handles:
                h.wait()
            handles.clear()
            out = [torch.empty(16, device="cuda") for _ in range(dist.get_world_size())]
            dist.all_gather_coalesced([out], [params[1].grad])  # the first layer's bias: 16 values
            opt.step(); opt.zero_grad()
            print(f"coalesced step {step}")
        """))
    rc, res, log = warm(script, tmp_path / "cache", "--world-size", "2", env={"PCOMPILE_DISABLE": "1"})
    assert rc == 0, log[-3000:]
    # no compiled code: no step counts toward --steps (pcompile/warm/stop.py), the script runs to its end
    assert "coalesced step 2" in log and res["report"]["eager_steps"] == 3, res["report"]


@pytest.mark.xfail(strict=True, reason="open: Dynamo's resume frame after a graph break in a DDP-compiled forward "
                   "refuses the script's fake (InternalTorchDynamoError '`tensor` needs to be a FakeTensor wrapped by this "
                   "instance of Dynamo'); Lightning's DDP strategy with lightning.pytorch.demos.Transformer hits it")
def test_a_graph_break_inside_a_ddp_compiled_forward_warms(tmp_path):
    script = tmp_path / "ddp_break.py"
    script.write_text(textwrap.dedent("""\
        import torch, torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        dist.init_process_group("nccl")
        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)

            def forward(self, x):
                h = self.a(x)
                m = torch.triu(torch.full((4, 4), float("-inf"), device=x.device), diagonal=1)
                if bool((m == m).all()):  # nn.Transformer's causal-mask check: a graph break
                    h = h * 2
                return self.b(h)
        model = DDP(M().cuda(), device_ids=[0])
        step = torch.compile(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(3):
            step(torch.randn(8, 16, device="cuda")).sum().backward()
            opt.step()
            opt.zero_grad()
        """))
    rc, res, log = warm(script, tmp_path / "cache", "--world-size", "2", env={"PCOMPILE_DISABLE": "1"})
    assert rc == 0, log[-3000:]
