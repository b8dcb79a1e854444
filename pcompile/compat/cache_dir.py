"""Inductor's default cache directory: `torch._inductor.runtime.cache_dir_utils.default_cache_dir`.

Why: `import torch._dynamo` (which every torch.compile does before any backend runs) calls
Inductor's `cache_dir()`, which writes the default (`/tmp/torchinductor_<user>`) into
TORCHINDUCTOR_CACHE_DIR. To tell "the user chose this directory" from "torch filled in its
default", pcompile compares against the default torch computes.

Touched (torch 2.14.1 and 2.11.0: `runtime/cache_dir_utils.py` `cache_dir()` setting the
environment variable, `default_cache_dir()` at 24/22; `_dynamo/package.py` calling it at import).
"""
from __future__ import annotations

import os

from pcompile.compat import require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.14.1, 2.15.0'}


def check() -> None:
    import torch._inductor.runtime.cache_dir_utils as utils

    require_attr(utils, "default_cache_dir", "torch._inductor.runtime.cache_dir_utils")
    require_attr(utils, "cache_dir", "torch._inductor.runtime.cache_dir_utils")


def torch_default_dir() -> str | None:
    """The directory torch uses when TORCHINDUCTOR_CACHE_DIR is unset (None if unknown here)."""
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        return os.path.abspath(default_cache_dir())
    except Exception:
        return None
