"""One truth for counts (issue 32, item 4): after a cold and a hot warm through the node's compile
daemon, the warm summary, `pcompile stats`, `pcompile report --list` and `warm --check` name the
same look-ups per layer, autotune included; the daemon's work is folded into the warm that asked
for it, never listed as a job the user did not run."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import child_env, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

SCRIPT = """
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.LayerNorm(256), torch.nn.Linear(256, 64)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
step = torch.compile(model)
for _ in range(3):
    loss = torch.nn.functional.softmax(step(torch.randn(32, 64, device="cuda")), dim=-1).sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
"""


def _warm(root: Path, env: dict[str, str], *extra: str) -> str:
    res = subprocess.run([sys.executable, "-m", "pcompile.cli.main", "warm", *extra, str(root / "train.py"), "--target", "h100"],
                         cwd=root, env=child_env(env), capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    return res.stdout


def _said(summary: str) -> str:
    line = next(ln for ln in summary.splitlines() if ln.startswith("cache look-ups: "))
    return line[len("cache look-ups: "):].removesuffix("; nothing compiled")


def test_warm_stats_report_and_check_count_the_same(tmp_path: Path) -> None:
    from pcompile.store import hits

    (tmp_path / "train.py").write_text(SCRIPT)
    env = {"PCOMPILE_CACHE_DIR": str(tmp_path / "cache"), "PCOMPILE_POOL_IDLE_EXIT": "10"}
    cold = _warm(tmp_path, env)
    hot = _warm(tmp_path, env, "--check")

    stats = json.loads(run_cli("stats", "--json", env=env).stdout)
    listed = json.loads(run_cli("report", "--list", "--json", env=env).stdout)
    for jobs in (stats["recent_jobs"], listed):
        assert not [j for j in jobs if "daemon" in (j["script"] or "")], f"a job the user never ran is listed: {jobs}"
    assert len(listed) == 2, [j["script"] for j in listed]

    for summary, job in ((hot, listed[0]), (cold, listed[1])):
        assert _said(summary) == hits.summary(job["layers"]), (summary, job["layers"])
    for summary, job in ((hot, stats["recent_jobs"][0]), (cold, stats["recent_jobs"][1])):
        assert _said(summary) == hits.summary(job["layers"])

    # autotune: what the cold warm predicted is what its look-ups say it predicted
    predicted = re.search(r"predicted (\d+) \(Inductor's no-benchmark choice", cold)
    cold_autotune = listed[1]["layers"]["autotune"]
    assert predicted and int(predicted.group(1)) == cold_autotune["predicted"] > 0, (cold, cold_autotune)
    assert f"{cold_autotune['predicted']} predicted" in _said(cold)

    # --check: the hot warm's coverage is the fraction its look-ups line shows
    hit, n = hits.totals(listed[0]["layers"])
    assert f"coverage before this run: {hit}/{n} look-ups hit" in hot
    assert hits.all_hit(listed[0]["layers"]), listed[0]["layers"]
    # every layer of the all-jobs table sums the two jobs: the daemon's look-ups are in them, once
    for layer, row in stats["layers"].items():
        for counter in ("lookups", "hits", "untimed", "predicted"):
            jobs_sum = sum(j["layers"].get(layer, {}).get(counter, 0) for j in listed)
            assert row[counter] == jobs_sum, (layer, counter, row, [j["layers"].get(layer) for j in listed])
