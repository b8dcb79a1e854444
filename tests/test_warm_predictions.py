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
