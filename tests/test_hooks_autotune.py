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
elif mode == "predict":
    import types
    from pcompile.inductor import store_adapter
    from pcompile.compat import autotune_choice
    # the two attributes of a CachingAutotuner the prediction reads, around a real AutotuneCache
    kernel = types.SimpleNamespace(save_cache_hook=cache.save, inductor_meta=meta, configs=configs)
    out["published"] = autotune_choice.publish_prediction(kernel, store_adapter.predicting)
    out["local_files"] = sorted(os.listdir(kernel_dir))
else:
    if os.environ.get("TEST_TUNING_MODE") == "1":  # as under torch.compile(mode="max-autotune")
        import torch._inductor.config as ic
        ic.max_autotune = True
    best = cache.read_best(meta, configs)
    out["best"] = None if best is None else {"kwargs": best.kwargs, "num_warps": best.num_warps}
from pcompile.store.compose import default_store
st = default_store()
layer = st.stats.data["layers"]["autotune"]
out["autotune"] = {k: layer.get(k, 0) for k in ("hits", "misses", "untimed")}
from pcompile.inductor import store_gateway
out["held"] = store_gateway.held_keys()
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
    assert read["autotune"] == {"hits": 1, "misses": 0, "untimed": 0} and read["held"] == []
    missing, _ = t.run(script, "read", t.clean_env(PCOMPILE_CACHE_DIR=str(tmp_path / "empty")), args=[str(tmp_path / "k3")])
    assert missing["best"] is None and missing["autotune"] == {"hits": 0, "misses": 1, "untimed": 0} and missing["held"] == []
    # where no kernel can be timed (a warm), a kernel with no winner is left for the GPU, not a miss
    warm, _ = t.run(script, "read", t.clean_env(PCOMPILE_CACHE_DIR=str(tmp_path / "empty2"), PCOMPILE_WARMING="1"),
                    args=[str(tmp_path / "k6")])
    assert warm["best"] is None and warm["autotune"] == {"hits": 0, "misses": 0, "untimed": 1}


def test_warm_prediction_serves_until_a_measured_winner_exists(tmp_path: Path) -> None:
    """A prediction (what a CPU-only warm files) is read by default, ignored under
    PCOMPILE_AUTOTUNE=benchmark, never written to Inductor's local file, and loses to a
    measured winner once one is published."""
    script = t.write_script(tmp_path / "app", "autotune.py", SCRIPT)
    env = t.clean_env(PCOMPILE_CACHE_DIR=str(tmp_path / "pc"), TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "ind"))
    pred, _ = t.run(script, "predict", env, args=[str(tmp_path / "k1")])
    assert pred["published"] is True and pred["local_files"] == []
    read, _ = t.run(script, "read", env, args=[str(tmp_path / "k2")])
    assert read["best"] == {"kwargs": {"XBLOCK": 128}, "num_warps": 4}  # pointwise: Inductor's first config
    assert read["autotune"] == {"hits": 1, "misses": 0, "untimed": 0}  # one look-up, answered by the prediction
    bench, _ = t.run(script, "read", {**env, "PCOMPILE_AUTOTUNE": "benchmark"}, args=[str(tmp_path / "k3")])
    assert bench["best"] is None and bench["autotune"] == {"hits": 0, "misses": 1, "untimed": 0}
    t.run(script, "save", env, args=[str(tmp_path / "k4")])
    measured, _ = t.run(script, "read", env, args=[str(tmp_path / "k5")])
    assert measured["best"] == {"kwargs": {"XBLOCK": 1024}, "num_warps": 8}
    assert measured["autotune"] == {"hits": 1, "misses": 0, "untimed": 0}


def test_under_max_autotune_the_default_benchmarks_instead_of_taking_the_prediction(tmp_path: Path) -> None:
    """A max-autotune user chose steady-state speed: the default policy (auto) ignores a warm's
    prediction there (H200 GPT-2: predicted winners cost 4% GPU time per step), and
    PCOMPILE_AUTOTUNE=predicted still takes it."""
    script = t.write_script(tmp_path / "app", "autotune.py", SCRIPT)
    env = t.clean_env(PCOMPILE_CACHE_DIR=str(tmp_path / "pc"), TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "ind"))
    pred, _ = t.run(script, "predict", env, args=[str(tmp_path / "k1")])
    assert pred["published"] is True
    tuned = {**env, "TEST_TUNING_MODE": "1"}
    bench, _ = t.run(script, "read", tuned, args=[str(tmp_path / "k2")])
    assert bench["best"] is None and bench["autotune"] == {"hits": 0, "misses": 1, "untimed": 0}
    forced, _ = t.run(script, "read", {**tuned, "PCOMPILE_AUTOTUNE": "predicted"}, args=[str(tmp_path / "k3")])
    assert forced["best"] == {"kwargs": {"XBLOCK": 128}, "num_warps": 4}


def test_reduction_prediction_is_inductors_deterministic_pick() -> None:
    from torch._inductor.runtime.triton_compat import Config
    from torch._inductor.runtime.triton_heuristics import filter_reduction_configs_for_determinism

    from pcompile.compat import autotune_choice

    configs = [Config({"XBLOCK": 1, "R0_BLOCK": 2048}, num_warps=16, num_stages=1),
               Config({"XBLOCK": 64, "R0_BLOCK": 8}, num_warps=4, num_stages=1),
               Config({"XBLOCK": 8, "R0_BLOCK": 512}, num_warps=8, num_stages=1)]
    chosen = autotune_choice.predict(configs, {})
    assert chosen is filter_reduction_configs_for_determinism({"deterministic": True}, configs)[0]
    assert chosen.kwargs == {"XBLOCK": 8, "R0_BLOCK": 512}  # second-largest R0_BLOCK
    pointwise = [Config({"XBLOCK": 1024}, num_warps=4, num_stages=1), Config({"XBLOCK": 512}, num_warps=4, num_stages=1)]
    assert autotune_choice.predict(pointwise, {}) is pointwise[0]


def test_autotune_choice_compat_check_passes_here() -> None:
    from pcompile.compat import autotune_choice

    autotune_choice.check()


def test_why_no_prediction_is_named() -> None:
    import types

    from torch._inductor.runtime.triton_compat import Config

    from pcompile.compat import autotune_choice

    two = [Config({"XBLOCK": 128}, num_warps=4, num_stages=1), Config({"XBLOCK": 64}, num_warps=4, num_stages=1)]
    assert "no autotune cache" in autotune_choice.why_not(types.SimpleNamespace(configs=two))

    class Cache:  # the shape of an AutotuneCache made without a remote backend
        remote_cache = None

        def save(self, *args: object, **kwargs: object) -> None:
            raise AssertionError("a kernel without a remote cache must not be saved")

    kernel = types.SimpleNamespace(save_cache_hook=Cache().save, configs=two)
    assert "no remote autotune cache" in autotune_choice.why_not(kernel)
    assert autotune_choice.publish_prediction(kernel, lambda: None) is False
    kernel.configs = two[:1]
    Cache.remote_cache = ("remote", "key")
    assert autotune_choice.why_not(kernel) == "one config"
