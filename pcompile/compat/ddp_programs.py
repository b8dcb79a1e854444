"""Programs for frames compiled under DDP: a DDP restart runs its compiled frames without Dynamo.

Why: a DDP job's restart with every bucket an AOTAutograd hit still spent 5.3-7.1 s tracing its
frames again (nanoGPT, 2 GPUs: RESULTS.md, session 5), because no frame that DDPOptimizer splits
ever got into a program. Two torch gaps (2.11-2.15), both closed here:

- `ConvertFrame._clone_with_backend` (how a frame under an active DDP module is handed to
  `DDPOptimizer.compile_fn`) builds the new converter without the compile's `CompilePackage`, so
  nothing of such a frame was recorded. The clone keeps the package.
- The frame's compiled callable is DDPOptimizer's split graph (`split_gm`: one compiled
  submodule per bucket), for which no backend artifact exists, so torch marked the frame
  bypassed ("Backend not found"). Each bucket's graph now carries a backend id of its own
  (`<frame's id>_ddpN`, so AOTAutograd records its entry as a program's backend artifact, as it
  does for a whole frame), and the split graph is recorded under the frame's id as a
  `SplitGraphArtifact`: the split graph's code with its buckets' ids. Before a program is saved,
  `resolve()` puts the buckets' artifacts inside it; a bucket whose entry is not recorded yet (a
  lazily lowered backward writes it at the first backward) leaves the frame out until then.
  Installing a program rebuilds the split graph around the buckets' callables, each loaded from
  its AOTAutograd entry the way a whole frame's is: no fakes, no DDPOptimizer, no Dynamo.

What it refuses (the frame stays out of the program, as before): a split graph holding anything
but placeholders, calls of its compiled buckets, plain functions and the output (attributes,
parameters, other modules).

Touched (torch 2.11.0, 2.14.1 and 2.15.0 read: same names in all three):
`torch._dynamo.convert_frame.ConvertFrame._clone_with_backend` (a property) and its
`_inner_convert._package`; `torch._dynamo.backends.distributed.DDPOptimizer.compile_fn` and
`.backend_compile_fn`, the `compiled_submod_*` wrappers SubmodCompiler puts in the split graph
(fields `submod`, `unwrap_singleton_tuple`), `gm._backend_id` (set by Dynamo's OutputGraph when
a package records the frame; read by AOTAutograd as `precompile_backend_id`);
`torch._dynamo.precompile_context.{BackendCacheArtifact, PrecompileContext.record_artifact}`;
`torch._functorch._aot_autograd.aot_autograd_result.BundledAOTAutogradCacheArtifact`.
"""
from __future__ import annotations

import dataclasses
import pickle
from typing import Any, Callable

from pcompile.compat import CompatError, require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.14.1, 2.15.0'}

_SUFFIX = "_ddp"
_PREFIX = "compiled_"
_saved: dict[str, Any] = {}


def _modules() -> tuple[Any, Any, Any, Any]:
    from torch._dynamo import convert_frame, precompile_context
    from torch._dynamo.backends import distributed
    from torch._functorch._aot_autograd import aot_autograd_result

    return convert_frame, distributed, precompile_context, aot_autograd_result


def check() -> None:
    import inspect

    convert_frame, distributed, precompile_context, result = _modules()
    clone = inspect.getattr_static(convert_frame.ConvertFrame, "_clone_with_backend", None)
    if not isinstance(clone, property):
        raise CompatError("torch._dynamo.convert_frame.ConvertFrame._clone_with_backend is no longer a property")
    require_attr(distributed.DDPOptimizer, "compile_fn", "torch._dynamo.backends.distributed.DDPOptimizer")
    if "backend_compile_fn" not in inspect.signature(distributed.DDPOptimizer.__init__).parameters:
        raise CompatError("DDPOptimizer.__init__ no longer takes backend_compile_fn")
    require_attr(distributed.SubmodCompiler, "compile_submod", "torch._dynamo.backends.distributed.SubmodCompiler")
    source = inspect.getsource(distributed.SubmodCompiler.compile_submod)
    if "unwrap_singleton_tuple" not in source or "self.submod" not in source:
        raise CompatError("SubmodCompiler.compile_submod's wrapper no longer has submod/unwrap_singleton_tuple")
    require_attr(precompile_context, "BackendCacheArtifact", "torch._dynamo.precompile_context")
    require_attr(precompile_context.PrecompileContext, "record_artifact", "PrecompileContext")
    require_attr(result, "BundledAOTAutogradCacheArtifact", "torch._functorch._aot_autograd.aot_autograd_result")


def _made(name: str) -> Any:
    """SplitGraphArtifact, Slot and Bucket, made on first use (their bases are torch's, and this module is
    imported before torch is) and kept as module globals, so pickles can name them here."""
    if name not in globals():
        import torch
        from torch._dynamo.precompile_context import BackendCacheArtifact

        @dataclasses.dataclass
        class SplitGraphArtifact(BackendCacheArtifact):  # type: ignore[type-arg]
            """A DDP frame's split graph: `content` = {"graph": pickled GraphModule whose bucket
            calls are Slots, "buckets": {attribute: (bucket backend id, unwrap a 1-tuple)},
            "resolved": {bucket backend id: that bucket's AOTAutograd artifact content}}."""

            def after_deserialization(self) -> Any:
                return _rebuild(self.content)

        class Slot(torch.nn.Module):
            """Stands in for a compiled bucket in the pickled split graph."""

            def forward(self, *args: Any) -> Any:
                raise RuntimeError("pcompile: a DDP split graph's bucket was not rebuilt")

        class Bucket(torch.nn.Module):
            """What SubmodCompiler's wrapper does around a compiled bucket."""

            def __init__(self, fn: Callable[..., Any], unwrap: bool) -> None:
                super().__init__()
                self.fn, self.unwrap = fn, unwrap

            def forward(self, *args: Any) -> Any:
                out = self.fn(*args)
                if self.unwrap and isinstance(out, (tuple, list)):
                    return out[0]
                return out

        for klass in (SplitGraphArtifact, Slot, Bucket):
            klass.__module__, klass.__qualname__ = __name__, klass.__name__
            globals()[klass.__name__] = klass
    return globals()[name]


def __getattr__(name: str) -> Any:  # an unpickling process asks before anything made them
    if name in ("SplitGraphArtifact", "Slot", "Bucket"):
        return _made(name)
    raise AttributeError(name)


def _describe(split_gm: Any, ids: dict[int, str]) -> dict[str, Any] | None:
    """The split graph with its buckets as slots, or None when it holds anything else."""
    import torch.fx as fx

    buckets: dict[str, tuple[str, bool]] = {}
    slots = {}
    Slot = _made("Slot")
    for node in split_gm.graph.nodes:
        if node.op in ("placeholder", "output", "call_function"):
            continue
        if node.op != "call_module" or not str(node.target).startswith(_PREFIX) or "." in str(node.target):
            return None
        wrapper = getattr(split_gm, str(node.target))
        bucket_id = ids.get(id(getattr(wrapper, "submod", None)))
        if bucket_id is None:
            return None
        buckets[str(node.target)] = (bucket_id, bool(getattr(wrapper, "unwrap_singleton_tuple", False)))
        slots[str(node.target)] = Slot()
    graph = fx.GraphModule(slots, split_gm.graph)
    return {"graph": pickle.dumps(graph), "buckets": buckets, "resolved": {}}


def _rebuild(content: dict[str, Any]) -> Any:
    from torch._functorch._aot_autograd.aot_autograd_result import BundledAOTAutogradCacheArtifact

    Bucket = _made("Bucket")
    graph = pickle.loads(content["graph"])
    for attr, (bucket_id, unwrap) in content["buckets"].items():
        fn = BundledAOTAutogradCacheArtifact(bucket_id, content["resolved"][bucket_id]).after_deserialization()
        setattr(graph, attr, Bucket(fn, unwrap))
    return graph


def resolve(backends: dict[Any, Any]) -> dict[Any, Any]:
    """`backends` (backend id -> artifact, what a program is saved with) with every split graph's
    buckets put inside it; a split graph one of whose buckets has no artifact yet is left out
    (torch marks its frame bypassed: the program is saved again once the bucket's entry exists)."""
    klass = globals().get("SplitGraphArtifact")
    if klass is None:
        return backends
    out = dict(backends)
    for key, artifact in backends.items():
        if not isinstance(artifact, klass):
            continue
        content = dict(artifact.content)
        resolved = dict(content.get("resolved", {}))
        for bucket_id, _ in content["buckets"].values():
            if bucket_id in resolved:
                continue
            bucket = backends.get(bucket_id)
            if bucket is None:
                out.pop(key)
                break
            resolved[bucket_id] = bucket.content
        else:
            content["resolved"] = resolved
            out[key] = klass(artifact.key, content)
    return out


def install(on_error: Callable[[str], None] = lambda why: None) -> None:
    """Both patches (idempotent). `on_error(why)`: a split graph that could not be recorded (its
    frame stays out of the program, as without this module)."""
    if "clone" in _saved:
        return
    convert_frame, distributed, precompile_context, _ = _modules()
    klass = _made("SplitGraphArtifact")
    clone = convert_frame.ConvertFrame.__dict__["_clone_with_backend"]
    compile_fn = distributed.DDPOptimizer.compile_fn

    def _clone_with_backend(self: Any) -> Callable[[Any], Any]:
        make = clone.fget(self)
        package = getattr(getattr(self, "_inner_convert", None), "_package", None)

        def clone_keeping_package(backend: Any) -> Any:
            made = make(backend)
            inner = getattr(made, "_inner_convert", None)
            if package is not None and inner is not None and getattr(inner, "_package", None) is None:
                inner._package = package
            return made

        return clone_keeping_package

    def ddp_compile_fn(self: Any, gm: Any, example_inputs: Any, **configs: Any) -> Any:
        frame_id = getattr(gm, "_backend_id", None)
        if not isinstance(frame_id, str):
            return compile_fn(self, gm, example_inputs, **configs)
        inner = self.backend_compile_fn
        ids: dict[int, str] = {}

        def per_bucket(mod: Any, args: Any, **kwargs: Any) -> Any:
            if mod is not gm:  # one bucket: DDPOptimizer compiles the frame's graph itself
                mod._backend_id = f"{frame_id}{_SUFFIX}{len(ids)}"
            out = inner(mod, args, **kwargs)
            if mod is not gm:
                ids[id(out)] = mod._backend_id
            return out

        self.backend_compile_fn = per_bucket
        try:
            result = compile_fn(self, gm, example_inputs, **configs)
        finally:
            self.backend_compile_fn = inner
        if ids:
            try:
                described = _describe(result, ids)
                if described is None:
                    on_error("the split graph holds more than its compiled buckets")
                else:
                    precompile_context.PrecompileContext.record_artifact(klass(frame_id, described))
            except Exception as exc:
                on_error(f"{type(exc).__name__}: {exc}")
        return result

    _saved["clone"] = clone
    _saved["compile_fn"] = compile_fn
    convert_frame.ConvertFrame._clone_with_backend = property(_clone_with_backend)  # type: ignore[assignment]
    distributed.DDPOptimizer.compile_fn = ddp_compile_fn  # type: ignore[method-assign]


def uninstall() -> None:
    """Back to stock (tests)."""
    if "clone" not in _saved:
        return
    convert_frame, distributed, _, _ = _modules()
    convert_frame.ConvertFrame._clone_with_backend = _saved.pop("clone")  # type: ignore[assignment]
    distributed.DDPOptimizer.compile_fn = _saved.pop("compile_fn")  # type: ignore[method-assign]
