"""`pcompile warm --cache-dir B` fills B, whatever compile pool serves it (issue 32, item 2).

The node daemon and Ray actors are shared workers: their environment is that of whoever started
them, and their store look-ups and writes (autotune entries, Triton's cubins) followed it. After
a warm into this environment's cache A (whose daemon keeps running, as after the README's first
command), a warm with `--cache-dir B` found its autotune entries in A through the workers, so B
got no predictions, and `warm --check` on B still said every look-up hit. Each job now carries
its requester's store settings: B gets what the warm into A got, and A gets nothing new.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from test_warm import warm  # noqa: E402  (same directory)

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform != "linux", reason="the virtual device is Linux-only")]

SCRIPT = """\
import torch

@torch.compile(dynamic=False)
def f(x):
    return (x * 2).softmax(-1)

for n in (64, 128):
    f(torch.randn(32, n, device="cuda"))
"""


def _files(root: Path) -> dict[str, float]:
    """Every file under `root` but the node pool's own (its socket, log, pid), with its mtime."""
    return {str(p.relative_to(root)): p.stat().st_mtime for p in root.rglob("*")
            if p.is_file() and p.relative_to(root).parts[0] != "pool"}


def _stop_daemon(cache: Path, env: dict[str, str]) -> None:
    code = "import sys; from pcompile.pool.client import NodePool; NodePool(sys.argv[1], connect_now=False).stop_daemon()"
    subprocess.run([sys.executable, "-c", code, str(cache)], env=env, timeout=60)


def _warm_beside_another_cache(tmp_path: Path, pool: str, **extra: str) -> None:
    script = tmp_path / "recompile.py"
    script.write_text(textwrap.dedent(SCRIPT))
    a, b = tmp_path / "A", tmp_path / "B"
    env = {"PCOMPILE_CACHE_DIR": str(a), "PCOMPILE_POOL": pool, **extra}  # A: this environment's cache
    try:
        rc, first, log = warm(script, a, env=env, cwd=tmp_path)
        assert rc == 0, log[-3000:]
        assert first["report"]["autotune_predicted"] == 2, first["report"]
        before = _files(a)
        rc, res, log = warm(script, b, env=env, cwd=tmp_path)
        assert rc == 0, log[-3000:]
        assert res["report"]["autotune_predicted"] == 2, f"B got {res['report']['autotune_predicted']} predictions"
        assert res["written"] == first["written"], (res["written"], first["written"])
        pools = {json.loads(line).get("pool") for log_file in (b / "events").glob("warm-*.jsonl")
                 for line in log_file.read_text().splitlines() if '"kernel_compile"' in line}
        assert pools == {pool}, f"kernels compiled by {pools}, not by the {pool} pool"
        after = _files(a)
        assert after == before, f"A changed: {sorted(set(after.items()) ^ set(before.items()))[:8]}"
        rc, check, log = warm(script, b, "--check", env=env, cwd=tmp_path)
        assert rc == 0, log[-3000:]
    finally:
        full = dict(os.environ, **env)
        for cache in (a, b):
            _stop_daemon(cache, full)


def test_warm_cache_dir_beside_a_node_daemon_of_another_cache(tmp_path: Path) -> None:
    _warm_beside_another_cache(tmp_path, "node")


def test_warm_cache_dir_on_a_ray_cluster_started_for_another_cache(tmp_path: Path, monkeypatch) -> None:
    """A running local Ray cluster whose processes (and so its actors) have A as their cache."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("a Ray cluster of another test is up in this process")
    monkeypatch.setenv("PCOMPILE_CACHE_DIR", str(tmp_path / "A"))
    ctx = ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        _warm_beside_another_cache(tmp_path, "ray", RAY_ADDRESS=ctx.address_info["gcs_address"])
    finally:
        ray.shutdown()
