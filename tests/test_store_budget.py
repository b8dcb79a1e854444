"""The node-local tier never grows past PCOMPILE_MAX_BYTES, even faster than GC can evict
(evicted entries' blobs stay for GC's grace period, so eviction alone cannot keep a burst in)."""
from __future__ import annotations

import os
from pathlib import Path

from pcompile.config import Settings
from pcompile.keys import make_key
from pcompile.store.entry import Entry
from pcompile.store.gc import collect_garbage
from pcompile.store.compose import open_store


def _entry(name: str, size: int) -> Entry:
    key, inputs = make_key("kernel", name, {"torch": "test"})
    return Entry(key, {"code": os.urandom(size)}, inputs, compile_seconds=1.0)


def test_burst_of_writes_stays_within_the_budget(tmp_path: Path) -> None:
    budget = 400_000
    store = open_store(Settings(cache_dir=tmp_path / "c", max_bytes=budget, min_free_bytes=0))
    collect_garbage(store.local, max_bytes=budget)  # what a node's GC leaves: the usage record
    for i in range(30):
        store.put(_entry(f"e{i}", 50_000))
        assert store.local.usage()[1] <= budget, f"grew past the budget at put {i}"
    store.stats.flush()
    assert store.stats.data.get("budget_skips", 0) > 0
    assert any(store.get(_entry(f"e{i}", 1).key) is not None for i in range(30))  # it still caches


def test_no_gc_record_yet_means_no_refusal(tmp_path: Path) -> None:
    store = open_store(Settings(cache_dir=tmp_path / "c", max_bytes=10, min_free_bytes=0))
    assert store.put(_entry("first", 1000))
    assert store.get(_entry("first", 1).key) is not None
