"""compat/dynamo_programs.py: the pieces of Dynamo's precompile cache pcompile plugs into are where it
expects them, and the counter bump it carries for a torch bug does what it says."""
from __future__ import annotations

import contextlib

import inspect

import pytest

from pcompile.compat import dynamo_programs as compat


def test_check_passes_on_this_torch() -> None:
    compat.check()


def test_dynamo_loads_through_the_cache_instance_with_the_context_as_self() -> None:
    """compile_options() reads the torch.compile call from the caller's `self`: the call site must
    still be `DynamoCache.load(fn_key)` inside a method of the optimize context."""
    from torch._dynamo import eval_frame

    src = inspect.getsource(eval_frame)
    assert "DynamoCache.load(fn_key)" in src, "eval_frame no longer loads packages through DynamoCache.load(fn_key)"
    assert "self._package.install(result.backends)" in src


def test_compile_options_names_the_backend_and_its_options() -> None:
    import sys

    import torch

    seen: dict[str, object] = {}

    class Probe:
        def load(self, fn: object) -> None:
            seen.update(compat.compile_options(sys._getframe(1)) or {})

    from torch._dynamo import package

    saved = package.DynamoCache.__dict__.get("load")
    saved_flag = torch._dynamo.config.caching_precompile
    package.DynamoCache.load = Probe().load  # type: ignore[method-assign]
    torch._dynamo.config.caching_precompile = True
    try:
        torch.compile(torch.nn.Linear(2, 2), mode="max-autotune-no-cudagraphs", fullgraph=True)
    finally:
        torch._dynamo.config.caching_precompile = saved_flag
        if saved is None:
            package.DynamoCache.__dict__.pop("load", None)
        else:
            package.DynamoCache.load = saved  # type: ignore[method-assign]
    assert seen.get("fullgraph") is True
    assert "max_autotune" in str(seen.get("config")), seen


def test_the_counter_moves_past_every_number_a_package_used() -> None:
    from torch._dynamo import bytecode_transformation as bt

    compat._bump_counter(["__builtins_dict___7", "__resume_at_30_12", "plain"])
    assert bt.unique_id("__probe") == "__probe_13" or int(bt.unique_id("__probe").rsplit("_", 1)[1]) > 12


def test_autocast_state_round_trips() -> None:
    import torch

    from pcompile.inductor.programs import autocast_context, autocast_state

    assert autocast_state() == {}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        state = autocast_state()
    assert state == {"cpu": "bfloat16"}
    with autocast_context(state):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    assert not torch.is_autocast_enabled("cpu")


@pytest.mark.parametrize("name", ["load", "write", "record_package"])
def test_enable_and_disable_leave_the_cache_as_it_was(name: str) -> None:
    from torch._dynamo import package

    before = package.DynamoCache.__dict__.get(name)
    compat.enable(lambda fn, opts: None, lambda e, k: None, lambda p: None, lambda p: contextlib.nullcontext())
    assert package.DynamoCache.__dict__.get(name) is not None
    compat.disable()
    assert package.DynamoCache.__dict__.get(name) is before
