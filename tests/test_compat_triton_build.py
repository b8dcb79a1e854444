"""compat/triton_build.py: Triton's own content key and the ptxas it runs for an arch."""
from __future__ import annotations

import os
import subprocess

import pytest

pytest.importorskip("triton")

from pcompile.compat import triton_build  # noqa: E402
from pcompile.keys import Target, fingerprint  # noqa: E402


def test_check_passes_on_this_triton() -> None:
    triton_build.check()


def test_key_is_stable_and_ptxas_runs() -> None:
    import sys
    import triton

    key = triton_build.triton_key()
    assert key.startswith(triton.__version__), key[:80]  # Triton's own key, naming its version
    fresh = subprocess.run([sys.executable, "-c", "from pcompile.compat import triton_build; print(triton_build.triton_key())"],
                           capture_output=True, text=True, timeout=120)
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert fresh.stdout.strip() == key  # the same in another process: stable, not just cached
    path = triton_build.ptxas_path(90)
    assert os.path.exists(path)
    assert "ptxas" in subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout.lower() \
        or "cuda" in subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout.lower()


def test_kernel_fingerprint_names_the_ptxas_triton_runs_for_the_target() -> None:
    """triton 3.9 compiles sm_90 with ptxas-blackwell (3.8: the plain ptxas): the key says which."""
    path = triton_build.ptxas_path(90)
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    fields = fingerprint(Target("sm_90", "NVIDIA H100 80GB HBM3"), ptxas=True)
    assert fields["ptxas"] in out
