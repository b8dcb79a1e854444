"""The first-call fakes of a DDP-split graph's forward, as plain metadata and back.

Why: SubmodCompiler (torch/_dynamo/backends/distributed.py) runs each compiled bucket once on
fakes to get the next bucket's example inputs, and `FakifiedOutWrapper` answers that call with the
forward graph's output fakes. A cache hit has no graph to take them from, so compat/ddp_autograd_cache.py
stores them with the entry as this module describes them (shape, strides, Inductor's final strides,
dtype, device, requires_grad; for views and outputs sharing one storage also the storage group,
byte offset and size) and rebuilds them in the tracing fake mode.

Touched: `torch._subclasses.fake_tensor.FakeTensor` (exact type, `fake_mode`),
`torch.multiprocessing.reductions.StorageWeakRef`; the rest is public tensor metadata.
"""
from __future__ import annotations

from typing import Any

from pcompile.compat import CompatError

CHECKED = {"torch": "2.11.0, 2.14.1, 2.15.0"}


def check() -> None:
    """Raise CompatError when a round trip of views sharing one storage no longer reproduces them."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        qkv = torch.empty(2, 12, dtype=torch.bfloat16)
        outs = [*(t.view(2, 2, 2).transpose(0, 1) for t in qkv.split(4, 1)), torch.empty(3)]
    described, why = describe(outs, None)
    if described is None:
        raise CompatError(f"DDP first-call fakes: views of one buffer are no longer described ({why})")
    other = FakeTensorMode()
    back = rebuild_outputs(described, other, [])
    same = back is not None and all(
        (b.shape, b.stride(), b.storage_offset(), b.dtype) == (o.shape, o.stride(), o.storage_offset(), o.dtype)
        and getattr(b, "fake_mode", None) is other for b, o in zip(back, outs))
    if not same or back[0].untyped_storage()._cdata != back[2].untyped_storage()._cdata:
        raise CompatError("DDP first-call fakes: a rebuilt view no longer matches its original or shares its buffer")


def describe(out_metas: list[Any], strides: list[Any] | None,
             inputs: list[Any] = ()) -> tuple[list[Any] | None, str]:
    """Plain metadata of the fakified outputs, or None and why when one of them could not be
    rebuilt as it was (then nothing is stored). `strides` are Inductor's output strides, applied
    on rebuild as FakifiedOutWrapper applies them (an `as_strided` view); `inputs` the forward
    graph's placeholder values: an output may be one of them (a primal saved for backward) but
    may not share storage with one otherwise. Outputs that are views or share one storage at
    offsets (attention's q, k, v split from one projection: nanoGPT's buckets) are recorded with
    their storage group, byte offset and the group's size, and rebuilt as views of one buffer."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.multiprocessing.reductions import StorageWeakRef

    input_ids = {id(t) for t in inputs if isinstance(t, torch.Tensor)}
    input_storages = {StorageWeakRef(t.untyped_storage()) for t in inputs if isinstance(t, torch.Tensor)}
    tensors = [t for t in out_metas if type(t) is FakeTensor and t.layout == torch.strided]
    sharers: dict[Any, int] = {}
    for t in {id(t): t for t in tensors}.values():
        ref = StorageWeakRef(t.untyped_storage())
        sharers[ref] = sharers.get(ref, 0) + 1
    groups: dict[Any, int] = {}
    out: list[Any] = []
    seen: dict[int, int] = {}
    for i, meta in enumerate(out_metas):
        if meta is None or type(meta) in (int, float, bool):
            out.append(("value", meta))
            continue
        if type(meta) is not FakeTensor:
            return None, f"output {i} is a {type(meta).__name__}, not a plain fake tensor"
        if id(meta) in seen:  # the same tensor twice (a user output also saved for backward)
            out.append(("same", seen[id(meta)]))
            continue
        if meta.layout != torch.strided:
            return None, f"output {i} is not a dense tensor"
        final = strides[i] if strides and i < len(strides) and strides[i] is not None else None
        storage = meta.untyped_storage()
        fields = (*meta.shape, *meta.stride(), *(final or ()), meta.storage_offset(), storage.nbytes())
        if not all(type(v) is int for v in fields):
            return None, f"output {i} has symbolic sizes"  # torch's bypass stands
        ref = StorageWeakRef(storage)
        if ref in input_storages and id(meta) not in input_ids:
            return None, f"output {i} shares storage with an input"
        seen[id(meta)] = i
        final = None if final is None or tuple(final) == tuple(meta.stride()) else tuple(final)
        plain = (tuple(meta.shape), tuple(meta.stride()), final, str(meta.dtype), str(meta.device), bool(meta.requires_grad))
        if sharers[ref] == 1 and not meta._is_view() and meta.storage_offset() == 0:
            out.append(("tensor", *plain))
        else:  # a view, or one of several outputs on one storage: rebuilt on a shared buffer
            group = groups.setdefault(ref, len(groups))
            out.append(("alias", *plain, group, meta.storage_offset() * meta.element_size(), storage.nbytes()))
    return out, ""


def device_map(described: list[Any], args: list[Any]) -> dict[str, str] | None:
    """Recorded device -> this compile's device. The entry may come from another rank's GPU
    (pcompile keys graphs as on cuda:0): a split graph's outputs are on its inputs' GPU."""
    import torch

    recorded = {d[5] for d in described if d[0] in ("tensor", "alias") and d[5] != "cpu"}
    if not recorded:
        return {}
    here = {str(a.device) for a in args if isinstance(a, torch.Tensor) and a.device.type != "cpu"}
    if recorded == here:
        return {d: d for d in recorded}
    if len(recorded) != 1 or len(here) != 1:
        return None
    (old,), (new,) = recorded, here
    return None if old.split(":")[0] != new.split(":")[0] else {old: new}


def rebuild_outputs(described: list[Any], fake_mode: Any, args: list[Any]) -> list[Any] | None:
    """The fakes FakifiedOutWrapper would return, made in `fake_mode`; None if they can't be."""
    import torch

    devices = device_map(described, args)
    if devices is None or fake_mode is None:
        return None
    out: list[Any] = []
    buffers: dict[int, Any] = {}  # storage group -> its bytes
    with torch.no_grad(), fake_mode:
        for d in described:
            if d[0] == "value":
                out.append(d[1])
            elif d[0] == "same":
                out.append(out[d[1]])
            else:
                _, shape, stride, final, dtype, device, requires_grad, *shared = d
                dt = getattr(torch, dtype.split(".")[-1], None)
                if not isinstance(dt, torch.dtype):
                    return None
                where = devices.get(device, device)
                if d[0] == "tensor":
                    t = torch.empty_strided(shape, stride, dtype=dt, device=where)
                else:
                    group, offset_bytes, nbytes = shared
                    size = dt.itemsize
                    if nbytes % size or offset_bytes % size:
                        return None
                    if group not in buffers:
                        buffers[group] = torch.empty(nbytes, dtype=torch.uint8, device=where)
                    buf = buffers[group]
                    if buf.untyped_storage().nbytes() != nbytes or str(buf.device) != str(torch.device(where)):
                        return None
                    t = buf.view(dt).as_strided(shape, stride, offset_bytes // size)
                t.requires_grad_(requires_grad)
                out.append(t if final is None else t.as_strided(shape, final))
    return out
