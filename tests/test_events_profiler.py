"""pcompile's spans show up as `pcompile::<kind>` ranges in a PyTorch profiler trace of a compiled step."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from pcompile.events import _profiler, span


def test_profiler_checks_exist_in_this_torch() -> None:
    # If this fails, torch moved `torch.autograd._profiler_enabled` or `_get_current_dispatch_mode`:
    # update pcompile/events/_profiler.py (spans then stop appearing in profiler traces).
    assert _profiler.available()


def test_no_range_without_profiler() -> None:
    assert _profiler.open_range("dynamo") is None


PROFILED = """
import json, sys
import torch
sys.path.insert(0, sys.argv[1])
from report_workload import compiled_step
from pcompile.events import span

step = compiled_step()  # backend="pcompile": the spans are the backend's own
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    with span("warm_step", step=0):
        step()
    step()
prof.export_chrome_trace(sys.argv[2])
print("NAMES " + json.dumps(sorted({e.name for e in prof.events() if e.name.startswith("pcompile::")})))
"""


def test_compiled_cpu_step_trace_contains_pcompile_ranges(cache_env: dict, tmp_path: Path) -> None:
    """In a fresh process (the backend's hooks stay out of this one)."""
    import subprocess
    import sys

    from conftest import REPO, child_env

    trace = tmp_path / "trace.json"
    env = child_env(dict(cache_env, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"), PCOMPILE_JOB_ID="profiled"))
    out = subprocess.run([sys.executable, "-c", PROFILED, str(REPO / "tests"), str(trace)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    names = set(json.loads(next(ln for ln in out.stdout.splitlines() if ln.startswith("NAMES "))[6:]))
    assert {"pcompile::warm_step", "pcompile::graph_compile", "pcompile::cache_lookup"} <= names, names
    traced = {e.get("name") for e in json.loads(trace.read_text())["traceEvents"]}
    assert "pcompile::graph_compile" in traced
    assert any(n and n.startswith("aten::") for n in traced)  # beside the step's own ops


def test_spans_inside_tracing_do_not_enter_graphs() -> None:
    """A span opened while make_fx traces must not record profiler ops into the graph (that would change keys)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def fn(x: torch.Tensor) -> torch.Tensor:
        with span("inductor_lowering"):
            return x.sin() + 1

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        gm = make_fx(fn)(torch.randn(4))
    assert "record_function" not in gm.code and "profiler" not in gm.code
