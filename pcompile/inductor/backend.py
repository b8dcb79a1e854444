"""The `pcompile` dynamo backend: stock Inductor with pcompile's caches underneath.

`torch.compile(m, backend="pcompile", mode=..., options=...)` reaches `pcompile_backend(gm,
example_inputs, mode=..., options=...)` (torch passes mode/options only when set; `dynamic` and
`fullgraph` are Dynamo's and never reach a backend). The backend builds exactly the inductor
wrapper `torch.compile(m, mode=..., options=...)` would have built, so mode tables, option
validation and the compiler bisector behave as with backend="inductor", and calls it inside a
pcompile compile scope. The kernels are Inductor's own: pcompile changes where artifacts are
looked up and published, never what is generated (numerics equal stock Inductor's, apart from
the backward being lowered with the forward, see compat/lazy_backward.py).
"""
from __future__ import annotations

import contextlib
import os
import sys
import re
from typing import Any, Iterator

from pcompile.warn import warn_once
from pcompile.inductor import features, hooks, private_dir, store_gateway
from pcompile import compat
from pcompile.inductor.timing import span

_ALLOWED = {"mode", "options", "dynamic", "config_patches", "name"}  # name: torch 2.15 forwards torch.compile(name=)

# torch.compile(m, backend="pcompile") imports this module (Dynamo resolves the backend's entry
# point) before it wraps m: this is the torch.compile call, when the registry's COMPILE features
# act (features.py: Inductor's compiler imported, backward ahead's worker started with the hooks).
hooks.at_torch_compile()


def normalize(gm: Any) -> None:
    """Let graph_normalize (the warm path's key equaliser) rewrite the graph."""
    try:
        from pcompile.inductor import graph_normalize

        graph_normalize.normalize_placeholder_types(gm)
    except Exception as exc:
        warn_once("normalize", f"pcompile: graph normalisation failed ({type(exc).__name__}: {exc}); "
                       "keys may differ between the warm host and this job")


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def _graph_name(gm: Any) -> tuple[str, str]:
    """(function (file:line), Dynamo's compile id) for the report: the outermost frame of the first
    node's recorded stack is the function Dynamo compiled, at its first traced line."""
    meta = getattr(gm, "meta", None) or {}
    cid = str(meta.get("dynamo_compile_id") or "")
    try:
        for node in gm.graph.nodes:
            found = _FRAME.search(str(node.meta.get("stack_trace") or ""))
            if found:
                path, line, func = found.groups()
                return f"{func} ({os.path.basename(path)}:{line})", cid
    except Exception:
        pass
    caller = _user_call_site()
    if caller:
        return caller, cid
    return str(getattr(gm, "_get_name", lambda: type(gm).__name__)()), cid


def _library_dirs() -> tuple[str, ...]:
    """Directories whose frames are no user's code: torch, pcompile, the standard library."""
    import sysconfig

    import torch

    import pcompile

    dirs = [os.path.dirname(torch.__file__), os.path.dirname(pcompile.__file__)]
    dirs += [sysconfig.get_paths().get(k, "") for k in ("stdlib", "platstdlib")]
    return tuple(os.path.join(d, "") for d in dirs if d)


def _user_call_site() -> str:
    """`called from train (train.py:120)`: the innermost frame of the user's code on this thread's
    stack, for graphs whose nodes carry no stack trace (torch records none for its own modules:
    a bare `torch.nn.Sequential` compiled). '' when the stack holds none (a worker thread)."""
    try:
        libs = _library_dirs()
        frame = sys._getframe(1)
        while frame is not None:
            path = frame.f_code.co_filename
            if not path.startswith("<") and not path.startswith(libs):
                return f"called from {frame.f_code.co_name} ({os.path.basename(path)}:{frame.f_lineno})"
            frame = frame.f_back
    except Exception:
        pass
    return ""


@contextlib.contextmanager
def compile_scope(gm: Any) -> Iterator[None]:
    """Everything pcompile wraps around one backend call (hooks assumed on)."""
    normalize(gm)
    eager: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if compat.check("lazy_backward") is None:
        from pcompile.compat import lazy_backward

        eager = lazy_backward.eager_backward()
    twins: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if compat.check("remote_cache") is None:
        from pcompile.compat import remote_cache

        twins = remote_cache.local_twins_off()
    name, cid = _graph_name(gm)
    ahead = features.handle("backward_ahead")  # its worker speculates only inside our own backend calls
    allowed = ahead.allowed() if ahead is not None else contextlib.nullcontext()
    with span("graph_compile", name=name, compile_id=cid, backend="pcompile") as ev, store_gateway.scope() as sc, eager, \
            allowed, twins:
        yield
        ev.outcome = sc.outcome
    if ahead is not None:
        ahead.scope_ended(sc.outcome)


def _stock(gm: Any, example_inputs: Any, mode: str | None, options: dict[str, Any] | None,
           dynamic: bool | None, config_patches: dict[str, Any] | None, name: str | None = None) -> Any:
    from pcompile.compat import compile_wrapper

    if compat.check("compile_wrapper") is None:
        wrapper = compile_wrapper.make(mode, options, dynamic, name)
        if config_patches:
            wrapper.config.update(config_patches)
        return compile_wrapper.call_stock(wrapper, gm, example_inputs)
    merged = dict(options or {})
    merged.update(config_patches or {})
    return compile_wrapper.compile_fx_fallback(gm, example_inputs, mode, merged)


def pcompile_backend(gm: Any, example_inputs: Any, **kwargs: Any) -> Any:
    """Dynamo backend: compile `gm` with stock Inductor, every cache layer through pcompile."""
    unknown = set(kwargs) - _ALLOWED
    if unknown:
        raise TypeError(f"pcompile backend got unexpected options {sorted(unknown)}: it takes mode= and options= "
                        "like backend='inductor'")
    mode = kwargs.get("mode")
    options = kwargs.get("options")
    dynamic = kwargs.get("dynamic")
    patches = kwargs.get("config_patches")
    name = kwargs.get("name")
    if not hooks.install_hooks() or private_dir.active():
        return _stock(gm, example_inputs, mode, options, dynamic, patches, name)
    try:
        with compile_scope(gm):
            return _stock(gm, example_inputs, mode, options, dynamic, patches, name)
    except Exception as exc:
        if not private_dir.recover(exc):
            raise
    return _stock(gm, example_inputs, mode, options, dynamic, patches, name)  # once more, in the private dir


def _reset() -> None:
    """torch._dynamo.reset() calls this, as it calls the inductor wrapper's reset."""
    from pcompile.compat import compile_wrapper

    compile_wrapper.reset_cudagraph_trees()


pcompile_backend.reset = _reset  # type: ignore[attr-defined]
