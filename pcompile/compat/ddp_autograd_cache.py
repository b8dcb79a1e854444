"""AOTAutograd cache entries for DDPOptimizer's bucket-split graphs, which torch bypasses.

Why torch bypasses: `SubmodCompiler` (torch/_dynamo/backends/distributed.py) compiles each
bucket's submodule with `TracingContext.fakify_first_call` set, and `check_cacheable` refuses
such graphs ("Won't cache a graph with fakify_first_call enabled"). The flag makes AOTAutograd
add a `FakifiedOutWrapper` whose *first* call returns the forward graph's output fakes (with
Inductor's output strides) instead of running the kernels: SubmodCompiler runs each compiled
bucket once on fakes to get the next bucket's example inputs. A cache hit rebuilds the runtime
wrappers without that wrapper (`GenericAOTAutogradResult.wrap_post_compile`: "Notably absent
... FakifiedOutWrapper") and without setting `TracingContext.fw_metadata`, which SubmodCompiler
asserts on. So every rank re-traces every bucket on every restart.

What is stored, and under which key: the entry torch would have saved, plus the forward
outputs' fake metadata (shape, stride, storage offset, dtype, device, requires_grad), read where
the miss built its `FakifiedOutWrapper` (after Inductor's strides were applied). The key is
torch's key with this module's tag mixed in, so a DDP-split entry (which carries the fakes) and
an entry for the same graph compiled outside DDP never stand in for each other. On a hit the
first call returns fakes rebuilt from that metadata in the tracing fake mode, exactly like
`FakifiedOutWrapper`, and `fw_metadata` is set as a compile would.

A lazily lowered backward (torch 2.11, where compat/lazy_backward.py cannot lower backwards
ahead; `PCOMPILE_EAGER_BACKWARD=0` on 2.14): SubmodCompiler keeps a stack of per-bucket
`fw_metadata` (`DDPOptimizerContext.metadata_per_bucket`, pushed once per bucket, a hit's too:
the one `wrap_post_compile` sets), and each lazily lowered bucket's first backward reads the slot
at `curr_bucket` and steps down (Note [DDPOptimizer and fw_metadata]), so buckets must pop last
to first, one each. Inductor lowers that backward with those metadata (`bw_donated_idxs`: which
saved tensors it may overwrite; `static_input_indices`). A hit bucket lowers no backward, so
left alone it would not pop, and the lazily lowered bucket below it would read the hit's
metadata. So a hit's backward takes its own metadata off the stack at its first call
(`_pop_own_metadata`: removed wherever it sits, which never changes what another bucket reads;
at the top when buckets run backward last to first, the order stock itself relies on). The entry
of a lazily lowered bucket is written at its first backward, so on a cold start the other rank
may compile the same bucket meanwhile (single-flight cannot hold a key across the forward): the
test's cold 2-rank start on 2.11 saves 3 entries for 2 buckets.

When it stays stock (torch's bypass): a torch minor other than those read (2.11, 2.14, 2.15), or one
where the per-bucket stack moved (`_check_lazy_backward_stack`); and no entry is written when a
forward output is not a static, dense fake tensor (symbolic sizes, subclasses) or shares storage
with an input it is not, or the graph has effect tokens, functionalized RNG or subclass inputs
(wrappers whose order around the fakified call would differ on a hit). Outputs that are views or
share one storage among themselves are rebuilt as views of one buffer at their byte offsets. A hit
whose metadata cannot be rebuilt is a miss.

Touched (read in torch 2.11.0 and 2.14.1, same call sites in both; 2.15.0: check() and the DDP tests pass):
`torch._functorch._aot_autograd.autograd_cache`: `autograd_cache_key` (module global, called
positionally by `AOTAutogradCache.try_load`; its first parameter is `gm` in 2.11, `mod` in 2.14),
`AOTAutogradCache.save` (staticmethod), `FXGraphCacheMiss` (try_load counts it as a miss and
compiles); `torch._functorch._aot_autograd.runtime_wrappers.FakifiedOutWrapper` (`pre_compile`,
`post_compile`, fields `out_metas`, `fwd_output_strides`, `needs_post_compile`);
`torch._functorch._aot_autograd.aot_autograd_result.GenericAOTAutogradResult` (`wrap_post_compile`,
which calls `self.compiled_fw.load(args)` then `self.compiled_fw.post_compile(fn, fx_config)`;
fields `compiled_fw`, `runtime_metadata`, `maybe_subclass_meta`); `torch._guards.TracingContext`
(`fakify_first_call`, `ddp_optimizer_ctx`, `fw_metadata`, `fake_mode`); `ViewAndMutationMeta`
(`tokens`, `is_rng_op_functionalized`, `num_graphsafe_rng_states`, 2.14's `act_input_paths`);
`torch._dynamo.backends.distributed.DDPOptimizerContext` (`metadata_per_bucket`, `curr_bucket`;
pushed in `SubmodCompiler.run_node`, popped by the lazy backward: 2.11's
`AOTDispatchAutograd.post_compile` `_backward_impl`, 2.14's
`_AutogradBackwardCompiler._prepare_lazy_backward_context`), and the hit's backward callable
(`compiled_bw.post_compile(...)` in `GenericAOTAutogradResult`, 2.14's `_load_and_post_compile`).
"""
from __future__ import annotations

import base64
import functools
import hashlib
import inspect
import threading
from typing import Any, Callable

from pcompile.compat import CompatError, require_attr
from pcompile.compat.ddp_first_call_fakes import describe, rebuild_outputs

CHECKED = {"torch": "2.11.0, 2.14.1, 2.15.0"}
#: The torch minors whose SubmodCompiler / cache-hit path this module was read against.
TORCH_MINORS = ((2, 11), (2, 14), (2, 15))
#: Mixed into the AOTAutograd key of a DDP-split graph; bump when what is stored changes.
TAG = "pcompile-ddp-fakified-first-call/v2"
#: The entry's attribute carrying the forward outputs' metadata (pickled with the entry).
FIELD = "_pcompile_ddp_fake_outs"

_lock = threading.Lock()
_ddp_keys: set[str] = set()  # AOTAutograd keys computed for DDP-split graphs in this process
#: such a key -> its first-call fakes, or None and why they cannot be stored (kept for every save of
#: the key: two buckets may be one graph)
_first_calls: dict[str, tuple[list[Any] | None, str]] = {}
_NOT_PLAIN = "its runtime wrappers are not plain (effect tokens, RNG, subclasses)"
#: why -> how many DDP-split bucket compiles of this process were left to torch's bypass for it
not_stored: dict[str, int] = {}


#: Told each refusal (installed by inductor/features.py, which names it: compat imports no higher layer).
on_not_stored: Callable[[str], None] | None = None


def _not_stored(why: str) -> None:
    """Counted and told: a restart re-traces this bucket as stock does."""
    with _lock:
        not_stored[why] = not_stored.get(why, 0) + 1
    if on_not_stored is not None:
        on_not_stored(why)


_installed: dict[str, Any] = {}  # "owner.attr" -> original, while installed


def _modules() -> tuple[Any, Any, Any]:
    from torch._functorch._aot_autograd import aot_autograd_result, autograd_cache, runtime_wrappers

    return autograd_cache, runtime_wrappers, aot_autograd_result


def _torch_minor() -> tuple[int, int]:
    import torch

    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def check() -> None:
    """Raise CompatError naming what moved (or that this torch was not read)."""
    if _torch_minor() not in TORCH_MINORS:
        read = ", ".join(f"{a}.{b}" for a, b in TORCH_MINORS)
        raise CompatError(f"DDP split-graph AOTAutograd entries were read against torch {read} only "
                          f"(found {'.'.join(map(str, _torch_minor()))})")
    import torch._guards

    ac, rw, result = _modules()
    key_fn = require_attr(ac, "autograd_cache_key", "torch._functorch._aot_autograd.autograd_cache")
    params = list(inspect.signature(inspect.unwrap(key_fn)).parameters)
    if params[1:3] != ["example_inputs", "config"]:
        raise CompatError(f"autograd_cache_key takes {params}, expected (gm or mod, example_inputs, config, ...)")
    require_attr(ac, "FXGraphCacheMiss", "torch._functorch._aot_autograd.autograd_cache")
    cache = require_attr(ac, "AOTAutogradCache", "torch._functorch._aot_autograd.autograd_cache")
    if not isinstance(inspect.getattr_static(cache, "save", None), staticmethod):
        raise CompatError("AOTAutogradCache.save is no longer a staticmethod")
    wrapper = require_attr(rw, "FakifiedOutWrapper", "torch._functorch._aot_autograd.runtime_wrappers")
    for name in ("pre_compile", "post_compile"):
        require_attr(wrapper, name, "FakifiedOutWrapper")
    fields = getattr(wrapper, "__dataclass_fields__", {})
    for name in ("out_metas", "fwd_output_strides", "needs_post_compile"):
        if name not in fields:
            raise CompatError(f"FakifiedOutWrapper.{name} is missing")
    generic = require_attr(result, "GenericAOTAutogradResult", "torch._functorch._aot_autograd.aot_autograd_result")
    require_attr(generic, "wrap_post_compile", "GenericAOTAutogradResult")
    annotations = getattr(generic, "__annotations__", {})
    for name in ("compiled_fw", "runtime_metadata", "maybe_subclass_meta"):
        if name not in annotations:
            raise CompatError(f"GenericAOTAutogradResult.{name} is missing")
    ctx = torch._guards.TracingContext(None)
    for name in ("fakify_first_call", "ddp_optimizer_ctx", "fw_metadata", "fake_mode"):
        if not hasattr(ctx, name):
            raise CompatError(f"torch._guards.TracingContext().{name} is missing")
    from torch._functorch._aot_autograd.schemas import ViewAndMutationMeta

    for name in ("tokens", "num_graphsafe_rng_states"):
        if name not in getattr(ViewAndMutationMeta, "__dataclass_fields__", {}):
            raise CompatError(f"ViewAndMutationMeta.{name} is missing")
    if "self.is_rng_op_functionalized" not in inspect.getsource(ViewAndMutationMeta.__post_init__):
        raise CompatError("ViewAndMutationMeta.__post_init__ no longer sets is_rng_op_functionalized")
    _check_lazy_backward_stack(rw, generic)


def _check_lazy_backward_stack(rw: Any, generic: Any) -> None:
    """What `_pop_own_metadata` mirrors: SubmodCompiler pushes the tracing context's fw_metadata
    per bucket, a lazily lowered backward reads `metadata_per_bucket[curr_bucket]` and steps
    down, and a hit's backward is the callable `compiled_bw.post_compile` returns."""
    from torch._dynamo.backends import distributed

    ddp_ctx = require_attr(distributed, "DDPOptimizerContext", "torch._dynamo.backends.distributed")()
    if not isinstance(getattr(ddp_ctx, "metadata_per_bucket", None), list) or getattr(ddp_ctx, "curr_bucket", None) != -1:
        raise CompatError("DDPOptimizerContext no longer starts with metadata_per_bucket=[] and curr_bucket=-1")
    sources = {
        "SubmodCompiler.run_node": (inspect.getsource(distributed.SubmodCompiler.run_node),
                                    ("ddp_ctx.curr_bucket += 1", "metadata_per_bucket.append(tracing_ctx.fw_metadata)")),
        "AOTAutograd's lazy backward": (inspect.getsource(rw),
                                        ("ddp_ctx.metadata_per_bucket[", "ddp_ctx.curr_bucket -= 1")),
        "GenericAOTAutogradResult": (inspect.getsource(generic), ("self.compiled_bw.post_compile(",)),
    }
    for where, (source, needles) in sources.items():
        for needle in needles:
            if needle not in source:
                raise CompatError(f"{where} no longer contains `{needle}`: DDP's per-bucket fw_metadata stack moved")


# ---- which compiles are DDP split graphs ------------------------------------------------------

def _tracing_context() -> Any:
    import torch._guards

    return torch._guards.TracingContext.try_get()


def _ddp_split(ctx: Any) -> bool:
    """SubmodCompiler is compiling a bucket (its backward lowered ahead or lazily: a hit pops its
    own per-bucket metadata at its first backward, see `_pop_own_metadata`)."""
    return (ctx is not None and bool(getattr(ctx, "fakify_first_call", False))
            and getattr(ctx, "ddp_optimizer_ctx", None) is not None)


def _is_ddp_key(key: str) -> bool:
    with _lock:
        return key in _ddp_keys


def ddp_key(key: str) -> str:
    """The key a DDP-split graph is stored under: torch's key with TAG mixed in (and torch's
    one-letter prefix kept, which says what kind of entry it is)."""
    digest = base64.b32encode(hashlib.sha256(f"{key}|{TAG}".encode()).digest())[:51].decode().lower()
    return key[:1] + digest


def _plain_wrappers(meta: Any, subclass_meta: Any) -> bool:
    """No wrapper sits between Inductor's forward and the fakified call on the miss path that
    the hit path would order differently (effect tokens, functionalized RNG, subclasses)."""
    return (subclass_meta is None and not getattr(meta, "tokens", None)
            and not getattr(meta, "is_rng_op_functionalized", False)
            and not getattr(meta, "num_graphsafe_rng_states", 0)
            and not getattr(meta, "act_input_paths", None))


# ---- the hooks --------------------------------------------------------------------------------

def _patch(owner: Any, attr: str, make: Callable[[Any], Any], static: bool = False) -> None:
    name = f"{owner.__name__}.{attr}"
    if name in _installed:
        return
    original = inspect.getattr_static(owner, attr)
    fn = original.__func__ if isinstance(original, staticmethod) else original
    _installed[name] = (owner, attr, original)
    wrapped = functools.wraps(fn)(make(fn))
    setattr(owner, attr, staticmethod(wrapped) if static else wrapped)


def install() -> None:
    """Key, save and load DDP-split graphs' AOTAutograd entries (idempotent)."""
    ac, rw, result = _modules()
    if _installed:
        return

    def key_fn(orig: Callable[..., Any]) -> Callable[..., Any]:
        def autograd_cache_key(mod: Any, example_inputs: Any, config: Any, *args: Any, **kwargs: Any) -> Any:
            ctx = _tracing_context()
            if not _ddp_split(ctx):
                return orig(mod, example_inputs, config, *args, **kwargs)
            ctx.fakify_first_call = False  # torch's only objection; what it guards is handled here
            try:
                key, lines = orig(mod, example_inputs, config, *args, **kwargs)
            finally:
                ctx.fakify_first_call = True
            key = ddp_key(key)
            with _lock:
                _ddp_keys.add(key)
            return key, [*lines, f"[pcompile] DDP split graph, first call fakified: {TAG}"]
        return autograd_cache_key

    def pre_compile(orig: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(self: Any, fw_module: Any, flat_args: Any, aot_config: Any, **kwargs: Any) -> Any:
            out = orig(self, fw_module, flat_args, aot_config, **kwargs)
            info = getattr(aot_config, "cache_info", None)
            if info is not None and _is_ddp_key(info.cache_key):
                self._pcompile_inputs = [n.meta.get("val") for n in fw_module.graph.find_nodes(op="placeholder")]
            return out
        return wrapped

    def post_compile(orig: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(self: Any, compiled_fn: Any, aot_config: Any, **kwargs: Any) -> Any:
            info = getattr(aot_config, "cache_info", None)
            if info is not None and _is_ddp_key(info.cache_key) and self.needs_post_compile:
                meta = kwargs.get("runtime_metadata")
                try:  # never a failed compile: an output it cannot read is one it does not store
                    described, why = describe(list(self.out_metas), self.fwd_output_strides,
                                              getattr(self, "_pcompile_inputs", ()))
                except Exception as exc:
                    described, why = None, f"its outputs could not be read ({type(exc).__name__})"
                if described is not None and (meta is None or not _plain_wrappers(meta, None)):
                    described, why = None, _NOT_PLAIN
                with _lock:
                    _first_calls[info.cache_key] = (described, why)
            return orig(self, compiled_fn, aot_config, **kwargs)
        return wrapped

    def save(orig: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(key: str, entry: Any, remote: bool) -> Any:
            if not _is_ddp_key(key):
                return orig(key, entry, remote)
            with _lock:
                described, why = _first_calls.get(key, (None, "its first call's outputs were not seen"))
            if described is None or not _plain_wrappers(entry.runtime_metadata, entry.maybe_subclass_meta):
                _not_stored(why if described is None else _NOT_PLAIN)
                return None  # torch's bypass stands for this graph: nothing a hit could rebuild
            setattr(entry, FIELD, described)
            return orig(key, entry, remote)
        return wrapped

    def wrap_post_compile(orig: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(self: Any, args: Any, aot_config: Any, fx_config: Any) -> Any:
            ctx = _tracing_context()
            if not _ddp_split(ctx):
                return orig(self, args, aot_config, fx_config)
            described = getattr(self, FIELD, None)
            fakes = None
            if described is not None and _plain_wrappers(self.runtime_metadata, self.maybe_subclass_meta):
                try:
                    fakes = rebuild_outputs(described, getattr(ctx, "fake_mode", None), list(args))
                except Exception:  # a miss, as for any entry it cannot rebuild
                    fakes = None
            if fakes is None:
                raise ac.FXGraphCacheMiss("DDP split graph entry without rebuildable first-call fakes")
            compiled_fw, compiled_bw = self.compiled_fw, self.compiled_bw
            self.compiled_fw = _FirstCallFakes(compiled_fw, fakes)
            if compiled_bw is not None:
                lazy = not getattr(aot_config, "force_non_lazy_backward_lowering", False)
                self.compiled_bw = _FirstBackwardPops(compiled_bw, ctx.ddp_optimizer_ctx, self.runtime_metadata, lazy)
            try:
                fn = orig(self, args, aot_config, fx_config)
            finally:
                self.compiled_fw, self.compiled_bw = compiled_fw, compiled_bw
            ctx.fw_metadata = self.runtime_metadata  # as the forward compile sets it (no subclasses)
            return fn
        return wrapped

    _patch(ac, "autograd_cache_key", key_fn)
    _patch(rw.FakifiedOutWrapper, "pre_compile", pre_compile)
    _patch(rw.FakifiedOutWrapper, "post_compile", post_compile)
    _patch(ac.AOTAutogradCache, "save", save, static=True)
    _patch(result.GenericAOTAutogradResult, "wrap_post_compile", wrap_post_compile)


class _FirstCallFakes:
    """The entry's compiled forward, whose post_compile (the last step the hit path takes on the
    forward alone, before the subclass/RNG/autograd wrappers) adds FakifiedOutWrapper's runtime
    half, where a compile puts it; everything else is the forward's own."""

    def __init__(self, compiled_fw: Any, fakes: list[Any]) -> None:
        self._compiled_fw, self._fakes = compiled_fw, fakes

    def __getattr__(self, name: str) -> Any:
        return getattr(self._compiled_fw, name)

    def post_compile(self, result: Any, fx_config: Any) -> Any:
        return _fakified_first_call(self._compiled_fw.post_compile(result, fx_config), self._fakes)


def _fakified_first_call(compiled_fn: Callable[..., Any], fakes: list[Any]) -> Callable[..., Any]:
    """FakifiedOutWrapper's runtime half: the first call returns the fakes, later calls run."""
    pending: list[Any] | None = fakes

    @functools.wraps(compiled_fn)
    def wrapper(runtime_args: list[Any]) -> Any:
        nonlocal pending
        if pending is not None:
            out, pending = pending, None
            return out
        return compiled_fn(runtime_args)

    return wrapper


class _FirstBackwardPops:
    """The entry's compiled backward, whose first call takes this bucket's `fw_metadata` off
    DDPOptimizer's per-bucket stack (`_pop_own_metadata`), where a lazily lowered backward would
    take it: at its first call."""

    def __init__(self, compiled_bw: Any, ddp_ctx: Any, meta: Any, lazy: bool) -> None:
        self._compiled_bw, self._ddp_ctx, self._meta, self._lazy = compiled_bw, ddp_ctx, meta, lazy

    def __getattr__(self, name: str) -> Any:
        return getattr(self._compiled_bw, name)

    def post_compile(self, result: Any, fx_config: Any) -> Any:
        compiled_fn = self._compiled_bw.post_compile(result, fx_config)
        ddp_ctx, meta, lazy = self._ddp_ctx, self._meta, self._lazy
        first = True

        @functools.wraps(compiled_fn)  # keeps `_boxed_call`: torch calls it as it calls the original
        def backward(*args: Any, **kwargs: Any) -> Any:
            nonlocal first
            if first:
                first = False
                _pop_own_metadata(ddp_ctx, meta, lazy)
            return compiled_fn(*args, **kwargs)

        return backward


def _pop_own_metadata(ddp_ctx: Any, meta: Any, lazy: bool) -> None:
    """Leave `DDPOptimizerContext` as this bucket's miss would leave it at its first backward.

    SubmodCompiler pushes one `fw_metadata` per bucket (`metadata_per_bucket`, `curr_bucket` at
    the top; a hit pushes the entry's, which `wrap_post_compile` set). A lazily lowered bucket's
    first backward reads the slot at `curr_bucket` and steps down, so buckets must pop last to
    first, one each. A hit compiles no backward: unless it popped too, the next lazily lowered
    bucket below it would be lowered with the hit's metadata (its donated buffers, static inputs).
    The hit's own metadata is removed wherever it sits below the top (at the top when buckets run
    backward last to first, as stock assumes), which never changes what another bucket reads; were
    it not on the stack, the hit steps down only if its miss would have (lazily lowered)."""
    metas = getattr(ddp_ctx, "metadata_per_bucket", None)
    top = getattr(ddp_ctx, "curr_bucket", -1)
    if not isinstance(metas, list) or not 0 <= top < len(metas):
        return
    for i in range(top, -1, -1):
        if metas[i] is meta:
            del metas[i]
            ddp_ctx.curr_bucket = top - 1
            return
    if lazy:
        ddp_ctx.curr_bucket = top - 1


def uninstall() -> None:
    """Put back every original (tests)."""
    for owner, attr, original in _installed.values():
        setattr(owner, attr, original)
    _installed.clear()


def installed() -> list[str]:
    return sorted(_installed)
