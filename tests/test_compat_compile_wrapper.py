"""compat/compile_wrapper.py: torch.compile's inductor wrapper still turns mode/options into config
patches and can be routed through pcompile (and back)."""
from __future__ import annotations

import torch

from pcompile.compat import compile_wrapper as compat


def test_check_passes_on_this_torch() -> None:
    compat.check()


def test_make_applies_mode_and_options_like_torch_compile() -> None:
    wrapper = compat.make("max-autotune-no-cudagraphs", {"epilogue_fusion": False})
    assert wrapper.config["max_autotune"] is True and wrapper.config["epilogue_fusion"] is False
    assert compat.make(None, None).config == {}


def test_route_through_calls_hook_with_the_original_and_unroute_restores() -> None:
    calls = []

    def hook(original, wrapper, gm, inputs, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(type(wrapper).__name__)
        return "hooked"

    was = compat.routed()
    original = torch._TorchCompileInductorWrapper.__call__
    if was:
        compat.unroute()
    try:
        compat.route_through(hook)
        compat.route_through(hook)  # idempotent
        assert compat.routed()
        assert torch._TorchCompileInductorWrapper(None, None, None)(None, []) == "hooked"
        assert calls == ["_TorchCompileInductorWrapper"]
    finally:
        compat.unroute()
    assert not compat.routed()
    if was:
        torch._TorchCompileInductorWrapper.__call__ = original


def test_fallback_without_the_wrapper_class_compiles_with_mode_and_options() -> None:
    x = torch.randn(8)

    def backend(gm, inputs):  # type: ignore[no-untyped-def]
        return compat.compile_fx_fallback(gm, inputs, "max-autotune-no-cudagraphs", {"epilogue-fusion": False})

    torch._dynamo.reset()
    y = torch.compile(lambda v: v.cos() * 2, backend=backend)(x)
    assert torch.allclose(y, x.cos() * 2)
