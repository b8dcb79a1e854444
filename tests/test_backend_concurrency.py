"""Four processes compiling the same model at once compile each key once (single-flight).

All four share one PCOMPILE_CACHE_DIR (one node) and each has its own empty
TORCHINDUCTOR_CACHE_DIR, so the only way to avoid compiling is to wait for another process's
entry in the store. `pcompile stats --json` must show exactly one compile per distinct key, every
process must end with no lease held, and all four must compute the same numbers.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from pcompile.inductor import _testing as t

pytestmark = pytest.mark.slow


def test_four_processes_compile_each_key_once(tmp_path: Path) -> None:
    script = t.write_script(tmp_path / "app")
    cache = tmp_path / "cache"
    procs = [
        t.start(script, "pcompile", t.clean_env(PCOMPILE_CACHE_DIR=str(cache), TORCHINDUCTOR_CACHE_DIR=str(tmp_path / f"ind{i}")))
        for i in range(4)
    ]
    results = [t.finish(p, timeout=600)[0] for p in procs]

    keys = t.job_keys(cache / "store")
    layers = {k.split("-", 1)[0] for k in keys}
    assert {"graph", "autograd", "kernel"} <= layers, keys
    summary = t.stats(cache)
    assert summary["compiles"] == len(keys), (summary["compiles"], sorted(keys))
    misses = sum(summary["layers"][layer]["misses"] for layer in ("graph", "autograd", "kernel"))
    assert misses == len(keys), "each key missed in exactly one process; the others waited or hit"
    assert summary["layers"]["autograd"]["hits"] >= 3, summary["layers"]
    for result in results:
        assert result["held"] == []
        assert result["params"] == results[0]["params"]
