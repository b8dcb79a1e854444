"""Pool sizing reads real cgroup-shaped files (v2 cpu.max, v1 CFS quota, memory limits)."""
from __future__ import annotations

from pathlib import Path

import pytest

from pcompile.pool.sizing import cgroup_cpu_limit, cgroup_memory_available, pool_size

GiB = 1024**3


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture(autouse=True)
def _no_env_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PCOMPILE_POOL_WORKERS", raising=False)
    monkeypatch.delenv("PCOMPILE_POOL_MEM_PER_WORKER", raising=False)


def test_v2_cpu_max_of_own_cgroup(tmp_path: Path) -> None:
    write(tmp_path / "proc_cgroup", "0::/job42\n")
    write(tmp_path / "cg" / "job42" / "cpu.max", "250000 100000\n")
    assert cgroup_cpu_limit(tmp_path / "cg", tmp_path / "proc_cgroup") == pytest.approx(2.5)


def test_v2_tightest_ancestor_wins_and_max_means_unlimited(tmp_path: Path) -> None:
    write(tmp_path / "proc_cgroup", "0::/slurm/job/step\n")
    write(tmp_path / "cg" / "slurm" / "cpu.max", "max 100000\n")
    write(tmp_path / "cg" / "slurm" / "job" / "cpu.max", "400000 100000\n")
    write(tmp_path / "cg" / "slurm" / "job" / "step" / "cpu.max", "max 100000\n")
    assert cgroup_cpu_limit(tmp_path / "cg", tmp_path / "proc_cgroup") == pytest.approx(4.0)


def test_v2_unlimited_is_none(tmp_path: Path) -> None:
    write(tmp_path / "proc_cgroup", "0::/\n")
    write(tmp_path / "cg" / "cpu.max", "max 100000\n")
    assert cgroup_cpu_limit(tmp_path / "cg", tmp_path / "proc_cgroup") is None


def test_v1_cfs_quota(tmp_path: Path) -> None:
    write(tmp_path / "proc_cgroup", "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n")
    write(tmp_path / "cg" / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_quota_us", "300000\n")
    write(tmp_path / "cg" / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_period_us", "100000\n")
    write(tmp_path / "cg" / "cpu,cpuacct" / "cpu.cfs_quota_us", "-1\n")
    write(tmp_path / "cg" / "cpu,cpuacct" / "cpu.cfs_period_us", "100000\n")
    assert cgroup_cpu_limit(tmp_path / "cg", tmp_path / "proc_cgroup") == pytest.approx(3.0)


def test_memory_left_under_v2_limit(tmp_path: Path) -> None:
    write(tmp_path / "proc_cgroup", "0::/job\n")
    write(tmp_path / "cg" / "job" / "memory.max", str(8 * GiB))
    write(tmp_path / "cg" / "job" / "memory.current", str(5 * GiB))
    assert cgroup_memory_available(tmp_path / "cg", tmp_path / "proc_cgroup") == 3 * GiB


def test_pool_size_takes_the_cpu_quota_not_the_core_count(tmp_path: Path) -> None:
    write(tmp_path / "proc_cgroup", "0::/job\n")
    write(tmp_path / "cg" / "job" / "cpu.max", "600000 100000\n")
    size = pool_size(cgroup_root=tmp_path / "cg", proc_cgroup=tmp_path / "proc_cgroup", affinity=64, memory_available=512 * GiB)
    assert size.workers == 6
    assert "cgroup" in size.reason


def test_pool_size_fractional_quota_rounds_down_but_never_to_zero(tmp_path: Path) -> None:
    write(tmp_path / "proc_cgroup", "0::/job\n")
    write(tmp_path / "cg" / "job" / "cpu.max", "50000 100000\n")
    size = pool_size(cgroup_root=tmp_path / "cg", proc_cgroup=tmp_path / "proc_cgroup", affinity=8, memory_available=64 * GiB)
    assert size.workers == 1


def test_pool_size_limited_by_memory(tmp_path: Path) -> None:
    write(tmp_path / "proc_cgroup", "0::/job\n")
    write(tmp_path / "cg" / "job" / "cpu.max", "1600000 100000\n")
    write(tmp_path / "cg" / "job" / "memory.max", str(7 * GiB))
    write(tmp_path / "cg" / "job" / "memory.current", str(1 * GiB))
    # 6 GiB left in the cgroup at 1.5 GiB per worker: 4 workers, although 16 CPUs are allowed.
    size = pool_size(cgroup_root=tmp_path / "cg", proc_cgroup=tmp_path / "proc_cgroup", affinity=32)
    assert size.workers == 4
    assert "GiB" in size.reason


def test_pool_size_affinity_below_quota(tmp_path: Path) -> None:
    write(tmp_path / "proc_cgroup", "0::/\n")
    size = pool_size(cgroup_root=tmp_path / "cg", proc_cgroup=tmp_path / "proc_cgroup", affinity=3, memory_available=64 * GiB)
    assert size.workers == 3 and size.cpu_source == "affinity"


def test_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PCOMPILE_POOL_WORKERS", "5")
    size = pool_size(cgroup_root=tmp_path, proc_cgroup=tmp_path / "none", affinity=1, memory_available=1)
    assert size.workers == 5


def test_this_machine() -> None:
    size = pool_size()
    assert 1 <= size.workers <= 32
