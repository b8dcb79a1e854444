"""compat/program_wrapped_functions.py against the installed torch: a function some decorator
wrapped is pickled by its name and unwrapping, so a program's guard on it can be rebuilt (a HF
model's program on torch 2.14.1: `test_programs.py::test_a_transformers_model_restarts_from_its_program`)."""
from __future__ import annotations

import functools
import pickle
import sys
import types

import pytest

torch = pytest.importorskip("torch")

from pcompile.compat import program_wrapped_functions as compat  # noqa: E402


def test_check_passes_on_this_torch() -> None:
    compat.check()


@pytest.fixture
def module() -> types.ModuleType:
    """A module whose `Model.forward` is a wrapper of the function it wraps (transformers' way)."""
    mod = types.ModuleType("pcompile_test_wrapped")

    def deco(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            return func(*args, **kwargs)
        return wrapper

    def forward(self, x):
        return x

    forward.__qualname__, forward.__module__ = "Model.forward", mod.__name__
    mod.Model = type("Model", (), {"forward": deco(deco(forward))})
    mod.original = forward
    sys.modules[mod.__name__] = mod
    yield mod
    del sys.modules[mod.__name__]


def test_a_wrapped_function_is_found_by_name_and_unwrapping(module: types.ModuleType) -> None:
    assert compat.steps_to(module.original) == (module.__name__, "Model.forward", 2)
    assert compat.unwrapped(*compat.steps_to(module.original)) is module.original
    assert compat.steps_to(module.Model.forward) is None  # found by name as it is: torch's own case


def test_the_guard_pickler_keeps_it_where_torch_dropped_it(module: types.ModuleType) -> None:
    from torch._dynamo import guards

    before = guards.GuardsStatePickler.reducer_override
    compat.install()
    try:
        if not compat.needed():  # torch 2.15+ rebuilds such a function itself: nothing patched
            assert guards.GuardsStatePickler.reducer_override is before
            return
        reduced = guards.GuardsStatePickler.reducer_override(None, module.original)  # ours answers first
        assert reduced == (compat.unwrapped, (module.__name__, "Model.forward", 2))
        assert pickle.loads(pickle.dumps(reduced[1])) == reduced[1]
    finally:
        compat.uninstall()
    assert guards.GuardsStatePickler.reducer_override is before


def test_a_moved_function_leaves_a_missing_value(module: types.ModuleType) -> None:
    from torch._dynamo.guards import _Missing

    assert isinstance(compat.unwrapped(module.__name__, "Model.forward", 5), _Missing)
