"""torch.compile's inductor wrapper: `torch._TorchCompileInductorWrapper`.

Why this API: it is what `torch.compile(m)` (and `backend="inductor"`) builds; it turns `mode`
and `options` into Inductor config patches (validating names and types, applying the compiler
bisector and the CUPTI workaround for cudagraphs) and calls `compile_fx`. pcompile uses it two
ways: `backend="pcompile"` builds one from the mode/options torch passed, so both backends treat
options identically; and `install()` wraps its `__call__` so an unchanged `torch.compile(m)`
compiles through pcompile. Subclasses (the AOTInductor wrapper) are left alone.

Touched (torch 2.14.1 and 2.11.0: `torch/__init__.py` class at 2818/2389 with
`__init__(mode, options, dynamic[, name])`, `apply_mode`, `apply_options`, `config`, and
`__call__(model_, inputs_)`, which 2.14 extends with `*, config_patches`; 2.15.0: the same at
2846, and `_TorchCompileWrapper` now passes `name=` on to custom backends such as pcompile). `compile_fx(gm,
inputs, config_patches=...)` is the fallback when the class is gone.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

from pcompile.compat import CompatError, require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.14.1, 2.15.0'}

_ORIGINAL_ATTR = "_pcompile_original"


def _cls() -> type:
    import torch

    return require_attr(torch, "_TorchCompileInductorWrapper", "torch")  # type: ignore[return-value]


def check_shape() -> None:
    """The class and its methods exist (safe while torch is still importing)."""
    cls = _cls()
    for name in ("__call__", "apply_mode", "apply_options"):
        require_attr(cls, name, "torch._TorchCompileInductorWrapper")


def check() -> None:
    check_shape()
    cls = _cls()
    try:
        wrapper = cls("default", None, None)
    except Exception as exc:
        raise CompatError(f"torch._TorchCompileInductorWrapper('default', None, None) fails: {exc}") from None
    if not isinstance(getattr(wrapper, "config", None), dict):
        raise CompatError("torch._TorchCompileInductorWrapper has no dict .config")


def make(mode: str | None, options: dict[str, Any] | None, dynamic: bool | None = None, name: str | None = None) -> Any:
    """The stock wrapper torch.compile would have built for backend="inductor".

    `name` is torch.compile(name=...): 2.15 forwards it to custom backends too (2.14 did not);
    the wrapper hands it to compile_fx as `compile_region_name`. A torch whose wrapper takes no
    name (2.11) gets none, as backend="inductor" would there."""
    cls = _cls()
    opts = dict(options) if options else None
    if name is not None and "name" in inspect.signature(cls.__init__).parameters:
        return cls(mode, opts, dynamic, name)
    return cls(mode, opts, dynamic)


def call_stock(wrapper: Any, gm: Any, example_inputs: Any, **kwargs: Any) -> Any:
    """Call the wrapper's original (unpatched) __call__."""
    call = _cls().__call__
    call = getattr(call, _ORIGINAL_ATTR, call)
    return call(wrapper, gm, example_inputs, **kwargs)


def route_through(hook: Callable[..., Any], on_build: Callable[[], None] | None = None) -> None:
    """Make `torch.compile`'s inductor wrapper call `hook(original_call, self, gm, inputs, **kw)`,
    and `on_build()` whenever torch.compile builds one (before Dynamo wraps the model)."""
    cls = _cls()
    current = cls.__call__
    if getattr(current, _ORIGINAL_ATTR, None) is not None:
        return
    original = current
    if on_build is not None:
        original_init = cls.__init__

        @functools.wraps(original_init)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            if type(self) is cls:
                try:
                    on_build()
                except Exception:
                    pass  # never break torch.compile
            original_init(self, *args, **kwargs)

        setattr(__init__, _ORIGINAL_ATTR, original_init)
        cls.__init__ = __init__

    @functools.wraps(original)
    def __call__(self: Any, model_: Any, inputs_: Any, **kwargs: Any) -> Any:
        if type(self) is not cls:  # AOTInductor and other subclasses: stock
            return original(self, model_, inputs_, **kwargs)
        return hook(original, self, model_, inputs_, **kwargs)

    setattr(__call__, _ORIGINAL_ATTR, original)
    cls.__call__ = __call__


def unroute() -> None:
    cls = _cls()
    original = getattr(cls.__call__, _ORIGINAL_ATTR, None)
    if original is not None:
        cls.__call__ = original
    original_init = getattr(cls.__init__, _ORIGINAL_ATTR, None)
    if original_init is not None:
        cls.__init__ = original_init


def routed() -> bool:
    return getattr(_cls().__call__, _ORIGINAL_ATTR, None) is not None


def import_compiler() -> None:
    """Import Inductor's compiler now, as torch.compile(backend="inductor") does when it returns."""
    import torch._inductor.compile_fx  # noqa: F401


def reset_cudagraph_trees() -> None:
    """What the stock wrapper's reset() does (torch._dynamo.reset() calls it), without importing
    cudagraph_trees where nothing used it."""
    import sys

    trees = sys.modules.get("torch._inductor.cudagraph_trees")
    reset = getattr(trees, "reset_cudagraph_trees", None) if trees else None
    if callable(reset):
        reset()


def compile_fx_fallback(gm: Any, example_inputs: Any, mode: str | None, options: dict[str, Any] | None) -> Any:
    """Stock inductor without the wrapper class: mode and options as config patches."""
    from torch._inductor import list_mode_options
    from torch._inductor.compile_fx import compile_fx

    patches: dict[str, Any] = {}
    if mode and mode != "default":
        patches.update(list_mode_options(mode))
    for key, value in (options or {}).items():
        patches[key.replace("-", "_")] = value
    return compile_fx(gm, example_inputs, config_patches=patches)
