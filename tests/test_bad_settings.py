"""A bad setting never fails a job: a real process compiles through pcompile with one bad variable
and must exit 0 with exactly one line naming the variable and the default it used, no traceback.
(Before the registry, PCOMPILE_MAX_BYTES=abc or =20G failed the job with a 50-line traceback.)"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pcompile.inductor import _testing as t

SCRIPT = r'''
import json
import torch
import torch.nn.functional as F

model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
fn = torch.compile(model, backend="pcompile")
fn(torch.randn(4, 8)).square().mean().backward()

from pcompile.inductor import hooks
from pcompile.pool import choose
from pcompile.compat import lazy_backward
from pcompile.store.compose import default_store

used = default_store().settings
print("RESULT " + json.dumps({"active": hooks.state.active, "max_bytes": used.max_bytes, "max_entries": used.max_entries,
                              "read_only": used.read_only, "pool": choose.pool_kind()[0],
                              "eager_backward": lazy_backward.wanted()}))
'''


def _run(tmp_path: Path, name: str, value: str) -> tuple[dict, str]:
    script = t.write_script(tmp_path, "job.py", SCRIPT)
    env = t.clean_env(PCOMPILE_CACHE_DIR=str(tmp_path / "cache"), **{name: value})
    proc = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    result = next(json.loads(line[len("RESULT "):]) for line in proc.stdout.splitlines() if line.startswith("RESULT "))
    assert result["active"], "pcompile's hooks were not installed: the job did not run through pcompile"
    return result, proc.stderr


@pytest.mark.parametrize("name, value, default, field, used", [
    ("PCOMPILE_MAX_ENTRIES", "lots", "200000", "max_entries", 200_000),  # bad int
    ("PCOMPILE_MAX_BYTES", "abc", "10G", "max_bytes", 10 << 30),  # bad size
    ("PCOMPILE_READ_ONLY", "maybe", "0", "read_only", False),  # bad bool
    ("PCOMPILE_EAGER_BACKWARD", "sometimes", "1", "eager_backward", True),  # bad bool, read at every compile
    ("PCOMPILE_POOL", "bogus", "node", "pool", "node"),  # bad choice
])
def test_a_bad_setting_gives_one_line_and_the_default(tmp_path: Path, name: str, value: str, default: str, field: str,
                                                      used: object) -> None:
    result, stderr = _run(tmp_path, name, value)
    lines = [line for line in stderr.splitlines() if name + "=" in line]
    assert len(lines) == 1, stderr[-4000:]
    assert lines[0].startswith(f"pcompile: {name}={value!r} is not ") and lines[0].endswith(f"; using the default {default}")
    assert result[field] == used


def test_a_size_with_a_suffix_is_accepted(tmp_path: Path) -> None:
    result, stderr = _run(tmp_path, "PCOMPILE_MAX_BYTES", "20G")
    assert "PCOMPILE_MAX_BYTES" not in stderr, stderr[-4000:]
    assert result["max_bytes"] == 20 << 30
