"""Boards of a mixed cluster (issue 31, item 6): a cache warmed for one board, used by a job on
another, says so; one warm serves several boards; stats and report name the board.

The GPU jobs run the script itself under the virtual device with a board's profile (PCOMPILE=1,
not a warm): that is the board they run on, as a real H100 or H200 would be, and their graph
keys hold its name exactly as on the real board. The H200 profile was captured on a real H200.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pcompile.inductor.board_notice import mismatch_line, warm_command
from pcompile.vdev.profile import builtin_for, resolve

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the virtual device is Linux-only")

# pointwise only: under the virtual device nothing runs, and cuBLAS would not start
SCRIPT = """\
import torch
w = torch.nn.Parameter(torch.ones(64, device="cuda"))
opt = torch.optim.SGD([w], lr=0.1)
step = torch.compile(lambda x: (x * w).sin().square().mean())
for i in range(3):
    loss = step(torch.randn(8, 64, device="cuda"))
    loss.backward()
    opt.step()
    opt.zero_grad()
print("job done")
"""
H100, H200 = resolve("h100").name, resolve("h200").name


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PCOMPILE_PROGRESS="plain")
    return subprocess.run([sys.executable, "-m", "pcompile.cli.main", *args], capture_output=True, text=True,
                          timeout=900, env=env, cwd=str(cwd))


def _job_on(board: str, script: Path, cache: Path, tmp: Path) -> subprocess.CompletedProcess:
    """The GPU job, unchanged, on `board` (PCOMPILE=1; the virtual device answers as that board)."""
    from pcompile.vdev import build, preload

    work = tmp / f"vdev-{board}"
    work.mkdir(exist_ok=True)
    env = preload.child_env(build.library(), resolve(board), work, False)
    env.update(PCOMPILE="1", PCOMPILE_CACHE_DIR=str(cache), PCOMPILE_POOL="off", PCOMPILE_PROGRESS="0")
    env.pop("PCOMPILE_WARMING", None)
    return subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600, cwd=str(script.parent))


def _board_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if "graph entries per board" in ln or "graph entries for" in ln]


@pytest.fixture(scope="module")
def warmed_h100(tmp_path_factory):
    job = tmp_path_factory.mktemp("job")
    (job / "train.py").write_text(SCRIPT)
    cache = tmp_path_factory.mktemp("cache")
    out = _cli("warm", "train.py", "--target", "h100", "--cache-dir", str(cache), cwd=job)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    return job, cache, out.stdout


def test_the_h200_profile_is_a_captured_board_whose_kernel_properties_match_the_h100s():
    h100, h200 = resolve("h100"), resolve("h200")
    assert h200.name == "NVIDIA H200" and h200.arch == "sm_90" and h200.board == "h200-sxm-141gb"
    assert builtin_for(H200) == "h200" and builtin_for(H100) == "h100" and builtin_for("NVIDIA A100-SXM4-80GB") is None
    # what Inductor writes into a Triton kernel's source (DeviceProperties): equal, so kernels are shared
    same = ("multiProcessorCount", "major", "minor", "regsPerMultiprocessor", "maxThreadsPerMultiProcessor",
            "maxThreadsPerBlock", "warpSize")
    assert {k: h100.fields()[k] for k in same} == {k: h200.fields()[k] for k in same}
    assert h100.fields()["totalGlobalMem"] < h200.fields()["totalGlobalMem"]  # a different board all the same


def test_mismatch_line_with_the_two_boards_real_names():
    warm = {"name": H100, "arch": "sm_90", "by": "warm", "at": 1.0,
            "command": "pcompile warm train.py --target h100 --check --cache-dir /c -- --bs 8"}
    line = mismatch_line(H200, "sm_90", [warm])
    assert line is not None and "\n" not in line
    assert f"runs on {H200}" in line and f"graph entries for {H100} only" in line
    assert "pcompile warm train.py --cache-dir /c --target h200 -- --bs 8" in line and "--target h100,h200" in line
    assert mismatch_line(H100, "sm_90", [warm]) is None  # its own board: misses are new graphs, not the board
    assert mismatch_line(H200, "sm_90", []) is None  # nothing warmed: nothing to say
    assert mismatch_line(H200, "sm_90", [warm, dict(warm, name=H200, by="job")]) is None
    other = mismatch_line("NVIDIA A100-SXM4-80GB", "sm_80", [warm])
    assert "pcompile profile --out board.json" in other and "--target board.json" in other
    assert warm_command(None, "h200") == "pcompile warm SCRIPT --target h200"
    assert warm_command("pcompile warm t.py --target=h100 --json", "h200") == "pcompile warm t.py --target h200"


def test_a_job_on_an_h200_says_the_cache_was_warmed_for_the_h100_only(warmed_h100, tmp_path):
    job, cache, summary = warmed_h100
    assert f"the GPU job on an {H100} hits these entries" in summary  # the warm says which board it serves
    out = _job_on("h200", job / "train.py", cache, tmp_path)
    assert out.returncode == 0 and "job done" in out.stdout, out.stderr[-3000:]
    said = _board_lines(out.stderr)
    assert len(said) == 1, out.stderr[-3000:]
    assert f"runs on {H200}" in said[0] and H100 in said[0] and "--target h200" in said[0], said[0]
    assert f"pcompile warm train.py --cache-dir {cache} --target h200" in said[0], said[0]  # the warm's own command


def test_a_job_on_the_warmed_board_hits_and_says_nothing(warmed_h100, tmp_path):
    job, cache, _ = warmed_h100
    out = _job_on("h100", job / "train.py", cache, tmp_path)
    assert out.returncode == 0 and "job done" in out.stdout, out.stderr[-3000:]
    assert _board_lines(out.stderr) == [], out.stderr[-3000:]


def test_stats_and_report_name_each_jobs_board(warmed_h100, tmp_path):
    job, cache, _ = warmed_h100
    _job_on("h200", job / "train.py", cache, tmp_path)
    stats = _cli("stats", "--cache-dir", str(cache), "--json", cwd=tmp_path)
    data = json.loads(stats.stdout)
    assert set(data["boards"]) == {H100, H200} and data["boards"][H100] == {"graph": 2, "autograd": 1}
    assert {b for j in data["recent_jobs"] for b in j["boards"]} == {H100, H200}
    text = _cli("stats", "--cache-dir", str(cache), cwd=tmp_path).stdout
    assert f"  {H200}: 2 FX graph, 1 AOTAutograd" in text and f"[{H200}]" in text
    listed = _cli("report", "--list", "--cache-dir", str(cache), cwd=tmp_path).stdout
    assert f"[{H200}]" in listed and f"[{H100}]" in listed
    rep = _cli("report", "--cache-dir", str(cache), "--out", str(tmp_path / "r.html"), cwd=tmp_path).stdout
    assert rep.splitlines()[0].startswith("job ") and " on NVIDIA H" in rep.splitlines()[0]


def test_one_warm_for_two_boards_shares_kernels_and_each_board_checks_100_percent(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    (job / "train.py").write_text(SCRIPT)
    cache = tmp_path / "cache"
    out = _cli("warm", "train.py", "--target", "h100,h200", "--cache-dir", str(cache), "--json", cwd=job)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    res = json.loads([ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1])
    h100, h200 = res["boards"]
    assert (h100["board"], h100["name"], h200["board"], h200["name"]) == ("h100", H100, "h200", H200)
    assert "warming h100 (1/2)" in out.stderr and "warming h200 (2/2)" in out.stderr  # progress per board
    for b in (h100, h200):  # graph entries per board
        assert b["exit_code"] == 0 and b["written"]["fxgraph"] == 2 and b["written"]["aotautograd"] == 1
    # kernels: compiled once, for the first board; the second loads every one of them
    assert h100["written"]["triton"] > 0 and h200["written"]["triton"] == 0
    k = h200["lookups"]["kernel"]
    assert k["lookups"] > 0 and k["hits"] == k["lookups"], k
    assert any("h200 (NVIDIA H200, sm_90): ok" in ln and "loaded from the boards before it" in ln for ln in res["lines"])
    for target in ("h100", "h200"):
        check = _cli("warm", "--check", "train.py", "--target", target, "--cache-dir", str(cache), cwd=job)
        assert check.returncode == 0, check.stderr[-3000:]
        assert "(100%)" in [ln for ln in check.stdout.splitlines() if ln.startswith("coverage before this run")][0], check.stdout


def test_a_bad_board_in_the_list_fails_before_anything_runs(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    out = _cli("warm", "train.py", "--target", "h100,a100-made-up", "--cache-dir", str(tmp_path / "c"), cwd=tmp_path)
    assert out.returncode != 0 and "unknown target 'a100-made-up'" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "c" / "store" / "boards").exists()
