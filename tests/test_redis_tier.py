"""The Redis tier against a real redis-server on loopback: sharing between processes, chunking,
the server dying or hanging mid-run, node-level single-flight, read-only consumers."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from conftest_remote import (  # noqa: F401  (fixtures)
    RedisServer,
    job_env,
    load_entry,
    make_entry,
    open_store,
    parse_summary,
    redis_server,
    remote_of,
    run_worker,
    start_worker,
    warnings_in,
)
from pcompile.errors import PcompileError
from pcompile.keys.key import Key
from pcompile.store.entry import Manifest
from pcompile.store.fs_tier import DirectoryTier

pytest.importorskip("redis")

SMALL_CHUNKS = {"PCOMPILE_REDIS_CHUNK_BYTES": str(64 * 1024)}


def _commandstats(server: RedisServer) -> dict[str, int]:
    info = server.client().info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in info.items()}


def _redis_tier_view(server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A store on a fresh local dir whose remote tier reads what the server holds right now."""
    store = open_store(monkeypatch, tmp_path / f"view-{time.monotonic_ns()}", server.url)
    return store, remote_of(store)


def test_process_b_hits_what_process_a_compiled(redis_server: RedisServer, tmp_path: Path) -> None:
    sizes = [1500, 300_000, 40]  # 300 kB is chunked at 64 KiB
    a, err_a = run_worker(job_env(tmp_path / "a", redis_server.url, **SMALL_CHUNKS), count=6, sizes=sizes)
    assert a["outcomes"] == ["compiled"] * 6 and a["computed"] == 6
    assert a["flushed"] is True and a["remote"]["remote_writes"] == 6
    assert not warnings_in(err_a), err_a
    names = [k.decode() for k in redis_server.client().keys("*")]
    assert sum(n.startswith("pcompile:v1:m:") for n in names) == 6
    assert any(n.startswith("pcompile:v1:c:") for n in names), "the 300 kB blobs should be chunked"

    b, err_b = run_worker(job_env(tmp_path / "b", redis_server.url, **SMALL_CHUNKS), count=6, sizes=sizes)
    assert b["outcomes"] == ["hit"] * 6
    assert b["computed"] == 0 and b["loaded"] == 6
    assert b["remote"]["fetches"] == 6
    assert not warnings_in(err_b), err_b
    # B's local tier now holds verified copies (backfill), so a third run needs no remote at all
    local_b = DirectoryTier(tmp_path / "b" / "store", "local", create=False)
    assert sorted(str(k) for k in local_b.keys()) == sorted(n.removeprefix("pcompile:v1:m:") for n in names if ":m:" in n)


def test_redis_killed_mid_run_job_finishes_warns_once_nothing_corrupt(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis", persist=True).start()  # AOF, fsync always: kill -9 keeps what was acknowledged
    try:
        env = job_env(tmp_path / "a", server.url, PCOMPILE_REMOTE_TIMEOUT="0.5", **SMALL_CHUNKS)
        count = 30
        proc = start_worker(env, count=count, sizes=[2000, 400_000], compile_seconds=0.05)
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if len(lines) == 8:
                server.kill()  # mid-run, likely mid-publish of a chunked blob
                break
        out_rest, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        summary = parse_summary("".join(lines) + out_rest)
        assert summary["outcomes"] == ["compiled"] * count  # the job finished every step
        assert summary["loaded"] == count
        assert summary["elapsed"] < count * 0.05 + 15, "a dead remote must not stall the job"
        warned = warnings_in(err)
        assert len(warned) == 1, err
        assert "redis" in warned[0] and "local tiers" in warned[0]
        assert summary["remote"]["dropped_writes"] >= 1

        # the local tier is complete and sound
        local = DirectoryTier(tmp_path / "a" / "store", "local", create=False)
        keys = list(local.keys())
        assert len(keys) == count
        assert all(local.verify(k) is None for k in keys)

        # what reached Redis before the kill is whole: every manifest's blobs are all there
        server.start()
        server.wait_ready()
        b, err_b = run_worker(job_env(tmp_path / "b", server.url, **SMALL_CHUNKS), count=count, sizes=[2000, 400_000], mode="get")
        assert not warnings_in(err_b), err_b
        hits = b["outcomes"].count("hit")
        assert 1 <= hits < count
        assert b["loaded"] == hits
        assert b["remote"].get("quarantined", 0) == 0
        manifests = [k.decode() for k in server.client().keys("pcompile:v1:m:*")]
        assert len(manifests) == hits
    finally:
        server.stop()


def test_redis_hang_is_bounded_by_the_timeout(redis_server: RedisServer, tmp_path: Path) -> None:
    """SIGSTOP: the server accepts nothing and answers nothing. Each round trip gives up after
    the timeout and the first timeout opens the breaker, so the job loses about one timeout."""
    env = job_env(tmp_path / "a", redis_server.url, PCOMPILE_REMOTE_TIMEOUT="0.5", PCOMPILE_REMOTE_FLUSH_TIMEOUT="2")
    baseline, _ = run_worker(job_env(tmp_path / "base", None), count=20, compile_seconds=0.02)
    redis_server.pause()
    try:
        t0 = time.monotonic()
        summary, err = run_worker(env, count=20, compile_seconds=0.02)
        wall = time.monotonic() - t0
    finally:
        redis_server.resume()
    assert summary["outcomes"] == ["compiled"] * 20
    assert summary["elapsed"] - baseline["elapsed"] < 3.0, (summary["elapsed"], baseline["elapsed"])
    assert wall < 20, "exit must not wait for a hung remote beyond the flush limit"
    assert len(warnings_in(err)) == 1, err
    assert summary["remote"]["timeouts"] >= 1
    assert summary["remote"].get("skipped", 0) >= 1


def test_eight_processes_on_a_node_fetch_once(redis_server: RedisServer, tmp_path: Path) -> None:
    sizes = [3000, 200_000]
    run_worker(job_env(tmp_path / "producer", redis_server.url, **SMALL_CHUNKS), count=3, sizes=sizes)

    def fetch_with(n: int, cache_dir: Path) -> int:
        redis_server.client().config_resetstat()
        env = job_env(cache_dir, redis_server.url, **SMALL_CHUNKS)
        start_at = time.time() + 4.0  # all eight import first, then ask at the same moment
        procs = [start_worker(env, count=3, sizes=sizes, mode="get", start_at=start_at, flush=False) for _ in range(n)]
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            summary = parse_summary(out)
            assert summary["outcomes"] == ["hit"] * 3 and summary["loaded"] == 3
        stats = _commandstats(redis_server)
        reads = {k: v for k, v in stats.items() if k not in ("config|resetstat", "client|setinfo", "info", "hello")}  # handshakes
        assert set(reads) <= {"get"}, reads  # only GETs: manifests, heads, chunks
        return reads.get("get", 0)

    one = fetch_with(1, tmp_path / "node-1")
    eight = fetch_with(8, tmp_path / "node-8")  # eight ranks sharing one node-local cache dir
    assert one == 3 + 3 * 2 + 4  # 3 manifests, 6 blob heads, 4 chunks of the one 200 kB blob
    assert eight == one, f"8 ranks caused {eight} GETs, one rank alone {one}"


def test_chunked_blob_with_an_evicted_chunk_is_a_miss_and_gets_rewritten(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = make_entry("graph", 1, 500_000)
    store = open_store(monkeypatch, tmp_path / "w", redis_server.url, **SMALL_CHUNKS)
    remote = remote_of(store)
    store.put(entry)
    assert remote.flush(10)
    client = redis_server.client()
    chunk_names = sorted(client.keys("pcompile:v1:c:*"))
    assert len(chunk_names) == 8  # 500 000 / 65 536
    client.delete(chunk_names[3])  # what allkeys-lru may do

    reader = open_store(monkeypatch, tmp_path / "r", redis_server.url, **SMALL_CHUNKS)
    assert reader.get(entry.key) is None
    # a writer's has_blob sees the hole, so republishing restores the chunk
    sha = Manifest.for_entry(entry).blobs["payload.pkl"]["sha256"]
    assert remote.has_blob(sha, len(entry.blobs["payload.pkl"])) is False
    store.put(entry)
    assert remote.flush(10)
    reader2 = open_store(monkeypatch, tmp_path / "r2", redis_server.url, **SMALL_CHUNKS)
    got = reader2.get(entry.key)
    assert got is not None and load_entry(got)(2) == 2 + 3
    for s in (store, reader, reader2):
        s.close()


def test_corrupt_remote_blob_is_never_loaded_and_is_replaced(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = make_entry("kernel", 7, 5000)
    writer = open_store(monkeypatch, tmp_path / "w", redis_server.url)
    writer.put(entry)
    assert remote_of(writer).flush(10)
    client = redis_server.client()
    (blob_name,) = [n for n in client.keys("pcompile:v1:b:*") if client.strlen(n) == len(entry.blobs["payload.pkl"]) + 1]
    data = bytearray(client.get(blob_name))
    data[100] ^= 0xFF  # same size, different bytes
    client.set(blob_name, bytes(data))

    store = open_store(monkeypatch, tmp_path / "r", redis_server.url)
    loaded = []
    got, outcome = store.get_or_compute(entry.key, lambda: entry)
    assert outcome == "compiled"  # the corrupt copy was refused, recompiled here
    loaded.append(load_entry(got))
    assert store.stats.data["quarantined"] >= 1
    assert client.get(blob_name) is None or client.get(blob_name) != bytes(data)  # deleted by the writer...
    assert remote_of(store).flush(10)
    fresh = open_store(monkeypatch, tmp_path / "r2", redis_server.url)
    again = fresh.get(entry.key)  # ...and republished whole
    assert again is not None and again.blobs == entry.blobs
    for s in (writer, store, fresh):
        s.close()


def test_read_only_consumer_never_writes(redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    published = make_entry("kernel", 1, 1000)
    writer = open_store(monkeypatch, tmp_path / "w", redis_server.url)
    writer.put(published)
    assert remote_of(writer).flush(10)
    before = sorted(redis_server.client().keys("*"))

    reader = open_store(monkeypatch, tmp_path / "r", redis_server.url, PCOMPILE_READ_ONLY="1")
    assert reader.get(published.key) is not None  # reads work
    fresh = make_entry("kernel", 2, 1000)
    got, outcome = reader.get_or_compute(fresh.key, lambda: fresh)
    assert outcome == "compiled"
    remote = remote_of(reader)
    assert remote.put(fresh) is None and remote.counters.get("writes_refused", 0) >= 1
    with pytest.raises(PcompileError, match="read-only"):
        remote.write_manifest(fresh.key, b"{}")
    remote.quarantine(published.key, "test", None)  # a reader deletes nothing either
    reader.close()
    assert sorted(redis_server.client().keys("*")) == before


def test_breaker_is_node_wide_and_recovers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = RedisServer(tmp_path / "redis").start()
    port_url = server.url
    server.stop()  # nothing listens: connection refused, instantly
    env = {"PCOMPILE_REMOTE_BREAKER_SECONDS": "1.5", "PCOMPILE_REMOTE_BREAKER_FAILURES": "2"}
    first = open_store(monkeypatch, tmp_path / "node", port_url, **env)
    r1 = remote_of(first)
    for i in range(3):
        assert first.get(make_entry("kernel", i, 10).key) is None
    assert r1.counters["errors"] == 2 and r1.counters["breaker_trips"] == 1 and r1.counters["skipped"] >= 1
    # another process on the same node (same cache dir) skips without trying
    second = open_store(monkeypatch, tmp_path / "node", port_url, **env)
    r2 = remote_of(second)
    assert second.get(make_entry("kernel", 9, 10).key) is None
    assert r2.counters.get("errors", 0) == 0 and r2.counters["skipped"] == 1
    # the server comes back; after the cool-down one probe succeeds and the tier is used again
    server.start()
    try:
        entry = make_entry("kernel", 42, 100)
        time.sleep(1.6)
        second.put(entry)
        assert r2.flush(10)
        assert server.client().exists(f"pcompile:v1:m:{entry.key}") == 1
    finally:
        for s in (first, second):
            s.close()
        server.stop()


def test_auth_from_env_and_password_never_logged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    secret = "s3cret-" + os.urandom(4).hex()
    server = RedisServer(tmp_path / "redis", args=["--requirepass", secret]).start()
    try:
        pw_file = tmp_path / "redis.pass"
        pw_file.write_text(secret + "\n")
        pw_file.chmod(0o600)
        store = open_store(monkeypatch, tmp_path / "a", server.url, PCOMPILE_REDIS_PASSWORD_FILE=str(pw_file))
        entry = make_entry("kernel", 1, 100)
        store.put(entry)
        assert remote_of(store).flush(10)
        assert server.client(password=secret).exists(f"pcompile:v1:m:{entry.key}") == 1
        store.close()
        # a wrong password in the URL: one warning, and the password is not in it
        bad = f"redis://:{secret}-wrong@127.0.0.1:{server.port}/0"
        store = open_store(monkeypatch, tmp_path / "b", bad)
        with caplog.at_level("WARNING", logger="pcompile"):
            assert store.get(entry.key) is None
        text = "\n".join(r.getMessage() for r in caplog.records)
        assert "redis" in text and secret not in text
        store.close()
    finally:
        server.stop()


def test_sample_keys_and_keys(redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(monkeypatch, tmp_path / "a", redis_server.url, PCOMPILE_REMOTE_QUEUE="1000")
    entries = [make_entry("kernel", i, 50) for i in range(120)]
    for e in entries:
        store.put(e)
    remote = remote_of(store)
    assert remote.flush(30)
    every = {str(k) for k in remote.keys()}
    assert every == {str(e.key) for e in entries}
    sample = remote.sample_keys(20)
    assert len(sample) == 20 and len({str(k) for k in sample}) == 20
    assert {str(k) for k in sample} <= every
    assert all(isinstance(k, Key) for k in sample)
    entries_n, used = remote.usage()
    assert entries_n == 120 and used > 0
    assert remote.verify(entries[0].key) is None
    store.close()
