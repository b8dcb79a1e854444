"""Nested jagged tensors (NJTs) built on the script's CUDA fakes: their host-side inner tensors.

An NJT keeps its min/max sequence length as inner tensors of shape (n, 0) made on the host
(`_store_val_in_tensor`: `torch.zeros(n, 0)`), next to its CUDA values and offsets. Under the
warm's device-scoped fake mode the host factory runs for real while values and offsets are
CUDA fakes, so the NJT mixes fake and real inner tensors, and `is_fake` (Dynamo's input wrap,
fakeification, the subclass machinery) refuses it: "got mixed fake and real tensors!". On a GPU
host all inner tensors are real; under Dynamo's own fake mode all are fakes. Both views are
uniform, so the flatten every one of those readers goes through makes them uniform here too:
a host (n, 0) tensor next to the script's fakes becomes a fake of the same mode. It holds no
data (its value is its shape), so nothing a GPU host would compute changes.

The other way round, compiled code's NJT outputs are rebuilt (`__tensor_unflatten__`) from
inner tensors that are the script's fakes where a GPU host has real ones; torch then takes its
tracing branch and memoises the runtime ragged size, a plain int, on the fake offsets ("Expected
nested_int_memo to be torch.SymInt"). Eager's nested int for those offsets is used instead.

Part of the warm's private-torch surface (see warm_runtime.py); tests/test_warm_compat.py runs
this module's check(); tests/test_warm_nested.py runs an NJT script through `pcompile warm`.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from pcompile.compat.warm_runtime import mark, marked, missing

CHECKED = {"torch": "2.11.0, 2.14.1 (2.15.0 not recorded: check(), test_warm_compat.py and the NJT test pass there, "
                     "but test_warm_nested.py's strided-nested/CUDA-profiler test crashes the warm child: CUPTI 13.2 "
                     "recurses without end when the virtual device refuses cuGetExportTable)"}

PRIVATE_SYMBOLS: list[tuple[str, str]] = [
    ("torch.nested._internal.nested_tensor", "NestedTensor"),
    ("torch.nested._internal.nested_tensor.NestedTensor", "__tensor_flatten__"),
    ("torch.nested._internal.nested_tensor.NestedTensor", "__tensor_unflatten__"),
    ("torch.nested._internal.nested_tensor", "_store_val_in_tensor"),  # the host (n, 0) tensors; instances keep them in _metadata_cache
]


def check() -> list[str]:
    """Names of the private symbols this module needs that this torch lacks (empty when all is well)."""
    return missing(PRIVATE_SYMBOLS)


def uniform_inner_tensors(owned: Callable[[Any], bool]) -> None:
    """Make an NJT's host metadata tensors fakes of the script's mode when its values are.

    `owned(t)` says whether `t` is a fake of the script's mode. Installed on NestedTensor's
    `__tensor_flatten__`, the one place that lists inner tensors to every reader, so the lazy
    min/max computations (cached after construction) are covered too."""
    from torch.nested._internal.nested_tensor import NestedTensor

    original = NestedTensor.__tensor_flatten__
    if marked(original, "uniform_nested_inner_tensors"):
        return

    def __tensor_flatten__(self: Any) -> Any:
        values = self._values
        cache = self._metadata_cache
        if owned(values):
            for key, t in list(cache.items()):
                if isinstance(t, torch.Tensor) and not owned(t) and t.numel() == 0 and t.device.type == "cpu":
                    cache[key] = values.fake_mode.from_tensor(t)
        return original(self)

    mark(__tensor_flatten__, "uniform_nested_inner_tensors")
    NestedTensor.__tensor_flatten__ = __tensor_flatten__


def eager_ragged_sizes(owned: Callable[[Any], bool]) -> None:
    """Rebuild compiled code's NJT outputs on the script's fakes with eager's nested int.

    On a GPU host the offsets are real and `get_tensor_symint` gives them a nested int; on the
    script's fake offsets NestedTensor's unflatten stores the runtime size (an int) as their
    memo, which FakeTensor.get_nested_int rejects. The ragged size passed in becomes the offsets'
    own nested int (the mode's eager-style one, warm_fakes.create_symbolic_nested_int)."""
    from torch.nested._internal.nested_tensor import NestedTensor

    original = NestedTensor.__tensor_unflatten__
    if marked(original, "eager_ragged_sizes"):
        return

    def __tensor_unflatten__(inner_tensors: dict, meta: Any, outer_size: Any, outer_stride: Any) -> Any:
        lengths = inner_tensors.get("_lengths")
        source = inner_tensors["_offsets"] if lengths is None else lengths
        idx = meta["ragged_idx"]
        if owned(source) and not isinstance(outer_size[idx], torch.SymInt):
            if not isinstance(getattr(source, "nested_int_memo", None), torch.SymInt):
                source.nested_int_memo = None
            outer_size = (*outer_size[:idx], source.get_nested_int(), *outer_size[idx + 1:])
        return original(inner_tensors, meta, outer_size, outer_stride)

    mark(__tensor_unflatten__, "eager_ragged_sizes")
    NestedTensor.__tensor_unflatten__ = staticmethod(__tensor_unflatten__)
