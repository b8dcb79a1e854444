"""Tracers the script itself runs work under `pcompile warm` (issue 31 class 4).

One plain script, warmed once, traces its model on CUDA and on CPU with make_fx in real, fake
and symbolic mode, torch.export.export and torch.jit.trace, then trains a compiled step. On the
GPU host each of those traces works; under the warm symbolic make_fx failed (`shape_env should be
set if tracing with 'symbolic'`: it adopted the warm's fake mode, which has no ShapeEnv) and fake
make_fx ran on the warm's mode instead of its own (compat/warm_tracers.py).
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
    from torch.fx.experimental.proxy_tensor import make_fx

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)).cuda()
    x = torch.randn(4, 8, device="cuda")
    cpu_model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    cpu_x = torch.randn(4, 8)


    def attempt(name, fn):
        try:
            print(f"TRACER {name} ok {fn()}", flush=True)
        except Exception as exc:
            print(f"TRACER {name} failed {type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}", flush=True)


    def traced(m, v, mode):
        gm = make_fx(lambda v: m(v).relu().sum(-1), tracing_mode=mode, _allow_non_fake_inputs=True)(v)
        shape = [n for n in gm.graph.nodes if n.op == "placeholder"][0].meta["val"].shape
        return f"symbolic={any(isinstance(s, torch.SymInt) for s in shape)}"


    for where, m, v in (("cuda", model, x), ("cpu", cpu_model, cpu_x)):
        for mode in ("real", "fake", "symbolic"):
            attempt(f"make_fx_{mode}_{where}", lambda: traced(m, v, mode))
        attempt(f"export_{where}", lambda: len(list(torch.export.export(m, (v,)).graph.nodes)))
        attempt(f"jit_trace_{where}", lambda: type(torch.jit.trace(m, (v,))).__name__)

    compiled = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        loss = compiled(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    """)


def test_the_scripts_own_tracers_work_under_the_warm(tmp_path: Path) -> None:
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.py").write_text(SCRIPT)
    cmd = [sys.executable, "-m", "pcompile.cli.main", "warm", str(job / "train.py"), "--target", "h100",
           "--cache-dir", str(tmp_path / "cache"), "--json", "--steps", "3"]
    env = dict(os.environ, PCOMPILE_PROGRESS="0", PCOMPILE_DISABLE="1")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, cwd=str(job))
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-4000:]
    results = dict(line.split(" ", 2)[1:] for line in log.splitlines() if line.startswith("TRACER "))
    assert len(results) == 10, log[-4000:]
    failed = {name: r for name, r in results.items() if not r.startswith("ok")}
    assert not failed, f"tracers that failed under the warm: {failed}"
    for where in ("cuda", "cpu"):  # as make_fx gives them on the GPU host
        assert results[f"make_fx_symbolic_{where}"] == "ok symbolic=True"
        assert results[f"make_fx_fake_{where}"] == "ok symbolic=False"
        assert results[f"make_fx_real_{where}"] == "ok symbolic=False"
    report = json.loads([ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1])["report"]
    assert report["steps_done"] == 3 and report["counters"]["aot_autograd"].get("ok") == 1, log[-3000:]
