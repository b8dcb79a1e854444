"""When the compile pool and its router's version probes start: at the first graph a process must compile.

A process whose graphs all hit in the store never compiles a kernel, so the probes (a thread of
~0.5 s of Python: ptxas and Triton's environment) would only compete with Dynamo for the GIL
during its first step. Real subprocesses, a real store, stock torch.compile with the pcompile
backend on CPU.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parent.parent

SCRIPT = r"""
import json, threading
import torch
from pcompile.inductor import pool_install
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
compiled = torch.compile(model, backend="pcompile")
compiled(torch.randn(8, 16)).sum().backward()
r = pool_install.router()
print(json.dumps({"router": r is not None, "probes_started": getattr(r, "_warming", None)}))
"""


def _run(tmp_path: Path, name: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO), PCOMPILE_CACHE_DIR=str(tmp_path / "pc"),
               TORCHINDUCTOR_CACHE_DIR=str(tmp_path / f"inductor-{name}"), TRITON_CACHE_DIR=str(tmp_path / f"triton-{name}"),
               PCOMPILE_POOL="node", PCOMPILE_POOL_IDLE_EXIT="30")
    for var in ("PCOMPILE_SHARED_DIR", "PCOMPILE_REMOTE", "PCOMPILE_READ_ONLY", "TORCHINDUCTOR_COMPILE_THREADS", "PCOMPILE_DISABLE"):
        env.pop(var, None)
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_pool_and_probes_start_at_the_first_compile_and_never_in_an_all_hit_process(tmp_path: Path) -> None:
    cold = _run(tmp_path, "a")
    assert cold["router"], "the pcompile pool was not installed in this process"
    assert cold["probes_started"] is True, "a process that compiled graphs did not start the router's probes"
    hot = _run(tmp_path, "b")  # same store, fresh Inductor dirs: every graph comes from the store
    assert hot["router"] is False, "a process whose graphs all hit still started the compile pool"


NEVER_RUN = r"""
import json, os
import torch, pcompile
from pcompile.inductor import pool_install
from pcompile.pool.launcher import read_pidfile
pcompile.install()
model = torch.nn.Linear(16, 4)
compiled = torch.compile(model)          # nanoGPT's sample.py --compile=True: then runs model.generate,
model(torch.randn(8, 16))                # which never enters the compiled forward
before = {"router": pool_install.router() is not None, "daemon": read_pidfile(os.environ["PCOMPILE_CACHE_DIR"]) is not None}
compiled(torch.randn(8, 16))
print(json.dumps({"before": before, "router_after": pool_install.router() is not None}))
"""


def test_an_eager_pool_starts_at_the_first_graph_to_compile_not_at_the_torch_compile_call(tmp_path: Path) -> None:
    """PCOMPILE_POOL_EAGER=1 stands in for a GPU host (where the daemon starts with the router):
    calling torch.compile starts nothing; the first graph to compile starts the router."""
    env = dict(os.environ, PYTHONPATH=str(REPO), PCOMPILE_CACHE_DIR=str(tmp_path / "pc"), PCOMPILE_POOL="node",
               PCOMPILE_POOL_EAGER="1", PCOMPILE_POOL_IDLE_EXIT="20")
    for var in ("PCOMPILE_SHARED_DIR", "PCOMPILE_REMOTE", "PCOMPILE_READ_ONLY", "TORCHINDUCTOR_COMPILE_THREADS", "PCOMPILE_DISABLE"):
        env.pop(var, None)
    out = subprocess.run([sys.executable, "-c", NEVER_RUN], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"before": {"router": False, "daemon": False}, "router_after": True}, got
