"""`pcompile warm` of a plain script that leans on the virtual device the way public training
scripts do (issue 25, classes 6-10): storage pointers to find tied weights, deep copies of the
model (EMA, frozen reference), a captured CUDA graph, the allocator setting it makes itself, and
event timing. One warm serves the five classes; each has its own assertion, read from the marker
the script prints after its own checks passed. The script compiles its training step, and a
second warm compiles nothing."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from test_warm import warm

SCRIPT = Path(__file__).resolve().parent / "data" / "warm_scripts" / "vdev_classes.py"
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the virtual device is Linux-only")


@pytest.fixture(scope="module")
def warmed(tmp_path_factory):
    job = tmp_path_factory.mktemp("user") / "job"
    job.mkdir()
    shutil.copy(SCRIPT, job / "train.py")
    cache = tmp_path_factory.mktemp("cache")
    rc, res, log = warm(job / "train.py", cache, cwd=job)
    assert rc == 0, log[-4000:]
    return job, cache, res, log


def _marker(log: str, cls: int) -> str:
    lines = [ln for ln in log.splitlines() if ln.startswith(f"class{cls} ok:")]
    assert lines, f"class {cls}'s checks did not pass:\n{log[-3000:]}"
    return lines[0]


def test_class6_distinct_storages_have_distinct_stable_pointers(warmed):
    assert "6 storages, one tie" in _marker(warmed[3], 6)


def test_class7_deepcopy_and_clones_of_virtual_tensors(warmed):
    _marker(warmed[3], 7)
    assert "corrupted" not in warmed[3] and "Segmentation" not in warmed[3]


def test_class8_cuda_graph_capture_and_replay(warmed):
    _marker(warmed[3], 8)
    vdev = warmed[2]["report"]["vdev"]
    assert vdev["cudaStreamBeginCapture"] == 1 and vdev["cudaGraphLaunch"] == 2


def test_class9_expandable_segments_set_by_the_script(warmed):
    assert "expandable_segments:True" in _marker(warmed[3], 9)
    assert warmed[2]["report"]["vdev"]["cuMemCreate"] >= 1  # the allocator took the VMM path


def test_class10_event_timing_is_positive(warmed):
    ms = float(_marker(warmed[3], 10).split()[2])
    assert ms > 0


def test_user_defined_triton_kernel_launched_eagerly_on_virtual_tensors(warmed):
    """Triton's launcher asks cuPointerGetAttribute of every pointer argument; the fakes' addresses
    were not the device's memory there ("Pointer argument cannot be accessed from Triton")."""
    lines = [ln for ln in warmed[3].splitlines() if ln.startswith("triton ok:")]
    assert lines == ["triton ok: eager launch on cuda:0"], warmed[3][-3000:]


def test_the_training_step_is_compiled_and_a_second_warm_compiles_nothing(warmed):
    job, cache, res, _ = warmed
    rep = res["report"]
    assert rep["status"] == "stopped" and rep["steps_done"] == 2
    assert rep["counters"]["inductor"]["fxgraph_cache_miss"] == 2 and rep["counters"]["aot_autograd"]["autograd_cache_miss"] == 1
    assert res["written"]["fxgraph"] == 2 and res["written"]["aotautograd"] == 1 and res["written"]["triton"] > 0
    rc, res2, log = warm(job / "train.py", cache, cwd=job)
    assert rc == 0, log[-4000:]
    c = res2["report"]["counters"]
    assert c["inductor"].get("fxgraph_cache_miss", 0) == 0 and c["inductor"]["fxgraph_cache_hit"] == 2
    assert c["aot_autograd"].get("autograd_cache_miss", 0) == 0 and c["aot_autograd"]["autograd_cache_hit"] == 1
    assert res2["written"] == {"fxgraph": 0, "aotautograd": 0, "triton": 0}
