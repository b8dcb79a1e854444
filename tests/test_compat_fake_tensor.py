"""compat/fake_tensor.py: FakeTensor is still recognisable as a class and an instance."""
from __future__ import annotations

import torch

from pcompile.compat import fake_tensor


def test_check_passes_on_this_torch() -> None:
    fake_tensor.check()


def test_fake_and_real_tensors_are_told_apart() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.empty(3)
    assert fake_tensor.is_fake(fake) and not fake_tensor.is_fake(torch.empty(3))
    assert fake_tensor.is_fake_type(type(fake)) and not fake_tensor.is_fake_type(torch.Tensor)
