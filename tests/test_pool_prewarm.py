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
        "import pcompile.inductor.worker_prewarm\n"
        "from torch._inductor.remote_cache import RemoteAutotuneCache\n"
        "cls = RemoteAutotuneCache.backend_override_cls\n"
        "print(cls.__module__ if cls else None)\n"
    )
    env = {"PCOMPILE_CACHE_DIR": str(tmp_path / "pc"), "PATH": "/usr/bin:/bin"}
    import os

    env.update({k: v for k, v in os.environ.items() if k in ("PYTHONPATH", "HOME")})
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "pcompile.inductor.store_adapter"


# -- a job run inside a real pool worker (workers import this module: tests/ is on PYTHONPATH) --
def what_the_worker_inherited() -> dict:
    """Checked before this job compiles anything itself: the forkserver's warm-up is inherited."""
    import os
    import sys

    from torch._inductor import codecache

    info = getattr(codecache.torch_key, "cache_info", None)
    return {"pid": os.getpid(), "ppid": os.getppid(), "code_generator": "triton.compiler.code_generator" in sys.modules,
            "torch_key_cached": info().currsize if info else None}


def test_pool_workers_inherit_the_forkserver_triton_warmup(tmp_path, monkeypatch):
    import os
    from pathlib import Path

    import pytest

    pytest.importorskip("triton")
    from pcompile.compat import triton_warmup
    from pcompile.inductor.pool_install import WORKER_PRELOAD
    from pcompile.pool.client import NodePool
    from pcompile.pool.launcher import DaemonOptions

    if not triton_warmup.has_cuda_backend():
        pytest.skip("this triton has no CUDA backend")
    tests = Path(__file__).resolve().parent
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tests), str(tests.parent), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("PCOMPILE_CACHE_DIR", str(tmp_path / "pc"))
    pool = NodePool(tmp_path / "pc", DaemonOptions(workers=2, idle_exit=60.0, preload=WORKER_PRELOAD))
    try:
        got = [pool.submit_job(what_the_worker_inherited).result(timeout=240) for _ in range(2)]
    finally:
        pool.stop_daemon()
        pool.shutdown(wait=False)
    for g in got:
        assert g["pid"] != os.getpid(), "the job ran in-process, not in a pool worker"
        assert g["code_generator"] is True, g
        assert g["torch_key_cached"] in (None, 1), g
