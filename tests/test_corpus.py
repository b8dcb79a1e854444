"""Every public script of benchmarks/corpus warms unchanged on this CPU-only host, and a second
warm hits everything the first one compiled (small-model arguments; the GPU benchmark,
benchmarks/corpus_bench.py, runs the full ones).

"Hits everything": the second warm compiles no FX graph (graphs left for the GPU job to tune,
max-autotune, excepted: those are never written by design) and writes no new FX graph or
AOTAutograd entry. AOTAutograd *lookups* can still miss where Dynamo restarts a frame's analysis
after looking up (dynamic shapes), which compiles nothing, so they are not counted.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "benchmarks" / "corpus"
CASES = json.loads((CORPUS / "cases.json").read_text()) if (CORPUS / "cases.json").exists() else []

pytestmark = [pytest.mark.skipif(sys.platform != "linux", reason="the virtual device is Linux-only"), pytest.mark.slow]


def _args(value: str | list[str] | None) -> list[str]:
    if not value:
        return []
    return shlex.split(value) if isinstance(value, str) else list(value)


def _warm(case: dict, cache: Path) -> tuple[int, dict, str]:
    cmd = [sys.executable, "-m", "pcompile.cli.main", "warm", str(CORPUS / case["script"]), "--target", "h100",
           "--cache-dir", str(cache), "--json"]
    if case.get("world_size"):
        cmd += ["--world-size", str(case["world_size"])]
    cmd += [*_args(case.get("warm_args")), "--", *_args(case.get("args_small"))]
    env = dict(os.environ, PCOMPILE_PROGRESS="0")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env=env, cwd=str(CORPUS / case.get("cwd", ".")))
    last = [line for line in out.stdout.splitlines() if line.startswith("{")]
    return out.returncode, json.loads(last[-1]) if last else {}, out.stdout[-3000:] + out.stderr[-5000:]


def test_the_corpus_has_the_cases_the_issue_asks_for():
    assert len(CASES) >= 10, [c["name"] for c in CASES]
    for case in CASES:
        folder = CORPUS / Path(case["script"]).parent
        assert (folder / "ORIGIN.md").exists() and any(folder.glob("LICENSE*")), f"{case['name']}: license and origin kept"


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_corpus_script_warms_unchanged_and_a_second_warm_hits(case, tmp_path):
    for pkg in case.get("needs", []):
        pytest.importorskip(pkg.replace("-", "_").split("[")[0].split("=")[0])
    cwd = CORPUS / case.get("cwd", ".")
    if case.get("setup"):
        cmd = [sys.executable if a == "python" else a for a in _args(case["setup"])]
        subprocess.run(cmd, cwd=str(cwd), check=True, timeout=600, capture_output=True)
    cache = tmp_path / "cache"
    rc, first, log = _warm(case, cache)
    assert rc == 0, f"{case['name']}: the first warm failed:\n{log}"
    rep = first["report"]
    assert rep["status"] in ("stopped", "completed")
    compiled = rep["counters"].get("inductor", {}).get("fxgraph_cache_miss", 0)
    assert compiled >= 1, f"{case['name']}: the warm compiled no graph:\n{log}"
    rc, second, log = _warm(case, cache)
    assert rc == 0, f"{case['name']}: the second warm failed:\n{log}"
    tuned = sum(rep.get("left_for_gpu_tuning", {}).get("fx_graph", 0) for rep in (second["report"],))
    misses = second["report"]["counters"].get("inductor", {}).get("fxgraph_cache_miss", 0)
    assert misses <= tuned, f"{case['name']}: {misses} FX graphs compiled again ({tuned} left for GPU tuning)"
    assert second["written"]["fxgraph"] == 0 and second["written"]["aotautograd"] == 0, second["written"]
