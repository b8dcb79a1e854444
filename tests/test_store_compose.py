"""store/compose.py, the one place a store is built: which tiers a process gets, and what each
tier declares about itself (no type probing in the store)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pcompile.config import Settings
from pcompile.errors import PcompileError
from pcompile.store.compose import open_store
from pcompile.store.fs_tier import SHARED_FETCH_WAIT

_JOB = """
import json
from pcompile.keys import make_key
from pcompile.keys.key import KeyInputs
from pcompile.store.entry import Entry
from pcompile.store.compose import default_store

store = default_store()
key, inputs = make_key("graph", "def f(): pass", {"torch": "x"})
store.put(Entry(key, {"b": b"payload"}, inputs))
entry = store.get(key)
print(json.dumps({"tiers": [t.name for t in store.tiers], "hit": entry is not None and entry.blobs["b"] == b"payload"}))
"""


def test_a_remote_url_typo_turns_off_only_the_remote_tier(tmp_path: Path) -> None:
    """PCOMPILE_REMOTE=bogus://x: the job keeps its node-local cache, and says so in one line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PCOMPILE_")}
    env.update(PCOMPILE_CACHE_DIR=str(tmp_path / "cache"), PCOMPILE_REMOTE="bogus://x")
    out = subprocess.run([sys.executable, "-c", _JOB], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"tiers": ["local"], "hit": True}
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    assert "PCOMPILE_REMOTE='bogus://x'" in lines[0] and "without the remote tier" in lines[0]


def test_a_command_aimed_at_the_remote_still_stops_on_a_typo(tmp_path: Path) -> None:
    settings = Settings(cache_dir=tmp_path / "cache", remote="bogus://x")
    open_store(settings)  # creates the local tier
    with pytest.raises(PcompileError, match="PCOMPILE_REMOTE"):
        open_store(settings, must_exist=True)


def test_node_fetch_follows_what_the_slow_tiers_declare(tmp_path: Path) -> None:
    alone = open_store(Settings(cache_dir=tmp_path / "a"))
    assert alone.fetches is None and alone.fetch_wait == 0.0  # nothing slower to take turns for
    assert alone.coordinator is alone.local  # compile leases on the node-local dir
    shared = open_store(Settings(cache_dir=tmp_path / "b", shared_dir=tmp_path / "shared"))
    assert [t.capabilities.directory for t in shared.tiers] == [True, True]
    assert shared.fetches is not None and shared.fetch_wait == SHARED_FETCH_WAIT
    assert shared.coordinator is shared.tiers[1]  # every node sees the shared dir's leases
