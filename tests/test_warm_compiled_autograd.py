"""`pcompile warm` of a script that uses compiled autograd (the backward captured while autograd
runs, then compiled): the capture converts the script's tensors into its own fake mode, which
failed on the warm's fakes ("Found tensor of type FakeTensor, which is not supported by
FakeTensorMode"). The captured backward graphs are warmed, and a second warm compiles nothing."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from test_warm import warm

SCRIPT = Path(__file__).resolve().parent / "data" / "warm_scripts" / "compiled_autograd.py"
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the virtual device is Linux-only")


def test_compiled_autograd_backward_graphs_are_warmed(tmp_path):
    cache = tmp_path / "cache"
    rc, res, log = warm(SCRIPT, cache, "--steps", "all", cwd=tmp_path)
    assert rc == 0, log[-4000:]
    assert "compiled autograd ok: (4, 16)" in log
    rep = res["report"]
    assert rep["counters"]["compiled_autograd"]["captures"] >= 2, rep["counters"]
    assert res["written"]["fxgraph"] >= 3 and res["written"]["triton"] > 0, res["written"]  # forward + captured backwards
    rc, res2, log = warm(SCRIPT, cache, "--steps", "all", cwd=tmp_path)
    assert rc == 0, log[-4000:]
    assert res2["written"] == {"fxgraph": 0, "aotautograd": 0, "triton": 0}, log[-3000:]
    assert res2["report"]["counters"]["inductor"].get("fxgraph_cache_miss", 0) == 0, res2["report"]["counters"]
