"""torch.compile modes under `pcompile warm`: reduce-overhead compiles its graphs (CUDA graph
capture itself is run-time work on the GPU and is skipped, and said so)."""
from __future__ import annotations

import shutil
import sys
import textwrap

import pytest

from test_warm import STOCK, warm  # noqa: E402  (same directory)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the virtual device is Linux-only")


def test_reduce_overhead_graphs_warm_without_capture(tmp_path):
    script = tmp_path / "ro_train.py"
    script.write_text(textwrap.dedent("""\
        import torch, torch.nn as nn
        m = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64)).cuda()
        cm = torch.compile(m, mode="reduce-overhead")
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for i in range(4):
            loss = cm(torch.randn(8, 64, device="cuda")).pow(2).mean()
            loss.backward(); opt.step(); opt.zero_grad()
            print(f"loss {loss.item():.3f}")
        """))
    rc, res, log = warm(script, tmp_path / "cache", env=STOCK)
    assert rc == 0, log[-3000:]
    rep = res["report"]
    assert rep["steps_done"] == 2 and rep["counters"]["inductor"]["fxgraph_cache_miss"] == 2
    assert res["written"]["aotautograd"] == 1 and rep["cudagraphs_skipped"] >= 2


@pytest.mark.parametrize("mode", ["max-autotune-no-cudagraphs", "max-autotune"])
def test_max_autotune_compiles_candidates_and_leaves_the_choice_to_the_gpu(tmp_path, mode):
    """Template candidates (mm) are compiled on the warm host; the graphs whose compile needed
    GPU timings are not published, so the GPU job benchmarks them itself; a default-mode graph
    in the same script is published as usual."""
    script = tmp_path / "serve.py"
    script.write_text(textwrap.dedent(f"""\
        import torch, torch.nn as nn
        m = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 256)).cuda().eval()
        f = torch.compile(m, mode="{mode}")
        g = torch.compile(lambda x: (x.sin() * 2).sum(-1))
        with torch.no_grad():
            for i in range(3):
                y = f(torch.randn(64, 256, device="cuda"))
                print("step", i, float(g(y).sum()))
        """))
    rc, res, log = warm(script, tmp_path / "cache", env=STOCK)
    assert rc == 0, log[-3000:]
    rep = res["report"]
    assert rep["counters"]["inductor"].get("select_algorithm_autotune", 0) >= 1
    assert rep["left_for_gpu_tuning"].get("fx_graph", 0) >= 1 and sum(rep["gpu_timings_faked"].values()) >= 1
    # every graph was compiled, only the default-mode one was written
    assert rep["counters"]["inductor"]["fxgraph_cache_miss"] == 2 and res["written"]["fxgraph"] == 1
    assert res["written"]["triton"] > 4, "the mm template candidates were not compiled"
    assert any("left for the GPU job to tune" in ln for ln in res["lines"])


def test_max_autotune_never_runs_an_aten_choice_on_the_virtual_device(tmp_path):
    """ATen choices without an out= variant (convolution, grouped mm, custom-op fallbacks) are
    called once for real before their timing, outside the benchmarker; on the virtual device a
    cuDNN convolution fails ("Runtime error during autotuning"), Inductor drops the choice, and
    the warm's graph is not the one the GPU job would build. The warm fakes that timing too."""
    script = tmp_path / "conv_train.py"
    script.write_text(textwrap.dedent("""\
        import torch, torch.nn as nn
        m = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.ReLU()).cuda()
        f = torch.compile(m, mode="max-autotune-no-cudagraphs")
        with torch.no_grad():
            for i in range(2):
                print("step", i, float(f(torch.randn(4, 8, 16, 16, device="cuda")).sum()))
        """))
    rc, res, log = warm(script, tmp_path / "cache", env=dict(STOCK, PCOMPILE_WARM_COORDESC_STEPS="0"))
    assert rc == 0, log[-3000:]
    assert "Runtime error during autotuning" not in log, log[-3000:]
    rep = res["report"]
    assert rep["counters"]["inductor"].get("select_algorithm_autotune", 0) >= 1
    assert rep["gpu_timings_faked"].get("extern_without_out", 0) >= 1, rep["gpu_timings_faked"]


def test_a_rewarm_of_a_store_not_yet_tuned_on_a_gpu_succeeds_and_writes_nothing(tmp_path):
    """A second warm before any GPU job tuned the max-autotune graph compiles that graph again (it
    is never written from a warm host) and writes nothing new. That is the warm doing its job; it
    used to fail with 'compiled 1 graphs and kernels but wrote nothing ... fix the cache dir'."""
    script = tmp_path / "serve.py"
    script.write_text(textwrap.dedent("""\
        import torch, torch.nn as nn
        m = nn.Sequential(nn.Linear(128, 256), nn.GELU(), nn.Linear(256, 128)).cuda().eval()
        f = torch.compile(m, mode="max-autotune-no-cudagraphs")
        with torch.no_grad():
            for i in range(2):
                print("step", i, float(f(torch.randn(32, 128, device="cuda")).sum()))
        """))
    env = dict(STOCK, PCOMPILE_WARM_COORDESC_STEPS="0")
    rc, first, log = warm(script, tmp_path / "cache", env=env)
    assert rc == 0, log[-3000:]
    assert first["report"]["left_for_gpu_tuning"].get("fx_graph", 0) >= 1 and first["written"]["triton"] >= 1
    rc, again, log = warm(script, tmp_path / "cache", env=env)
    assert rc == 0, log[-3000:]
    assert again["written"]["fxgraph"] == 0 and again["written"]["triton"] == 0, again["written"]
    assert again["report"]["left_for_gpu_tuning"].get("fx_graph", 0) >= 1
    assert any("left for the GPU job to tune" in ln for ln in again["lines"]), again["lines"]


def test_a_rewarm_with_an_empty_local_triton_dir_writes_nothing_it_only_loaded(tmp_path):
    """Graphs and kernels loaded from the store put their cubins in the local Triton dir; that is
    no compile and no write. The report counted them as written Triton cubins (a rewarm after a GPU
    job on an H200: 43 'written' with every look-up a hit)."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""\
        import torch, torch.nn as nn
        m = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64)).cuda()
        cm = torch.compile(m)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for i in range(3):
            loss = cm(torch.randn(8, 64, device="cuda")).pow(2).mean()
            loss.backward(); opt.step(); opt.zero_grad()
        """))
    rc, first, log = warm(script, tmp_path / "cache")  # pcompile's store, as a warm runs by default
    assert rc == 0, log[-3000:]
    assert first["written"]["triton"] > 0 and first["written"]["fxgraph"] == 2
    local = tmp_path / "cache" / "inductor" / "triton"
    assert any(local.rglob("*.cubin"))
    shutil.rmtree(local)  # as on another warm host sharing the store
    rc, again, log = warm(script, tmp_path / "cache")
    assert rc == 0, log[-3000:]
    assert any(local.rglob("*.cubin")), "the hits' cubins were not unpacked here: the test shows nothing"
    assert again["written"] == {"fxgraph": 0, "aotautograd": 0, "triton": 0}, again["written"]
