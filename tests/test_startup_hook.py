"""pcompile/startup.py and `pcompile-startup.pth`: with PCOMPILE=1, torch's own modules are read from
kept bytecode from `import torch` on (the autoload comes too late for them); without it, the hook
imports nothing; a broken setting never stops Python from starting."""
from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pcompile.startup import PTH_NAME
from source_compiles import COUNT_SOURCE_COMPILES

ROOT = Path(__file__).resolve().parents[1]

# counts the modules compiled from source by the script's own `import torch`
PROBE = r"""
import json, sys
""" + COUNT_SOURCE_COMPILES + r"""
before = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "pcompile"))
import torch
print(json.dumps({"prefix": sys.pycache_prefix, "before": before,
                  "torch_compiled": sum("/torch/" in p for p in compiled)}))
"""


def _run(tmp: Path, **env: str) -> dict:
    full = {k: v for k, v in os.environ.items() if not k.startswith(("PCOMPILE", "PYTHONPYCACHEPREFIX"))}
    full.update({"PCOMPILE_CACHE_DIR": str(tmp / "cache"), "PYTHONDONTWRITEBYTECODE": "1", **env})
    out = subprocess.run([sys.executable, "-c", PROBE], env=full, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _installed_pth() -> Path | None:
    for folder in [*site.getsitepackages(), site.getusersitepackages()]:
        if Path(folder, PTH_NAME).is_file():
            return Path(folder, PTH_NAME)
    return None


def test_the_install_put_the_hook_in_site_packages() -> None:
    installed = _installed_pth()
    assert installed is not None, (f"{PTH_NAME} is not in site-packages: install pcompile with the README's command "
                                   "(`pip install -e '.[dev]'` or `pip install .`), not by putting it on PYTHONPATH")
    assert installed.read_text() == (ROOT / PTH_NAME).read_text(), f"{installed} is stale: reinstall pcompile"


def test_a_built_wheel_ships_the_hook_at_its_root(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                          "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    (wheel,) = tmp_path.glob("pcompile-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        assert zf.read(PTH_NAME) == (ROOT / PTH_NAME).read_bytes()
        record = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))).decode()
    assert f"\n{PTH_NAME}," in f"\n{record}", "the hook is missing from RECORD: pip would not uninstall it"


def test_without_pcompile_the_hook_imports_nothing(tmp_path: Path) -> None:
    result = _run(tmp_path, PCOMPILE_BYTECODE="1")
    assert result["prefix"] is None and result["before"] == [], result
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("setting", [{"PCOMPILE_CACHE_DIR": "/proc/pcompile-cannot-be-here"},
                                     {"PCOMPILE_BYTECODE": "sometimes"}, {"PCOMPILE_DISABLE": "1"}])
def test_a_broken_or_declining_setting_leaves_python_as_it_was(tmp_path: Path, setting: dict[str, str]) -> None:
    env = {"PCOMPILE_BYTECODE": "1", **setting}
    result = _run(tmp_path, PCOMPILE="1", **env)
    assert result["prefix"] is None and "torch" not in result["before"], result


@pytest.mark.slow
def test_with_pcompile_import_torch_itself_reads_kept_bytecode(tmp_path: Path) -> None:
    # forced: this host's torch has its bytecode beside it, which the default leaves alone
    first = _run(tmp_path, PCOMPILE="1", PCOMPILE_BYTECODE="1")
    assert first["prefix"] == str(tmp_path / "cache" / "bytecode"), first
    assert "torch" not in first["before"], first  # the hook acted before torch, and did not import it
    assert first["torch_compiled"] > 100, first  # torch's own modules, compiled into the prefix tree once
    second = _run(tmp_path, PCOMPILE="1", PCOMPILE_BYTECODE="1")
    assert second["torch_compiled"] == 0, second
