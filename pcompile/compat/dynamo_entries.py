"""A stored program: Dynamo's `PrecompileCacheEntry` made from a package, pickled, checked and
read back for install (the entry half of dynamo_package.py, which hooks torch's DynamoCache).

Why this API: `PrecompileCacheEntry.from_cache_entry(cache_entry, backends)` is how torch itself
bundles a package with the AOTAutograd backends `PrecompileContext` collected; its own load path
checks versions (`check_versions`) and inlined sources (`_hash_sourcelines`) before install, which
pcompile runs ahead so a stale program is refused with one line.

Touched (torch 2.11.0, 2.13.0, 2.14.1, 2.15.0, as dynamo_package.py):
  torch._dynamo.package.PrecompileCacheEntry (.from_cache_entry; fields dynamo, backends)
  torch._dynamo.precompile_context.PrecompileContext._backend_artifacts_by_key
  torch._dynamo.package._hash_sourcelines; torch._dynamo.eval_frame.innermost_fn
  torch._{dynamo,functorch,inductor}.config.get_config_copy (the configs in the key)
  `load_cache_entry` deep-copies every backend into PrecompileContext: pcompile keeps the stored
  bytes instead and unpickles them again only when the package changes (`loads`, `entry_for`).
"""
from __future__ import annotations

import dataclasses
import pickle
from typing import Any

from pcompile.compat import CompatError, require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.13.0, 2.14.1, 2.15.0'}
#: Names reached through helpers, which tools/private_surface.py cannot follow statically.
PRIVATE = ("torch._dynamo.package.PrecompileCacheEntry", "torch._dynamo.precompile_context.PrecompileContext",
           "torch._dynamo.config.get_config_copy", "torch._functorch.config.get_config_copy",
           "torch._inductor.config.get_config_copy")


def _modules() -> tuple[Any, Any, Any, Any]:
    import torch._dynamo.config as dconfig
    import torch._dynamo.eval_frame as eval_frame
    import torch._dynamo.package as package
    import torch._dynamo.precompile_context as precompile_context

    return dconfig, package, precompile_context, eval_frame


def check() -> None:
    _, package, pctx, eval_frame = _modules()
    entry = require_attr(package, "PrecompileCacheEntry", "torch._dynamo.package")
    require_attr(entry, "from_cache_entry", "torch._dynamo.package.PrecompileCacheEntry")
    ctx = require_attr(pctx, "PrecompileContext", "torch._dynamo.precompile_context")
    if not isinstance(getattr(ctx, "_backend_artifacts_by_key", None), dict):
        raise CompatError("torch._dynamo.precompile_context.PrecompileContext._backend_artifacts_by_key is not a dict")
    require_attr(package, "_hash_sourcelines", "torch._dynamo.package")
    require_attr(eval_frame, "innermost_fn", "torch._dynamo.eval_frame")
    fields = [f.name for f in dataclasses.fields(entry)]
    if fields[:2] != ["dynamo", "backends"]:
        raise CompatError(f"torch._dynamo.package.PrecompileCacheEntry fields are {fields}, not dynamo, backends")
    import torch._dynamo.config as dconfig
    import torch._functorch.config as fconfig
    import torch._inductor.config as iconfig

    for module in (dconfig, fconfig, iconfig):
        require_attr(module, "get_config_copy", module.__name__)


def entry_for(package_: Any) -> Any | None:
    """The package with its backends, ready to serialise; None if a backend is not ready yet
    (a lazily lowered backward records its bundled entry at the first .backward())."""
    _, package, pctx, _ = _modules()
    cache_entry = package_.cache_entry()
    backends = pctx.PrecompileContext._backend_artifacts_by_key
    _restore_pristine(cache_entry.backend_ids)
    if any(b not in backends for b in cache_entry.backend_ids):
        return None
    return package.PrecompileCacheEntry.from_cache_entry(cache_entry, backends)


def source_id(package_: Any) -> str:
    return str(package_.source_id)


def innermost(package_: Any) -> Any:
    return package_._innermost_fn


def dumps(entry: Any) -> bytes:
    return pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)


#: backend id -> the stored program bytes that hold a pristine copy of it (see loads)
_pristine: dict[str, bytes] = {}


def loads(data: bytes) -> Any:
    """Unpickle a *verified* entry.

    Its backends are deserialised for this process (install mutates them: loaded modules hang
    off them afterwards), so they are not the ones a later save may pickle: the bytes are kept
    and unpickled again only if this package changes and must be stored anew."""
    _, package, _, _ = _modules()
    entry = pickle.loads(data)
    if not isinstance(entry, package.PrecompileCacheEntry):
        raise CompatError(f"a stored program is a {type(entry).__name__}, not a PrecompileCacheEntry")
    for backend_id in entry.backends:
        _pristine[str(backend_id)] = data
    return entry


def _restore_pristine(backend_ids: Any) -> None:
    _, _, pctx, _ = _modules()
    backends = pctx.PrecompileContext._backend_artifacts_by_key
    for data in {id(d): d for b in backend_ids if b not in backends and (d := _pristine.get(str(b)))}.values():
        for backend_id, backend in pickle.loads(data).backends.items():
            backends.setdefault(backend_id, backend)


def check_entry(entry: Any) -> None:
    """Raise RuntimeError if `entry` was made by another python/torch/GPU (torch's own check)."""
    entry.dynamo.check_versions()


def backend_ids(entry: Any) -> list[str]:
    return sorted(str(b) for b in entry.dynamo.backend_ids)


def innermost_fn(fn: Any) -> Any:
    """The function torch.compile keys a package on (unwrapping compiled and bound wrappers)."""
    from torch._dynamo.eval_frame import innermost_fn as inner

    if hasattr(fn, "forward") and not hasattr(fn, "__code__"):
        fn = fn.forward
    fn = inner(fn)
    return getattr(fn, "__func__", fn)


def config_copies() -> dict[str, dict[str, Any]]:
    """Dynamo's, AOTAutograd's and Inductor's configs as plain dicts (what a compile reads)."""
    import torch._dynamo.config as dconfig
    import torch._functorch.config as fconfig
    import torch._inductor.config as iconfig

    return {name: dict(module.get_config_copy()) for name, module in
            (("dynamo", dconfig), ("functorch", fconfig), ("inductor", iconfig))}


def changed_sources(entry: Any) -> str | None:
    """The first inlined function whose source differs from when `entry` was compiled, or None
    (torch's own check at install, run here so a stale program is refused with one line)."""
    import importlib

    from torch._dynamo.package import _hash_sourcelines

    for code in entry.dynamo.source_info.inlined_sources:
        try:
            module = importlib.import_module(code.module)
            checksum = _hash_sourcelines(module, code.firstlineno, code.lastlineno)
        except Exception as exc:
            return f"{code.module} ({type(exc).__name__})"
        if checksum != code.checksum:
            return f"{code.module} lines {code.firstlineno}-{code.lastlineno}"
    return None


class _Ready:
    """A backend deserialised ahead of install (so a bad one is refused before torch sees it)."""

    def __init__(self, fn: Any) -> None:
        self._fn = fn

    def after_deserialization(self) -> Any:
        return self._fn


def deserialize_backends(entry: Any) -> Any:
    """A copy of `entry` whose backends are already deserialised (install only installs)."""
    _, package, _, _ = _modules()
    ready = {backend_id: _Ready(backend.after_deserialization()) for backend_id, backend in entry.backends.items()}
    return package.PrecompileCacheEntry(dynamo=entry.dynamo, backends=ready)


def guarded_count(package_or_entry: Any) -> int:
    """How many guarded versions of its frames a package (or a stored program) holds."""
    codes = package_or_entry.dynamo.codes if hasattr(package_or_entry, "dynamo") else package_or_entry._codes.values()
    return sum(len(code.guarded_codes) for code in codes)
