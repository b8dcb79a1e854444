"""A second process, and a second node, get every compiled layer from pcompile's store.

Process A compiles a tiny training step on CPU with backend="pcompile". Process B is a fresh
interpreter with the same PCOMPILE_CACHE_DIR but its own empty TORCHINDUCTOR_CACHE_DIR, so
only pcompile's store can serve it: `pcompile stats --json` must show hits and no misses on the
graph, autograd and kernel layers, and no new compiles. A "second node" (its own cache dir, the
same PCOMPILE_SHARED_DIR) must hit the same way, through the shared tier. Results are compared
bit for bit with stock Inductor and closely with eager.
"""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from pcompile.inductor import _testing as t

pytestmark = pytest.mark.slow
LAYERS = ("graph", "autograd", "kernel")


def _close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=1e-4, abs_tol=1e-5) for x, y in zip(a, b))


def test_second_process_and_second_node_hit_every_layer(tmp_path: Path) -> None:
    script = t.write_script(tmp_path / "app")
    node1, node2, shared = tmp_path / "node1", tmp_path / "node2", tmp_path / "shared"

    def env(cache: Path, inductor: str) -> dict[str, str]:
        return t.clean_env(PCOMPILE_CACHE_DIR=str(cache), PCOMPILE_SHARED_DIR=str(shared),
                           TORCHINDUCTOR_CACHE_DIR=str(tmp_path / inductor))

    a, _ = t.run(script, "pcompile", env(node1, "ind_a"))
    assert a["hooks"]["active"] and {"graph", "autograd", "kernel.cpp"} <= set(a["hooks"]["layers"])
    assert a["held"] == [], "every lease must be released when the compile is done"
    first = t.stats(node1, shared)
    assert first["compiles"] > 0
    for layer in LAYERS:
        assert first["layers"][layer]["misses"] > 0, f"process A should have compiled the {layer} layer"
    assert t.manifest_keys(shared / "store") == t.manifest_keys(node1 / "store")

    stock, _ = t.run(script, "inductor", t.clean_env(TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "ind_stock")))
    assert a["params"] == stock["params"] and a["losses"] == stock["losses"], "pcompile must equal stock Inductor bit for bit"
    assert _close(a["param_values"], a["eager_param_values"])

    b, _ = t.run(script, "pcompile", env(node1, "ind_b"))
    second = t.stats(node1, shared)
    delta = t.layer_delta(first, second)
    for layer in LAYERS:
        assert delta[layer]["hits"] > 0 and delta[layer]["misses"] == 0, (layer, delta)
    assert second["compiles"] == first["compiles"], "process B compiled something"
    assert second["saved_seconds"] > first["saved_seconds"]
    assert b["params"] == a["params"] and _close(b["param_values"], b["eager_param_values"])

    c, _ = t.run(script, "pcompile", env(node2, "ind_c"))
    other = t.stats(node2, shared)
    for layer in LAYERS:
        assert other["layers"][layer]["hits"] > 0 and other["layers"][layer]["misses"] == 0, (layer, other["layers"])
    assert other["compiles"] == 0
    assert other["tiers"]["shared"]["hits"] > 0 and other["tiers"]["local"]["hits"] == 0
    assert c["params"] == a["params"]
    assert t.manifest_keys(node2 / "store") == t.manifest_keys(shared / "store"), "shared hits are backfilled locally"
