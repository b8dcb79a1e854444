"""Write-behind and deadlines: bounded queue, drops counted, exit flush within its time limit,
and forked children (pool workers) that get working threads of their own."""
from __future__ import annotations

import multiprocessing
import threading
import time
from pathlib import Path

import pytest

from conftest_remote import (  # noqa: F401  (fixtures)
    RedisServer,
    job_env,
    make_entry,
    open_store,
    redis_server,
    remote_of,
    run_worker,
)
from pcompile.store.background import BackgroundWriter, DeadlineExceeded, DeadlineRunner
from pcompile.store.stats import collect

pytest.importorskip("redis")


def test_deadline_runner_abandons_a_hung_call() -> None:
    runner = DeadlineRunner(threads=2)
    t0 = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        runner.call(time.sleep, (3.0,), 0.2)
    assert time.monotonic() - t0 < 1.0
    assert runner.call(lambda x: x * 2, (21,), 1.0) == 42  # the other thread still serves
    with pytest.raises(ZeroDivisionError):
        runner.call(lambda: 1 / 0, (), 1.0)  # errors reach the caller as they are


def test_writer_queue_is_bounded_and_drops_are_counted() -> None:
    gate = threading.Event()
    started = threading.Event()
    written, dropped = [], []

    def write(entry):  # a remote that takes its time
        started.set()
        gate.wait(10)
        written.append(entry.key)

    writer = BackgroundWriter(write, max_entries=2, max_bytes=1 << 20, on_drop=lambda e, why: dropped.append(why))
    entries = [make_entry("kernel", i, 100) for i in range(6)]
    assert writer.submit(entries[0])
    assert started.wait(5)  # the thread holds entry 0
    results = [writer.submit(e) for e in entries[1:]]
    assert results == [True, True, False, False, False]
    assert dropped == ["queue full"] * 3
    assert writer.flush(0.2) is False  # still blocked
    gate.set()
    assert writer.flush(5) is True
    assert written == [e.key for e in entries[:3]]
    big = make_entry("kernel", 9, 2 << 20)
    small = make_entry("kernel", 10, 10)
    gate.clear()
    assert writer.submit(small) and started.wait(5)
    assert writer.submit(make_entry("kernel", 11, 10))
    assert writer.submit(big) is False  # would exceed max_bytes while another write is queued
    gate.set()
    assert writer.close(5) == 0


def test_exit_flush_writes_everything_to_a_healthy_remote(redis_server: RedisServer, tmp_path: Path) -> None:
    run_worker(job_env(tmp_path / "a", redis_server.url), count=8, flush=False)  # only the atexit flush
    b, _ = run_worker(job_env(tmp_path / "b", redis_server.url), count=8)
    assert b["outcomes"] == ["hit"] * 8


def test_exit_flush_has_a_time_limit_and_counts_what_it_dropped(redis_server: RedisServer, tmp_path: Path) -> None:
    env = job_env(
        tmp_path / "a",
        redis_server.url,
        PCOMPILE_REMOTE_TIMEOUT="5",  # each stuck write would hold ~6 s
        PCOMPILE_REMOTE_FLUSH_TIMEOUT="1",
    )
    admin = redis_server.client()
    admin.client_pause(60_000, all=False)  # writes hang, reads are answered
    try:
        t0 = time.monotonic()
        summary, err = run_worker(env, count=10, flush=False)
        wall = time.monotonic() - t0
    finally:
        admin.client_unpause()
    assert summary["outcomes"] == ["compiled"] * 10
    assert wall < summary["elapsed"] + 6, f"exit took {wall - summary['elapsed']:.1f} s beyond the job"
    counters = collect(tmp_path / "a" / "stats")["tiers"]["redis"]
    assert counters["queued_writes"] == 10
    assert counters["dropped_writes"] >= 9  # the first write was in flight, the rest never left
    assert counters.get("remote_writes", 0) == 0


def _child(cache: str, url: str, q: "multiprocessing.Queue[object]") -> None:
    import os

    from pcompile.store.tiered import Store

    os.environ["PCOMPILE_CACHE_DIR"] = cache
    os.environ["PCOMPILE_REMOTE"] = url
    store = _child.store  # type: ignore[attr-defined]
    entry = make_entry("kernel", 77, 100)
    store.put(entry)
    q.put(remote_of(store).flush(10))
    del Store


def test_forked_child_gets_its_own_writer_and_io_threads(redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(monkeypatch, tmp_path / "a", redis_server.url)
    parent_entry = make_entry("kernel", 1, 100)
    store.put(parent_entry)  # the parent's threads exist before the fork
    assert remote_of(store).flush(10)
    _child.store = store  # type: ignore[attr-defined]
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    proc = ctx.Process(target=_child, args=(str(tmp_path / "a"), redis_server.url, q))
    proc.start()
    assert q.get(timeout=30) is True
    proc.join(30)
    assert proc.exitcode == 0
    assert redis_server.client().exists(f"pcompile:v1:m:{make_entry('kernel', 77, 100).key}") == 1
    store.close()
