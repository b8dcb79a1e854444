"""Python bytecode of torch's modules, kept under pcompile's cache dir where Python keeps none.

Why: a job's first compiled call imports `torch._dynamo` and Inductor. Where Python may not write
bytecode beside the sources (`PYTHONDONTWRITEBYTECODE=1`, which many container images set, or a
read-only site-packages), every process of every rank compiles those modules from source again,
on every start. On the H200 machine (its image sets it) that import was 5.3 s + 3.4 s, and
1.0 s + 1.1 s with the bytecode kept: more than Dynamo's trace, which programs already skip.

Python's own `sys.pycache_prefix` keeps `.pyc` files in a separate tree instead of `__pycache__`
folders beside the sources. pcompile points it at CACHE_DIR/bytecode, so the first process writes
them and every later one reads them, the ranks and compile workers it starts too (through
`PYTHONPYCACHEPREFIX`, so a torchrun rank's own `import torch` reads them as well). Python checks
each file against its source (mtime and size) as it checks any `.pyc`, so an edited or upgraded
module is compiled again; nothing pcompile stores depends on these files, and nothing is ever
written beside a source. Where torch's bytecode is already kept, nothing changes.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from pcompile.settings import BYTECODE, DISABLE

FOLDER = "bytecode"
ENV_PREFIX = "PYTHONPYCACHEPREFIX"
#: a module of torch's that the first compiled call imports: whether its bytecode is kept stands for the rest
PROBE = ("_dynamo", "convert_frame.py")


def folder(cache_dir: Path) -> Path:
    return cache_dir / FOLDER


def _torch_dir() -> Path | None:
    module = sys.modules.get("torch")  # at the autoload, torch is still being imported: no find_spec
    origin = getattr(module, "__file__", None)
    if origin is None:
        spec = importlib.util.find_spec("torch")
        origin = spec.origin if spec is not None else None
    return Path(origin).parent if origin else None


def python_keeps_torch_bytecode() -> bool:
    """True when Python already has bytecode for torch's modules (the probe's `.pyc` beside it is
    fresh, as in an image compiled at build time), or will write it there itself."""
    torch_dir = _torch_dir()
    return True if torch_dir is None else keeps_bytecode(torch_dir.joinpath(*PROBE))


def keeps_bytecode(source: Path) -> bool:
    cached = Path(source.parent, "__pycache__", f"{source.stem}.{sys.implementation.cache_tag}.pyc")
    try:
        if cached.stat().st_mtime >= source.stat().st_mtime:
            return True
    except OSError:
        pass
    if sys.dont_write_bytecode:
        return False
    return os.access(cached.parent if cached.parent.exists() else source.parent, os.W_OK)


def enable(cache_dir: Path) -> Path | None:
    """Keep bytecode under `cache_dir` when `PCOMPILE_BYTECODE` asks for it (by default: when
    Python keeps none for torch's modules). Returns the folder, or None where nothing changed.
    A folder that cannot be made or written leaves Python as it was: a start-up aid must not fail a
    job (an invalid `PCOMPILE_BYTECODE` value is refused like any other setting's)."""
    wanted = BYTECODE.get()
    if wanted is False or DISABLE.get():  # PCOMPILE_DISABLE: stock in every respect, for A/B comparisons
        return None
    target = folder(cache_dir)
    current = sys.pycache_prefix
    if current is not None and Path(current) != target:
        return None  # the user chose a prefix of their own
    if current is None and wanted is None and python_keeps_torch_bytecode():
        return None
    try:
        target.mkdir(parents=True, exist_ok=True)
        if not os.access(target, os.W_OK):
            return None
    except OSError:
        return None
    sys.pycache_prefix = str(target)
    sys.dont_write_bytecode = False  # writes go to the prefix tree only, never beside a source
    os.environ[ENV_PREFIX] = str(target)
    return target


def enable_from_env() -> Path | None:
    """`enable` for the cache dir the environment names (install(), the warm child)."""
    from pcompile.config import Settings

    try:
        return enable(Settings.from_env().cache_dir)
    except OSError:
        return None
