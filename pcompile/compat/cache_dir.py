"""Inductor's default cache directory: `torch._inductor.runtime.cache_dir_utils.default_cache_dir`.

Why: `import torch._dynamo` (which every torch.compile does before any backend runs) calls
Inductor's `cache_dir()`, which writes the default (`/tmp/torchinductor_<user>`) into
TORCHINDUCTOR_CACHE_DIR. To tell "the user chose this directory" from "torch filled in its
default", pcompile compares against the default torch computes.

The default is computed without importing Inductor: `cache_dir_utils` is torch-free by design
("Factoring out to file without torch dependencies"), so while `torch._inductor` is not imported
it is loaded from its file. Importing the package instead cost every `import torch` under
PCOMPILE=1 with TORCHINDUCTOR_CACHE_DIR set 1.6-1.9 s here and 3-4 s on the H200 host (the
autoload asks at the end of `import torch`), in processes that never compile too.

Touched (torch 2.14.1 and 2.11.0: `runtime/cache_dir_utils.py` `cache_dir()` setting the
environment variable, `default_cache_dir()` at 24/22; `_dynamo/package.py` calling it at import;
`_inductor/utils.py` `clear_caches()`, which empties the in-memory code caches registered with
`clear_on_fresh_cache` (CppCodeCache, PyCodeCache, ...): `forget_paths`).
"""
from __future__ import annotations

import os
import sys
from types import ModuleType

from pcompile.compat import require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.14.1, 2.15.0'}


_MODULE = "torch._inductor.runtime.cache_dir_utils"


def check() -> None:
    import torch._inductor.runtime.cache_dir_utils as utils

    require_attr(utils, "default_cache_dir", _MODULE)
    require_attr(utils, "cache_dir", _MODULE)
    require_attr(_standalone(), "default_cache_dir", f"{_MODULE} (loaded from its file)")


def _standalone() -> ModuleType:
    """torch's cache_dir_utils.py, executed as a module of its own, without Inductor's package."""
    import importlib.util

    import torch

    path = os.path.join(os.path.dirname(torch.__file__), "_inductor", "runtime", "cache_dir_utils.py")
    spec = importlib.util.spec_from_file_location("pcompile._torch_cache_dir_utils", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def torch_default_dir() -> str | None:
    """The directory torch uses when TORCHINDUCTOR_CACHE_DIR is unset (None if unknown here)."""
    try:
        utils = sys.modules.get(_MODULE) or _standalone()
        return os.path.abspath(utils.default_cache_dir())
    except Exception:
        return None


def forget_paths() -> None:
    """Inductor's in-memory code caches map a source to the file it wrote under the cache dir of
    that moment; after the dir moved (private_dir.py: the cache dir is full), a retried compile
    would reuse those paths and fail there again ("ld: final link failed: No space left on
    device"). Emptied, the retry writes under the new dir. Nothing to forget before Inductor's
    utils are imported."""
    utils = sys.modules.get("torch._inductor.utils")
    if utils is None:
        return
    clear = getattr(utils, "clear_caches", None)
    if callable(clear):
        clear()
