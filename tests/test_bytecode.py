"""inductor/bytecode.py: where Python keeps no bytecode, torch's modules are compiled from source once
per cache dir, not once per process; nothing is written beside a source; the user's choice stands."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pcompile.inductor import bytecode
from source_compiles import COUNT_SOURCE_COMPILES

# counts the modules compiled from source after `import torch` (the autoload has run by then)
PROBE = r"""
import json, os, sys
import torch
""" + COUNT_SOURCE_COMPILES + r"""
import torch._dynamo, torch._inductor.compile_fx
sys.path.insert(0, os.environ["USER_DIR"])
import user_module
print(json.dumps({"compiled": len(compiled), "paths": compiled[:5], "prefix": sys.pycache_prefix,
                  "env": os.environ.get("PYTHONPYCACHEPREFIX"), "dont_write": sys.dont_write_bytecode}))
"""


def _run(tmp: Path, **env: str) -> dict:
    user = tmp / "user"
    if not user.exists():
        user.mkdir()
        (user / "user_module.py").write_text("VALUE = 1\n")
    full = {k: v for k, v in os.environ.items() if not k.startswith(("PCOMPILE", "PYTHONPYCACHEPREFIX"))}
    full.update(PCOMPILE="1", PCOMPILE_CACHE_DIR=str(tmp / "cache"), PYTHONDONTWRITEBYTECODE="1",
                USER_DIR=str(user), **env)
    out = subprocess.run([sys.executable, "-c", PROBE], env=full, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_second_process_compiles_no_module_from_source_and_nothing_lands_beside_a_source(tmp_path: Path) -> None:
    # forced: this host's torch was installed with its bytecode beside it, which `auto` leaves alone
    first = _run(tmp_path, PCOMPILE_BYTECODE="1")
    prefix = str(tmp_path / "cache" / "bytecode")
    assert first["prefix"] == prefix and first["env"] == prefix and first["dont_write"] is False, first
    assert first["compiled"] > 50, first  # Dynamo and Inductor, from source into the prefix tree
    assert list((tmp_path / "cache" / "bytecode").rglob("convert_frame.*.pyc")), "no bytecode of torch._dynamo kept"
    assert not (tmp_path / "user" / "__pycache__").exists()  # never beside a source
    second = _run(tmp_path, PCOMPILE_BYTECODE="1")
    assert second["compiled"] == 0, second
    (tmp_path / "user" / "user_module.py").write_text("VALUE = 22\n")  # an edit: that module again, nothing else
    third = _run(tmp_path, PCOMPILE_BYTECODE="1")
    assert third["compiled"] == 1, third


def test_off_and_a_prefix_of_the_users_own_are_left_alone(tmp_path: Path) -> None:
    off = _run(tmp_path, PCOMPILE_BYTECODE="0")
    assert off["prefix"] is None and off["dont_write"] is True, off
    mine = str(tmp_path / "mine")
    own = _run(tmp_path, PCOMPILE_BYTECODE="1", PYTHONPYCACHEPREFIX=mine)
    assert own["prefix"] == mine and own["dont_write"] is True, own
    assert not (tmp_path / "cache" / "bytecode").exists()


def test_auto_judges_by_the_bytecode_beside_the_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "pkg" / "mod.py"
    source.parent.mkdir()
    source.write_text("x = 1\n")
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert not bytecode.keeps_bytecode(source)  # none beside it, and Python may not write one
    cached = source.parent / "__pycache__" / f"mod.{sys.implementation.cache_tag}.pyc"
    cached.parent.mkdir()
    cached.write_bytes(b"")
    os.utime(cached, (source.stat().st_mtime + 5,) * 2)
    assert bytecode.keeps_bytecode(source)  # compiled at build time: Python reads it, nothing to do
    os.utime(cached, (source.stat().st_mtime - 5,) * 2)
    assert not bytecode.keeps_bytecode(source)  # stale
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    assert bytecode.keeps_bytecode(source)  # Python rewrites it itself


def test_clear_removes_the_kept_bytecode(tmp_path: Path) -> None:
    kept = tmp_path / "cache" / "bytecode" / "x" / "m.cpython-311.pyc"
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"0" * 100)
    out = subprocess.run([sys.executable, "-m", "pcompile.cli.main", "clear", "--cache-dir", str(tmp_path / "cache"),
                          "--json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1])["removed"]["bytecode"] == {"files": 1, "bytes": 100}
    assert not kept.exists()


BACKEND_ONLY = r"""
import json, sys
import torch
before = sys.pycache_prefix
torch.compile(lambda x: x + 1, backend="pcompile")  # no install(), no PCOMPILE=1
print(json.dumps({"before": before, "after": sys.pycache_prefix}))
"""


def test_backend_pcompile_alone_keeps_the_bytecode_of_what_it_imports(tmp_path: Path) -> None:
    """torch.compile(m, backend="pcompile") without install() or PCOMPILE=1 (the benchmark harness's
    way): Inductor's compiler is imported at that call, so the prefix is set there."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PCOMPILE", "PYTHONPYCACHEPREFIX"))}
    env.update(PCOMPILE_CACHE_DIR=str(tmp_path / "cache"), PYTHONDONTWRITEBYTECODE="1", PCOMPILE_BYTECODE="1")
    out = subprocess.run([sys.executable, "-c", BACKEND_ONLY], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["before"] is None and got["after"] == str(bytecode.folder(tmp_path / "cache")), got
    assert list((tmp_path / "cache").rglob("compile_fx.*.pyc")), "Inductor's compiler was imported after the prefix was set"
