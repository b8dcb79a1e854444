"""Autotune predictions are made once per kernel source, not once per kernel name.

Inductor names kernels per graph (`triton_per_fused__softmax_..._0`), so two graphs (here a
recompile for a new shape) hold different kernels of the same name. The warm deduplicated its
predictions by name: the second kernel went unpredicted, and each later warm of the same script
found more of them (build-nanogpt: 23 predicted, then 5 more on the next warm, which should have
found everything in the cache).
"""
from __future__ import annotations

import sys
import textwrap

import pytest

from test_warm import warm  # noqa: E402  (same directory)

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the virtual device is Linux-only")

SCRIPT = """\
import torch

@torch.compile(dynamic=False)
def f(x):
    return (x * 2).softmax(-1)

for n in (64, 128):  # a recompile: the same graph and kernel names, other kernel sources
    f(torch.randn(32, n, device="cuda"))
"""


def test_kernels_of_one_name_in_two_graphs_are_each_predicted_in_the_first_warm(tmp_path):
    script = tmp_path / "recompile.py"
    script.write_text(textwrap.dedent(SCRIPT))
    cache = tmp_path / "cache"
    rc, res, log = warm(script, cache, cwd=tmp_path)
    assert rc == 0, log[-3000:]
    rep = res["report"]
    names = {k.split()[0] for k in rep["autotune_unselected"]}
    assert len(names) == 1 and len(rep["autotune_unselected"]) == rep["autotune_predicted"] == 2, rep["autotune_unselected"]
    rc, res, log = warm(script, cache, cwd=tmp_path)
    assert rc == 0 and res["report"]["autotune_predicted"] == 0, log[-3000:]  # nothing left for a second warm


USER_KERNEL = """\
import torch, triton, triton.language as tl

@triton.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 128})], key=["n"])
@triton.jit
def add_one(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)

@torch.compile
def f(x):
    out = torch.empty_like(x)
    add_one[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
    return out * 2

f(torch.randn(4096, device="cuda"))
"""


def test_a_user_autotuned_kernel_is_left_for_the_gpu_to_time(tmp_path):
    """Inductor predicts its own kernels' winners without benchmarking; a user's @triton.autotune
    configs have no such choice (the first is the author's first guess): the GPU job times them."""
    script = tmp_path / "user_kernel.py"
    script.write_text(USER_KERNEL)
    rc, res, log = warm(script, tmp_path / "cache", cwd=tmp_path)
    assert rc == 0, log[-3000:]
    rep = res["report"]
    assert any(k.split()[0] == "add_one" for k in rep["autotune_unselected"]), rep["autotune_unselected"]
    assert "user-defined" in rep.get("autotune_not_predicted", {}).get("add_one", ""), {k: v for k, v in rep.items() if "autotune" in k}
