"""Whole-program entries: a compiled frame that a new process runs without tracing it again.

A hot start with graph, autograd and kernel hits still re-traces every frame with Dynamo,
rebuilds its guards and recomputes Inductor's cache keys: seconds per frame, on every rank of
every restart. torch's precompile packages (compat/dynamo_package.py) hold all Dynamo produced
for one `torch.compile`d function: its transformed bytecode and resume functions, guards, the
checksums of every function it inlined, and each graph's compiled backend. pcompile stores each
package as one `program` entry and installs it at `torch.compile(m)`, so the first call runs the
compiled code directly; a guard that fails falls back to Dynamo's usual path (counted, one line).

Key (all of it, so a loaded program is what this code and setup would compile):
  - the function: module, qualname, first line and the sha256 of its source file;
  - the torch.compile call: the backend and its mode/options/dynamic, fullgraph;
  - Dynamo's, AOTAutograd's and Inductor's portable configs;
  - the graph layers' fingerprint (torch, triton, CUDA, python versions, target GPU or CPU ISA).
Functions it inlines from other files are checked by torch against their recorded checksums at
load (a changed file refuses the program, which is then traced and stored again). torch drops
the guards on object identity (ID_MATCH etc.), which cannot survive a process: what they
protected is the code, and the code is in the key or the checksums.

Not stored: functions whose code lives in torch itself (`model.compile()` compiles
`Module._call_impl`, one qualname for every model: the key could not tell two models apart).
Loads unpickle only entries the store verified (sha256 per blob, signature when required).

Off unless `PCOMPILE_PROGRAMS=1` (see `wanted()` for why); when off, torch's packages stay off too.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import re
import threading
from pathlib import Path
from typing import Any, Callable

from pcompile.inductor import store_gateway
from pcompile.warn import warn_once
from pcompile.inductor.timing import emit, now, span
from pcompile.settings import PROGRAMS

KIND = "program"
BLOB = "program"
DISPATCH_BLOB = "dispatch"  # JSON: the dispatch-key state the frames were converted under (older torch)

_lock = threading.Lock()
#: what this process did with programs (tests, `pcompile stats`-style summaries)
counts: dict[str, int] = {"loaded": 0, "missed": 0, "refused": 0, "saved": 0, "unchanged": 0,
                          "not_covered": 0, "unstorable": 0, "pending": 0, "skipped": 0}


class _State:
    def __init__(self) -> None:
        self.keys: dict[int, str] = {}          # id(fn code) -> program identity (the store key's source)
        self.names: dict[int, str] = {}         # id(fn code) -> readable name
        self.loaded: set[int] = set()           # codes whose program came from the store
        self.published: dict[int, str] = {}     # code -> sha256 of the last bytes stored
        self.pending: dict[int, Any] = {}       # code -> package whose backends were not ready
        self.unstorable: set[int] = set()
        self.guarded: dict[int, int] = {}       # code -> guarded versions in the last stored program
        self.dispatch: dict[int, list[int]] = {}  # code -> dispatch_state() of its last conversion / of the loaded program
        self.installed = False
        self.hooks_on: Callable[[], bool] = lambda: False


_state = _State()


def wanted() -> bool:
    """Opt-in (PCOMPILE_PROGRAMS=1): on the H100 with torch 2.11 hot starts got slower with them
    (benchmarks/RESULTS.md, runs P4/P5). Both causes were found later (P6/P7) and are handled:
    guards rebuilt outside the caller's autocast (`dispatch_state()`), and backward ahead's
    pre-launched backwards that torch cannot pickle (backward ahead is off with programs on).
    Not re-measured on a GPU yet, so still opt-in; on CPU it runs untraced (tests/test_programs.py)."""
    return bool(PROGRAMS.get())


def install(hooks_on: Callable[[], bool]) -> bool:
    """Route torch's precompile packages through the store (idempotent). The feature registry
    (features.py) calls this at torch.compile, once `wanted()` and compat.dynamo_package agree;
    `hooks_on` turns pcompile's hooks on at the first load (hooks.install_hooks, handed in: this
    module never imports the hooks)."""
    with _lock:
        _state.hooks_on = hooks_on
        if _state.installed:
            return True
        from pcompile.compat import dynamo_package

        dynamo_package.install(_Hooks())
        _state.installed = True
        atexit.register(_flush_pending)
        store_gateway.add_publish_listener(_on_publish)
        return True


def _torch_root() -> str:
    import torch

    return str(Path(torch.__file__).resolve().parent)


def _describe_fn(fn: Any) -> tuple[int, str, dict[str, str]] | None:
    """(id of its code, readable name, identity fields) or None when it must not be stored."""
    from pcompile.compat import dynamo_entries

    fn = dynamo_entries.innermost_fn(fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    path = Path(code.co_filename)
    try:
        resolved = path.resolve()
        if str(resolved).startswith(_torch_root() + os.sep):
            return None
        digest = hashlib.sha256(resolved.read_bytes()).hexdigest()
    except OSError:
        return None  # <stdin>, exec'd strings: nothing on disk to check a program against
    name = f"{getattr(fn, '__module__', '?')}.{fn.__qualname__}"
    return id(code), name, {"module": str(getattr(fn, "__module__", "")), "qualname": fn.__qualname__,
                            "firstlineno": str(code.co_firstlineno), "file_sha256": digest}


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _stable(value: Any) -> Any:
    """A JSON value equal in every process for equal settings (no set order, no addresses)."""
    if isinstance(value, dict):
        return {_text(k): _stable(v) for k, v in sorted(value.items(), key=lambda kv: _text(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_stable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(_text(v) for v in value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return _text(value)


def _text(value: Any) -> str:
    code = getattr(value, "__code__", None)
    if code is not None:  # a custom pass or hook: named and pinned by its bytecode
        body = hashlib.sha256(code.co_code + repr(code.co_consts).encode()).hexdigest()[:16]
        return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', '?')}:{body}"
    return _ADDRESS.sub("", value if isinstance(value, str) else repr(value))


def _describe_backend(backend: Any) -> dict[str, Any]:
    if backend is None:
        return {"backend": "unknown"}
    out: dict[str, Any] = {"backend": getattr(backend, "compiler_name", None) or type(backend).__name__}
    for attr in ("config", "kwargs", "dynamic"):
        if hasattr(backend, attr):
            out[attr] = _stable(getattr(backend, attr))
    return out


def _configs() -> dict[str, str]:
    from pcompile.compat import dynamo_entries

    out = {}
    for name, values in dynamo_entries.config_copies().items():
        kept = {k: v for k, v in values.items() if not k.startswith(_CONFIG_IGNORED)}
        out[name] = hashlib.sha256(json.dumps(_stable(kept), sort_keys=True).encode()).hexdigest()
    return out


#: config fields that name places or processes, not what is compiled
_CONFIG_IGNORED = ("cache_dir", "debug_dir", "output_code", "trace.", "fx_graph_remote_cache", "autotune_remote_cache",
                   "fx_graph_cache", "enable_autograd_cache", "enable_remote_autograd_cache",
                   "bundled_autotune_remote_cache", "caching_precompile", "force_non_lazy_backward_lowering",
                   "compile_threads", "worker_start_method", "recompile_limit", "accumulated_recompile_limit")


def identity(fn: Any, backend: Any, flags: dict[str, Any] | None = None) -> tuple[int, str, str] | None:
    """(code id, readable name, the store key's source) for `fn` compiled by `backend`."""
    described = _describe_fn(fn)
    if described is None:
        return None
    code_id, name, fields = described
    body = {"fn": fields, "compile": {**_describe_backend(backend), "flags": _stable(flags or {})}, "config": _configs()}
    return code_id, name, json.dumps(body, sort_keys=True)


class _Hooks:
    """compat.dynamo_package.Hooks: the store behind torch's DynamoCache."""

    def load(self, fn: Callable[..., Any], backend: Any, flags: dict[str, Any]) -> Any | None:
        if not _state.hooks_on():
            return None
        try:
            found = identity(fn, backend, flags)
        except Exception as exc:
            warn_once("program-key", f"pcompile: cannot key whole programs ({type(exc).__name__}: {exc}); "
                      "frames are traced as usual")
            return None
        if found is None:
            _count("skipped")
            return None
        code_id, name, source = found
        with _lock:
            _state.keys[code_id] = source
            _state.names[code_id] = name
        entry = store_gateway.lookup(KIND, source, single_flight=False)
        if entry is None:
            _count("missed")
            return None
        return _install_ready(code_id, name, entry)

    def changed(self, package: Any) -> None:
        from pcompile.compat import dynamo_entries, dynamo_package

        fn = dynamo_entries.innermost(package)
        code_id = id(getattr(fn, "__code__", None))
        count = dynamo_entries.guarded_count(package)
        with _lock:
            known = code_id in _state.keys
            was_loaded = code_id in _state.loaded
            grew = count > _state.guarded.get(code_id, 0)
        if not known or not grew:
            return  # a frame that compiled nothing new (no graph): the stored program already has it
        state = dynamo_package.dispatch_state()  # still inside the conversion: the caller's state
        if state is not None:
            with _lock:
                _state.dispatch[code_id] = state
        if was_loaded:
            _count("not_covered")
            warn_once(f"program-cover:{code_id}", f"pcompile: the stored program of {_state.names[code_id]} did not cover "
                      "this call (a guard failed or a new frame ran): Dynamo traced it as usual; the stored program "
                      "is updated to cover both")
        _save(code_id, package)

    def dispatch_state_for(self, package: Any) -> list[int] | None:
        from pcompile.compat import dynamo_entries

        code_id = id(getattr(dynamo_entries.innermost(package), "__code__", None))
        with _lock:
            return _state.dispatch.get(code_id) if code_id in _state.loaded else None

    def install_failed(self, package: Any, reason: str) -> None:
        from pcompile.compat import dynamo_entries

        code_id = id(getattr(dynamo_entries.innermost(package), "__code__", None))
        with _lock:
            _state.loaded.discard(code_id)
            _state.guarded.pop(code_id, None)
            _state.published.pop(code_id, None)
            counts["loaded"] = max(0, counts["loaded"] - 1)
        _refuse(_state.names.get(code_id, "a function"), f"torch could not install it: {reason}")


def _install_ready(code_id: int, name: str, entry: Any) -> Any | None:
    """Unpickle a verified entry and check it the way torch would at install, without its traceback."""
    from pcompile.compat import dynamo_entries, dynamo_package

    t0 = now()
    try:
        program = dynamo_entries.loads(entry.blobs[BLOB])
        dynamo_entries.check_entry(program)
        stale = dynamo_entries.changed_sources(program)
        if stale:
            _refuse(name, f"{stale} changed since it was compiled")
            return None
        unresolved = dynamo_package.unresolved_globals(program)
        if unresolved:
            _refuse(name, f"its bytecode names {unresolved[0]}, which only the compiling process had")
            return None
        dispatch = _dispatch_of(entry)
        ready = dynamo_entries.deserialize_backends(program)
    except Exception as exc:
        _refuse(name, f"{type(exc).__name__}: {exc}")
        return None
    with _lock:
        _state.loaded.add(code_id)
        _state.published[code_id] = hashlib.sha256(entry.blobs[BLOB]).hexdigest()
        _state.guarded[code_id] = dynamo_entries.guarded_count(program)
        if dispatch is not None:
            _state.dispatch[code_id] = dispatch
    _count("loaded")
    emit("program_load", t0, now() - t0, key=str(entry.key), name=name, outcome="hit")
    return ready


def _dispatch_of(entry: Any) -> list[int] | None:
    raw = entry.blobs.get(DISPATCH_BLOB)
    if raw is None:
        return None
    value = json.loads(raw)
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value)):
        raise ValueError(f"malformed {DISPATCH_BLOB} blob")
    return value


def _refuse(name: str, why: str) -> None:
    _count("refused")
    warn_once(f"program-refused:{name}", f"pcompile: the stored program of {name} is not used ({why}): "
              "Dynamo traces it and the program is stored again")


def _save(code_id: int, package: Any) -> None:
    from pcompile.compat import dynamo_entries, dynamo_package

    with _lock:
        if code_id in _state.unstorable:
            return
        source = _state.keys[code_id]
        name = _state.names[code_id]
    with span("program_save", name=name) as ev:
        try:
            program = dynamo_entries.entry_for(package)
            if program is None:
                with _lock:
                    _state.pending[code_id] = package
                _count("pending")
                ev.outcome = "pending"
                return
            unresolved = dynamo_package.unresolved_globals(program)
            if unresolved:
                raise ValueError(f"its bytecode names {unresolved[0]}, an object of this process only")
            data = dynamo_entries.dumps(program)
        except Exception as exc:
            with _lock:
                _state.unstorable.add(code_id)
                _state.pending.pop(code_id, None)
            _count("unstorable")
            ev.outcome = "unstorable"
            warn_once(f"program-unstorable:{code_id}", f"pcompile: cannot store the program of {name} "
                      f"({type(exc).__name__}: {str(exc)[:200]} at {_where(exc)}); later jobs trace it (their graphs still hit)")
            return
        digest = hashlib.sha256(data).hexdigest()
        with _lock:
            _state.pending.pop(code_id, None)
            if _state.published.get(code_id) == digest:
                ev.outcome = "unchanged"
                unchanged = True
            else:
                unchanged = False
        with _lock:
            _state.guarded[code_id] = dynamo_entries.guarded_count(program)
        if unchanged:
            _count("unchanged")
            return
        blobs = {BLOB: data}
        with _lock:
            dispatch = _state.dispatch.get(code_id)
        if dispatch is not None:
            blobs[DISPATCH_BLOB] = json.dumps(dispatch).encode()
        ok = store_gateway.publish(KIND, source, blobs, meta={"name": name, "source": "pcompile.programs",
                                                              "backends": dynamo_entries.backend_ids(program)},
                            compiled=False)
        ev.outcome = "stored" if ok else "not stored"
        if ok:
            with _lock:
                _state.published[code_id] = digest
            _count("saved")


def _on_publish(kind: str) -> None:
    """A backward lowered after its frame (backward ahead's worker, a lazy backward) completes its
    AOTAutograd entry later: that is when a pending program can be stored."""
    if kind == "autograd" and _state.pending:
        _flush_pending()


def _where(exc: BaseException) -> str:
    """file:line where `exc` was raised (an assertion inside torch names nothing else)."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    return f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "?"


def _flush_pending() -> None:
    """At exit: store programs whose lazily lowered backward was not ready at the frame's end."""
    with _lock:
        pending = list(_state.pending.items())
    for code_id, package in pending:
        try:
            _save(code_id, package)
        except Exception:
            pass


def _count(what: str) -> None:
    with _lock:
        counts[what] = counts.get(what, 0) + 1


def snapshot() -> dict[str, int]:
    with _lock:
        return dict(counts)
