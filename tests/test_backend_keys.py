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
