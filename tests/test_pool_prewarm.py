"""The node pool's forkserver module leaves workers able to use the store for autotune results.

A kernel's AutotuneCache is built in the worker that imports the kernel; on torch 2.11 the
parent never rebuilds it, so a worker without pcompile's remote-cache backend would silently
drop every autotune winner (and every warm prediction) of pool-compiled kernels.
"""
from __future__ import annotations

import subprocess
import sys


def test_prewarm_installs_the_autotune_backend_in_a_fresh_interpreter(tmp_path):
    code = (
        "import pcompile.pool.prewarm\n"
        "from torch._inductor.remote_cache import RemoteAutotuneCache\n"
        "cls = RemoteAutotuneCache.backend_override_cls\n"
        "print(cls.__module__ if cls else None)\n"
    )
    env = {"PCOMPILE_CACHE_DIR": str(tmp_path / "pc"), "PATH": "/usr/bin:/bin"}
    import os

    env.update({k: v for k, v in os.environ.items() if k in ("PYTHONPATH", "HOME")})
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "pcompile.inductor.remote_backend"
