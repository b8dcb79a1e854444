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

Touched (torch 2.14.1 and 2.11.0: `_dynamo/config.py` caching_precompile; `_dynamo/package.py`
DynamoCache (a DiskDynamoCache: load/write/record_package/path_prefix), CompilePackage.install and
source_id_from_fn, PrecompileCacheEntry.from_cache_entry; `_dynamo/precompile_context.py`
PrecompileContext._backend_artifacts_by_key; `_dynamo/bytecode_transformation.py`
_unique_id_counter; `_dynamo/eval_frame.py` `_OptimizeContext.__call__` calling DynamoCache.load(fn)
with the context as `self`, whose `callback._torchdynamo_orig_backend` is the compile's backend).
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import re
import sys
import types
from typing import Any, Callable

from pcompile.compat import CompatError, require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.14.1'}

_NUMBER = re.compile(r"_(\d+)")
_saved: dict[str, Any] = {}


def check() -> None:
    import torch._dynamo.config as dconfig
    from torch._dynamo import bytecode_transformation, package, precompile_context

    require_attr(dconfig, "caching_precompile", "torch._dynamo.config")
    cache = require_attr(package, "DynamoCache", "torch._dynamo.package")
    for name in ("load", "write", "record_package", "path_prefix"):
        require_attr(cache, name, "torch._dynamo.package.DynamoCache")
    require_attr(package.CompilePackage, "install", "torch._dynamo.package.CompilePackage")
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
            out[name] = dict(module.save_config_portable())
        except Exception:
            out[name] = {}
    return out


def entry_for(cache_entry: Any) -> Any:
    """A PrecompileCacheEntry of one recorded package with the backend artifacts recorded so far."""
    from torch._dynamo.package import PrecompileCacheEntry
    from torch._dynamo.precompile_context import PrecompileContext

    return PrecompileCacheEntry.from_cache_entry(cache_entry, PrecompileContext._backend_artifacts_by_key)


def complete(entry: Any) -> bool:
    """Every frame of the package has its compiled callables (a bypassed frame would be traced again)."""
    return not any(getattr(code, "bypassed", False) for code in getattr(entry.dynamo, "codes", ()))


def frame_count(entry: Any) -> int:
    return sum(len(getattr(code, "guarded_codes", ()) or ()) for code in getattr(entry.dynamo, "codes", ()))


def _bump_counter(names: Any) -> None:
    """Move Dynamo's unique-name counter past every number in `names` (see the module docstring)."""
    from torch._dynamo import bytecode_transformation as bt

    top = max((int(n) for name in names for n in _NUMBER.findall(str(name))), default=-1)
    current = next(bt._unique_id_counter)  # consumes one id: harmless, ids only need to be unique
    bt._unique_id_counter = itertools.count(max(current, top + 1))


def autocast_state() -> dict[str, str]:
    """{device type: dtype} of every autocast context on in this thread (what a guard's expected
    dispatch keys depend on)."""
    import torch

    out: dict[str, str] = {}
    for device in ("cuda", "cpu", "xpu", "mps"):
        try:
            if torch.is_autocast_enabled(device):
                out[device] = str(torch.get_autocast_dtype(device)).removeprefix("torch.")
        except Exception:
            continue
    return out


def autocast_context(state: dict[str, str]) -> contextlib.ExitStack:
    """Enter the autocast contexts `state` names (built by autocast_state() in the saving process).

    Why: before pytorch#184850 (torch <= 2.13) a loaded package rebuilt its TENSOR_MATCH guards with
    the loading thread's dispatch TLS, so a program traced under autocast never matched a call under
    autocast when it was loaded outside it (a miss every time, on the GPU's torch 2.11). Rebuilding
    the guards inside the same autocast state gives them the compile-time keys; with the fix in
    torch it changes nothing."""
    import torch

    stack = contextlib.ExitStack()
    for device, dtype in state.items():
        try:
            stack.enter_context(torch.autocast(device, dtype=getattr(torch, dtype)))
        except Exception:
            continue
    return stack


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


class _LoadFailures(logging.Filter):
    """torch logs a program it could not install with a full traceback and goes on tracing; pcompile
    says it in one line instead (why, and that Dynamo traces the function)."""

    def __init__(self, tell: Callable[[str], None]) -> None:
        super().__init__()
        self.tell = tell

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage() != "Failed to load entry from dynamo cache":
            return True
        exc = record.exc_info[1] if record.exc_info else None
        self.tell(f"{type(exc).__name__}: {exc}".splitlines()[0] if exc is not None else "unknown reason")
        return False


def enable(load: Callable[[Any, dict[str, Any] | None], Any], write: Callable[[Any, str], None],
           recorded: Callable[[Any], None],
           install_context: Callable[[Any], contextlib.AbstractContextManager[Any]],
           not_installed: Callable[[str], None] = lambda why: None,
           bypassed: Callable[[str], None] = lambda why: None) -> None:
    """Turn Dynamo's precompile cache on, with pcompile's `load(fn, options)`, `write(entry, source_id)`,
    `recorded(package)` (after each converted frame) and `install_context(package)` (entered while a
    loaded package installs its guards). Idempotent. Must run before `torch.compile` builds its context
    (the flag is read there)."""
    import torch._dynamo.config as dconfig
    from torch._dynamo import package

    cache = package.DynamoCache
    if not _saved:
        _saved["flag"] = dconfig.caching_precompile
        _saved["install"] = package.CompilePackage.install
        for name in ("load", "write", "record_package"):
            _saved[name] = cache.__dict__.get(name)
        original_install = package.CompilePackage.install
        original_record = type(cache).record_package

        def install(self: Any, backends: Any) -> None:
            try:
                with install_context(self):
                    original_install(self, backends)
            except RuntimeError:
                raise  # torch's caller logs it and starts a fresh package: Dynamo traces
            except Exception as exc:  # anything else (an unpicklable guard state, ...) would fail torch.compile
                try:
                    self.uninstall()
                except Exception:
                    pass
                raise RuntimeError(f"pcompile: a stored program could not be installed ({type(exc).__name__}: {exc})") from exc
            names: list[str] = list(backends or ())
            for code, entry in getattr(self, "_codes", {}).items():
                names.extend(getattr(entry, "function_names", ()) or ())
                module = sys.modules.get(getattr(entry, "python_module", "") or "")
                if module is not None:
                    names.extend(n for n in vars(module) if n.startswith("__"))
            _bump_counter(names)

        def record_package(pkg: Any) -> None:
            original_record(cache, pkg)
            recorded(pkg)

        _saved["filter"] = _LoadFailures(not_installed)
        logging.getLogger("torch._dynamo.eval_frame").addFilter(_saved["filter"])
        _saved["quiet"] = _Quiet(bypassed)
        for name in ("torch._dynamo.guards", "torch._dynamo.output_graph"):
            logging.getLogger(name).addFilter(_saved["quiet"])
        _guards_never_fail_a_compile()
        package.CompilePackage.install = install  # type: ignore[method-assign]
        cache.load = lambda fn: load(fn, compile_options(sys._getframe(1)))  # type: ignore[method-assign]
        cache.write = write  # type: ignore[method-assign]
        cache.record_package = record_package  # type: ignore[method-assign]
    dconfig.caching_precompile = True


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
    package.CompilePackage.install = _saved["install"]  # type: ignore[method-assign]
    logging.getLogger("torch._dynamo.eval_frame").removeFilter(_saved["filter"])
    for name in ("torch._dynamo.guards", "torch._dynamo.output_graph"):
        logging.getLogger(name).removeFilter(_saved["quiet"])
    from torch._dynamo import guards

    guards.CheckFunctionManager.__init__, guards.CheckFunctionManager.serialize_guards = _saved["guards"]
    for name in ("load", "write", "record_package"):
        if _saved[name] is None:
            cache.__dict__.pop(name, None)
        else:
            setattr(cache, name, _saved[name])
    _saved.clear()
