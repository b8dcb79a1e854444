"""A warm that could write nothing fails and says so (issue 32, item 3).

On a full file system the warm printed "written to ...: 0 FX graph entries, 0 AOTAutograd
entries, 0 Triton cubins", then that the GPU job hits these entries, and exited 0; its Python
redirect also printed `could not install the file redirect: KeyError: 'user'`. The cache dir here
is a full tmpfs mounted in the warm's own mount namespace (unshare -m): a real ENOSPC.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform != "linux", reason="the virtual device is Linux-only")]

SCRIPT = """\
import torch

@torch.compile(dynamic=False)
def f(x):
    return (x * 2).softmax(-1)

f(torch.randn(32, 64, device="cuda"))
"""


def test_a_warm_into_a_full_cache_dir_fails_and_says_so(tmp_path: Path) -> None:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare(1) for a tmpfs in a private mount namespace")
    script = tmp_path / "tiny.py"
    script.write_text(textwrap.dedent(SCRIPT))
    cache = tmp_path / "cache"
    cache.mkdir()
    warm = [sys.executable, "-m", "pcompile.cli.main", "warm", str(script), "--target", "h100", "--cache-dir", str(cache)]
    fill = (f"mount -t tmpfs -o size=1m tmpfs {cache} || exit 97; "
            f"head -c 2000000 /dev/zero > {cache}/filler 2>/dev/null; exec \"$0\" \"$@\"")
    env = dict(os.environ, PCOMPILE_POOL="local", PCOMPILE_PROGRESS="0")  # no daemon left in the namespace
    out = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", fill, *warm],
                         capture_output=True, text=True, timeout=600, env=env, cwd=str(tmp_path))
    text = out.stdout + out.stderr
    if out.returncode == 97:
        pytest.skip(f"cannot mount a tmpfs here: {text.strip()[-300:]}")
    assert out.returncode != 0, text[-3000:]
    assert f"wrote nothing to {cache} (cache dir {cache} is full)" in text, text[-3000:]
    assert "the GPU job hits these entries" not in text, text[-3000:]
    assert "could not install the file redirect" not in text, text[-3000:]
