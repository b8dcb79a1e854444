"""Real torch.compile across two "nodes" that share nothing but a Redis server.

Node A (a writer with the ed25519 private key) compiles a tiny CPU training step with
backend="pcompile" into an empty local cache; node B (a read-only consumer holding only the
public key, its own empty local and Inductor cache dirs) must get every graph, autograd and
kernel entry from Redis, compile nothing, and train bit-identically. `pcompile stats` and
`pcompile verify` are run as the CLI against the remote tier.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest_remote import RedisServer, redis_server  # noqa: F401  (fixture)

pytest.importorskip("torch")
pytest.importorskip("redis")
pytest.importorskip("cryptography")
_t = pytest.importorskip("pcompile.inductor._testing")

pytestmark = pytest.mark.slow
LAYERS = ("graph", "autograd", "kernel")


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pcompile.cli.main", *args], env=env, capture_output=True, text=True, timeout=300)


def test_node_b_hits_every_layer_from_redis(redis_server: RedisServer, tmp_path: Path) -> None:
    from pcompile.trust.signing_keys import generate_ed25519

    private, public = generate_ed25519()
    (tmp_path / "signing.key").write_bytes(private)
    (tmp_path / "signing.key").chmod(0o600)
    (tmp_path / "verify.pub").write_bytes(public)
    script = _t.write_script(tmp_path / "app")

    def env(node: str, **extra: str) -> dict[str, str]:
        return _t.clean_env(
            PCOMPILE_CACHE_DIR=str(tmp_path / node),
            TORCHINDUCTOR_CACHE_DIR=str(tmp_path / f"inductor-{node}"),
            PCOMPILE_REMOTE=redis_server.url,
            **extra,
        )

    writer = env("node-a", PCOMPILE_SIGNING_KEY_FILE=str(tmp_path / "signing.key"))
    a, err_a = _t.run(script, "pcompile", writer)
    assert "WARNING" not in err_a, err_a
    published = [k.decode().split(":m:")[1] for k in redis_server.client().keys("pcompile:v1:m:*")]
    assert {k.split("-")[0] for k in published} >= set(LAYERS), published
    assert all(json.loads(redis_server.client().get(f"pcompile:v1:m:{k}"))["signature"].startswith("ed25519:") for k in published)

    consumer = env("node-b", PCOMPILE_VERIFY_KEY_FILE=str(tmp_path / "verify.pub"), PCOMPILE_READ_ONLY="1")
    keys_before = sorted(redis_server.client().keys("*"))
    b, err_b = _t.run(script, "pcompile", consumer)
    assert "WARNING" not in err_b, err_b
    assert b["params"] == a["params"] and b["losses"] == a["losses"]
    assert sorted(redis_server.client().keys("*")) == keys_before, "a read-only consumer wrote to Redis"

    stats = _cli(consumer, "stats", "--json")
    assert stats.returncode == 0, stats.stderr
    data = json.loads(stats.stdout)
    for layer in LAYERS:
        assert data["layers"][layer]["hits"] > 0 and data["layers"][layer]["misses"] == 0, (layer, data["layers"])
    assert data["compiles"] == 0
    redis_stats = data["tiers"]["redis"]
    assert redis_stats["kind"] == "remote" and redis_stats["hits"] > 0 and redis_stats["bytes_read"] > 0
    assert redis_stats["entries"] == len(published)
    assert redis_stats.get("untrusted", 0) == 0

    verify = _cli(consumer, "verify", "--all", "--json")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert json.loads(verify.stdout)["checked"] >= 2 * len(published)  # node B's local copies + every remote entry
    # a consumer that does not trust the writer's key: verify reports every remote entry
    stranger_pub = tmp_path / "stranger.pub"
    stranger_pub.write_bytes(generate_ed25519()[1])
    distrust = env("node-b", PCOMPILE_VERIFY_KEY_FILE=str(stranger_pub), PCOMPILE_READ_ONLY="1")
    bad = _cli(distrust, "verify", "--json")
    assert bad.returncode == 1
    problems = json.loads(bad.stdout)["bad"]
    assert {p["tier"] for p in problems} == {"redis"} and len(problems) == len(published)
    assert all("unknown ed25519 key" in p["problem"] for p in problems)
