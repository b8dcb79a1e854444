"""compat/dynamo_entries.py: what a stored program is made of, on this torch."""
from __future__ import annotations

import pickle

import pytest

from pcompile.compat import CompatError, dynamo_entries


def test_check_passes_on_this_torch() -> None:
    dynamo_entries.check()  # raises CompatError naming what moved


def test_loads_refuses_bytes_that_are_not_a_program() -> None:
    with pytest.raises(CompatError, match="not a PrecompileCacheEntry"):
        dynamo_entries.loads(pickle.dumps({"not": "a program"}))


def test_config_copies_are_the_three_compile_configs() -> None:
    copies = dynamo_entries.config_copies()
    assert sorted(copies) == ["dynamo", "functorch", "inductor"]
    assert "fx_graph_cache" in copies["inductor"]


def test_innermost_fn_unwraps_modules_and_bound_methods() -> None:
    import torch

    class M(torch.nn.Module):
        def forward(self, x):
            return x

    m = M()
    assert dynamo_entries.innermost_fn(m) is M.forward
    assert dynamo_entries.innermost_fn(m.forward) is M.forward
