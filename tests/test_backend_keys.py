"""Keys do not depend on where a script lives or where caches are.

The same script, copied into two different directories and run from each with its own
PCOMPILE_CACHE_DIR and TORCHINDUCTOR_CACHE_DIR, must publish exactly the same set of keys:
nothing path-, pid- or host-specific leaks into a pcompile key.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from pcompile.inductor import _testing as t

pytestmark = pytest.mark.slow


def test_same_script_in_two_directories_gives_equal_keys(tmp_path: Path) -> None:
    runs = []
    for name in ("first/checkout", "second/elsewhere/deeper"):
        root = tmp_path / name
        script = t.write_script(root / "app")
        env = t.clean_env(PCOMPILE_CACHE_DIR=str(root / "pc"), TORCHINDUCTOR_CACHE_DIR=str(root / "ind"))
        runs.append((root, t.start(script, "pcompile", env, cwd=root)))
    for _root, proc in runs:
        t.finish(proc)
    keys = [t.manifest_keys(root / "pc" / "store") for root, _ in runs]
    assert keys[0], "nothing was published"
    assert {k.split("-")[0] for k in keys[0]} >= {"graph", "autograd", "kernel"}
    assert keys[0] == keys[1]
    for key in keys[0]:  # and no absolute path made it into what a key was computed from
        layer = key.split("-")[0]
        manifest = next((runs[0][0] / "pc" / "store" / "manifests" / layer).rglob(f"{key}.json"))
        inputs = json.loads(manifest.read_text())["inputs"]
        assert str(tmp_path) not in json.dumps(inputs)


def test_a_config_the_script_sets_gives_one_key_whether_hooks_came_first_or_later(tmp_path: Path) -> None:
    """gpt-fast sets torch._functorch.config.enable_autograd_cache at import. A warm turns pcompile's
    hooks on before the script, a GPU job at its torch.compile; both must compute one AOTAutograd
    key (pcompile switched the local twin off at install: the warm hashed True, the job False)."""
    from tests.conftest import run_py

    cache = tmp_path / "pc"
    code = """
        import sys, torch
        import pcompile
        from torch._dynamo.utils import counters
        if sys.argv[1] == "hooks-first":
            from pcompile.inductor import hooks
            pcompile.install(); hooks.install_hooks()
        torch._functorch.config.enable_autograd_cache = True   # what the script does at import
        if sys.argv[1] == "hooks-at-compile":
            pcompile.install()
        m = torch.nn.Linear(8, 8)
        y = torch.compile(m)(torch.randn(4, 8, requires_grad=True)).sum()
        y.backward()
        a = counters["aot_autograd"]
        print("AOT", a["autograd_cache_hit"], a["autograd_cache_miss"])
    """
    env = dict(t.clean_env(PCOMPILE_CACHE_DIR=str(cache)), PCOMPILE_POOL="off", PCOMPILE_BACKWARD_AHEAD="0")
    outs = []
    for order in ("hooks-at-compile", "hooks-first"):
        r = run_py(f"import sys; sys.argv = ['x', {order!r}]\n" + __import__("textwrap").dedent(code), env=env,
                   timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        outs.append([ln for ln in r.stdout.splitlines() if ln.startswith("AOT")][-1])
    assert outs == ["AOT 0 1", "AOT 1 0"], outs
