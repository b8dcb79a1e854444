"""compat/ddp_autograd_cache.py against the installed torch: fails loudly when torch moves what
it touches; what it stores of the first-call fakes, and what it refuses to store."""
from __future__ import annotations

import types

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from pcompile.compat import CompatError, ddp_autograd_cache as dac, ddp_first_call_fakes as fakes


def test_check_passes_and_install_patches_then_restores_every_name():
    dac.check()
    from torch._functorch._aot_autograd import aot_autograd_result, autograd_cache, runtime_wrappers

    before = (autograd_cache.autograd_cache_key, autograd_cache.AOTAutogradCache.__dict__["save"],
              runtime_wrappers.FakifiedOutWrapper.post_compile,
              aot_autograd_result.GenericAOTAutogradResult.wrap_post_compile)
    dac.install()
    try:
        assert len(dac.installed()) == 5
        assert autograd_cache.autograd_cache_key is not before[0]
    finally:
        dac.uninstall()
    after = (autograd_cache.autograd_cache_key, autograd_cache.AOTAutogradCache.__dict__["save"],
             runtime_wrappers.FakifiedOutWrapper.post_compile,
             aot_autograd_result.GenericAOTAutogradResult.wrap_post_compile)
    assert after == before and dac.installed() == []


def test_another_torch_minor_keeps_torchs_bypass(monkeypatch):
    monkeypatch.setattr(dac, "TORCH_MINORS", ((2, 99),))
    with pytest.raises(CompatError, match="read against torch 2.99 only"):
        dac.check()


def test_only_a_ddp_bucket_compile_is_keyed_apart():
    ctx = torch._guards.TracingContext(FakeTensorMode())
    assert not dac._ddp_split(ctx)  # not a fakified first call
    ctx.fakify_first_call = True
    assert not dac._ddp_split(ctx)  # no DDPOptimizer context
    ctx.ddp_optimizer_ctx = object()
    assert dac._ddp_split(ctx)  # backward lowered ahead or lazily: a hit pops its own metadata
    key = "a" + "x" * 51
    assert dac.ddp_key(key) != key and dac.ddp_key(key) == dac.ddp_key(key) and dac.ddp_key(key).startswith("a")


def _stack(*metas):
    """DDPOptimizer's per-bucket stack as SubmodCompiler leaves it after pushing `metas`."""
    from torch._dynamo.backends.distributed import DDPOptimizerContext

    ddp = DDPOptimizerContext()
    for m in metas:
        ddp.curr_bucket += 1
        ddp.metadata_per_bucket.append(m)
    return ddp


def _lazy_read(ddp):
    """What a lazily lowered bucket's first backward reads (AOTAutograd's lazy backward)."""
    meta = ddp.metadata_per_bucket[ddp.curr_bucket]
    ddp.curr_bucket -= 1
    return meta


@pytest.mark.parametrize("hit", [0, 1, 2])
def test_a_hit_bucket_takes_its_own_metadata_so_each_lazy_bucket_reads_its_own(hit):
    metas = [object(), object(), object()]
    ddp = _stack(*metas)
    for bucket in (2, 1, 0):  # backward: last bucket first
        if bucket == hit:
            dac._pop_own_metadata(ddp, metas[bucket], lazy=True)
        else:
            assert _lazy_read(ddp) is metas[bucket]
    assert ddp.curr_bucket == -1


def test_a_hit_popping_out_of_order_never_changes_what_the_next_lazy_bucket_reads():
    metas = [object(), object(), object()]
    ddp = _stack(*metas)
    dac._pop_own_metadata(ddp, metas[0], lazy=True)  # bucket 0 (hit) ran backward first
    assert _lazy_read(ddp) is metas[2] and _lazy_read(ddp) is metas[1] and ddp.curr_bucket == -1


def test_a_hit_whose_metadata_is_not_on_the_stack_steps_down_only_where_its_miss_would():
    metas = [object(), object()]
    ddp = _stack(*metas)
    dac._pop_own_metadata(ddp, object(), lazy=False)
    assert ddp.curr_bucket == 1
    dac._pop_own_metadata(ddp, object(), lazy=True)
    assert ddp.curr_bucket == 0 and _lazy_read(ddp) is metas[0]
    dac._pop_own_metadata(ddp, metas[0], lazy=True)  # an empty stack is left alone
    assert ddp.curr_bucket == -1


def test_a_hit_backward_pops_at_its_first_call_only_and_is_called_as_the_original():
    metas = [object(), object()]
    ddp = _stack(*metas)
    calls = []

    def compiled_bw(args):
        calls.append(list(args))
        return ["grad"]

    compiled_bw._boxed_call = True
    entry = types.SimpleNamespace(post_compile=lambda result, fx_config: result, num_symints_saved_for_bw_=0)
    proxy = dac._FirstBackwardPops(entry, ddp, metas[1], lazy=True)
    assert proxy.num_symints_saved_for_bw_ == 0
    fn = proxy.post_compile(compiled_bw, {})
    assert fn._boxed_call and ddp.curr_bucket == 1  # nothing popped at load
    assert fn([1]) == ["grad"] and ddp.curr_bucket == 0 and ddp.metadata_per_bucket == [metas[0]]
    fn([2])  # a retained graph's second backward: popped once, as a lazy bucket lowers once
    assert ddp.curr_bucket == 0 and calls == [[1], [2]]


def test_first_call_fakes_round_trip_with_inductors_strides_and_repeats():
    mode = FakeTensorMode()
    with mode:
        act = torch.empty(8, 512)
        saved = torch.empty_strided((4, 6), (1, 4), dtype=torch.bfloat16)
        primal = torch.empty(3, requires_grad=True)
    outs = [act, saved, None, 7, act, primal]
    strides = [None, (6, 1), None, None, None, None]  # Inductor chose row-major for the second
    described, _why = fakes.describe(outs, strides, inputs=[primal])
    assert described is not None
    other = FakeTensorMode()
    rebuilt = fakes.rebuild_outputs(described, other, [])
    assert [type(r) for r in rebuilt[2:4]] == [type(None), int] and rebuilt[3] == 7
    assert rebuilt[4] is rebuilt[0]
    assert rebuilt[0].shape == (8, 512) and rebuilt[0].stride() == (512, 1) and rebuilt[0].fake_mode is other
    assert rebuilt[1].dtype == torch.bfloat16 and rebuilt[1].stride() == (6, 1) and rebuilt[1]._is_view()
    assert rebuilt[5].requires_grad and rebuilt[5].shape == (3,)


def test_first_call_fakes_check_passes_here():
    fakes.check()  # ddp_first_call_fakes: views of one buffer round-trip on this torch


def test_outputs_sharing_one_storage_at_offsets_are_rebuilt_as_views_of_one_buffer():
    """nanoGPT's attention buckets save q, k, v for backward: three views of one projection's output
    at byte offsets (8 of 26 buckets per rank were left to torch's bypass before)."""
    mode = FakeTensorMode()
    with mode:
        qkv = torch.empty(8, 1536, dtype=torch.bfloat16)
        q, k, v = (t.view(8, 8, 64).transpose(0, 1) for t in qkv.split(512, 1))
        own = torch.empty(8, 512)
        sharing = torch.empty(0).set_(own.untyped_storage(), 4, (2, 4), (4, 1))  # not a view, offset 4
    outs = [q, k, v, own, sharing, k]
    strides = [None, None, None, None, (1, 2), None]
    described, why = fakes.describe(outs, strides)
    assert described is not None, why
    other = FakeTensorMode()
    rebuilt = fakes.rebuild_outputs(described, other, [])
    for old, new in zip(outs, rebuilt):
        assert (new.shape, new.dtype, new.storage_offset()) == (old.shape, old.dtype, old.storage_offset())
        assert new.untyped_storage().nbytes() == old.untyped_storage().nbytes() and new.fake_mode is other
    assert [r.stride() for r in rebuilt[:4]] == [t.stride() for t in outs[:4]] and rebuilt[4].stride() == (1, 2)
    assert rebuilt[5] is rebuilt[1]
    same = lambda a, b: a.untyped_storage()._cdata == b.untyped_storage()._cdata  # noqa: E731
    assert same(rebuilt[0], rebuilt[2]) and same(rebuilt[3], rebuilt[4]) and not same(rebuilt[0], rebuilt[3])
    assert rebuilt[1]._is_view()


@pytest.mark.parametrize("case", ["aliases_an_input", "not_fake", "sparse"])
def test_outputs_a_rebuild_could_not_reproduce_store_nothing(case):
    mode = FakeTensorMode()
    with mode:
        inp = torch.empty(4, 4)
        outs = {"aliases_an_input": [torch.empty(0).set_(inp.untyped_storage(), 0, (16,), (1,))],
                "sparse": [torch.empty(4, 4).to_sparse()]}.get(case)
    if case == "not_fake":
        outs = [torch.empty(1)]
    described, why = fakes.describe(outs, None, inputs=[inp])  # said, not silent
    assert described is None
    assert {"aliases_an_input": "shares storage with an input", "not_fake": "not a plain fake",
            "sparse": "not a dense tensor"}[case] in why


def test_a_recorded_gpu_maps_to_this_ranks_gpu_and_mismatched_devices_refuse():
    rec = [("tensor", (2,), (1,), None, "torch.float32", "cuda:0", False)]
    mode = FakeTensorMode()
    with mode:
        on_1 = torch.empty(1, device="cuda:1")
    assert fakes.device_map(rec, [on_1]) == {"cuda:0": "cuda:1"}
    assert fakes.device_map(rec, []) is None  # a GPU output, but no GPU input to bind it to
    assert fakes.device_map(rec, [torch.empty(1, device="meta")]) is None  # another device type
    assert fakes.device_map([("value", None)], []) == {}
    (out,) = fakes.rebuild_outputs(rec, FakeTensorMode(), [on_1])
    assert out.device == torch.device("cuda:1")
