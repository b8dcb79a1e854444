"""Dynamo's own precompile cache (`torch._dynamo.config.caching_precompile`): a restart skips Dynamo.

Why this API: a hot restart's floor is Dynamo tracing every frame again (RESULTS.md: 6.3 of a 9.5 s
GPT-2 first step), which no FX/AOTAutograd hit removes. Torch can serialise what Dynamo produced for
a `torch.compile`d function (transformed bytecode per frame, its guards, and the compiled callables
as bundled AOTAutograd entries) and install it again at the function's first call: a `CompilePackage`
saved through `DynamoCache`. Stock never saves one unless the user calls `save_cache_artifacts()`,
keys it by the function alone (not by the compile's options or the device), and reads it back
unverified. pcompile keeps torch's machinery and replaces exactly those three parts, through the
`DynamoCache` instance's own methods: `load(fn)` and `write(entry, key)` go to the caller's
functions (the store, with pcompile's key), and `record_package` (called after each frame Dynamo
converts) saves the package at once, so a job killed mid-run still leaves its programs behind.

Torch bug carried here: a package's install puts its globals (`__builtins_dict___N`, resume
functions) into the module under the names of the process that saved it, and Dynamo's name counter in
this process starts again at 0, so the first guard failure after a load re-traced into a name
already taken (`AssertionError: Name '__builtins_dict___0' already exists in scope`, torch 2.14.1):
after each install the counter is moved past every number the package used.

Never a failed compile: torch calls the package's recording methods (`code_context`,
`add_guarded_code`, `add_inlined_source`, `add_resume_function`, ...) in the middle of converting a
frame, outside any try, so whatever they raise fails the user's compile, e.g. `PackageError: Cannot
resolve a fully qualified name` for a frame that starts in a `property` getter (transformers'
`loss_function`, torch 2.11 and 2.14.1). Each of them runs guarded here: an error marks the package
spoiled (`spoiled(pkg)`: never saved) and the compile goes on as without programs. Loading is
guarded the same way: torch only catches a RuntimeError there, and then re-initialises a package
already initialised (AssertionError), so any error while a stored program is read or installed gives
a fresh package (Dynamo traces the function) instead.

Touched (torch 2.14.1 and 2.11.0: `_dynamo/config.py` caching_precompile; `_dynamo/package.py`
DynamoCache (a DiskDynamoCache: load/write/record_package/path_prefix), CompilePackage (__init__,
initialize, install, uninstall, code_context, the recording methods (`_recording`: 2.15 renamed
bypass_current_entry to bypass_current_compile), _innermost_fn, _current_entry, _codes and its
entries' python_module) and source_id_from_fn, PrecompileCacheEntry.from_cache_entry;
`_dynamo/precompile_context.py` PrecompileContext._backend_artifacts_by_key;
`_dynamo/bytecode_transformation.py` _unique_id_counter; `_dynamo/eval_frame.py`
`_OptimizeContext.__call__` calling DynamoCache.load(fn) with the context as `self`, whose
`callback._torchdynamo_orig_backend` is the compile's backend). Torch's other gaps, each closed in
a module of its own: programs_aot_entries, and `_EXTRAS` (ddp_programs, program_wrapped_functions,
program_module_globals, program_property_code, program_generated_code).
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import re
import sys
import types
from typing import Any, Callable

from pcompile.compat import (CompatError, ddp_programs, program_generated_code, program_module_globals,
                             program_property_code, program_wrapped_functions, programs_aot_entries, require_attr)

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.14.1, 2.15.0'}

_NUMBER = re.compile(r"_(\d+)")
_saved: dict[str, Any] = {}
_SPOILED = "_pcompile_spoiled"  # attribute on a CompilePackage: why it must never be saved
_FELL_BACK = "_pcompile_fell_back"  # attribute: its stored program was refused, it starts fresh

#: The CompilePackage methods Dynamo calls while it converts a frame (each may raise on code it
#: cannot name or serialise); code_context is a context manager and is wrapped apart.
_RECORDING_ALL = ("add_guarded_code", "add_inlined_source", "update_device_type", "add_resume_function",
                  "add_import_source", "add_backend_id")
#: The one that drops the frame being recorded: `bypass_current_entry` (2.11-2.14), renamed
#: `bypass_current_compile` in 2.15.
_BYPASS = ("bypass_current_entry", "bypass_current_compile")


def _recording(klass: Any) -> tuple[str, ...]:
    """The recording methods this torch's CompilePackage has (CompatError when a bypass is missing)."""
    bypass = [name for name in _BYPASS if name in klass.__dict__]
    if not bypass:
        raise CompatError(f"torch._dynamo.package.CompilePackage has none of {', '.join(_BYPASS)}")
    return (*_RECORDING_ALL, *bypass)


#: Gaps in torch's precompile closed apart (each with its own check(), installed with programs).
_EXTRAS = (ddp_programs, program_wrapped_functions, program_module_globals, program_property_code,
           program_generated_code)
_QUIET_LOGGERS = ("torch._dynamo.guards", "torch._dynamo.output_graph", "torch._dynamo.package")


def check() -> None:
    import torch._dynamo.config as dconfig
    from torch._dynamo import bytecode_transformation, package, precompile_context

    require_attr(dconfig, "caching_precompile", "torch._dynamo.config")
    cache = require_attr(package, "DynamoCache", "torch._dynamo.package")
    for name in ("load", "write", "record_package", "path_prefix"):
        require_attr(cache, name, "torch._dynamo.package.DynamoCache")
    require_attr(package.CompilePackage, "initialize", "torch._dynamo.package.CompilePackage")
    require_attr(package.CompilePackage, "install", "torch._dynamo.package.CompilePackage")
    require_attr(package.CompilePackage, "uninstall", "torch._dynamo.package.CompilePackage")
    require_attr(package.CompilePackage, "code_context", "torch._dynamo.package.CompilePackage")
    for name in _recording(package.CompilePackage):
        require_attr(package.CompilePackage, name, "torch._dynamo.package.CompilePackage")
    require_attr(package.CompilePackage, "source_id_from_fn", "torch._dynamo.package.CompilePackage")
    require_attr(package.PrecompileCacheEntry, "from_cache_entry", "torch._dynamo.package.PrecompileCacheEntry")
    require_attr(precompile_context.PrecompileContext, "_backend_artifacts_by_key",
                 "torch._dynamo.precompile_context.PrecompileContext")
    counter = require_attr(bytecode_transformation, "_unique_id_counter", "torch._dynamo.bytecode_transformation")
    if not isinstance(counter, itertools.count):
        raise CompatError("torch._dynamo.bytecode_transformation._unique_id_counter is no longer an itertools.count")


def source_id(fn: Any) -> str:
    from torch._dynamo.package import CompilePackage

    return str(CompilePackage.source_id_from_fn(fn))


def compile_options(caller: types.FrameType | None) -> dict[str, Any] | None:
    """What the `torch.compile` call whose function is being loaded was given (backend, its mode and
    options, fullgraph), read from the `_OptimizeContext` that calls `DynamoCache.load`. None when
    the caller is not one (then nothing is loaded or saved: the options are unknown)."""
    ctx = caller.f_locals.get("self") if caller is not None else None
    backend = getattr(ctx, "callback", None)
    for _ in range(16):  # catch_errors -> ConvertFrame -> ConvertFrameAssert -> debug wrapper -> the backend
        inner = getattr(backend, "_torchdynamo_orig_backend", None)
        if inner is None:
            break
        backend = inner
    if ctx is None or backend is None or backend is getattr(ctx, "callback", None):
        return None
    inner = getattr(backend, "compiler_fn", backend)
    return {
        "backend": getattr(backend, "compiler_name", None) or getattr(inner, "__qualname__", type(backend).__qualname__),
        "wrapper": type(backend).__qualname__,
        "config": getattr(backend, "config", None),
        "kwargs": getattr(backend, "kwargs", None),
        "dynamic": getattr(backend, "dynamic", None),
        "fullgraph": getattr(ctx, "fullgraph", None),
        "error_on_graph_break": getattr(ctx, "error_on_graph_break", None),
    }


def config_snapshot() -> dict[str, dict[str, Any]]:
    """The Dynamo, Inductor and functorch configs as torch saves them portably (what a program's
    bytecode and graphs were made under)."""
    import torch._dynamo.config as dconfig
    import torch._functorch.config as fconfig
    import torch._inductor.config as iconfig

    out: dict[str, dict[str, Any]] = {}
    for name, module in (("dynamo", dconfig), ("inductor", iconfig), ("functorch", fconfig)):
        try:
            out[name] = {k: v for k, v in module.save_config_portable().items() if k not in UNKEYED.get(name, ())}
        except Exception:
            out[name] = {}
    return out


#: settings that change no program, left out of its key. `debug_dir_root` is where debug dumps go,
#: by default under the process's working directory: a warm and its GPU job started in different
#: folders missed each other's programs on it (H200 GPU tier, session 9: "configs.dynamo.debug_dir_root")
UNKEYED: dict[str, tuple[str, ...]] = {"dynamo": ("debug_dir_root",)}


class _Quiet(logging.Filter):
    """Per-guard lines torch logs at WARNING for every frame traced with the precompile cache on
    ("ID_MATCH guard on ... is dropped with caching_precompile=True", "Detected a package bypass"):
    a job's stderr would fill with them. Dropped; a bypass is counted by the caller instead."""

    def __init__(self, tell: Callable[[str], None]) -> None:
        super().__init__()
        self.tell = tell

    def filter(self, record: logging.LogRecord) -> bool:
        text = str(record.msg)
        if "is dropped with caching_precompile=True" in text:
            return False
        if text == "Backend not found":  # a program saved before its backward's entry: saved again later
            return False
        if text.startswith("Detected a package bypass"):
            self.tell(record.getMessage().splitlines()[0][:300])
            return False
        return True


def _guards_never_fail_a_compile() -> None:
    """torch bug (2.11 and 2.14.1): when a frame's guards cannot be serialised, Dynamo marks the
    package entry bypassed and then asserts `check_fn.guards_state is not None` anyway, failing the
    compile (a compiled `opt.step()` crashed every job). A bypassed entry is skipped by
    `add_guarded_code`, so an empty state is what the assertion should have accepted; and any error
    while serialising guards becomes torch's own PackageError, which it turns into a bypass."""
    from torch._dynamo import exc, guards

    cls = guards.CheckFunctionManager
    init, serialize = cls.__init__, cls.serialize_guards

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if getattr(self, "guards_state", b"") is None:
            self.guards_state = b""

    def serialize_guards(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return serialize(self, *args, **kwargs)
        except exc.PackageError:
            raise
        except Exception as error:
            raise exc.PackageError(f"{type(error).__name__}: {error}") from error

    _saved["guards"] = (init, serialize)
    cls.__init__ = __init__  # type: ignore[method-assign]
    cls.serialize_guards = serialize_guards  # type: ignore[method-assign]


def entry_for(cache_entry: Any, loaded_backends: dict[str, Any] | None = None) -> Any:
    """A PrecompileCacheEntry of one recorded package with the backend artifacts recorded so far in
    this process, plus `loaded_backends` (those of the program it was loaded from: a loaded package
    that converts a new frame is saved again, and its loaded frames' backends were never recorded
    here; without them torch marks those frames bypassed and the next restart traced them again).

    torch marks a frame whose backend it cannot find `bypassed` in place, on the live package (its
    later frames would no longer be recorded): it is given copies of the frame entries."""
    import copy

    from torch._dynamo.package import PrecompileCacheEntry
    from torch._dynamo.precompile_context import PrecompileContext

    from pcompile.compat import program_growth

    backends = ddp_programs.resolve({**(loaded_backends or {}), **PrecompileContext._backend_artifacts_by_key})
    cache_entry = copy.copy(cache_entry)
    cache_entry.codes = [program_growth.newest(copy.copy(code)) for code in cache_entry.codes]
    return PrecompileCacheEntry.from_cache_entry(cache_entry, backends)


def missing_backends(program: Any) -> list[str]:
    """The compiled graphs (backend ids) the program's frames name that torch had no bundled entry
    for: from_cache_entry marked those frames bypassed, so a restart traces them again. Why they
    are missing is AOTAutograd's: it did not save the graph's entry (it logs "AOTAutograd cache
    unable to serialize compiled graph", e.g. a Triton kernel whose launchers were made before the
    pickle) or bypassed its cache."""
    have = set(getattr(program, "backends", None) or ())
    return sorted({str(b) for code in getattr(program.dynamo, "codes", ()) for b in code.backend_ids} - have)


def backends_of(program: Any) -> dict[str, Any]:
    """The backend artifacts a loaded program carries."""
    return dict(getattr(program, "backends", None) or {})


def complete(entry: Any) -> bool:
    """Every frame of the package has its compiled callables (a bypassed frame would be traced again)."""
    return not any(getattr(code, "bypassed", False) for code in getattr(entry.dynamo, "codes", ()))


def frame_count(entry: Any) -> int:
    return sum(len(getattr(code, "guarded_codes", ()) or ()) for code in getattr(entry.dynamo, "codes", ()))


def spoiled(pkg: Any) -> str | None:
    """Why `pkg` must not be saved (an error while Dynamo recorded it), or None."""
    return getattr(pkg, _SPOILED, None)


def _spoil(pkg: Any, where: str, exc: BaseException, on_error: Callable[[Any, str], None],
           whole: bool = True) -> None:
    """Tell `on_error`; with `whole`, the package is never saved (what it recorded may be incomplete)."""
    reason = f"{where}: {type(exc).__name__}: {exc}"
    if whole and getattr(pkg, _SPOILED, None) is None:
        try:
            setattr(pkg, _SPOILED, reason)
        except Exception:
            pass
    try:
        on_error(pkg, reason)
    except Exception:
        pass


def _guarded_method(name: str, original: Callable[..., Any],
                    on_error: Callable[[Any, str], None]) -> Callable[..., Any]:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(self, *args, **kwargs)
        except Exception as exc:
            _spoil(self, name, exc, on_error)
            return None

    method.__name__ = name
    method.__wrapped__ = original  # type: ignore[attr-defined]
    return method


def _guarded_code_context(original: Callable[..., Any],
                          on_error: Callable[[Any, str], None]) -> Callable[..., Any]:
    """code_context(code): when torch cannot record the frame (it cannot name its code: a frame that
    starts in a property getter), the frame is compiled all the same under a bypassed stand-in entry
    that is not in the package (the recording calls inside find it and record nothing). The package
    keeps its other frames, as with torch's own bypassed entries: a process that loads it traces that
    frame again. Errors of the compile itself pass through untouched."""

    @contextlib.contextmanager
    def code_context(self: Any, code: types.CodeType) -> Any:
        stack = contextlib.ExitStack()
        try:
            stack.enter_context(original(self, code))
        except Exception as exc:
            _spoil(self, "code_context (the frame is left out)", exc, on_error, whole=False)
            previous = getattr(self, "_current_entry", None)
            self._current_entry = types.SimpleNamespace(
                bypassed=True, guarded_codes=[], import_sources={}, backend_ids=[], has_compile_id=True)

            def restore() -> None:
                self._current_entry = previous

            stack.callback(restore)
        with stack:
            yield

    code_context.__wrapped__ = original  # type: ignore[attr-defined]
    return code_context


def _fresh(pkg: Any, original_init: Callable[..., Any], original_initialize: Callable[..., Any]) -> None:
    """Reset `pkg` to a package that holds nothing loaded, initialised for the same function."""
    fn = pkg._innermost_fn
    try:
        pkg.uninstall()
    except Exception:
        pass
    original_init(pkg, None)
    original_initialize(pkg, fn, None, ignore_inlined_sources=False)
    setattr(pkg, _FELL_BACK, True)


def _bump_counter(names: Any) -> None:
    """Move Dynamo's unique-name counter past every number in `names` (see the module docstring)."""
    from torch._dynamo import bytecode_transformation as bt

    top = max((int(n) for name in names for n in _NUMBER.findall(str(name))), default=-1)
    current = next(bt._unique_id_counter)  # consumes one id: harmless, ids only need to be unique
    bt._unique_id_counter = itertools.count(max(current, top + 1))


def enable(load: Callable[[Any, dict[str, Any] | None], Any], write: Callable[[Any, str], None],
           recorded: Callable[[Any], None],
           install_context: Callable[[Any], contextlib.AbstractContextManager[Any]],
           on_error: Callable[[Any, str], None] = lambda pkg, reason: None,
           bypassed: Callable[[str], None] = lambda why: None) -> None:
    """Turn Dynamo's precompile cache on, with pcompile's `load(fn, options)`, `write(entry, source_id)`,
    `recorded(package)` (after each converted frame), `install_context(package)` (entered while a
    loaded package installs its guards) and `on_error(package, reason)` (torch's precompile machinery
    raised: the package is spoiled, or its stored program refused; the compile goes on). Idempotent.
    Must run before `torch.compile` builds its context (the flag is read there)."""
    import torch._dynamo.config as dconfig
    from torch._dynamo import package

    cache = package.DynamoCache
    klass = package.CompilePackage
    if not _saved:
        _saved["flag"] = dconfig.caching_precompile
        for name in ("__init__", "initialize", "install", "code_context", *_recording(klass)):
            _saved[f"pkg.{name}"] = klass.__dict__[name]
        for name in ("load", "write", "record_package"):
            _saved[name] = cache.__dict__.get(name)
        original_init = klass.__init__
        original_initialize = klass.initialize
        original_install = klass.install
        original_record = type(cache).record_package

        def initialize(self: Any, fn: Any, dynamo: Any = None, ignore_inlined_sources: bool = False) -> None:
            if dynamo is None:
                original_initialize(self, fn, dynamo, ignore_inlined_sources)
                return _home_module(self)
            try:
                original_initialize(self, fn, dynamo, ignore_inlined_sources)
            except Exception as exc:  # a changed source (RuntimeError) or anything else torch raises
                original_init(self, None)
                original_initialize(self, fn, None, ignore_inlined_sources=False)
                setattr(self, _FELL_BACK, True)
                on_error(self, f"initialize: {type(exc).__name__}: {exc}")
            _home_module(self)

        def install(self: Any, backends: Any) -> None:
            if getattr(self, _FELL_BACK, False):
                return  # its program was refused: a fresh package has nothing to install
            entries = list(getattr(self, "_codes", {}).values())
            try:
                with install_context(self):
                    original_install(self, backends)
            except Exception as exc:
                _fresh(self, original_init, original_initialize)
                on_error(self, f"install: {type(exc).__name__}: {exc}")
            finally:
                # also after a failed install: it may have put names (a builtins dict) into modules
                # that its uninstall does not take back, and Dynamo's next trace would reuse them
                names: list[str] = list(backends or ())
                for entry in entries:
                    names.extend(getattr(entry, "function_names", ()) or ())
                    module = sys.modules.get(getattr(entry, "python_module", "") or "")
                    if module is not None:
                        names.extend(n for n in vars(module) if n.startswith("__"))
                _bump_counter(names)

        def record_package(pkg: Any) -> None:
            if spoiled(pkg) is not None:
                return
            try:
                original_record(cache, pkg)
                recorded(pkg)
            except Exception as exc:
                _spoil(pkg, "record_package", exc, on_error)

        _saved["quiet"] = _Quiet(bypassed)
        for name in _QUIET_LOGGERS:
            logging.getLogger(name).addFilter(_saved["quiet"])
        _guards_never_fail_a_compile()
        programs_aot_entries.install()
        for extra in _EXTRAS:  # moved in a torch: that gap stays open, loudly in its compat test
            try:
                extra.check()
                extra.install(lambda why, m=extra.__name__: bypassed(f"{m}: {why}"))
            except Exception as exc:
                bypassed(f"{extra.__name__} not installed: {type(exc).__name__}: {exc}")
        klass.initialize = initialize  # type: ignore[method-assign]
        klass.install = install  # type: ignore[method-assign]
        klass.code_context = _guarded_code_context(klass.code_context, on_error)  # type: ignore[method-assign]
        for name in _recording(klass):
            setattr(klass, name, _guarded_method(name, klass.__dict__[name], on_error))
        cache.load = lambda fn: load(fn, compile_options(sys._getframe(1)))  # type: ignore[method-assign]
        cache.write = write  # type: ignore[method-assign]
        cache.record_package = record_package  # type: ignore[method-assign]
    dconfig.caching_precompile = True


def _home_module(pkg: Any) -> None:
    """Torch bug carried here (2.11-2.15): a package files its main code under `fn.__module__`, which
    `functools.wraps` copies from the wrapped function, while the code runs in the globals of the
    module that defined the wrapper. A wrapped forward (transformers' `can_return_tuple`, defined in
    `transformers.utils.generic`, around `LlamaForCausalLM.forward`) then had its guards rebuilt over
    the wrong module's globals (`KeyError on G['_is_torch_available']`): every restart failed them,
    traced the frame again and saved one more entry into the program. The main code is filed under
    the module whose globals it runs in."""
    fn = getattr(pkg, "_innermost_fn", None)
    home = getattr(fn, "__globals__", None)
    name = home.get("__name__") if isinstance(home, dict) else None
    module = sys.modules.get(name) if isinstance(name, str) else None
    entry = getattr(pkg, "_codes", {}).get(getattr(fn, "__code__", None))
    if module is not None and vars(module) is home and entry is not None and entry.python_module != name:
        entry.python_module = name


def backend_entry(pkg: Any) -> Any:
    """The package's dynamo cache entry (validated by torch)."""
    return pkg.cache_entry()


def disable() -> None:
    """Back to stock (tests)."""
    if not _saved:
        return
    import torch._dynamo.config as dconfig
    from torch._dynamo import package

    cache = package.DynamoCache
    dconfig.caching_precompile = _saved["flag"]
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).removeFilter(_saved["quiet"])
    from torch._dynamo import guards

    guards.CheckFunctionManager.__init__, guards.CheckFunctionManager.serialize_guards = _saved["guards"]
    programs_aot_entries.uninstall()
    for extra in _EXTRAS:
        extra.uninstall()
    for key, value in _saved.items():
        if key.startswith("pkg."):
            setattr(package.CompilePackage, key[4:], value)
    for name in ("load", "write", "record_package"):
        if _saved[name] is None:
            cache.__dict__.pop(name, None)
        else:
            setattr(cache, name, _saved[name])
    _saved.clear()
