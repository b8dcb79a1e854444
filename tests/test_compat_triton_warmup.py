"""compat/triton_warmup.py: one throwaway Triton compile for a GPU target, on this CPU-only host.

The node pool's forkserver runs it so that forked workers inherit a warmed compiler; it must
produce a real cubin without touching a GPU driver, leave no files behind and restore the
environment it borrowed.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

REPO = Path(__file__).resolve().parent.parent


def test_the_triton_api_it_uses_is_still_there():
    from pcompile.compat import triton_warmup

    triton_warmup.check()  # raises CompatError naming what moved in this triton
    assert triton_warmup.has_cuda_backend(), "this triton has no CUDA backend: the warm-up cannot compile for sm_90"


def test_warm_compiles_a_cubin_without_a_driver_and_leaves_nothing_behind(tmp_path):
    code = r"""
import glob, json, os, sys, tempfile
from pcompile.compat import triton_warmup
before = set(glob.glob(os.path.join(tempfile.gettempdir(), "pcompile-triton-warmup-*")))
result = triton_warmup.warm()
import torch
from torch._inductor import codecache
print(json.dumps({
    "result": result,
    "cuda_initialized": torch.cuda.is_initialized(),
    "left": sorted(set(glob.glob(os.path.join(tempfile.gettempdir(), "pcompile-triton-warmup-*"))) - before),
    "env": {k: os.environ.get(k) for k in ("TRITON_CACHE_DIR", "TRITON_CACHE_MANAGER")},
    "code_generator": "triton.compiler.code_generator" in sys.modules,
    "torch_key_cached": codecache.torch_key.cache_info().currsize if hasattr(codecache.torch_key, "cache_info") else None,
    "triton_dir": sorted(os.listdir(os.environ["TRITON_CACHE_DIR"])) if os.path.isdir(os.environ["TRITON_CACHE_DIR"]) else [],
}))
"""
    env = dict(os.environ, PYTHONPATH=str(REPO), TRITON_CACHE_DIR=str(tmp_path / "triton"),
               TRITON_CACHE_MANAGER="pcompile.inductor.triton_cache:StoreCacheManager", PCOMPILE_CACHE_DIR=str(tmp_path / "pc"),
               CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["result"]["compiled"] is True and got["result"]["cubin_bytes"] > 0, got
    assert got["cuda_initialized"] is False
    assert got["left"] == [], "the private Triton cache dir was not removed"
    assert got["env"] == {"TRITON_CACHE_DIR": str(tmp_path / "triton"),
                          "TRITON_CACHE_MANAGER": "pcompile.inductor.triton_cache:StoreCacheManager"}
    assert got["triton_dir"] == [], "the warm-up wrote into the job's Triton cache"
    assert not any(p.is_file() for p in (tmp_path / "pc").rglob("*")), "the warm-up wrote to the store"
    assert got["code_generator"] is True
    assert got["torch_key_cached"] in (None, 1)
