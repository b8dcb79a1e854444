"""The warm path's private-torch touches still resolve, and its pure-Python pieces behave."""
from __future__ import annotations

import pytest
import torch

from pcompile.inductor.graph_normalize import normalize_placeholder_types
from pcompile.warm import compat
from pcompile.warm.scalars import WarmScalar, WarmValueError


def test_private_apis_present_in_this_torch():
    assert compat.version_supported(), f"torch {torch.__version__} outside {compat.SUPPORTED}"
    assert compat.check() == [], "private torch APIs used by pcompile warm moved; update pcompile/warm/compat.py"


def test_fake_tensor_read_methods_exist():
    from torch._subclasses.fake_tensor import FakeTensor

    for name in ("item", "tolist", "__bool__", "__float__", "__int__", "__index__", "numpy"):
        assert callable(getattr(FakeTensor, name))


def test_caching_autotuner_run_signature():
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    assert callable(CachingAutotuner.run)


def test_normalize_placeholder_types_matches_real_annotations():
    """Inside a backend (where Dynamo's grapharg metadata is live), a warm-style FakeTensor
    annotation normalises back to exactly what the real run recorded."""
    from torch._subclasses.fake_tensor import FakeTensor

    seen = {}

    def backend(gm, example_inputs):
        real = {n.name: n.type for n in gm.graph.find_nodes(op="placeholder")}
        for n in gm.graph.find_nodes(op="placeholder"):
            n.type = FakeTensor  # what a warm process records
        gm.recompile()
        seen["fake_code"] = gm.code
        normalize_placeholder_types(gm)
        seen["real"], seen["normalized"], seen["code"] = real, {n.name: n.type for n in gm.graph.find_nodes(op="placeholder")}, gm.code
        return gm.forward

    torch._dynamo.reset()
    torch.compile(torch.nn.Linear(4, 3), backend=backend)(torch.randn(2, 4))
    torch._dynamo.reset()
    assert torch.nn.Parameter in seen["real"].values() and torch.Tensor in seen["real"].values()
    assert "FakeTensor" in seen["fake_code"]
    assert seen["normalized"] == seen["real"]
    assert "FakeTensor" not in seen["code"]


def test_warm_scalar_logs_but_refuses_decisions():
    x = WarmScalar()
    assert f"{x:.4f}" == "nan" and str(x) == "nan"
    total = 0.0
    total += x
    assert isinstance(total, WarmScalar)
    with pytest.raises(WarmValueError, match="pcompile.warming"):
        bool(x > 1.0)
    with pytest.raises(WarmValueError):
        if x:
            pass
