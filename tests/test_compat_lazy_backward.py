"""compat/lazy_backward.py: functorch still reads force_non_lazy_backward_lowering into AOTConfig,
so eager_backward() makes the backward compile together with the forward."""
from __future__ import annotations

import inspect

import pytest

from pcompile.compat import lazy_backward as compat
from pcompile.settings import EAGER_BACKWARD


def test_check_passes_on_this_torch() -> None:
    compat.check()


def test_flag_is_read_by_aot_autograd() -> None:
    import torch._functorch.aot_autograd as aot

    assert "config.force_non_lazy_backward_lowering" in inspect.getsource(aot), \
        "AOTAutograd no longer reads force_non_lazy_backward_lowering from its config"


def test_eager_backward_sets_flag_only_inside(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch._functorch.config as fconfig

    monkeypatch.delenv(EAGER_BACKWARD.name, raising=False)
    assert fconfig.force_non_lazy_backward_lowering is False
    with compat.eager_backward():
        assert fconfig.force_non_lazy_backward_lowering is True
    assert fconfig.force_non_lazy_backward_lowering is False
    monkeypatch.setenv(EAGER_BACKWARD.name, "0")
    with compat.eager_backward():
        assert fconfig.force_non_lazy_backward_lowering is False
