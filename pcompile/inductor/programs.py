"""Programs: a restarted job, and the job after a warm, runs its compiled functions without Dynamo.

Why: with every FX/AOTAutograd entry cached, a restart still spends most of its first step in
Dynamo re-tracing each frame (RESULTS.md's floor table). A program is what Dynamo made of one
`torch.compile`d function (each frame's transformed bytecode and guards, and the compiled graphs),
saved through torch's own precompile cache (compat/dynamo_programs.py) into pcompile's store, so
it has every tier, verified reads, atomic publishes and GC like any other entry.

The key: the function's source identity (torch's `source_id`: module, qualname, first line) plus a
digest of everything that changes what Dynamo and Inductor make of it: the `torch.compile` call's
backend, mode, options, dynamic and fullgraph, and the Dynamo/Inductor/functorch configs; the
fingerprint adds torch/triton/python versions and the target board. A changed option or config is
a miss; a changed source (the function or anything it inlined) is refused by torch when it
installs the program, and a failing guard re-traces that frame: both fall back to Dynamo, are
counted and named (`program_fallback` events, `pcompile stats`), and never run stale code.

Never a failed job: whatever torch's precompile machinery raises (a frame it cannot name, a guard
or graph it cannot serialise, a stored program it cannot install) leaves the function compiled as
without programs, with one warning naming it (`failed`; compat/dynamo_programs guards the calls).

When: a package is saved after the frame Dynamo converted (at most every `_MIN_GAP_S`, so a model
with many graph breaks is not re-pickled per frame), after each optimizer step that follows new
frames, and at exit: a job killed mid-run still leaves what it compiled.
"""
from __future__ import annotations

import atexit
import contextlib
import json
import pickle
import threading
import time
from typing import Any

from pcompile.inductor import store_gateway
from pcompile.warn import warn_once

KIND = "program"
CONTEXT_BLOB = "context"
_MIN_GAP_S = 2.0
#: In every program's key: bump when what a stored program holds changes meaning (2: a wrapped
#: function's main code is filed under the module it runs in; programs saved before never pass
#: their guards and are not looked up again).
FORMAT = 2

_lock = threading.RLock()
_digests: dict[str, str] = {}  # source_id -> options digest of this process's torch.compile of it
_ambiguous: set[str] = set()  # compiled twice with different options: never saved
_dirty: dict[str, Any] = {}  # source_id -> package recorded since its last save
#: source_id -> package saved while a graph's AOTAutograd entry was not yet written (a training
#: graph's entry is saved after its lazily compiled backward, i.e. after the frame was recorded):
#: saved again after the next optimizer steps and at exit, until complete.
_incomplete: dict[str, Any] = {}
_RETRIES = 3
_retries: dict[str, int] = {}
_context: dict[str, dict[str, str]] = {}  # source_id -> autocast state its first frame was traced in
_loaded_context: dict[str, dict[str, str]] = {}  # source_id -> the loaded program's autocast state
_loaded_blob: dict[str, bytes] = {}  # source_id -> the loaded program as stored (its backends, unused)
_last_flush = 0.0
_registered = False
loaded: dict[str, int] = {}  # source_id -> frames installed from a program (this process)
_parts: dict[str, dict[str, Any]] = {}
_stepped = False  # an optimizer step has run in this process (programs' guard failures after it are quiet)  # source_id -> what its key was made of (program_misses.parts)


def options_digest(options: dict[str, Any], fn_name: str = "?") -> tuple[str, dict[str, Any]]:
    """One string for everything besides source that changes what a program holds, and the parts it
    was made of (kept in the program's meta for `program_misses`)."""
    import xxhash

    from pcompile.compat import dynamo_programs
    from pcompile.inductor import program_misses

    configs = dynamo_programs.config_snapshot()
    device = device_context()
    text = json.dumps({"format": FORMAT, "options": options, "configs": configs, "device": device}, sort_keys=True,
                      default=program_misses.stable)
    return xxhash.xxh3_128_hexdigest(text.encode()), {**program_misses.parts(fn_name, options, configs, device),
                                                      _CONFIGS: configs}


def device_context() -> dict[str, Any]:
    """Which GPU of the node this process compiles for. A program holds its graphs as compiled for
    that device (FX and AOTAutograd entries are rebound to the asking rank's GPU on load, a
    program's bundled graphs are not), so rank 1 running rank 0's program computed its gradients
    on cuda:0 ("returned an invalid gradient ... expected device cuda:1"). Each rank keeps its own.
    CUDA is not initialised here for it: a process that has not touched CUDA yet is told apart by
    LOCAL_RANK (torchrun's), as every rank of a node is."""
    import os

    local_rank = os.environ.get("LOCAL_RANK")
    # Before CUDA is initialised (always, in a warm): the GPU a torchrun rank will pick, else CUDA's default.
    device = int(local_rank) if local_rank is not None and local_rank.isdigit() else 0
    try:
        import torch

        if torch.cuda.is_initialized():
            device = int(torch.cuda.current_device())
    except Exception:
        pass
    return {"cuda_device": device, "local_rank": local_rank}


def _name(sid: str) -> str:
    return f"{sid}:{_digests[sid]}"


def load(fn: Any, options: dict[str, Any] | None) -> Any:
    """DynamoCache.load: this function's program from the store, or None (Dynamo traces it).

    A warm never loads one: its guards stand for the GPU job's real tensors (compat/warm_programs.py),
    which the warm's fakes never pass, and the warm traces to fill the caches anyway."""
    from pcompile.compat import dynamo_programs
    from pcompile.settings import WARMING

    try:
        sid = dynamo_programs.source_id(fn)
    except Exception:
        return None
    if options is None:
        return None
    digest, parts = options_digest(options, _fn_name(fn))
    with _lock:
        if _digests.setdefault(sid, digest) != digest:
            _ambiguous.add(sid)
            return None
        _parts[sid] = parts
    if WARMING.get():
        return None  # named above, so that its program is saved
    entry = store_gateway.lookup(KIND, _name(sid), single_flight=False)
    if entry is None:
        _explain_miss(sid)
        return None
    try:
        program = pickle.loads(entry.blobs[store_gateway_blob()])
        context = json.loads(entry.blobs.get(CONTEXT_BLOB, b"{}"))
    except Exception as exc:
        warn_once("program-load", f"pcompile: a stored program could not be read ({type(exc).__name__}: {exc}); "
                  "Dynamo traces the function instead")
        return None
    loaded[sid] = dynamo_programs.frame_count(program)
    _loaded_blob[sid] = entry.blobs[store_gateway_blob()]
    _loaded_context[sid] = {str(k): str(v) for k, v in dict(context).items()}
    return program


def _fn_name(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__qualname__)}"


#: the raw configs beside a program's parts, made into per-setting digests only when needed
_CONFIGS = "_configs"


def _meta_parts(sid: str) -> dict[str, Any]:
    from pcompile.inductor import program_misses

    with _lock:
        mine = dict(_parts.get(sid, {}))
    configs = mine.pop(_CONFIGS, None)
    return {**mine, **program_misses.settings(configs)} if configs else mine


def _explain_miss(sid: str) -> None:
    """A miss where the node-local store holds a program of this function: say what differs."""
    from pcompile.config import Settings
    from pcompile.inductor import program_misses
    from pcompile.inductor.layer_keys import layer_fingerprint

    try:
        root = Settings.from_env().cache_dir / "store"
        fingerprint = layer_fingerprint(KIND)
    except Exception:
        return
    program_misses.report(root, sid, _meta_parts(sid), fingerprint)


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


def install_context(pkg: Any) -> Any:
    """Entered while torch installs a loaded program: its guards are rebuilt in the autocast state it
    was traced in (autocast_context says why), and its AOTAutograd entries are loaded inside the
    backward-lowered-ahead scope a compile's are (backend.compile_scope), so a retained graph's
    backward gets stock's answer (compat/lazy_backward.py) and not AOTAutograd's donated-buffer
    error: without it a restart from a program raised on `backward(retain_graph=True)`."""
    from pcompile import compat

    stack = autocast_context(_loaded_context.get(getattr(pkg, "source_id", ""), {}))
    if compat.check("lazy_backward") is None:
        from pcompile.compat import lazy_backward

        stack.enter_context(lazy_backward.eager_backward())
    return stack


def bypassed(why: str) -> None:
    """A frame whose guards torch cannot serialise: it compiles as usual and gets no program (a
    restart traces that frame). Counted (events); not said: it is expected for some frames."""
    from pcompile.events import emit

    emit("program_bypass", time.time(), 0.0, reason=why)


def guards_failed(code: Any, reason: str) -> None:
    """A call that the installed program of this frame does not take: Dynamo traces it (right,
    and the frame then has both). Recorded once per frame with the first failing guard (a
    `program_guard_failed` event; INFO in the `pcompile` log), not warned: most such calls are a
    new shape (a last short batch, an eval batch), which stock recompiles silently as well."""
    import logging

    from pcompile.events import emit

    name = getattr(code, "co_qualname", None) or getattr(code, "co_name", "?")
    emit("program_guard_failed", time.time(), 0.0, fn=str(name), reason=reason[:500])
    logging.getLogger("pcompile").info("pcompile: a call of %s failed the guards of its program (%s); Dynamo traces it",
                                       name, reason[:300])


def failed(pkg: Any, reason: str) -> None:
    """Torch's precompile machinery raised for `pkg` (compat/dynamo_programs guards every call): the
    function is compiled as without programs and gets no program (or its stored one is not used)."""
    from pcompile.compat import dynamo_programs

    sid = getattr(pkg, "source_id", None) if getattr(pkg, "_innermost_fn", None) is not None else None
    fn = getattr(getattr(pkg, "_innermost_fn", None), "__qualname__", "?")
    whole = dynamo_programs.spoiled(pkg) is not None or not reason.startswith("code_context")
    with _lock:
        if sid is not None and whole:
            _dirty.pop(sid, None)
            _incomplete.pop(sid, None)
            loaded.pop(sid, None)
            _loaded_blob.pop(sid, None)
    what = f"no program for {fn}" if whole else f"a frame of {fn} is left out of its program"
    warn_once(f"program-failed:{fn}:{whole}", f"pcompile: {what} ({reason[:300]}); "
              "it is compiled as usual and a restart traces it with Dynamo")


def store_gateway_blob() -> str:
    from pcompile.inductor.store_adapter import BLOB

    return BLOB


def _save(sid: str, pkg: Any, final: bool = False) -> None:
    from pcompile.compat import dynamo_programs

    with _lock:
        if sid in _ambiguous or sid not in _digests:
            return
        name = _name(sid)
    if dynamo_programs.spoiled(pkg) is not None:
        return
    t0 = time.perf_counter()
    try:
        blob = _loaded_blob.get(sid)  # installing a program changes its backends: a fresh copy
        loaded_backends = dynamo_programs.backends_of(pickle.loads(blob)) if blob is not None else None
        program = dynamo_programs.entry_for(dynamo_programs.backend_entry(pkg), loaded_backends)
        data = pickle.dumps(program)
        missing = dynamo_programs.missing_backends(program)
    except Exception as exc:
        warn_once("program-save", f"pcompile: a compiled function's program could not be saved "
                  f"({type(exc).__name__}: {exc}); a restart traces it with Dynamo")
        return
    with _lock:
        if missing and not final and _retries.get(sid, 0) < _RETRIES:
            _incomplete[sid] = pkg  # said only if still incomplete at the end
        else:
            _incomplete.pop(sid, None)
    if missing and (final or sid not in _incomplete):
        fn = getattr(getattr(pkg, "_innermost_fn", None), "__qualname__", "?")
        warn_once(f"program-missing:{fn}", f"pcompile: the program of {fn} lacks {len(missing)} compiled "
                  f"graph(s) ({', '.join(missing[:4])}): AOTAutograd saved no bundled entry for them (see its "
                  "log line above); a restart traces the frames that use them with Dynamo")
    context = json.dumps(_context.get(sid, {}), sort_keys=True).encode()
    store_gateway.publish(KIND, name, {store_gateway_blob(): data, CONTEXT_BLOB: context},
                          meta={"frames": dynamo_programs.frame_count(program), "source": sid, "parts": _meta_parts(sid)},
                          compile_seconds=time.perf_counter() - t0, compiled=False)


def write(entry: Any, sid: str) -> None:
    """DynamoCache.write (torch's own save_cache_artifacts path): the same store entry."""
    with _lock:
        if sid in _ambiguous or sid not in _digests:
            return
        name = _name(sid)
    context = json.dumps(_context.get(sid, {}), sort_keys=True).encode()
    store_gateway.publish(KIND, name, {store_gateway_blob(): pickle.dumps(entry), CONTEXT_BLOB: context},
                          meta={"source": sid, "parts": _meta_parts(sid)}, compiled=False)


def flush(final: bool = False) -> None:
    """Save every package recorded since its last save, and every one saved incomplete."""
    global _last_flush
    with _lock:
        pending = dict(_incomplete)
        for sid in pending:
            _retries[sid] = _retries.get(sid, 0) + 1
        pending.update(_dirty)
        _dirty.clear()
        _incomplete.clear()
        _last_flush = time.monotonic()
    for sid, pkg in pending.items():
        _save(sid, pkg, final=final)


def _flush_at_exit() -> None:
    flush(final=True)


def recorded(pkg: Any) -> None:
    """Dynamo converted a frame of `pkg`'s function: save now, or soon."""
    from pcompile.compat import dynamo_programs

    sid = getattr(pkg, "source_id", None)
    if sid is None:
        return
    with _lock:
        if sid not in _context:
            _context[sid] = autocast_state()  # the traced frame's thread state, now
        _dirty[sid] = pkg
        due = time.monotonic() - _last_flush >= _MIN_GAP_S
    if due:
        flush()


def _after_step(*_args: Any) -> None:
    if _dirty or _incomplete:
        flush()


def install() -> bool:
    """Turn programs on (the torch.compile call, before Dynamo builds its context)."""
    global _registered
    from pcompile.compat import dynamo_programs

    dynamo_programs.enable(load, write, recorded, install_context, failed, bypassed)
    try:
        from pcompile.compat import program_guard_failures

        program_guard_failures.check()
        program_guard_failures.install(guards_failed)
    except Exception:
        pass  # only the naming of a failed guard is lost; its compat test says so loudly
    if not _registered:
        _registered = True
        atexit.register(_flush_at_exit)
        try:
            import torch
            from torch.optim.optimizer import register_optimizer_step_post_hook

            # never traced: inside a compiled `opt.step` Dynamo converted every frame the save ran
            # (151 frames against stock's 10 for one AdamW step)
            register_optimizer_step_post_hook(torch.compiler.disable(_after_step))
        except Exception:
            pass  # saved per frame and at exit all the same
    return True


def uninstall() -> None:
    from pcompile.compat import dynamo_programs

    dynamo_programs.disable()
    from pcompile.compat import program_guard_failures

    program_guard_failures.uninstall()
    with _lock:
        _digests.clear()
        _ambiguous.clear()
        _dirty.clear()
        _incomplete.clear()
        _retries.clear()
        _context.clear()
        _loaded_context.clear()
        _loaded_blob.clear()
        _parts.clear()
    loaded.clear()
