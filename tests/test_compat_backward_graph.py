"""compat/backward_graph.py: the private AOTAutograd stages pcompile wraps to ship backward graphs
(backward ahead) are where it expects them on this torch, and its small helpers behave."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import pytest

from pcompile import compat
from pcompile.compat import backward_graph

STAGES = ("_aot_stage2a_partition", "_aot_stage2b_bw_compile")


def _gc() -> Any:
    import torch._functorch._aot_autograd.graph_compile as gc

    return gc


@pytest.fixture
def stock_stages() -> Iterator[dict[str, Any]]:
    """The module's stages unwrapped for the test; whatever was there before is put back."""
    gc = _gc()
    before = {name: getattr(gc, name) for name in STAGES}
    backward_graph.uninstall()
    stock = {name: getattr(gc, name) for name in STAGES}
    try:
        yield stock
    finally:
        for name, fn in before.items():
            setattr(gc, name, fn)


def test_check_passes_on_this_torch() -> None:
    backward_graph.check()  # raises CompatError naming what moved
    assert compat.check("backward_graph") is None, (
        f"the private API backward ahead relies on moved in this torch: {compat.check('backward_graph')}")


def test_stages_are_module_globals_called_by_aot_stage2_autograd() -> None:
    """Wrapping the module attributes intercepts them only while aot_stage2_autograd looks them up
    as globals of its own module."""
    import inspect

    gc = _gc()
    source = inspect.getsource(gc.aot_stage2_autograd)
    for name in STAGES:
        assert f"{name}(" in source, f"aot_stage2_autograd no longer calls {name}"
        assert gc.aot_stage2_autograd.__globals__ is vars(gc)
    partition = getattr(gc._aot_stage2a_partition, backward_graph._WRAPPED, gc._aot_stage2a_partition)
    params = list(inspect.signature(partition).parameters)
    # _why_not and the bw_compile hook read these by position
    assert params[2] == "maybe_subclass_meta" and params[4] == "aot_config", params
    bw_compile = getattr(gc._aot_stage2b_bw_compile, backward_graph._WRAPPED, gc._aot_stage2b_bw_compile)
    params = list(inspect.signature(bw_compile).parameters)
    assert params[0] == "bw_module" and params[5] == "aot_config", params
    assert params[6:7] in (["bw_compiler"], []), params  # 2.14+ passes the compiler; 2.11 reads aot_config's


# -- differing_inputs -----------------------------------------------------------------------

def test_differing_inputs_equal_fake_and_real_is_empty() -> None:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    real = [torch.randn(4, 8), torch.randn(3, 5).t(), torch.zeros(2, dtype=torch.int64), 7]
    mode = FakeTensorMode()
    fake = [mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in real]
    assert backward_graph.differing_inputs(fake, real) == []
    assert backward_graph.differing_inputs(real, real) == []
    assert backward_graph.differing_inputs([], []) == []


def test_differing_inputs_reports_strides() -> None:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    contiguous = torch.randn(4, 8)
    transposed = torch.randn(8, 4).t()  # same shape, strides (1, 4)
    fake = FakeTensorMode().from_tensor(contiguous)
    out = backward_graph.differing_inputs([fake], [transposed])
    assert len(out) == 1
    assert out[0].startswith("input 0:")
    assert "(8, 1)" in out[0] and "(1, 4)" in out[0], out


def test_differing_inputs_reports_shapes_dtypes_values_and_counts() -> None:
    import torch

    a = torch.randn(4, 8)
    out = backward_graph.differing_inputs([a, a, a], [a, torch.randn(4, 9), a])
    assert len(out) == 1 and out[0].startswith("input 1:") and "(4, 8)" in out[0] and "(4, 9)" in out[0], out
    out = backward_graph.differing_inputs([a], [a.double()])
    assert len(out) == 1 and out[0].startswith("input 0:"), out
    out = backward_graph.differing_inputs([a, 3], [a, 4])
    assert out == ["input 1: 3 -> 4"]
    out = backward_graph.differing_inputs([a, 3], [a, a])
    assert len(out) == 1 and out[0].startswith("input 1:"), out
    out = backward_graph.differing_inputs([a, a], [a])
    assert out == ["2 inputs -> 1"]


# -- node metadata filter -------------------------------------------------------------------

@pytest.mark.parametrize("key", ["nn_module_stack", "fwd_nn_module_stack", "source_fn_stack"])
def test_meta_key_wanted_drops_user_module_stacks(key: str) -> None:
    assert backward_graph._meta_key_wanted(key) is False


@pytest.mark.parametrize("key", ["val", "tensor_meta", "stack_trace", "seq_nr", "original_aten", "partitioner_tag",
                                 "is_backward"])
def test_meta_key_wanted_keeps_the_rest(key: str) -> None:
    assert backward_graph._meta_key_wanted(key) is True


# -- install / uninstall --------------------------------------------------------------------

def _noop_partition(part: Any) -> None:
    pass


def _noop_around(bw_module: Any, placeholders: list[Any]) -> Any:
    import contextlib

    return contextlib.nullcontext()


def test_install_wraps_and_uninstall_restores(stock_stages: dict[str, Any]) -> None:
    gc = _gc()
    for name, fn in stock_stages.items():
        assert not hasattr(fn, backward_graph._WRAPPED), f"{name} still wrapped after uninstall()"

    backward_graph.install(_noop_partition, _noop_around)
    for name, stock in stock_stages.items():
        hooked = getattr(gc, name)
        assert hooked is not stock, f"install() did not wrap {name}"
        assert getattr(hooked, backward_graph._WRAPPED) is stock
        assert hooked.__name__ == stock.__name__  # functools.wraps

    backward_graph.uninstall()
    for name, stock in stock_stages.items():
        assert getattr(gc, name) is stock, f"uninstall() did not restore {name}"
    backward_graph.uninstall()  # a second uninstall is harmless
    for name, stock in stock_stages.items():
        assert getattr(gc, name) is stock


def test_install_twice_does_not_double_wrap(stock_stages: dict[str, Any]) -> None:
    gc = _gc()
    backward_graph.install(_noop_partition, _noop_around)
    first = {name: getattr(gc, name) for name in STAGES}
    backward_graph.install(_noop_partition, _noop_around)
    for name, stock in stock_stages.items():
        hooked = getattr(gc, name)
        assert getattr(hooked, backward_graph._WRAPPED) is stock, f"{name} wraps a wrapper after a second install()"
        assert not hasattr(getattr(hooked, backward_graph._WRAPPED), backward_graph._WRAPPED)
        assert hooked is not first[name]  # replaced (new callbacks), not stacked
    backward_graph.uninstall()  # one uninstall is enough to get back to stock
    for name, stock in stock_stages.items():
        assert getattr(gc, name) is stock


def test_hooks_see_the_partitioned_backward_and_its_real_inputs(stock_stages: dict[str, Any]) -> None:
    """A real (aot_eager) compile through the wrapped stages: on_partition gets the backward graph,
    the backward compile runs inside around_backward with that same graph and its inputs, and
    callbacks that raise never break the compile."""
    import contextlib

    import torch
    import torch._functorch.config as fconfig

    seen: dict[str, list[Any]] = {"partition": [], "around": [], "entered": [], "exited": []}

    def on_partition(part: backward_graph.Partitioned) -> None:
        seen["partition"].append(part)

    @contextlib.contextmanager
    def around(bw_module: Any, placeholders: list[Any]) -> Iterator[None]:
        seen["around"].append((bw_module, placeholders))
        seen["entered"].append(True)
        yield
        seen["exited"].append(True)

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (torch.sin(x) @ w).relu()

    x = torch.randn(4, 8, requires_grad=True)
    w = torch.randn(8, 3, requires_grad=True)
    torch._dynamo.reset()
    try:
        backward_graph.install(on_partition, around)
        with fconfig.patch(force_non_lazy_backward_lowering=True):  # as pcompile's backend does
            out = torch.compile(f, backend="aot_eager", fullgraph=True)(x, w)
        out.sum().backward()
        assert len(seen["partition"]) == 1
        part = seen["partition"][0]
        assert isinstance(part.bw_module, torch.fx.GraphModule)
        assert part.why_not is None, part.why_not
        assert len(seen["around"]) == 1 and seen["entered"] == seen["exited"] == [True]
        bw_module, placeholders = seen["around"][0]
        assert bw_module is part.bw_module  # the key backward_ahead pairs ship and compile by
        assert backward_graph.differing_inputs(backward_graph.placeholder_vals(part.bw_module), placeholders) == []
        grads = (x.grad.clone(), w.grad.clone())

        # Callbacks that raise are the speculation's problem, never the compile's.
        def bad_partition(part: Any) -> None:
            raise RuntimeError("boom")

        def bad_around(bw_module: Any, placeholders: list[Any]) -> Any:
            raise RuntimeError("boom")

        backward_graph.install(bad_partition, bad_around)
        torch._dynamo.reset()
        x.grad = w.grad = None
        with fconfig.patch(force_non_lazy_backward_lowering=True):
            out2 = torch.compile(f, backend="aot_eager", fullgraph=True)(x, w)
        out2.sum().backward()
        torch.testing.assert_close(out2, out)
        torch.testing.assert_close((x.grad, w.grad), grads)
    finally:
        backward_graph.uninstall()
        torch._dynamo.reset()


def test_fx_key_dump_writes_inductor_s_description(tmp_path: Path) -> None:
    """PCOMPILE_DEBUG_FX_KEYS: one file per FX key this process computes, Inductor's own lines."""
    import torch
    import torch._inductor.codecache as cc

    original = cc.compiled_fx_graph_hash
    try:
        backward_graph.dump_fx_keys(str(tmp_path))
        backward_graph.dump_fx_keys(str(tmp_path))  # twice: still one wrapper
        assert getattr(cc.compiled_fx_graph_hash, backward_graph._WRAPPED) is original
        torch._dynamo.reset()
        from torch._inductor import config as iconfig

        import torch._functorch.config as fconfig

        # A shape no other test uses and no AOTAutograd cache: an AOTAutograd hit would load the
        # FX graph by its stored key without computing one.
        n = 8 + os.getpid() % 97
        with iconfig.patch(fx_graph_cache=True, force_disable_caches=False), \
                fconfig.patch(enable_autograd_cache=False):
            torch.compile(lambda x: x.sin() + 1, backend="inductor")(torch.randn(n, 3))
        files = list(tmp_path.glob(f"{os.getpid()}-*.txt"))
        assert files, "no key description written"
        text = files[0].read_text()
        assert "example_inputs[0]: TensorMetadata" in text and "gm:" in text
    finally:
        cc.compiled_fx_graph_hash = original
        torch._dynamo.reset()


def test_every_numerics_flag_in_the_fx_key_is_shipped_and_applied() -> None:
    """Each flag in _FLAGS must reach the worker: `torch.backends.cuda.matmul` is an object, not a
    module, and its settings (TF32: nanoGPT sets allow_tf32) were silently left out, so every
    backward compiled ahead for such a script had another FX key than the parent's."""
    import torch
    from torch.fx._graph_pickler import GraphPickler

    from pcompile.compat import backward_graph

    gm = torch.fx.symbolic_trace(lambda x: x * 2)
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            node.meta["val"] = torch.randn(3)
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    try:
        matmul.allow_tf32 = True
        data = backward_graph.dumps(gm, [torch.randn(3)])
        from torch._subclasses.fake_tensor import FakeTensorMode

        flags = GraphPickler.loads(data, FakeTensorMode()).flags
        assert {f"{owner}.{name}" for owner, name in backward_graph._FLAGS} <= set(flags), flags
        assert flags["torch.backends.cuda.matmul.fp32_precision"] == "tf32", flags
        matmul.fp32_precision = "none"
        backward_graph._apply_flags(flags)  # what the worker does before compiling
        assert matmul.fp32_precision == "tf32"
    finally:
        matmul.fp32_precision = before
