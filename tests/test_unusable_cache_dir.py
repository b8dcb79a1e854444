"""A cache dir torch cannot use never fails a PCOMPILE=1 job (issue 32, item 1).

torch creates TORCHINDUCTOR_CACHE_DIR while `import torch._dynamo` runs, inside torch.compile's
first call; pcompile sets that variable while `import torch` finishes. A cache dir that is a file,
or on a read-only file system, failed the job there (NotADirectoryError, OSError errno 30). Each
case is a real PCOMPILE=1 job in a fresh process: it finishes with stock's numbers and pcompile
says exactly one line naming the problem and the fix.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pcompile.inductor import _testing as t

pytestmark = pytest.mark.slow

SCRIPT = r'''
import torch
x = torch.arange(16, dtype=torch.float32)
y = torch.compile(lambda v: (v * 3).tanh() + 1)(x)
print("OK" if torch.equal(y, (x * 3).tanh() + 1) else "DIFFERENT", flush=True)
'''


def _job(tmp_path: Path, cache_dir: Path, prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    script = t.write_script(tmp_path / "app", "job.py", SCRIPT)
    tmp = tmp_path / "tmp"  # torch's own default cache dir lives under TMPDIR: keep it in the test's dir
    tmp.mkdir(exist_ok=True)
    env = t.clean_env(PCOMPILE="1", PCOMPILE_CACHE_DIR=str(cache_dir), TMPDIR=str(tmp))
    argv = [*(prefix or []), sys.executable, str(script)]
    return subprocess.run(argv, env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=300)


def _pcompile_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "pcompile" in line.lower()]


def test_a_cache_dir_that_is_a_file(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    out = _job(tmp_path, afile)
    assert out.returncode == 0 and out.stdout.strip() == "OK", out.stderr[-3000:]
    lines = _pcompile_lines(out.stderr)
    assert len(lines) == 1, lines
    assert f"cache dir {afile} is not a directory ({afile} is a file)" in lines[0], lines[0]
    assert "PCOMPILE_CACHE_DIR" in lines[0] and "(File exists)" not in lines[0], lines[0]


def test_a_cache_dir_on_a_read_only_file_system(tmp_path: Path) -> None:
    """A read-only tmpfs mounted in this job's own mount namespace (chmod does not stop root)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare(1) for a read-only mount in a private namespace")
    ro = tmp_path / "ro"
    ro.mkdir()
    mount = f"mount -t tmpfs -o ro,size=1m tmpfs {ro} && exec \"$0\" \"$@\""
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", mount, "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here: {probe.stderr.strip()}")
    out = _job(tmp_path, ro / "cache", prefix=["unshare", "-m", "--propagation", "private", "sh", "-c", mount])
    assert out.returncode == 0 and out.stdout.strip() == "OK", out.stderr[-3000:]
    lines = _pcompile_lines(out.stderr)
    assert len(lines) == 1, lines
    assert f"cache dir {ro / 'cache'} is on a read-only filesystem" in lines[0], lines[0]
    assert "PCOMPILE_CACHE_DIR" in lines[0], lines[0]
