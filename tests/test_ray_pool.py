"""RayPool on a real local Ray cluster (ray.init(num_cpus=2)): CPU-only actors compile jobs,
including Inductor's Triton kernels for sm_90 on this GPU-less host, into pcompile's store."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from pcompile.pool.choose import pool_kind  # noqa: E402
from pcompile.pool import JobTimedOut, WorkerCrashed  # noqa: E402
from pcompile.pool.ray_pool import RayPool  # noqa: E402

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


# -- jobs (run inside Ray actors) -----------------------------------------------------------
def actor_pid(delay: float = 0.0) -> int:
    time.sleep(delay)
    return os.getpid()


def raises() -> None:
    raise ValueError("no such config")


def dies() -> None:
    os._exit(3)


def hangs() -> None:
    time.sleep(3600)


@pytest.fixture(scope="module")
def cluster():
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS), str(REPO), old or "") if p)
    ctx = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        yield ctx.address_info["gcs_address"]
    finally:
        ray.shutdown()
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def test_pool_kind_parses_ray_addresses() -> None:
    assert pool_kind("ray") == ("ray", None)
    assert pool_kind("ray://head:10001") == ("ray", "ray://head:10001")
    assert pool_kind("") == ("node", None)
    assert pool_kind("off") == ("off", None)


def test_ray_unavailable_runs_in_process_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    """Runs before the cluster fixture exists: an unreachable address (here Ray Client is not even
    installed; elsewhere the connect deadline fires) must not fail or stall the jobs."""
    from pcompile.warn import forget as forget_warnings

    if ray.is_initialized():
        pytest.skip("a Ray cluster is already initialised in this process")
    forget_warnings()
    pool = RayPool("ray://127.0.0.1:1", connect_timeout=20)
    try:
        assert [f.result(timeout=180) for f in [pool.submit(actor_pid) for _ in range(3)]] == [os.getpid()] * 3
        assert pool.mode == "local"
        warnings = [r for r in caplog.records if "Ray pool unavailable" in r.getMessage()]
        assert len(warnings) == 1 and "\n" not in warnings[0].getMessage()
    finally:
        pool.shutdown()


def test_actors_run_jobs_with_crash_and_timeout_isolation(cluster: str) -> None:
    pool = RayPool(job_timeout=60)
    try:
        assert pool.wait_ready(120) and pool.actor_count == 2
        pids = {f.result(timeout=120) for f in [pool.submit(actor_pid, 0.05) for _ in range(6)]}
        assert os.getpid() not in pids and 1 <= len(pids) <= 2
        with pytest.raises(ValueError, match="no such config") as info:
            pool.submit(raises).result(timeout=120)
        assert "Traceback" in str(info.value.__cause__)
        with pytest.raises(WorkerCrashed, match="dying-kernel: Ray actor died"):
            pool.submit_job(dies, label="dying-kernel").result(timeout=120)
        with pytest.raises(JobTimedOut, match="stuck-kernel: timed out after 2 s"):
            pool.submit_job(hangs, timeout=2, label="stuck-kernel").result(timeout=120)
        # both actors were replaced; the pool keeps working at full size
        after = {f.result(timeout=120) for f in [pool.submit(actor_pid, 0.2) for _ in range(4)]}
        assert after and pool.counts["crashed"] == 1 and pool.counts["timeout"] == 1
    finally:
        pool.shutdown()


def test_triton_kernels_for_sm90_compile_on_ray_actors_and_land_in_the_store(cluster: str, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    version = ".".join(torch.__version__.split(".")[:2])
    data = TESTS / "data" / f"triton_kernels_{version}.json"
    if not data.exists():
        pytest.skip(f"no captured kernels for torch {version}")
    code = f"""
    import functools, json, os
    import torch
    from pcompile.inductor import pool_install
    import torch._inductor.async_compile as ac
    from torch._inductor.runtime.compile_tasks import _worker_compile_triton
    from torch._inductor.codecache import _load_triton_kernel_from_source
    from pcompile.config import Settings
    from pcompile.store.compose import open_store
    from pcompile.store.tiered import Store
    from pcompile.compat import pool_hook
    kernels = json.load(open({str(data)!r}))["kernels"]
    assert pool_install.install_pool()
    pool = ac.AsyncCompile.process_pool()
    extra_env = {{"TORCHINDUCTOR_CACHE_DIR": os.environ["TORCHINDUCTOR_CACHE_DIR"], "TRITON_CACHE_DIR": os.environ["TRITON_CACHE_DIR"]}}
    extra_config = {{"use_static_triton_launcher": torch._inductor.config.use_static_triton_launcher}}
    futures = [pool.submit(_worker_compile_triton, functools.partial(_load_triton_kernel_from_source, k["name"], k["source"]), extra_env, extra_config) for k in kernels]
    out = {{"kernels": [], "entries": []}}
    for f in futures:
        kernel, us = f.result(timeout=600)
        raw = [getattr(getattr(r, "kernel", None), "cubin_raw", None) for r in kernel.compile_results]
        out["kernels"].append([type(kernel).__name__, all(c is not None and c[:4] == b"\\x7fELF" for c in raw)])
    router = pool_install.router()
    store = open_store(Settings.from_env())
    for k in kernels:
        key = router.key_for(pool_hook.TritonJob(k["name"], k["source"], extra_env, extra_config))[0]
        entry = store.get(key)
        out["entries"].append(entry.meta if entry else None)
    out["counts"] = pool_install.counts()
    out["pool"] = type(router.jobs).__name__
    out["ray"] = router.jobs.counts
    out["pid"] = os.getpid()
    print(json.dumps(out))
    """
    env = dict(os.environ)
    env.update(
        {
            "PCOMPILE_POOL": "ray",
            "RAY_ADDRESS": cluster,
            "PCOMPILE_CACHE_DIR": str(tmp_path / "cache"),
            "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
            "TRITON_CACHE_DIR": str(tmp_path / "triton"),
        }
    )
    for name in ("PCOMPILE_SHARED_DIR", "PCOMPILE_REMOTE", "TORCHINDUCTOR_COMPILE_THREADS"):
        env.pop(name, None)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    n = len(out["kernels"])
    assert out["pool"] == "RayPool" and out["ray"]["ray"] == n and out["ray"]["local"] == 0, out
    assert out["kernels"] == [["CachingAutotuner", True]] * n
    assert out["counts"]["compiled"] == n
    for meta in out["entries"]:
        assert meta is not None and meta["pool"] == "ray"
        assert meta["built_by"] != f"pid {out['pid']}"  # built in an actor, published by the caller
    # nothing was written into the caller's Triton cache dir: the actors used their own
    assert not (tmp_path / "triton").exists() or not any((tmp_path / "triton").iterdir())
