"""`pcompile explain JOB` (issue 32, items 7 and 8): every miss of a job, without two keys in hand,
the differing inputs named in words; `explain A B` refuses keys of two layers. Real CPU compiles of
a model whose width changes between two jobs."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import child_env, run_cli

SCRIPT = """
import sys, torch
width = int(sys.argv[1])
model = torch.nn.Sequential(torch.nn.Linear(16, width), torch.nn.ReLU(), torch.nn.Linear(width, 4))
step = torch.compile(model, backend="pcompile")
step(torch.randn(8, 16)).sum().backward()
"""


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("explainjob")
    (root / "widen.py").write_text(SCRIPT)
    cache = root / "cache"
    ids = {}
    for name, width in (("narrow", 8), ("again", 8), ("wide", 24)):
        env = child_env({"PCOMPILE_CACHE_DIR": str(cache), "PCOMPILE_JOB_ID": f"{name}-job"})
        res = subprocess.run([sys.executable, str(root / "widen.py"), str(width)], env=env, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]
        ids[name] = f"{name}-job"
    ids["cache"] = str(cache)
    return ids


def _explain(jobs: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return run_cli("explain", "--cache-dir", jobs["cache"], *args)


def test_a_job_that_hit_everything_has_no_misses(jobs: dict[str, str]) -> None:
    out = _explain(jobs, jobs["again"])
    assert out.returncode == 0, out.stderr
    assert "no misses" in out.stdout


def test_a_first_job_misses_for_the_first_time(jobs: dict[str, str]) -> None:
    data = json.loads(_explain(jobs, jobs["narrow"], "--json").stdout)
    assert data["misses"] and all("first time" in m["reasons"][0] for m in data["misses"])


def test_a_widened_model_names_the_changed_graph_in_words(jobs: dict[str, str]) -> None:
    out = _explain(jobs, jobs["wide"])
    assert out.returncode == 0, out.stderr
    data = json.loads(_explain(jobs, jobs["wide"], "--json").stdout)
    graphs = [m for m in data["misses"] if m["layer"] in ("graph", "autograd")]
    assert graphs, out.stdout
    for m in graphs:
        assert m["earlier_job"] == jobs["again"], m
        assert "(widen.py:" in m["name"] or "widen.py" in m["name"], m  # a file:line name, not `GraphModule`
        assert not any("source_hash" in r for r in m["reasons"]), m
    text = out.stdout
    assert "source_hash" not in text
    # the changed width, named as the inputs whose shape changed (Inductor's key description)
    assert "shape [8, 16] -> [24, 16]" in text and "shape [8] -> [24]" in text, text


def test_keys_of_two_layers_are_refused_in_one_line(jobs: dict[str, str]) -> None:
    data = json.loads(_explain(jobs, jobs["wide"], "--json").stdout)
    by_layer = {m["layer"]: m["key"] for m in data["misses"]}
    out = _explain(jobs, by_layer["autograd"], by_layer["graph"])
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out
    assert "different layers" in out.stderr
