"""`pcompile warm` end to end on this CPU-only host (CUDA build of torch, no driver).

A small GPT training script (SDPA, a graph break, bf16 autocast, a compiled AdamW step) is warmed
into a cache dir: forward and backward FX graphs, AOTAutograd entries and sm_90 cubins must land
there; a second warm of a copy of the script from another directory must hit every graph (so keys
do not depend on the script's location). Also: `.item()` used to branch gets a clear message, and
strict mode turns a planted device-side computation during compile into an error.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pcompile.vdev import preload

ROOT = Path(__file__).resolve().parent.parent
GPT = ROOT / "examples" / "warm_small_gpt.py"
GPT_ARGS = ["--layers", "2", "--dim", "64", "--ctx", "32", "--vocab", "128", "--batch", "2"]
# Stock Inductor caches (pcompile's own backend off): the path measured on the H100, and
# independent of the pool daemon; tests/test_warm_dist.py runs with pcompile installed.
STOCK = {"PCOMPILE_DISABLE": "1"}

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the virtual device is Linux-only")


def warm(script: Path, cache: Path, *extra: str, script_args: list[str] | None = None, env: dict | None = None,
         cwd: Path | None = None) -> tuple[int, dict, str]:
    cmd = [sys.executable, "-m", "pcompile.cli.main", "warm", str(script), "--target", "h100", "--cache-dir", str(cache),
           "--json", *extra]
    if script_args:
        cmd += ["--", *script_args]
    full_env = dict(os.environ, PCOMPILE_PROGRESS="0", **(env or {}))
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=full_env, cwd=str(cwd or ROOT))
    last = [line for line in out.stdout.splitlines() if line.startswith("{")]
    return out.returncode, json.loads(last[-1]) if last else {}, out.stdout + out.stderr


@pytest.fixture(scope="module")
def cold(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    rc, res, log = warm(GPT, cache, script_args=GPT_ARGS, env=STOCK)
    assert rc == 0, log[-4000:]
    return cache, res, log


def test_cold_warm_writes_forward_backward_and_sm90_cubins(cold):
    cache, res, log = cold
    rep = res["report"]
    assert rep["status"] == "stopped" and rep["steps_done"] == 2
    # two forward graphs (graph break), their two backward graphs, and the optimizer step
    assert rep["counters"]["inductor"]["fxgraph_cache_miss"] == 5
    assert rep["counters"]["aot_autograd"]["autograd_cache_miss"] == 3
    assert res["written"]["fxgraph"] >= 5 and res["written"]["aotautograd"] == 3
    cubins = list((cache / "inductor" / "triton").rglob("*.cubin"))
    assert len(cubins) == res["written"]["triton"] > 10
    metas = [json.loads(p.read_text()) for p in (cache / "inductor" / "triton").rglob("*.json") if not p.name.startswith("__grp__")]
    targets = {tuple(sorted(m["target"].items())) for m in metas if isinstance(m, dict) and "target" in m}
    assert targets == {(("arch", 90), ("backend", "cuda"), ("warp_size", 32))}
    assert "loss 0.0000" in log  # the script's loss.item() logging reads the placeholder zero
    # the script's zero-fills reach the device: native fill kernels through 2.14, cudaMemsetAsync in 2.15
    assert rep["vdev"].get("launch", 0) + rep["vdev"].get("cudaMemsetAsync", 0) >= 1 and rep["vdev"]["cuModuleLoadData"] >= 1


def test_second_warm_from_another_directory_hits_everything(cold, tmp_path):
    cache, _, _ = cold
    before = sorted(p.relative_to(cache) for p in (cache / "inductor").rglob("*") if p.is_file())
    other = tmp_path / "elsewhere" / "job"
    other.mkdir(parents=True)
    shutil.copy(GPT, other / "train.py")
    rc, res, log = warm(other / "train.py", cache, script_args=GPT_ARGS, cwd=other, env=STOCK)
    assert rc == 0, log[-4000:]
    c = res["report"]["counters"]
    assert c["inductor"].get("fxgraph_cache_miss", 0) == 0 and c["inductor"]["fxgraph_cache_hit"] == 5
    assert c["aot_autograd"].get("autograd_cache_miss", 0) == 0 and c["aot_autograd"]["autograd_cache_hit"] == 3
    assert res["written"] == {"fxgraph": 0, "aotautograd": 0, "triton": 0}
    after = sorted(p.relative_to(cache) for p in (cache / "inductor").rglob("*") if p.is_file())
    assert [p for p in after if p.parts[0] in ("fxgraph", "aotautograd")] == [p for p in before if p.parts[0] in ("fxgraph", "aotautograd")]


def test_real_script_patterns_run_unchanged_and_user_files_are_safe(tmp_path):
    """CPU code runs for real (memmap loader, CPU schedule, eval bookkeeping), GPU reads are
    zeros and counted by line, the checkpoint of virtual weights is a placeholder, and the log the
    script appends to goes to the warm's run dir, not into the user's tree."""
    job = tmp_path / "job"
    job.mkdir()
    script = job / "train.py"
    shutil.copy(ROOT / "tests" / "data" / "warm_scripts" / "memmap_gpt.py", script)
    (job / "out").mkdir()
    (job / "out" / "log.txt").write_text("the user's real log\n")
    cache = tmp_path / "cache"
    rc, res, log = warm(script, cache, "--steps", "3", cwd=job)
    assert rc == 0, log[-4000:]
    rep = res["report"]
    assert rep["status"] == "stopped" and rep["steps_done"] == 3
    assert "tied: True" in log and "iter 0: val 0.0000" in log and "iter 2 loss 0.0000" in log
    lines = {(r["line"], r["source"]) for r in rep["reads"]["lines"]}
    assert any("losses[k] = loss.item()" in src for _, src in lines), rep["reads"]
    assert rep["writes"]["n_placeholder_saves"] == 1 and "torch.save" in rep["writes"]["placeholder_saves"][0]
    assert not (job / "out" / "ckpt.pt").exists()
    assert (job / "out" / "log.txt").read_text() == "the user's real log\n"
    mirrored = Path(rep["writes"]["dir"] + str(job / "out" / "log.txt"))
    assert mirrored.read_text().count("0.0000") == 3
    assert any("GPU values read back" in ln for ln in res["lines"]) and any("not to your files" in ln for ln in res["lines"])
    # a second warm hits every graph the first one compiled
    rc, res2, log = warm(script, cache, "--steps", "3", cwd=job)
    c = res2["report"]["counters"]
    assert rc == 0 and c["inductor"].get("fxgraph_cache_miss", 0) == 0 and c["aot_autograd"].get("autograd_cache_miss", 0) == 0


def test_strict_mode_catches_a_planted_device_computation(tmp_path):
    script = tmp_path / "planted.py"
    script.write_text(textwrap.dedent("""\
        import torch
        import torch._inductor.config as ic
        from torch.utils._python_dispatch import _disable_current_modes

        def planted(graph):
            with _disable_current_modes():  # like a constant folder: real device tensors
                t = torch.full((4,), 2.0, device="cuda")
                float((t * 3).sum())

        ic.post_grad_custom_pre_pass = planted
        f = torch.compile(lambda x: (x * 2).sin())
        print(f(torch.randn(8, device="cuda")).shape)
        """))
    rc, res, log = warm(script, tmp_path / "cache", "--strict", env=STOCK)
    assert rc != 0, log[-3000:]
    assert "strict mode" in res["report"]["error"]
    rc, res, log = warm(script, tmp_path / "cache2", env=STOCK)
    assert rc == 0, log[-3000:]
    assert res["report"]["vdev"]["launch"] >= 2  # counted and swallowed without --strict


def test_virtual_device_never_in_the_pytest_process():
    assert not preload.loaded_here()
    assert "libcuda.so.1" not in os.environ.get("LD_PRELOAD", "")


def test_steps_all_runs_to_the_end_and_warms_the_eval_after_the_epoch(tmp_path):
    """An eval after the last training step (the end of an epoch) is compiled only when the warm
    lets the script run to its end; with the default 2 steps it is never reached."""
    script = tmp_path / "epoch_then_eval.py"
    script.write_text(textwrap.dedent("""\
        import torch
        m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).cuda()
        cm = torch.compile(m)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for step in range(3):
            loss = cm(torch.randn(8, 16, device="cuda")).pow(2).mean()
            loss.backward()
            opt.step(); opt.zero_grad()
        m.eval()
        with torch.no_grad():
            print("eval", float(cm(torch.randn(8, 16, device="cuda")).sum()))
        """))
    rc, res, log = warm(script, tmp_path / "c2", env=STOCK)
    assert rc == 0, log[-3000:]
    assert res["report"]["status"] == "stopped" and "eval 0.0" not in log
    two_steps = res["report"]["counters"]["inductor"]["fxgraph_cache_miss"]
    rc, res, log = warm(script, tmp_path / "call", "--steps", "all", env=STOCK)
    assert rc == 0, log[-3000:]
    rep = res["report"]
    assert rep["status"] == "completed" and rep["steps_done"] == 3 and "eval 0.0" in log, log[-3000:]
    # the training graph (forward + backward), then the inference graph under no_grad
    assert rep["counters"]["inductor"]["fxgraph_cache_miss"] == two_steps + 1, rep["counters"]
    rc, _, log = warm(script, tmp_path / "cbad", "--steps", "none", env=STOCK)
    assert rc != 0 and "--steps takes a number of steps or 'all'" in log
