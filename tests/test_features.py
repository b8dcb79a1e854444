"""The hooks' feature registry (pcompile/inductor/features.py), with the real features.

Each case runs in a fresh interpreter (compat checks are memoised per process). A torch whose
private API moved is made for real: the attribute a compat module checks is deleted from torch
before pcompile looks, exactly what an upgraded torch without it would show.
"""
from __future__ import annotations

import json

from conftest import run_py

RESULT = "FEATURES_RESULT "

PRELUDE = """
import json, warnings
import torch
from pcompile.inductor import features, hooks

def report(caught, **extra):
    msgs = [str(w.message) for w in caught if w.category.__name__ == "PcompileFallbackWarning"]
    out = {"layers": list(hooks.state.layers), "stock": hooks.state.stock, "warnings": msgs,
           "on": sorted(f.name for f in features.FEATURES if features.is_on(f.name)), **extra}
    print("FEATURES_RESULT " + json.dumps(out))
"""


def _run(code: str, env: dict[str, str]) -> dict:
    proc = run_py(PRELUDE + code, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT)]
    assert line, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(line[-1][len(RESULT):])


def test_a_cache_layer_whose_api_moved_stays_stock_and_is_named_in_the_one_warning(cache_env: dict[str, str]) -> None:
    env = {**cache_env, "PCOMPILE_POOL": "off"}
    out = _run("""
import torch._inductor.remote_cache as rc
delattr(rc.RemoteCache, "backend_override_cls")  # a torch without the remote-cache plug point
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    on = hooks.install_hooks()
    hooks.install_hooks()  # idempotent: no second warning
report(caught, active=on)
""", env)
    assert set(out["stock"]) == {"graph", "autograd", "autotune"}, out
    assert all("backend_override_cls" in why for why in out["stock"].values()), out
    assert "kernel.cpp" in out["layers"] and "graph" not in out["layers"], out
    assert out["active"] is True
    stock_lines = [w for w in out["warnings"] if "stay stock" in w]
    assert len(stock_lines) == 1, out["warnings"]
    assert all(layer in stock_lines[0] for layer in ("graph", "autograd", "autotune")), stock_lines
    assert "remote" not in out["on"] and "cpp" in out["on"], out
    assert "device_index" not in out["on"], out  # it needs the graph layer
    assert "pool" not in out["on"], out  # PCOMPILE_POOL=off: declined, silently
    assert not [w for w in out["warnings"] if "compile pool" in w], out["warnings"]


def test_a_feature_whose_check_fails_stays_off_with_its_own_line_and_the_layers_stay_on(
        cache_env: dict[str, str]) -> None:
    """Backward ahead asked for explicitly, in a torch whose partition step moved: no worker, one
    line naming why, every cache layer on. Wanted, it still pulls the hooks to torch.compile."""
    env = {**cache_env, "PCOMPILE_POOL": "off", "PCOMPILE_BACKWARD_AHEAD": "1"}
    out = _run("""
import torch._functorch._aot_autograd.graph_compile as gc
delattr(gc, "_aot_stage2a_partition")  # a torch without the partition step backward ahead wraps
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    torch.compile(torch.nn.Linear(4, 4), backend="pcompile")  # not run: torch itself needs what was deleted
    decided_at_compile = hooks.state.decided  # no graph exists yet
report(caught, decided_at_compile=decided_at_compile, manager=features.kept("backward_ahead") is not None)
""", env)
    assert out["decided_at_compile"] is True, out
    assert "backward_ahead" not in out["on"] and out["manager"] is False, out
    lines = [w for w in out["warnings"] if "backward graphs compile after their forward" in w]
    assert len(lines) == 1 and "_aot_stage2a_partition" in lines[0], out["warnings"]
    assert {"graph", "autograd", "autotune", "kernel.cpp"} <= set(out["layers"]), out
    assert not out["stock"], out
    assert not [w for w in out["warnings"] if "stay stock" in w], out["warnings"]


def test_features_act_at_torch_compile_and_uninstalling_takes_every_one_off(cache_env: dict[str, str]) -> None:
    """At the torch.compile call (before any graph) Inductor's compiler is imported and the cache
    layers are on; backward ahead, not wanted on this CPU host by default, stays off.
    Uninstalling takes every feature off."""
    env = {**cache_env, "PCOMPILE_POOL": "off"}
    out = _run("""
import sys
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    torch.compile(torch.nn.Linear(4, 4), backend="pcompile")
    decided_at_compile = hooks.state.decided
    at_compile = sorted(f.name for f in features.FEATURES if features.is_on(f.name))
    compiler = "torch._inductor.compile_fx" in sys.modules
    hooks.uninstall_hooks()
report(caught, decided_at_compile=decided_at_compile, at_compile=at_compile, compiler=compiler,
       wanted={f.name: features.wanted(f.name) for f in features.FEATURES})
""", env)
    assert out["decided_at_compile"] is True and out["compiler"] is True, out
    assert {"compiler_import", "remote", "cpp"} <= set(out["at_compile"]), out
    assert out["wanted"]["backward_ahead"] is False and "backward_ahead" not in out["at_compile"], out
    assert not out["warnings"], out["warnings"]
    assert out["on"] == [], out


def test_unknown_feature_names_say_which_exist() -> None:
    from pcompile.inductor import features

    try:
        features.wanted("backwards_ahead")
    except KeyError as exc:
        assert "backward_ahead" in str(exc)
    else:
        raise AssertionError("an unknown feature name must not pass silently")
