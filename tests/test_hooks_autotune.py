"""Autotune results (Inductor's `.best_config`) go through the store (layer autotune).

Choosing a config needs a GPU, so this drives Inductor's own AutotuneCache directly, the way
the Triton heuristics do after benchmarking: process A saves a best config, process B (another
kernel directory, so Inductor's local file cannot serve it) reads it back through
RemoteAutotuneCache, i.e. from pcompile's store. Autotune lookups take no lease: results are
written at a kernel's first launch, or never.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from pcompile.inductor import _testing as t

pytest.importorskip("triton")

SCRIPT = r'''
import json, os, sys
from pcompile.inductor import hooks
assert hooks.install_hooks()
from torch._inductor.runtime.autotune_cache import AutotuneCache
from torch._inductor.runtime.triton_compat import Config

mode, kernel_dir = sys.argv[1], sys.argv[2]
os.makedirs(kernel_dir, exist_ok=True)
filename = os.path.join(kernel_dir, "cabc123kernel.py")
meta = {"autotune_local_cache": True, "autotune_remote_cache": True, "backend_hash": "B" * 64, "is_fbcode": False}
configs = [Config({"XBLOCK": 128}, num_warps=4, num_stages=1), Config({"XBLOCK": 1024}, num_warps=8, num_stages=1)]
cache = AutotuneCache.create(meta, filename, "confighash0123")
out = {"remote": cache.remote_cache is not None}
if mode == "save":
    cache.save(configs[1], time_taken_ns=5_000_000)
else:
    best = cache.read_best(meta, configs)
    out["best"] = None if best is None else {"kwargs": best.kwargs, "num_warps": best.num_warps}
from pcompile.store.tiered import default_store
st = default_store()
out["autotune"] = st.stats.data["layers"]["autotune"]
from pcompile.inductor import flight
out["held"] = flight.held_keys()
print("PCOMPILE_RESULT " + json.dumps(out))
'''


def test_best_config_saved_in_one_process_is_read_in_another(tmp_path: Path) -> None:
    script = t.write_script(tmp_path / "app", "autotune.py", SCRIPT)
    env = t.clean_env(PCOMPILE_CACHE_DIR=str(tmp_path / "pc"), TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "ind"))
    saved, _ = t.run(script, "save", env, args=[str(tmp_path / "k1")])
    assert saved["remote"] and saved["held"] == []
    keys = t.manifest_keys(tmp_path / "pc" / "store")
    assert len(keys) == 1 and next(iter(keys)).startswith("autotune-")
    read, _ = t.run(script, "read", env, args=[str(tmp_path / "k2")])
    assert read["best"] == {"kwargs": {"XBLOCK": 1024}, "num_warps": 8}
    assert read["autotune"] == {"hits": 1, "misses": 0} and read["held"] == []
    missing, _ = t.run(script, "read", t.clean_env(PCOMPILE_CACHE_DIR=str(tmp_path / "empty")), args=[str(tmp_path / "k3")])
    assert missing["best"] is None and missing["autotune"] == {"hits": 0, "misses": 1} and missing["held"] == []
