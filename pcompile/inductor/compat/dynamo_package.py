"""Dynamo's precompile packages: `torch._dynamo.package` (CompilePackage, DynamoCache) and
`torch._dynamo.precompile_context.PrecompileContext`, with `config.caching_precompile` on.

Why this API: it is the one place where torch itself saves everything a compiled frame needs
without tracing again: the transformed bytecode of the frame and of its resume functions, the
guards (serialised; the ID-based ones are dropped, see programs.py for why that stays safe),
the source checksums of every inlined function, and each graph's backend as a bundled
AOTAutograd entry (forward, backward and Inductor's compiled graphs inline). torch decides
when a package is loaded (`_TorchDynamoContext.__call__`, i.e. at `torch.compile(m)`) and when it
changes (after every frame conversion, `DynamoCache.record_package`); pcompile replaces the
object behind both (`DynamoCache`) so packages live in its verified store instead of an
unverified pickle under Inductor's cache dir.

Touched (torch 2.14.1 and 2.15.0 read side by side: `_dynamo/eval_frame.py` __call__ loading
`DynamoCache.load(fn.forward or fn)` then `package.initialize` + `package.install`, falling back
on RuntimeError only; `convert_frame.py` calling `DynamoCache.record_package(package)` after each
conversion; `precompile_context.py` importing DynamoCache by name;
`PrecompileContext._backend_artifacts_by_key`; `PrecompileCacheEntry.from_cache_entry`;
`CompilePackage.{install, uninstall, initialize, cache_entry, source_id, _initialized,
_innermost_fn}`; torch 2.11.0 checked on the device by `check()`):
  torch._dynamo.config.caching_precompile
  torch._dynamo.package.{DiskDynamoCache, CompilePackage, PrecompileCacheEntry, DynamoCache}
  torch._dynamo.precompile_context.{PrecompileContext, DynamoCache}
  torch._dynamo.eval_frame._TorchDynamoContext.__call__ (wrapped: the backend of the
      torch.compile call being applied, for the key); torch._dynamo.eval_frame.innermost_fn
  torch._dynamo.package._hash_sourcelines (the inlined-source checksums, checked before install)
  torch._{dynamo,functorch,inductor}.config.get_config_copy (the configs in the key)
Two torch behaviours are corrected here, both in the load path:
  - a backend that fails to deserialise raises whatever it raises, and torch's fallback then
    calls initialize() on an initialised package (AssertionError): `install` is wrapped so any
    failure leaves the package uninitialised and surfaces as the RuntimeError torch handles;
  - `load_cache_entry` deep-copies every backend into PrecompileContext: the loaded entry is
    recorded as is (nothing mutates it), so a hot start pays no copy.
"""
from __future__ import annotations

import logging
import pickle
import threading
from typing import Any, Callable

from pcompile.inductor.compat import CompatError, require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.14.1, 2.15.0'}
#: Names reached through helpers or loops, which tools/private_surface.py cannot follow statically.
PRIVATE = ("torch._dynamo.config.caching_precompile", "torch._dynamo.package.DiskDynamoCache",
           "torch._dynamo.package.CompilePackage", "torch._dynamo.package.PrecompileCacheEntry",
           "torch._dynamo.package.DynamoCache", "torch._dynamo.precompile_context.PrecompileContext",
           "torch._dynamo.precompile_context.DynamoCache", "torch._dynamo.eval_frame._TorchDynamoContext",
           "torch._dynamo.config.get_config_copy", "torch._functorch.config.get_config_copy",
           "torch._inductor.config.get_config_copy")

_ORIGINAL = "_pcompile_original"
_tls = threading.local()


class Hooks:
    """What pcompile does at the two moments torch hands it a package (programs.py)."""

    def load(self, fn: Callable[..., Any], backend: Any, context: dict[str, Any]) -> Any | None:  # pragma: no cover
        """A verified `PrecompileCacheEntry` for `fn` compiled by `backend` with the torch.compile
        flags `context` (fullgraph, ...), or None (trace as usual)."""
        raise NotImplementedError

    def changed(self, package: Any) -> None:  # pragma: no cover - interface
        """`package` gained frames, guards or backends (after a frame conversion)."""
        raise NotImplementedError


def _modules() -> tuple[Any, Any, Any, Any]:
    import torch._dynamo.config as dconfig
    import torch._dynamo.eval_frame as eval_frame
    import torch._dynamo.package as package
    import torch._dynamo.precompile_context as precompile_context

    return dconfig, package, precompile_context, eval_frame


def check() -> None:
    dconfig, package, pctx, eval_frame = _modules()
    require_attr(dconfig, "caching_precompile", "torch._dynamo.config")
    disk = require_attr(package, "DiskDynamoCache", "torch._dynamo.package")
    for name in ("load", "record_package", "load_cache_entry", "read", "write"):
        require_attr(disk, name, "torch._dynamo.package.DiskDynamoCache")
    cp = require_attr(package, "CompilePackage", "torch._dynamo.package")
    for name in ("install", "uninstall", "initialize", "cache_entry", "source_id", "is_initialized"):
        require_attr(cp, name, "torch._dynamo.package.CompilePackage")
    entry = require_attr(package, "PrecompileCacheEntry", "torch._dynamo.package")
    require_attr(entry, "from_cache_entry", "torch._dynamo.package.PrecompileCacheEntry")
    require_attr(package, "DynamoCache", "torch._dynamo.package")
    ctx = require_attr(pctx, "PrecompileContext", "torch._dynamo.precompile_context")
    if not isinstance(getattr(ctx, "_backend_artifacts_by_key", None), dict):
        raise CompatError("torch._dynamo.precompile_context.PrecompileContext._backend_artifacts_by_key is not a dict")
    require_attr(pctx, "DynamoCache", "torch._dynamo.precompile_context")
    require_attr(package, "_hash_sourcelines", "torch._dynamo.package")
    require_attr(eval_frame, "innermost_fn", "torch._dynamo.eval_frame")
    fields = [f.name for f in __import__("dataclasses").fields(entry)]
    if fields[:2] != ["dynamo", "backends"]:
        raise CompatError(f"torch._dynamo.package.PrecompileCacheEntry fields are {fields}, not dynamo, backends")
    tdc = require_attr(eval_frame, "_TorchDynamoContext", "torch._dynamo.eval_frame")
    require_attr(tdc, "__call__", "torch._dynamo.eval_frame._TorchDynamoContext")
    import inspect

    source = inspect.getsource(tdc.__call__)
    if "DynamoCache.load(" not in source:
        raise CompatError("torch._dynamo.eval_frame._TorchDynamoContext.__call__ no longer loads DynamoCache")


def current_backend() -> tuple[Any, dict[str, Any]] | None:
    """(backend, torch.compile flags) of the torch.compile(...) being applied on this thread."""
    return getattr(_tls, "backend", None)


_CONTEXT_FLAGS = ("fullgraph", "error_on_graph_break", "export", "_dynamic")


def _orig_backend(callback: Any) -> Any:
    """The user's backend behind Dynamo's callback wrappers (catch_errors -> ConvertFrame -> it)."""
    seen = 0
    while callback is not None and hasattr(callback, "_torchdynamo_orig_backend") and seen < 8:
        callback = getattr(callback, "_torchdynamo_orig_backend")
        seen += 1
    return callback


def _install_context_probe(eval_frame: Any) -> None:
    cls = eval_frame._TorchDynamoContext
    original = cls.__call__
    if getattr(original, _ORIGINAL, None) is not None:
        return

    def __call__(self: Any, fn: Any) -> Any:
        previous = getattr(_tls, "backend", None)
        flags = {name.lstrip("_"): getattr(self, name) for name in _CONTEXT_FLAGS if hasattr(self, name)}
        _tls.backend = _orig_backend(getattr(self, "callback", None)), flags
        try:
            return original(self, fn)
        finally:
            _tls.backend = previous

    setattr(__call__, _ORIGINAL, original)
    cls.__call__ = __call__


def _install_safe_install(package: Any) -> None:
    cls = package.CompilePackage
    original = cls.install
    if getattr(original, _ORIGINAL, None) is not None:
        return

    def install(self: Any, backends: Any) -> None:
        try:
            original(self, backends)
        except Exception as exc:
            try:
                self.uninstall()
            except Exception:
                pass
            self._initialized = False
            raise RuntimeError(f"stored program does not install: {type(exc).__name__}: {exc}") from exc

    setattr(install, _ORIGINAL, original)
    cls.install = install


def install(hooks: Hooks) -> None:
    """Turn precompile packages on and route their loads and saves through `hooks` (idempotent)."""
    dconfig, package, pctx, eval_frame = _modules()
    if isinstance(package.DynamoCache, _store_class(package)):
        package.DynamoCache._hooks = hooks
        return
    cache = _store_class(package)(hooks)
    package.DynamoCache = cache
    pctx.DynamoCache = cache
    _install_context_probe(eval_frame)
    _install_safe_install(package)
    _quiet_dropped_guards()
    dconfig.caching_precompile = True


class _DroppedGuards(logging.Filter):
    """torch warns once per ID-based guard it leaves out of a package (dozens per model); the
    drop is by design (programs.py says why it stays safe), so count instead of printing."""

    dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if "is dropped with caching_precompile=True" in str(record.msg):
            _DroppedGuards.dropped += 1
            return False
        return True


def _quiet_dropped_guards() -> None:
    logger = logging.getLogger("torch._dynamo.guards")
    if not any(isinstance(f, _DroppedGuards) for f in logger.filters):
        logger.addFilter(_DroppedGuards())


def dropped_guards() -> int:
    return _DroppedGuards.dropped


def installed() -> bool:
    _, package, _, _ = _modules()
    return isinstance(package.DynamoCache, _store_class(package))


_classes: dict[int, type] = {}


def _store_class(package: Any) -> type:
    found = _classes.get(id(package))
    if found is not None:
        return found
    base = package.DiskDynamoCache

    class StoreDynamoCache(base):  # type: ignore[misc, valid-type]
        """torch's DynamoCache with pcompile's store behind load and record_package."""

        def __init__(self, hooks: Hooks) -> None:
            super().__init__("")
            self._hooks = hooks

        def load(self, fn: Callable[..., Any]) -> Any:
            backend, flags = current_backend() or (None, {})
            return self._hooks.load(fn, backend, flags)

        def record_package(self, package_: Any) -> None:
            super().record_package(package_)
            self._hooks.changed(package_)

        def write(self, cache_entry: Any, path: str) -> None:
            pass  # save_cache_artifacts(): pcompile publishes on record_package instead

    _classes[id(package)] = StoreDynamoCache
    return StoreDynamoCache


def entry_for(package_: Any) -> Any | None:
    """The package with its backends, ready to serialise; None if a backend is not ready yet
    (a lazily lowered backward records its bundled entry at the first .backward())."""
    _, package, pctx, _ = _modules()
    cache_entry = package_.cache_entry()
    backends = pctx.PrecompileContext._backend_artifacts_by_key
    if any(b not in backends for b in cache_entry.backend_ids):
        return None
    return package.PrecompileCacheEntry.from_cache_entry(cache_entry, backends)


def source_id(package_: Any) -> str:
    return str(package_.source_id)


def innermost(package_: Any) -> Any:
    return package_._innermost_fn


def dumps(entry: Any) -> bytes:
    return pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)


def loads(data: bytes) -> Any:
    """Unpickle a *verified* entry and record its backends for later saves of the same package."""
    _, package, pctx, _ = _modules()
    entry = pickle.loads(data)
    if not isinstance(entry, package.PrecompileCacheEntry):
        raise CompatError(f"a stored program is a {type(entry).__name__}, not a PrecompileCacheEntry")
    for backend_id, backend in entry.backends.items():
        pctx.PrecompileContext._backend_artifacts_by_key[backend_id] = backend
    return entry


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
