"""Single-flight for Inductor's caches (pcompile.inductor.store_gateway), on a real store.

A miss takes the key's lease and a publish releases it; a lease left by a compile that ended
without a publish is released by the next lookup of that kind on the thread, by the end of the
compile scope, or by its Triton cache manager going away; a second process that misses while
the first compiles waits and gets the entry as a hit; a forked child never releases its
parent's leases.
"""
from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pcompile.inductor import _testing as t
from pcompile.inductor import store_gateway
from pcompile.inductor.layer_keys import store_key


def _lease_file(cache: Path, kind: str, ikey: str) -> Path:
    return cache / "store" / "leases" / f"{store_key(kind, ikey)[0]}.lease"


def test_miss_leases_publish_releases_then_hits(store_env: Path) -> None:
    assert store_gateway.lookup("graph", "pt2:fx-graph-v1::k1:c1") is None
    assert _lease_file(store_env, "graph", "pt2:fx-graph-v1::k1:c1").exists()
    assert store_gateway.publish("graph", "pt2:fx-graph-v1::k1:c1", {"value": b'{"data": "x"}'})
    assert not _lease_file(store_env, "graph", "pt2:fx-graph-v1::k1:c1").exists()
    entry = store_gateway.lookup("graph", "pt2:fx-graph-v1::k1:c1")
    assert entry is not None and entry.blobs["value"] == b'{"data": "x"}' and entry.key.layer == "graph"
    assert store_gateway.held_keys() == []


def test_unpublished_lease_released_by_next_lookup_of_same_kind(store_env: Path) -> None:
    assert store_gateway.lookup("graph", "a") is None
    assert store_gateway.lookup("autograd", "outer") is None  # another kind: both held
    assert len(store_gateway.held_keys()) == 2
    assert store_gateway.lookup("graph", "b") is None  # graph "a" ended without a publish
    held = store_gateway.held_keys()
    assert str(store_key("graph", "a")[0]) not in held and str(store_key("graph", "b")[0]) in held
    assert str(store_key("autograd", "outer")[0]) in held


def test_scope_releases_what_it_took(store_env: Path) -> None:
    before = store_gateway.lookup("cpp", "outside")
    assert before is None
    with store_gateway.scope() as sc:
        assert store_gateway.lookup("autograd", "inside") is None
        assert sc.misses == 1 and sc.outcome == "compiled"
    assert store_gateway.held_keys() == [str(store_key("cpp", "outside")[0])]


def test_autotune_lookups_take_no_lease(store_env: Path) -> None:
    assert store_gateway.lookup("autotune", "pt2:x::y:c1", single_flight=False) is None
    assert store_gateway.held_keys() == []


HOLDER = r'''
import sys, time
from pcompile.inductor import store_gateway
assert store_gateway.lookup("graph", "shared-key") is None
print("LEASED", flush=True)
time.sleep(float(sys.argv[1]))
store_gateway.publish("graph", "shared-key", {"value": b"from the other process"})
'''


def test_second_process_waits_for_the_first_and_gets_a_hit(store_env: Path, tmp_path: Path) -> None:
    script = t.write_script(tmp_path / "app", "holder.py", HOLDER)
    env = t.clean_env(PCOMPILE_CACHE_DIR=str(store_env))
    holder = subprocess.Popen([sys.executable, str(script), "2.0"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "LEASED"
        t0 = time.monotonic()
        entry = store_gateway.lookup("graph", "shared-key")
        waited = time.monotonic() - t0
    finally:
        holder.wait(timeout=60)
    assert entry is not None and entry.blobs["value"] == b"from the other process"
    assert waited > 0.5 and store_gateway.held_keys() == []
    from pcompile.store.compose import default_store

    data = default_store().stats.data
    assert data["lease_waits"] >= 1 and data["layers"]["graph"]["hits"] >= 1


def test_forked_child_does_not_release_parent_lease(store_env: Path) -> None:
    assert store_gateway.lookup("graph", "forky") is None
    lease = _lease_file(store_env, "graph", "forky")
    pid = os.fork()
    if pid == 0:  # child: exit through atexit-free path after trying to release everything
        store_gateway.release_all()
        os._exit(0 if not store_gateway.held_keys() else 1)
    _, status = os.waitpid(pid, 0)
    assert status == 0
    assert lease.exists(), "the child's release_all must not have touched the parent's lease"
    store_gateway.release_all()
    assert not lease.exists()


def test_triton_manager_releases_its_lease_when_dropped(store_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    from pcompile.inductor.triton_cache import StoreCacheManager

    manager = StoreCacheManager("ABCDEF")
    assert manager.get_group("k.json") is None  # a miss: this manager now holds the kernel's lease
    assert len(store_gateway.held_keys()) == 1
    del manager  # the compile raised: Triton drops the manager without put_group
    gc.collect()
    assert store_gateway.held_keys() == []
