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
_innermost_fn, _add_user_function, _add_function}`; torch 2.11.0 checked on the device by `check()`):
  torch._dynamo.config.caching_precompile
  torch._dynamo.package.{DiskDynamoCache, CompilePackage, PrecompileCacheEntry, DynamoCache}
  torch._dynamo.precompile_context.{PrecompileContext, DynamoCache}
  torch._dynamo.eval_frame._TorchDynamoContext.__call__ (wrapped: the backend of the
      torch.compile call being applied, for the key); torch._dynamo.eval_frame.innermost_fn
  torch._dynamo.package._hash_sourcelines (the inlined-source checksums, checked before install)
  torch._dynamo.bytecode_transformation._unique_id_counter (moved past a loaded program's names)
  torch._dynamo.codegen.PyCodegen.create_load_python_module (its id-named module globals
      recorded as the package's import sources); torch._dynamo.package.SerializedCode
  torch._dynamo.guards.CheckFunctionManager.serialize_guards, torch._dynamo.exc.PackageError
      (a frame whose guards cannot be stored is bypassed instead of failing its compile)
  torch._dynamo.package.CompilePackage.{_codes, _installed_globals}
  torch._{dynamo,functorch,inductor}.config.get_config_copy (the configs in the key)
Two torch behaviours are corrected here, both in the load path:
  - a backend that fails to deserialise raises whatever it raises, and torch's fallback then
    calls initialize() on an initialised package (AssertionError): `install` is wrapped so any
    failure leaves the package uninitialised and surfaces as the RuntimeError torch handles;
  - `load_cache_entry` deep-copies every backend into PrecompileContext: pcompile keeps the
    stored bytes instead and unpickles them again only when the package changes (a guard
    failed), so a hot start pays no copy (dynamo_entries.py).
What a stored program is and how it is read back (PrecompileCacheEntry, the backends, the source
checksums, the configs in its key) is dynamo_entries.py's; check() here runs its check too.
"""
from __future__ import annotations

import contextlib
import logging
import re
import sys
import threading
from typing import Any, Callable, Iterator

from pcompile.compat import CompatError, require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.13.0, 2.14.1, 2.15.0'}
#: Names reached through helpers or loops, which tools/private_surface.py cannot follow statically.
PRIVATE = ("torch._dynamo.config.caching_precompile", "torch._dynamo.package.DiskDynamoCache",
           "torch._dynamo.package.CompilePackage",
           "torch._dynamo.package.DynamoCache",
           "torch._dynamo.precompile_context.DynamoCache", "torch._dynamo.eval_frame._TorchDynamoContext",
           "torch._dynamo.bytecode_transformation._unique_id_counter",
           "torch._dynamo.guards.CheckFunctionManager", "torch._dynamo.exc.PackageError",
           "torch._dynamo.codegen.PyCodegen", "torch._dynamo.package.SerializedCode",
           "torch._dynamo.guards.GuardsState", "torch._C._ForceDispatchKeyGuard",
           "torch._C._dispatch_tls_local_include_set", "torch._C._dispatch_tls_local_exclude_set")

_ORIGINAL = "_pcompile_original"
_hooks: "Hooks | None" = None  # the installed hooks (install())
log = logging.getLogger("pcompile.inductor")
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

    def install_failed(self, package: Any, reason: str) -> None:  # pragma: no cover - interface
        """torch could not install a loaded program; it traces the function instead."""
        raise NotImplementedError

    def dispatch_state_for(self, package: Any) -> list[int] | None:
        """The `dispatch_state()` a loaded program was compiled under (None: this thread's)."""
        return None


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
    for name in ("install", "uninstall", "initialize", "cache_entry", "source_id", "is_initialized",
                 "_add_user_function", "_add_function"):
        require_attr(cp, name, "torch._dynamo.package.CompilePackage")
    require_attr(package, "DynamoCache", "torch._dynamo.package")
    require_attr(pctx, "DynamoCache", "torch._dynamo.precompile_context")
    import torch._dynamo.bytecode_transformation as bt

    require_attr(bt, "_unique_id_counter", "torch._dynamo.bytecode_transformation")
    import torch._dynamo.exc as dexc
    import torch._dynamo.guards as guards

    require_attr(dexc, "PackageError", "torch._dynamo.exc")
    import torch._dynamo.codegen as codegen

    require_attr(require_attr(codegen, "PyCodegen", "torch._dynamo.codegen"), "create_load_python_module",
                 "torch._dynamo.codegen.PyCodegen")
    require_attr(require_attr(package, "SerializedCode", "torch._dynamo.package"), "to_code_object",
                 "torch._dynamo.package.SerializedCode")
    require_attr(guards, "GuardsState", "torch._dynamo.guards")
    import torch

    for name in ("_ForceDispatchKeyGuard", "_dispatch_tls_local_include_set", "_dispatch_tls_local_exclude_set"):
        require_attr(torch._C, name, "torch._C")
    require_attr(torch._C.DispatchKeySet, "from_raw_repr", "torch._C.DispatchKeySet")
    cfm = require_attr(guards, "CheckFunctionManager", "torch._dynamo.guards")
    require_attr(cfm, "serialize_guards", "torch._dynamo.guards.CheckFunctionManager")
    tdc = require_attr(eval_frame, "_TorchDynamoContext", "torch._dynamo.eval_frame")
    require_attr(tdc, "__call__", "torch._dynamo.eval_frame._TorchDynamoContext")
    import inspect

    call = tdc.__call__
    source = inspect.getsource(getattr(call, _ORIGINAL, call))  # unwrapped: install() may have run already
    if "DynamoCache.load(" not in source:
        raise CompatError("torch._dynamo.eval_frame._TorchDynamoContext.__call__ no longer loads DynamoCache")
    from pcompile.compat import dynamo_entries

    dynamo_entries.check()  # what a stored program is made of: checked with the feature


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
            state = _hooks.dispatch_state_for(self) if _hooks is not None else None
            with _forced_dispatch_state(state):
                original(self, backends)
            _skip_installed_ids(self)
        except Exception as exc:
            try:
                self.uninstall()
            except Exception:
                pass
            self._initialized = False
            reason = f"{type(exc).__name__}: {str(exc)[:200]}"
            if _hooks is not None:
                try:
                    _hooks.install_failed(self, reason)
                except Exception:
                    pass
            raise RuntimeError(f"stored program does not install: {reason}") from exc

    setattr(install, _ORIGINAL, original)
    cls.install = install


def _guards_carry_dispatch_state() -> bool:
    import torch._dynamo.guards as guards

    return "local_state" in getattr(guards.GuardsState, "__dataclass_fields__", {})


def dispatch_state() -> list[int] | None:
    """This thread's dispatch-key include/exclude sets (raw), where torch does not keep them itself.

    A tensor guard folds them into the key set it expects (autocast un-excludes its key). torch
    builds a loaded program's guards at `torch.compile()`, outside the caller's autocast: before
    torch stored each guard's build state (`GuardsState.local_state`), every call under autocast
    failed them. None where torch keeps that state."""
    if _guards_carry_dispatch_state():
        return None
    import torch

    return [torch._C._dispatch_tls_local_include_set().raw_repr(), torch._C._dispatch_tls_local_exclude_set().raw_repr()]


@contextlib.contextmanager
def _forced_dispatch_state(state: list[int] | None) -> Iterator[None]:
    if not state:
        yield
        return
    import torch

    keys = torch._C.DispatchKeySet
    with torch._C._ForceDispatchKeyGuard(keys.from_raw_repr(int(state[0])), keys.from_raw_repr(int(state[1]))):
        yield


_NUMBERED = re.compile(r"^__\w*?_(\d+)(?:_[0-9a-f]{8}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{4}_[0-9a-f]{12})?$")


def _skip_installed_ids(package_: Any) -> None:
    """Move Dynamo's name counter past the names a loaded package installed.

    Dynamo numbers the globals it installs (`__builtins_dict___0`, resume functions) from a
    per-process counter; a program from another process brings names made by *its* counter, so
    the first recompile here (a guard that fails) would pick one of them and stop on
    "Name ... already exists in scope"."""
    import itertools

    import torch._dynamo.bytecode_transformation as bt

    highest = -1
    modules = {sys.modules.get(entry.python_module) for entry in package_._codes.values()}
    for module in modules | set(package_._installed_globals):
        for name in list(getattr(module, "__dict__", {})):
            found = _NUMBERED.match(name) if name.startswith("__") else None
            if found:
                highest = max(highest, int(found.group(1)))
    now = next(bt._unique_id_counter)
    bt._unique_id_counter = itertools.count(max(now + 1, highest + 1))


def install(hooks: Hooks) -> None:
    """Turn precompile packages on and route their loads and saves through `hooks` (idempotent)."""
    global _hooks
    dconfig, package, pctx, eval_frame = _modules()
    _hooks = hooks
    if isinstance(package.DynamoCache, _store_class(package)):
        package.DynamoCache._hooks = hooks
        return
    cache = _store_class(package)(hooks)
    package.DynamoCache = cache
    pctx.DynamoCache = cache
    _install_context_probe(eval_frame)
    _install_safe_install(package)
    _quiet_dropped_guards()
    _install_guard_bypass()
    _install_unnamed_function_bypass(package)
    _install_module_import_record()
    dconfig.caching_precompile = True


def _install_module_import_record() -> None:
    """Record the module globals Dynamo's codegen installs by object id (`___module_<name>_<id>_c<n>`,
    e.g. to rebuild a transformers ModelOutput) as import sources of the package.

    torch installs them in this process but does not tell the package, so a loaded program's
    bytecode would name a global that exists only in the process that compiled it (NameError
    at the first call)."""
    import torch._dynamo.codegen as codegen

    cls = codegen.PyCodegen
    original = cls.create_load_python_module
    if getattr(original, _ORIGINAL, None) is not None:
        return

    def create_load_python_module(self: Any, mod: Any) -> Any:
        inst = original(self, mod)
        name = getattr(inst, "argval", None)
        package_ = getattr(getattr(self.tx, "output", None), "package", None)
        if package_ is not None and isinstance(name, str) and name.startswith("___module_"):
            try:
                package_.add_import_source(name, mod.__name__)
            except Exception:  # no current entry: unresolved_globals() keeps such a program out
                pass
        return inst

    setattr(create_load_python_module, _ORIGINAL, original)
    cls.create_load_python_module = create_load_python_module


_BY_ID = re.compile(r"_\d{6,}_c\d+$")


def _code_names(code: Any) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names |= _code_names(const)
    return names


def unresolved_globals(entry: Any) -> list[str]:
    """Globals named by object id in a program's bytecode that installing it would not define:
    such a program can only run in the process that compiled it."""
    _, package, _, _ = _modules()
    missing: set[str] = set()
    for code in entry.dynamo.codes:
        if code.bypassed:
            continue
        for guarded in code.guarded_codes:
            names = _code_names(package.SerializedCode.to_code_object(guarded.dynamo_code))
            missing |= {n for n in names if _BY_ID.search(n) and n not in code.import_sources}
    return sorted(missing)


def _install_unnamed_function_bypass(package: Any) -> None:
    """A frame whose function torch cannot name (a function reached through a property, e.g.
    transformers' `self.loss_function`) is compiled and run, just not stored: torch raises
    PackageError at the frame's start and fails the compile."""
    import inspect

    import torch._dynamo.exc as dexc

    cls = package.CompilePackage
    original = cls._add_user_function
    if getattr(original, _ORIGINAL, None) is not None:
        return

    def _add_user_function(self: Any, code: Any) -> None:
        try:
            original(self, code)
        except dexc.PackageError as exc:
            reason = f"cannot name {code.co_name} ({code.co_filename}:{code.co_firstlineno})"
            bypassed[reason] = bypassed.get(reason, 0) + 1
            module = inspect.getmodule(code)
            name = module.__name__ if module is not None else self._innermost_fn.__module__
            self._add_function(code, name)
            self._codes[code].bypassed = True
            log.debug("pcompile: frame not stored: %s", exc)

    setattr(_add_user_function, _ORIGINAL, original)
    cls._add_user_function = _add_user_function


#: why guards of a frame could not be stored, per reason (programs.py reports them)
bypassed: dict[str, int] = {}


def _install_guard_bypass() -> None:
    """A frame whose guards cannot be serialised is compiled and run, just not stored.

    torch marks the package entry bypassed but then asserts the guards it did not produce
    (convert_frame: "check_fn.guards_state must not be None") and fails the compile; here the
    bypass returns empty guards, which the bypassed entry ignores."""
    import torch._dynamo.exc as dexc
    import torch._dynamo.guards as guards

    cls = guards.CheckFunctionManager
    original = cls.serialize_guards
    if getattr(original, _ORIGINAL, None) is not None:
        return

    def serialize_guards(self: Any, builder: Any, sorted_guards: Any, output_graph: Any) -> bytes:
        try:
            return original(self, builder, sorted_guards, output_graph)
        except dexc.PackageError as exc:
            reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            bypassed[reason] = bypassed.get(reason, 0) + 1
            bypass = getattr(output_graph, "bypass_package", None)
            if callable(bypass):
                bypass(f"guards cannot be stored: {reason}")
            return b""

    setattr(serialize_guards, _ORIGINAL, original)
    cls.serialize_guards = serialize_guards


class _DroppedGuards(logging.Filter):
    """torch warns once per ID-based guard it leaves out of a package (dozens per model); the
    drop is by design (programs.py says why it stays safe), so count instead of printing."""

    dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if "is dropped with caching_precompile=True" in str(record.msg):
            _DroppedGuards.dropped += 1
            return False
        return True


class _FailedLoad(logging.Filter):
    """torch logs a traceback when a loaded program does not install; pcompile has already said
    why in one line (Hooks.install_failed)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Failed to load entry from dynamo cache" not in str(record.msg)


def _quiet_dropped_guards() -> None:
    for name, cls in (("torch._dynamo.guards", _DroppedGuards), ("torch._dynamo.eval_frame", _FailedLoad)):
        logger = logging.getLogger(name)
        if not any(isinstance(f, cls) for f in logger.filters):
            logger.addFilter(cls())


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
            try:
                super().record_package(package_)
            except Exception as exc:  # never fail the compile over bookkeeping for a later job
                reason = f"{type(exc).__name__}: {str(exc)[:160]}"
                bypassed[reason] = bypassed.get(reason, 0) + 1
                return
            self._hooks.changed(package_)

        def write(self, cache_entry: Any, path: str) -> None:
            pass  # save_cache_artifacts(): pcompile publishes on record_package instead

    _classes[id(package)] = StoreDynamoCache
    return StoreDynamoCache
