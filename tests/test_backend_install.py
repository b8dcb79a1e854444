"""Unchanged scripts go through pcompile (PCOMPILE=1, pcompile.install()); unknown versions fall back.

- PCOMPILE=1: torch calls pcompile's `torch.backends` entry point at the end of `import torch`;
  an unchanged `torch.compile(m)` script then compiles through pcompile (entries in the store,
  hooks on), with numbers equal to stock.
- pcompile.install(): the same from inside the script.
- A torch version outside the gate (PCOMPILE_PRETEND_TORCH_VERSION) runs stock Inductor, with
  exactly one warning however many graphs compile, and nothing written to the store.
"""
from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

import pytest

from pcompile.inductor import _testing as t

pytestmark = pytest.mark.slow
AUTOLOAD = "pcompile.inductor.autoload:autoload"


def _entry_point_dir(root: Path) -> Path:
    """A minimal installed distribution declaring pcompile's `torch.backends` entry point, for
    when the package metadata in this checkout predates it (the real one lives in pyproject)."""
    info = root / "pcompile_autoload_probe-0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pcompile-autoload-probe\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text("[torch.backends]\npcompile = pcompile.inductor.autoload:autoload\n")
    return root


def _has_real_entry_point() -> bool:
    return any(ep.value == AUTOLOAD for ep in entry_points(group="torch.backends"))


ROUTE_SCRIPT = r'''
import json, sys
import torch
if sys.argv[1] == "install":
    import pcompile
    pcompile.install()
from pcompile.compat import compile_wrapper
routed_before_compile = compile_wrapper.routed()
x = torch.randn(16)
y = torch.compile(lambda v: (v * 3).tanh() + 1)(x)
from pcompile.inductor import store_gateway, hooks
print("PCOMPILE_RESULT " + json.dumps({"routed": routed_before_compile, "active": hooks.state.active,
      "ok": torch.allclose(y, (x * 3).tanh() + 1, atol=1e-6), "held": store_gateway.held_keys()}))
'''


def _route(tmp_path: Path, how: str, **extra: str) -> tuple[dict, set[str], str]:
    script = t.write_script(tmp_path / "app", "route.py", ROUTE_SCRIPT)
    env = t.clean_env(PCOMPILE_CACHE_DIR=str(tmp_path / "pc"), TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "ind"), **extra)
    if extra.get("PCOMPILE") and not _has_real_entry_point():
        env["PYTHONPATH"] = str(_entry_point_dir(tmp_path / "ep")) + ":" + env["PYTHONPATH"]
    result, stderr = t.run(script, how, env)
    store = tmp_path / "pc" / "store"
    return result, t.manifest_keys(store) if store.exists() else set(), stderr


def test_pcompile_env_routes_an_unchanged_script(tmp_path: Path) -> None:
    result, keys, _ = _route(tmp_path / "on", "-", PCOMPILE="1")
    assert result == {"routed": True, "active": True, "ok": True, "held": []}, "routed at `import torch`, before any compile"
    assert {k.split("-")[0] for k in keys} >= {"graph", "kernel"}
    result, keys, _ = _route(tmp_path / "off", "-")
    assert result == {"routed": False, "active": False, "ok": True, "held": []} and not keys


def test_installed_package_declares_the_autoload_entry_point() -> None:
    """PCOMPILE=1 works only through this entry point: pyproject must declare it, the installed
    metadata must carry it (a stale install does not), and it must name a callable."""
    import importlib
    from importlib.metadata import PackageNotFoundError, distribution

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
    declared = project.get("entry-points", {}).get("torch.backends", {})
    assert declared == {"pcompile": AUTOLOAD}, f"pyproject.toml [project.entry-points.\"torch.backends\"] is {declared}"
    module, _, attr = AUTOLOAD.partition(":")
    assert callable(getattr(importlib.import_module(module), attr))
    try:
        installed = [ep for ep in distribution("pcompile").entry_points if ep.group == "torch.backends"]
    except PackageNotFoundError:
        pytest.fail("pcompile is not installed: pip install -e . (the suite and PCOMPILE=1 need its metadata)")
    assert [ep.value for ep in installed] == [AUTOLOAD], f"installed metadata has {installed}: reinstall (pip install -e .)"


def test_install_routes_torch_compile(tmp_path: Path) -> None:
    result, keys, _ = _route(tmp_path, "install")
    assert result == {"routed": True, "active": True, "ok": True, "held": []}
    assert {k.split("-")[0] for k in keys} >= {"graph", "kernel"}


FALLBACK_SCRIPT = r'''
import json, sys, warnings
import torch
import pcompile
warnings.simplefilter("always")  # count every warning raised, not just the first per location
pcompile.install()
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.ReLU())
x = torch.randn(3, 6)
a = torch.compile(m, backend="pcompile")(x)
b = torch.compile(lambda v: (v * 2).sin())(x)
c = torch.compile(lambda v: v.cos() + 1, backend="pcompile", mode="max-autotune-no-cudagraphs")(x)
ref = (m(x), (x * 2).sin(), x.cos() + 1)
ok = all(torch.allclose(p, q, atol=1e-5) for p, q in zip((a, b, c), ref))
from pcompile.inductor import hooks
print("PCOMPILE_RESULT " + json.dumps({"ok": ok, "active": hooks.state.active}))
'''


def test_unknown_torch_version_falls_back_with_one_warning(tmp_path: Path) -> None:
    script = t.write_script(tmp_path / "app", "fallback.py", FALLBACK_SCRIPT)
    env = t.clean_env(PCOMPILE_PRETEND_TORCH_VERSION="2.99.0", PCOMPILE_CACHE_DIR=str(tmp_path / "pc"),
                      TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "ind"))
    result, stderr = t.run(script, "-", env)
    assert result == {"ok": True, "active": False}
    assert stderr.count("PcompileFallbackWarning") == 1, stderr[-3000:]
    assert "torch 2.99.0" in stderr
    assert not t.manifest_keys(tmp_path / "pc" / "store") if (tmp_path / "pc" / "store").exists() else True


def test_pcompile_env_on_unknown_torch_warns_once_and_runs_stock(tmp_path: Path) -> None:
    result, keys, stderr = _route(tmp_path, "-", PCOMPILE="1", PCOMPILE_PRETEND_TORCH_VERSION="2.99.0")
    assert result == {"routed": False, "active": False, "ok": True, "held": []} and not keys
    assert stderr.count("PcompileFallbackWarning") == 1, stderr[-3000:]


IDLE_SCRIPT = r'''
import json, os, sys, time
import torch
if sys.argv[1] == "install":
    import pcompile
    pcompile.install()
import psutil
x = torch.randn(64, 64)
for _ in range(20):
    x = (x @ x).tanh()  # eager work only: this script never calls torch.compile
time.sleep(1.0)  # a pool daemon or backward worker started by pcompile would be running by now
me = psutil.Process()
before = {"inductor": "torch._inductor" in sys.modules,
          "children": sorted(p.name() for p in me.children(recursive=True)),
          "pool_dirs": sorted(os.listdir(os.environ["PCOMPILE_CACHE_DIR"])) if os.path.isdir(os.environ["PCOMPILE_CACHE_DIR"]) else []}
y = torch.compile(lambda v: v.sin() + 1)(x)
from pcompile.inductor import hooks

def daemons():
    out = []
    for p in me.children():
        try:
            out += ["pcompile.pool.daemon" in " ".join(p.cmdline())]
        except psutil.Error:
            pass
    return any(out)


deadline = time.monotonic() + 60
while not daemons() and time.monotonic() < deadline:  # the eager start, once the hooks are on
    time.sleep(0.05)
after = {"daemon": daemons()}
children = me.children(recursive=True)
for p in children:  # the daemon and whatever it started: gone with this test
    p.kill()
print("PCOMPILE_RESULT " + json.dumps({"before": before, "after": after, "active_after_compile": hooks.state.active}))
'''


@pytest.mark.parametrize("how", ["install", "env"])
def test_a_process_that_never_compiles_pays_nothing(tmp_path: Path, how: str) -> None:
    """pcompile.install() and PCOMPILE=1 only route torch.compile: the hooks (Inductor's imports,
    the node's compile pool, the backward worker) wait for the first torch.compile call. Forced
    on here (PCOMPILE_POOL_EAGER, PCOMPILE_BACKWARD_AHEAD), they would start at once if install()
    turned the hooks on (it did: a script that compiles nothing ran 2.3 s slower on the H100). The
    node pool is on here (the test default is off), so the same observation sees the daemon start
    once the script compiles."""
    script = t.write_script(tmp_path / "app", "idle.py", IDLE_SCRIPT)
    extra = {"PCOMPILE": "1"} if how == "env" else {}
    env = t.clean_env(PCOMPILE_CACHE_DIR=str(tmp_path / "pc"), TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "ind"),
                      PCOMPILE_POOL="node", PCOMPILE_POOL_WORKERS="1", PCOMPILE_POOL_IDLE_EXIT="30",
                      TORCHINDUCTOR_COMPILE_THREADS="2",  # 1 (the test default) keeps the pool out
                      PCOMPILE_POOL_EAGER="1", PCOMPILE_BACKWARD_AHEAD="1", **extra)
    if how == "env" and not _has_real_entry_point():
        env["PYTHONPATH"] = str(_entry_point_dir(tmp_path / "ep")) + ":" + env["PYTHONPATH"]
    result, stderr = t.run(script, how, env)
    assert result["before"] == {"inductor": False, "children": [], "pool_dirs": []}, (result, stderr[-2000:])
    assert result["active_after_compile"], (result, stderr[-2000:])
    assert result["after"]["daemon"], (result, stderr[-2000:])  # the same observation sees the daemon once it starts
