"""compat/lazy_backward.py: functorch still reads force_non_lazy_backward_lowering into AOTConfig,
so eager_backward() makes the backward compile together with the forward."""
from __future__ import annotations

import inspect

import pytest

from pcompile.compat import lazy_backward as compat

pytestmark = pytest.mark.skipif(__import__("pcompile.compat", fromlist=["by_design"]).by_design("lazy_backward"),
                                reason="this torch is older than the module's SINCE_TORCH: it stays stock here by design")
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


def test_backward_impl_still_decides_donation_at_the_first_backward() -> None:
    """The retained-graph rule (`_deciding_get_or_compile`, module docstring) relies on AOTAutograd
    asking `get_or_compile(saved_tensors_use_once=...)` for the compiled backward before checking
    `fw_metadata.bw_donated_idxs`, and on the lazy path clearing that list for a kept graph."""
    from torch._functorch._aot_autograd import runtime_wrappers as rw

    source = inspect.getsource(rw)
    assert "backward_compiler.get_or_compile(" in source and "saved_tensors_use_once=saved_tensors_use_once" in source
    assert "fw_metadata.bw_donated_idxs != []" in source, "the donated-buffer check moved"
    assert "self.fw_metadata.bw_donated_idxs = []" in inspect.getsource(rw._AutogradBackwardCompiler), \
        "stock no longer clears donation when the first backward keeps the graph"


def test_a_first_backward_that_keeps_the_graph_gets_private_copies() -> None:
    """On a compiler object marked as lowered ahead, a kept-graph first backward clears the donation
    and feeds the compiled backward copies of the donated inputs; the originals stay intact."""
    import torch

    compat._install_first_backward()
    cls = compat._backward_compiler_class()
    seen: list[list[torch.Tensor]] = []

    def compiled(args: list[torch.Tensor]) -> list[torch.Tensor]:
        seen.append(list(args))
        args[0].zero_()  # a donating backward reuses the buffer
        return [args[1]]

    compiled._boxed_call = True  # type: ignore[attr-defined]

    class Meta:
        bw_donated_idxs = [0]
        num_symints_saved_for_bw = 0

    with compat.eager_backward():
        bc = cls(compiled_bw=compiled, lazy_backward_info=None, disable_amp=False, bw_compiler=None,
                 aot_config=None, fw_metadata=Meta(), try_save_cache_entry=None)
    saved = torch.ones(3)
    fn = bc.get_or_compile(saved_tensors_use_once=False)
    assert bc.fw_metadata.bw_donated_idxs == []
    fn([saved, torch.zeros(1)])
    assert torch.equal(saved, torch.ones(3)) and seen[0][0] is not saved
    assert bc.get_or_compile(saved_tensors_use_once=True) is compiled  # a freeing backward: as lowered


def test_a_first_backward_that_frees_the_graph_keeps_stock_error() -> None:
    compat._install_first_backward()
    cls = compat._backward_compiler_class()

    def compiled(args: list) -> list:
        return []

    class Meta:
        bw_donated_idxs = [0]
        num_symints_saved_for_bw = 0

    with compat.eager_backward():
        bc = cls(compiled_bw=compiled, lazy_backward_info=None, disable_amp=False, bw_compiler=None,
                 aot_config=None, fw_metadata=Meta(), try_save_cache_entry=None)
    assert bc.get_or_compile(saved_tensors_use_once=True) is compiled
    assert bc.get_or_compile(saved_tensors_use_once=False) is compiled
    assert bc.fw_metadata.bw_donated_idxs == [0], "stock raises its donated-buffer error after a freeing first backward"
