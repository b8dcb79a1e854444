"""The version gate and the compat registry: known versions pass, unknown ones are refused once."""
from __future__ import annotations

import warnings

import pytest

from pcompile import compat
from pcompile.compat import gate
from pcompile.settings import PRETEND_TORCH_VERSION, PRETEND_TRITON_VERSION


def test_every_compat_module_works_on_this_torch() -> None:
    """Except those that declare this torch too old for them (SINCE_TORCH): they stay stock there."""
    assert {name: why for name, why in compat.problems().items() if not compat.by_design(name)} == {}


def test_installed_versions_are_inside_the_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PRETEND_TORCH_VERSION.name, raising=False)
    monkeypatch.delenv(PRETEND_TRITON_VERSION.name, raising=False)
    assert gate.unsupported_reason() is None


@pytest.mark.parametrize("torch_v,triton_v,ok", [
    ("2.11.0+cu130", "3.6.0", True), ("2.14.1", "3.9.1", True), ("2.15.0+cu132", "3.9.0", True), ("2.10.0", "3.6.0", False),
    ("2.16.0a0", "3.9.0", False), ("2.12.0", "3.5.0", False), ("2.12.0", "3.10.0", False), ("garbage", "3.6.0", False),
])
def test_gate_ranges(monkeypatch: pytest.MonkeyPatch, torch_v: str, triton_v: str, ok: bool) -> None:
    monkeypatch.setenv(PRETEND_TORCH_VERSION.name, torch_v)
    monkeypatch.setenv(PRETEND_TRITON_VERSION.name, triton_v)
    assert (gate.unsupported_reason() is None) is ok


def test_refusal_warns_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PRETEND_TORCH_VERSION.name, "3.0.0")
    from pcompile import warn

    monkeypatch.setattr(warn, "_warned", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not gate.supported() and not gate.supported() and not gate.supported()
    assert len([w for w in caught if issubclass(w.category, gate.PcompileFallbackWarning)]) == 1


def test_gate_check_raises_outside_the_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    """gate.check() follows the compat contract: None inside the ranges, CompatError naming the version outside."""
    monkeypatch.delenv(PRETEND_TORCH_VERSION.name, raising=False)
    monkeypatch.delenv(PRETEND_TRITON_VERSION.name, raising=False)
    gate.check()
    monkeypatch.setenv(PRETEND_TORCH_VERSION.name, "3.0.0")
    with pytest.raises(compat.CompatError, match="torch 3.0.0"):
        gate.check()
