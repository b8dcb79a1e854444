"""`pcompile.install()`: make an unchanged `torch.compile(m)` compile through pcompile.

`torch.compile(m)` and `torch.compile(m, backend="inductor")` build torch's inductor wrapper and
call it once per graph; install() wraps that call (compat/compile_wrapper.py) so each graph gets
pcompile's compile scope, and turns the cache hooks on. Everything the wrapper does with mode
and options is untouched. `PCOMPILE=1` does the same from `import torch` on (see autoload.py).
"""
from __future__ import annotations

import threading
from typing import Any

from pcompile import compat
from pcompile.inductor import bytecode, hooks

_lock = threading.Lock()


def _routed(original: Any, wrapper: Any, gm: Any, example_inputs: Any, **kwargs: Any) -> Any:
    from pcompile.inductor import private_dir

    if not hooks.install_hooks() or private_dir.active():
        return original(wrapper, gm, example_inputs, **kwargs)
    from pcompile.inductor.backend import compile_scope

    try:
        with compile_scope(gm):
            return original(wrapper, gm, example_inputs, **kwargs)
    except Exception as exc:
        if not private_dir.recover(exc):
            raise
    return original(wrapper, gm, example_inputs, **kwargs)  # once more, in the private dir


def route_default_backend() -> bool:
    """Wrap torch.compile's inductor wrapper (idempotent); False if that API moved.

    Only the class's shape is checked here: this also runs while `import torch` is finishing
    (PCOMPILE=1), when building a wrapper would import Inductor too early.
    """
    from pcompile.compat import CompatError, compile_wrapper

    with _lock:
        try:
            compile_wrapper.check_shape()
        except (CompatError, AttributeError):
            return False
        compile_wrapper.route_through(_routed, on_build=hooks.at_torch_compile)
        return True


def install() -> bool:
    """Idempotent. True if pcompile now serves `torch.compile(m)`; False (warned once) if it runs stock.

    Only routes the default backend: the cache hooks (they import Inductor, and on a GPU host
    start the node's compile pool and the backward worker) turn on at the first `torch.compile`
    call, as with PCOMPILE=1. A process that never compiles pays nothing for pcompile (measured on
    the H100: a script that compiles nothing ran 2.3 s slower when install() turned them on)."""
    from pcompile.compat import gate

    if hooks.disabled_by_user() or not gate.supported():
        return False
    bytecode.enable_from_env()  # before torch._dynamo is imported
    if not route_default_backend():
        from pcompile.warn import warn_once

        warn_once("route", "pcompile: cannot route torch.compile's default backend in this torch; "
                       "use torch.compile(m, backend='pcompile') (the caches are on either way)")
        return hooks.install_hooks()  # backend="pcompile" still works: its caches must be on
    return True


def uninstall() -> None:
    """Undo install() (tests)."""
    if compat.check("compile_wrapper") is None:
        from pcompile.compat import compile_wrapper

        compile_wrapper.unroute()
    hooks.uninstall_hooks()
