"""`pcompile verify` and `pcompile stats` with a remote tier, run as the CLI."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest_remote import RedisServer, job_env, redis_server, run_worker  # noqa: F401  (fixture)

pytest.importorskip("redis")


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pcompile.cli.main", *args], env=env, capture_output=True, text=True, timeout=120)


def test_verify_samples_or_checks_all_remote_entries_and_stats_reports_the_tier(redis_server: RedisServer, tmp_path: Path) -> None:
    writer = job_env(tmp_path / "w", redis_server.url)
    run_worker(writer, count=30, sizes=[500])
    reader = job_env(tmp_path / "r", redis_server.url)
    run_worker(reader, count=5, sizes=[500])  # 5 hits from Redis, for the stats

    ok = _cli(reader, "verify", "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert json.loads(ok.stdout)["checked"] == 5 + 30  # 5 local copies; the remote sample (<= 200) is all 30
    every = _cli(reader, "verify", "--all", "--json")
    assert json.loads(every.stdout)["checked"] == 35

    client = redis_server.client()
    name = sorted(k for k in client.keys("pcompile:v1:b:*") if client.strlen(k) > 400)[0]
    data = bytearray(client.get(name))
    data[-1] ^= 1
    client.set(name, bytes(data))
    bad = _cli(reader, "verify", "--all", "--json")
    assert bad.returncode == 1
    problems = json.loads(bad.stdout)["bad"]
    assert problems and all(p["tier"] == "redis" and "sha256" in p["problem"] for p in problems)
    fixed = _cli(writer, "verify", "--all", "--fix", "--json")  # a writer may take bad remote entries out
    assert fixed.returncode == 1
    assert _cli(reader, "verify", "--all", "--json").returncode == 0

    stats = _cli(reader, "stats", "--json")
    assert stats.returncode == 0, stats.stderr
    tier = json.loads(stats.stdout)["tiers"]["redis"]
    assert tier["kind"] == "remote" and tier["hits"] == 5 and tier["bytes_read"] > 0
    assert tier["entries"] == 30 - len(problems) and tier["fetches"] == 5


def test_cli_with_the_remote_down(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis").start()
    url = server.url
    env = job_env(tmp_path / "a", url)
    run_worker(env, count=2)
    server.stop()
    stats = _cli(env, "stats", "--json")
    assert stats.returncode == 0, stats.stderr  # stats still works, remote shows nothing
    assert json.loads(stats.stdout)["tiers"]["redis"]["entries"] == 0
    assert stats.stderr.count("WARNING") == 1
    verify = _cli(env, "verify")
    assert verify.returncode == 2
    assert "unreachable" in verify.stderr and "PCOMPILE_REMOTE" in verify.stderr
