"""compat/autotune_recheck.py against the installed torch (issue 34 item 2): the names it reads
exist with the signatures it calls, and kernels that need no re-read are left alone."""
from __future__ import annotations

import types

import pytest

pytest.importorskip("torch")

from pcompile.compat import autotune_recheck  # noqa: E402


def test_check_passes_on_this_torch() -> None:
    autotune_recheck.check()


def _kernel(n_results: int, **meta: object) -> types.SimpleNamespace:
    from torch._inductor.runtime.triton_heuristics import Config

    results = [types.SimpleNamespace(config=Config({"XBLOCK": 2 ** (8 + i)})) for i in range(n_results)]
    return types.SimpleNamespace(compile_results=results, inductor_meta=dict(meta), autotune_cache_info={}, filename=None)


def test_one_config_without_coordinate_descent_and_builder_hits_are_left_alone() -> None:
    assert autotune_recheck.apply_cached_winner(_kernel(1), lambda: None) is None
    hit = _kernel(2)
    hit.autotune_cache_info = {"autotune_cache_state": "hit"}
    assert autotune_recheck.apply_cached_winner(hit, lambda: None) is None and len(hit.compile_results) == 2


def test_no_cache_means_no_winner_and_every_config_kept() -> None:
    kernel = _kernel(2, coordinate_descent_tuning=False)  # no filename: Inductor makes no autotune cache
    assert autotune_recheck.apply_cached_winner(kernel, lambda: None) is None and len(kernel.compile_results) == 2
