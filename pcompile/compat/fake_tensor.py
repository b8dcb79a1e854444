"""Telling a fake tensor from a real one: `torch._subclasses.fake_tensor.FakeTensor`.

Why: Dynamo annotates each graph placeholder with the Python type of the value it saw, so a
graph traced in `pcompile warm` (on fake tensors) says `FakeTensor` where the GPU job's says
`Tensor`/`Parameter`; pcompile rewrites the annotation before hashing (graph_normalize.py), and
needs the class to recognise it. No public name exposes it.

Touched (torch 2.14.1 and 2.15.0: the class, a torch.Tensor subclass).
"""
from __future__ import annotations

from pcompile.compat import CompatError

CHECKED = {"torch": "2.14.1, 2.15.0"}


def fake_tensor_type() -> type:
    from torch._subclasses.fake_tensor import FakeTensor

    return FakeTensor


def check() -> None:
    import torch

    cls = fake_tensor_type()
    if not (isinstance(cls, type) and issubclass(cls, torch.Tensor)):
        raise CompatError("torch._subclasses.fake_tensor.FakeTensor is no longer a torch.Tensor subclass")


def is_fake(value: object) -> bool:
    return isinstance(value, fake_tensor_type())


def is_fake_type(tp: type) -> bool:
    return issubclass(tp, fake_tensor_type())
