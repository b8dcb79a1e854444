"""Install the warm child's protection of the user's files: what writes.py describes.

Always: `torch.save` and safetensors' `save_file`/`save_model` of virtual tensors write a placeholder
checkpoint (compat/warm_checkpoints.py, safetensors_placeholders.py: shapes and dtypes, no data; it
loads back during the warm), and both write elsewhere through the redirect. Fallback: paths.py's patches of Python's file
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


def _wrap_safetensors(w: Writes) -> None:
    """safetensors writes from native code by path: virtual tensors get a placeholder file
    (safetensors_placeholders.py), others are redirected."""
    try:
        import safetensors.torch as st
    except ImportError:
        return
    from pcompile.compat.warm_runtime import untraced
    from pcompile.warm import safetensors_placeholders

    for name in ("save_file", "save_model"):
        original = getattr(st, name, None)
        if original is None:
            continue

        def make(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
            def saver(obj: Any, filename: Any, *args: Any, **kwargs: Any) -> Any:
                # save_model calls the module's save_file (this wrapper) with its de-duplicated tensors
                if name == "save_file" and w.holds_virtual(obj):
                    metadata = kwargs.get("metadata", args[0] if args else None)
                    safetensors_placeholders.write(obj, w.target(filename), metadata)
                    w.placeholder_save(f"safetensors.{name}", filename)
                    return None
                return original(obj, w.target(filename), *args, **kwargs)

            return untraced(saver)

        setattr(st, name, make(name, original))
