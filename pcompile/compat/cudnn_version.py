"""cuDNN's version without initialising CUDA.

`torch.backends.cudnn.version()` first asks `torch.cuda.is_available()`, which initialises the
CUDA driver (cuInit). Store keys need the cuDNN version in every compile worker and on warm hosts,
whose processes must never open a host GPU's driver: ask the library directly instead.
"""
from __future__ import annotations

from pcompile.compat import CompatError

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.14.1, 2.15.0'}

PRIVATE = ["torch._C._cudnn.getVersionInt"]


def check() -> None:
    import torch

    if torch.version.cuda and not hasattr(getattr(torch._C, "_cudnn", None), "getVersionInt"):
        raise CompatError("torch._C._cudnn.getVersionInt is gone: cuDNN's version would need a CUDA init")


def version() -> int | None:
    """cuDNN's version as torch reports it (e.g. 91900), or None where torch has no cuDNN."""
    import torch

    cudnn = getattr(torch._C, "_cudnn", None)
    if cudnn is None or not hasattr(cudnn, "getVersionInt"):
        return torch.backends.cudnn.version() if torch.version.cuda else None
    return int(cudnn.getVersionInt())
