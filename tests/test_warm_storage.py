"""warm_storage in this (GPU-free) process, on the warm's device-scoped fake mode: the script's
fakes get distinct, stable, aligned storage addresses that views and ties share; deep copies get
their own storage, keep view sharing among themselves and never copy the mode; Dynamo's fakes and
real tensors keep stock behaviour."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

from pcompile.compat import warm_fakes, warm_storage


@pytest.fixture
def mode():
    m = warm_fakes.new_fake_mode(lambda how: None)
    warm_storage.install(m)
    yield m
    warm_storage._route[:] = [lambda t: False]  # later tests' fakes are not this script's


def test_storages_get_distinct_stable_aligned_addresses_shared_by_views_and_ties(mode):
    with mode:
        model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8)).cuda()
        model[1].weight = model[0].weight  # tied
        x = torch.randn(4, 8, device="cuda")
    ptrs = [p.data_ptr() for p in model.parameters()]
    assert len(set(ptrs)) == 3 and 0 not in ptrs and all(p % warm_storage.ALIGN == 0 for p in ptrs)
    assert [p.data_ptr() for p in model.parameters()] == ptrs  # stable
    assert model[1].weight.untyped_storage().data_ptr() == model[0].weight.untyped_storage().data_ptr()
    assert x[1:].data_ptr() == x.data_ptr() + 8 * 4 and x.t().data_ptr() == x.data_ptr()
    spans = sorted((p.untyped_storage().data_ptr(), p.untyped_storage().nbytes()) for p in model.parameters())
    assert all(a + n <= b for (a, n), (b, _) in zip(spans, spans[1:]))  # disjoint extents


def test_deepcopy_gives_own_storage_keeps_view_sharing_and_shares_the_mode(mode):
    with mode:
        base = torch.randn(6, 4, device="cuda")
        small = torch.tensor([2.0]).cuda()  # a fake carrying a real constant
        w = nn.Parameter(torch.randn(3, device="cuda"))
        w.grad = torch.ones(3, device="cuda")
        w.tag = {"note": [1, 2]}
        box = {"a": base, "b": base[2:], "small": small, "w": w}
        for _ in range(3):
            dup = copy.deepcopy(box)
    assert dup["a"].data_ptr() != base.data_ptr() and dup["a"].device.type == "cuda"
    assert dup["b"].data_ptr() == dup["a"].data_ptr() + 2 * 4 * 4  # still a view of the copy's storage
    assert dup["a"].fake_mode is mode and dup["small"].fake_mode is mode
    # a real constant needs a device to live on (the virtual one: tests/test_vdev_complete.py); here
    # there may be none, and then neither side has one
    assert (dup["small"].constant is None) == (small.constant is None)
    assert small.constant is None or dup["small"].constant is not small.constant
    assert dup["w"].requires_grad and dup["w"].grad is not None and dup["w"].grad.data_ptr() != w.grad.data_ptr()
    assert dup["w"].tag == {"note": [1, 2]} and dup["w"].tag is not w.tag


def test_real_tensors_and_other_fakes_keep_stock_behaviour(mode):
    from torch._subclasses.fake_tensor import FakeTensorMode

    t = torch.arange(4.0)
    assert t.data_ptr() == t.untyped_storage().data_ptr() != 0
    assert torch.equal(copy.deepcopy(t), t)
    with FakeTensorMode() as other:  # e.g. Dynamo's: not the script's
        f = torch.empty(4)
    assert f.fake_mode is other and f.untyped_storage().data_ptr() == 0


def test_a_host_storage_from_bytes_has_its_bytes_under_the_script_mode(mode):
    """torch.distributed's object collectives pickle to bytes, then build a CPU tensor on
    `ByteStorage._from_buffer(bytes)`: under an active fake mode torch makes that storage meta, and
    the tensor failed ("set the storage of a tensor on device cpu to a storage on different device
    meta"; Lightning's DDP broadcasts its log dir with broadcast_object_list). Other fake modes keep
    stock behaviour."""
    import pickle

    from torch._subclasses.fake_tensor import FakeTensorMode

    data = pickle.dumps({"log_dir": "lightning_logs/version_0"})
    with mode:
        t = torch.ByteTensor(torch.ByteStorage._from_buffer(data))
        assert not warm_fakes.is_fake(t) and t.device.type == "cpu" and bytes(t.tolist()) == data
        u = torch.UntypedStorage.from_buffer(data, dtype=torch.uint8)
        assert u.device.type == "cpu" and bytes(u) == data
    with FakeTensorMode():
        assert torch.UntypedStorage.from_buffer(data, dtype=torch.uint8).device.type == "meta"
