"""Install the warm child's protection of the user's files: what writes.py describes.

Always: `torch.save` of virtual tensors writes a placeholder checkpoint (compat/warm_checkpoints.py:
shapes and dtypes, no data; it loads back during the warm), safetensors' savers skip them (a stub
stands in for the file), and both write elsewhere through the redirect. Fallback: paths.py's patches of Python's file
functions. writes.py holds the rules (which paths are the user's, where they go); this module
puts them in place, so the rules never import the patches that apply them.
"""
from __future__ import annotations

import builtins
import os
import sys
from typing import Any, Callable

from pcompile.warm import paths
from pcompile.warm.writes import Writes


def install(w: Writes, state: str | None = None) -> None:
    """Skip saves of virtual tensors; with w.redirect, also patch the file functions (paths.py)
    and, given `state`, share the redirect with child processes through that file."""
    if w.redirect:
        paths.install(w, state)
        if state:
            paths.share(w, state)
    if "torch" in sys.modules or w.redirect is False:
        _wrap_torch_save(w)
        _wrap_safetensors(w)


def _wrap_torch_save(w: Writes) -> None:
    import torch

    from pcompile.compat import warm_checkpoints
    from pcompile.compat.warm_runtime import untraced

    o_save = torch.save

    def stub(path: Any, data: bytes) -> None:
        with builtins.open(path, "wb") as fh:
            fh.write(data)

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        dest = w.target(f) if isinstance(f, (str, os.PathLike)) else f
        if w.holds_virtual(obj):
            if warm_checkpoints.save_placeholders(o_save, obj, dest, *args, **kwargs):
                w.placeholder_save("torch.save", f)
                return None
            w.skip_save("torch.save", f, stub)  # the legacy format: no placeholders there
            return None
        return o_save(obj, dest, *args, **kwargs)

    torch.save = untraced(save)  # type: ignore[assignment]


def _write_stub(path: Any, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)  # redirected already; os.open is wrapped
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _wrap_safetensors(w: Writes) -> None:
    """safetensors writes from native code by path: skip saves of virtual tensors, redirect others."""
    try:
        import safetensors.torch as st
    except ImportError:
        return
    from pcompile.compat.warm_runtime import untraced

    for name in ("save_file", "save_model"):
        original = getattr(st, name, None)
        if original is None:
            continue

        def make(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
            def saver(obj: Any, filename: Any, *args: Any, **kwargs: Any) -> Any:
                tensors = obj.state_dict() if name == "save_model" else obj
                if w.holds_virtual(tensors):
                    w.skip_save(f"safetensors.{name}", filename, _write_stub)
                    return None
                return original(obj, w.target(filename), *args, **kwargs)

            return untraced(saver)

        setattr(st, name, make(name, original))
