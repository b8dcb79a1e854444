"""compat/coordesc_ring.py against this torch: the tuner's own fields and neighbours, GPU-free."""
from __future__ import annotations

import types

import pytest

from pcompile.compat import coordesc_ring


def test_check_passes_on_this_torch():
    coordesc_ring.check()


def _autotuner(heuristic: str = "REDUCTION", tuned: bool = True) -> types.SimpleNamespace:
    """What ring() reads of a CachingAutotuner, with the real tuner and real triton.Configs."""
    from torch._inductor.runtime.coordinate_descent_tuner import CoordescTuner
    from torch._inductor.runtime.triton_heuristics import HeuristicType
    from triton import Config

    meta = {"coordinate_descent_tuning": True} if tuned else {}
    tuner = CoordescTuner(name="k", size_hints={"x": 4096, "r0_": 1024}, inductor_meta=meta)
    configs = [Config({"XBLOCK": 8, "R0_BLOCK": 64}, num_warps=4, num_stages=1)]
    return types.SimpleNamespace(inductor_meta=meta, heuristic_type=getattr(HeuristicType, heuristic),
                                 coordesc_tuner=tuner, configs=configs)


def _fields(c) -> dict:
    return {**c.kwargs, "num_warps": c.num_warps}


def test_first_ring_is_one_step_in_one_field_as_the_tuner_moves():
    at = _autotuner()
    base = _fields(at.configs[0])
    ring = coordesc_ring.ring(at, 1)
    moved = sorted((k, _fields(c)[k]) for c in ring for k in base if _fields(c)[k] != base[k])
    assert moved == sorted([("XBLOCK", 16), ("XBLOCK", 4), ("R0_BLOCK", 128), ("R0_BLOCK", 32),
                            ("num_warps", 8), ("num_warps", 2)])
    assert all(sum(_fields(c)[k] != base[k] for k in base) == 1 for c in ring)


def test_two_steps_add_the_second_round_without_repeats():
    at = _autotuner()
    one, two = coordesc_ring.ring(at, 1), coordesc_ring.ring(at, 2)
    ident = [coordesc_ring._identity(c) for c in two]
    assert len(ident) == len(set(ident)) and len(two) > len(one)
    assert coordesc_ring._identity(at.configs[0]) not in ident


@pytest.mark.parametrize("heuristic,tuned", [("TEMPLATE", True), ("REDUCTION", False)])
def test_no_ring_where_the_tuner_does_not_run(heuristic, tuned):
    assert coordesc_ring.ring(_autotuner(heuristic, tuned), 1) == []


def test_marker_is_what_inductor_writes_into_inductor_meta():
    assert coordesc_ring.wanted("inductor_meta={'kernel_name': 'k', 'coordinate_descent_tuning': True}")
    assert not coordesc_ring.wanted("inductor_meta={'kernel_name': 'k'}")
