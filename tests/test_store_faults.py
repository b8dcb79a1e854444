"""Faults: writers killed mid-publish, flipped bits, truncation, dead lease holders, full disks."""
from __future__ import annotations

import errno
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import REPO, child_env, run_cli
from pcompile.config import Settings
from pcompile.keys import make_key
from pcompile.store.entry import Entry
from pcompile.store.compose import open_store
from pcompile.store.tiered import Store

WORKER = str(REPO / "tests" / "store_worker.py")
FP = {"torch": "test", "target_arch": "sm_90"}


def _store(tmp_path: Path, node: str = "node", **kw) -> Store:
    return open_store(Settings(cache_dir=tmp_path / node, shared_dir=tmp_path / "shared", **kw))


def _entry(name: str, size: int = 50_000) -> Entry:
    key, inputs = make_key("kernel", name, FP)
    return Entry(key, {"code": os.urandom(size), "meta": name.encode()}, inputs, compile_seconds=1.5)


def test_sigkill_during_publish_never_shows_a_partial_entry(tmp_path: Path) -> None:
    env = child_env({"PCOMPILE_CACHE_DIR": str(tmp_path / "w"), "PCOMPILE_SHARED_DIR": str(tmp_path / "shared")})
    rng = random.Random(1234)
    published: list[str] = []
    for _round in range(8):
        proc = subprocess.Popen([sys.executable, WORKER, "publish_forever", "3000000"], env=env, stdout=subprocess.PIPE, text=True)
        first = proc.stdout.readline()  # started publishing
        assert first
        published.append(first.strip())
        time.sleep(rng.uniform(0.0, 0.4))
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate()
        published += [line for line in out.split() if line]
    reader = _store(tmp_path, "reader")
    from pcompile.keys import Key

    shared = reader.tiers[1]
    seen = 0
    for key in shared.keys():
        assert shared.verify(key) is None, f"partial entry visible: {key}"
        seen += 1
    assert seen >= len(published) - 8  # every announced publish is whole (the last per round may be mid-way)
    for text in published:
        assert reader.get(Key.parse(text)) is not None
    # the next writer recovers: same dirs, publishes and reads fine; leftovers are only temp files
    writer = _store(tmp_path, "w")
    entry = _entry("after-crash")
    assert writer.put(entry)
    assert reader.get(entry.key).blobs == entry.blobs
    result = run_cli("verify", "--cache-dir", str(tmp_path / "w"), "--shared-dir", str(tmp_path / "shared"))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("target", ["blob", "manifest"])
@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_corruption_detected_by_verify_and_on_read(tmp_path: Path, target: str, damage: str) -> None:
    store = _store(tmp_path)
    entry = _entry(f"{target}-{damage}")
    store.put(entry)
    local = store.tiers[0]
    manifest_path = local.manifest_path(entry.key)
    import json

    sha = json.loads(manifest_path.read_bytes())["blobs"]["code"]["sha256"]
    path = local.blob_path(sha) if target == "blob" else manifest_path
    data = bytearray(path.read_bytes())
    if damage == "flip":
        i = len(data) // 2
        data[i] ^= 0x01
    else:
        data = data[: len(data) // 2]
    path.write_bytes(bytes(data))

    result = run_cli("verify", "--cache-dir", str(tmp_path / "node"), "--shared-dir", str(tmp_path / "shared"))
    assert result.returncode == 1
    assert str(entry.key) in result.stdout and "BAD local" in result.stdout

    # on read: never returned, quarantined, reported; the shared copy still serves (and backfills)
    loaded = []
    got = local.get(entry.key)
    if got is not None:
        loaded.append(got)
    assert loaded == []
    assert local.read_manifest(entry.key) is None
    assert any((local.quarantine_dir).iterdir())
    again = store.get(entry.key)
    assert again is not None and again.blobs == entry.blobs
    assert local.verify(entry.key) is None  # backfilled a good copy


def test_foreign_manifest_is_not_loaded(tmp_path: Path) -> None:
    store = _store(tmp_path)
    a, b = _entry("a"), _entry("b")
    store.put(a)
    store.put(b)
    local = store.tiers[0]
    local.manifest_path(b.key).write_bytes(local.manifest_path(a.key).read_bytes())  # a's entry under b's key
    assert local.get(b.key) is None
    assert "foreign" in (local.verify(b.key) or "") or local.read_manifest(b.key) is None


def test_dead_lease_holder_is_taken_over(tmp_path: Path) -> None:
    env = child_env({"PCOMPILE_CACHE_DIR": str(tmp_path / "h"), "PCOMPILE_SHARED_DIR": str(tmp_path / "shared"), "PCOMPILE_LEASE_TIMEOUT": "2"})
    holder = subprocess.Popen([sys.executable, WORKER, "hold", "contested"], env=env, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "HOLDING"
    waiter = _store(tmp_path, "w", lease_timeout=2.0)
    key, inputs = make_key("kernel", "contested", FP)
    holder.send_signal(signal.SIGKILL)  # dies mid-"compile": no entry, lease left behind
    holder.wait()
    t0 = time.monotonic()
    entry, outcome = waiter.get_or_compute(key, lambda: Entry(key, {"code": b"ok"}, inputs), wait_timeout=30)
    took = time.monotonic() - t0
    assert outcome == "compiled" and entry.blobs == {"code": b"ok"}
    # The holder was a process of this host and is gone: no need to wait out its heartbeat.
    assert took < 1.5, f"takeover after {took:.1f}s, lease timeout 2s"


def test_silent_holder_on_another_host_is_taken_over_after_the_timeout(tmp_path: Path) -> None:
    """A lease of another host cannot be checked for a live process: only its heartbeat counts."""
    import json
    import socket

    waiter = _store(tmp_path, "w", lease_timeout=2.0)
    key, inputs = make_key("kernel", "remote-holder", FP)
    assert waiter.leases is not None
    path = waiter.leases.path(str(key))
    path.parent.mkdir(parents=True, exist_ok=True)
    other = f"not-{socket.gethostname()}"
    path.write_text(json.dumps({"holder": f"{other}:1:x", "pid": 1, "host": other, "since": time.time()}))
    t0 = time.monotonic()
    entry, outcome = waiter.get_or_compute(key, lambda: Entry(key, {"code": b"ok"}, inputs), wait_timeout=30)
    took = time.monotonic() - t0
    assert outcome == "compiled" and entry.blobs == {"code": b"ok"}
    assert 1.5 <= took < 8, f"takeover after {took:.1f}s, lease timeout 2s"


def test_live_lease_holder_is_waited_for(tmp_path: Path) -> None:
    """A holder that keeps heartbeating is not broken, even past the timeout."""
    env = child_env({"PCOMPILE_CACHE_DIR": str(tmp_path / "h"), "PCOMPILE_SHARED_DIR": str(tmp_path / "shared"), "PCOMPILE_LEASE_TIMEOUT": "1"})
    holder = subprocess.Popen([sys.executable, WORKER, "hold", "busy"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "HOLDING"
        waiter = _store(tmp_path, "w", lease_timeout=1.0)
        key, _ = make_key("kernel", "busy", FP)
        waits: list[float] = []
        got = waiter.acquire_or_wait(key, wait_timeout=3.5, on_wait=lambda: waits.append(time.monotonic()))
        assert got is None  # gave up waiting (would compile itself), never stole a live lease
        assert len(waits) == 1  # told once, when the wait began (backward_ahead lets its worker go then)
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EACCES])
def test_write_errors_leave_store_consistent_and_job_going(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog, err: int) -> None:
    store = _store(tmp_path)
    good = _entry("good")
    store.put(good)
    real_write = os.write
    calls = {"n": 0}

    def failing_write(fd: int, data) -> int:  # fault injection at the write call
        calls["n"] += 1
        if calls["n"] >= 2:
            raise OSError(err, os.strerror(err))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", failing_write)
    key, inputs = make_key("kernel", "doomed", FP)
    with caplog.at_level("WARNING", logger="pcompile"):
        entry, outcome = store.get_or_compute(key, lambda: Entry(key, {"code": os.urandom(100_000), "x": b"y"}, inputs))
    monkeypatch.setattr(os, "write", real_write)
    assert outcome == "compiled" and len(entry.blobs["code"]) == 100_000  # the job got its result
    warnings = [r for r in caplog.records if "cannot write" in r.getMessage()]
    assert len(warnings) >= 1 and all(len(r.getMessage().splitlines()) == 1 for r in warnings)
    # A put starts a background GC pass whose lease file may be mid-write right now: let it end
    # before looking for leftovers (its temp file is removed on the way out, as every write's is).
    for thread in threading.enumerate():
        if thread.name == "pcompile-gc":
            thread.join(10)
    for tier in store.tiers:
        assert tier.read_manifest(key) is None or tier.verify(key) is None
        assert tier.verify(good.key) is None
        assert list(tier.tmp.iterdir()) == []  # no half-written temp files left behind
    assert store.get(good.key) is not None
