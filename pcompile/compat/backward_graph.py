"""Compile an AOTAutograd backward graph in another process, ahead of its turn.

Why: AOTAutograd lowers a region's backward only after its forward is compiled (it needs the
forward's real output strides), so a cold compile is forward lowering, forward kernels, backward
lowering, backward kernels, one after another. The backward graph itself exists as soon as the
joint graph is partitioned; shipping it to another process then lets both lowerings run at once.
The other process runs the same `compile_fx_backward` the parent would, so it computes the same
FX graph cache key and publishes under it; the parent's own backward compile then finds the entry
through the store (single-flight waits for it). If the forward chose other strides for what it
saves, the parent's key differs and it compiles as before: the key is the check.

Touched (torch 2.14.1 and 2.11.0):
- `torch._functorch._aot_autograd.graph_compile._aot_stage2a_partition` (returns fw_module,
  bw_module, n_saved, n_symints_saved, ...; args fx_g, joint_inputs, maybe_subclass_meta,
  fw_metadata, aot_config) and `_aot_stage2b_bw_compile(bw_module, ...)`, both looked up as module
  globals by `aot_stage2_autograd`, so wrapping the module attribute intercepts them;
- `torch._inductor.compile_fx.compile_fx_backward(gm, inputs, compiler_config_extra, inner_compile)`
  and its `CompilerConfigExtra` dataclass (2.11: cudagraphs, graph_id, forward_device; 2.14 adds
  forward_is_partitioned and cudagraphs_bwd_override; 2.15 renames forward_device to
  forward_device_index and forward_is_partitioned to forward_is_cudagraph_partitioned);
- `torch._inductor.graph.GraphLowering.decide_layout_opt(gm, *, is_inference)` and
  `find_nodes_prefer_channels_last(self)` (reads only `self.module`), and
  `torch._prims_common.is_non_overlapping_and_dense_or_false`, to predict the channels-last
  strides the compiled forward gives what it saves (`predict_inputs`);
- `torch.fx._graph_pickler.GraphPickler.dumps/loads(data, fake_mode)`, Inductor's own way of
  sending a graph with fake-tensor metadata to a subprocess (compile_fx_ext.py);
- `FxGraphCache._check_for_hop` and `compile_fx_ext._graph_contains_triton_kernel_wrappers`:
  graphs Inductor will not cache (or cannot ship) are not sent.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import logging
from typing import Any, Callable

from pcompile.compat import CompatError, require_attr

#: The releases this module was read against (tools/private_surface.py puts them in compat/README.md).
CHECKED = {'torch': '2.11.0, 2.14.1, 2.15.0'}

log = logging.getLogger("pcompile.inductor")
_WRAPPED = "_pcompile_wrapped"
#: Process-global numerics settings that enter Inductor's FX cache key (codecache.py:
#: FxGraphHashDetails' cuda_matmul_settings and deterministic_algorithms_settings) or its output.
_FLAGS = (
    ("torch.backends.cuda.matmul", "fp32_precision"),
    ("torch.backends.cuda.matmul", "allow_fp16_reduced_precision_reduction"),
    ("torch.backends.cuda.matmul", "allow_bf16_reduced_precision_reduction"),
    ("torch.backends.cudnn", "fp32_precision"),
    ("torch.utils.deterministic", "fill_uninitialized_memory"),
)


def _graph_compile() -> Any:
    import torch._functorch._aot_autograd.graph_compile as gc

    return gc


def check() -> None:
    gc = _graph_compile()
    for name in ("_aot_stage2a_partition", "_aot_stage2b_bw_compile", "aot_stage2_autograd"):
        require_attr(gc, name, "torch._functorch._aot_autograd.graph_compile")
    import torch._inductor.compile_fx as cfx

    require_attr(cfx, "compile_fx_backward", "torch._inductor.compile_fx")
    require_attr(cfx, "compile_fx_inner", "torch._inductor.compile_fx")
    from torch._inductor.graph import GraphLowering

    require_attr(GraphLowering, "decide_layout_opt", "torch._inductor.graph.GraphLowering")
    require_attr(GraphLowering, "find_nodes_prefer_channels_last", "torch._inductor.graph.GraphLowering")
    import torch._prims_common as prims_common

    require_attr(prims_common, "is_non_overlapping_and_dense_or_false", "torch._prims_common")
    extra = require_attr(cfx, "CompilerConfigExtra", "torch._inductor.compile_fx")
    known = {"cudagraphs", "graph_id", "forward_device", "forward_is_partitioned", "cudagraphs_bwd_override",
             "forward_device_index", "forward_is_cudagraph_partitioned"}  # 2.15 names
    for f in dataclasses.fields(extra):  # type: ignore[arg-type]
        if f.name not in known and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise CompatError(f"torch._inductor.compile_fx.CompilerConfigExtra has a new required field {f.name!r}")
    import torch.fx._graph_pickler as gp

    pickler = require_attr(gp, "GraphPickler", "torch.fx._graph_pickler")
    require_attr(pickler, "dumps", "torch.fx._graph_pickler.GraphPickler")
    require_attr(pickler, "loads", "torch.fx._graph_pickler.GraphPickler")
    from torch._inductor.codecache import FxGraphCache

    require_attr(FxGraphCache, "_check_for_hop", "torch._inductor.codecache.FxGraphCache")
    import torch._inductor.config as iconfig

    require_attr(iconfig, "save_config_portable", "torch._inductor.config")


# -- the parent side: where the graphs are ---------------------------------------------------

@dataclasses.dataclass
class Partitioned:
    """What the partition hands the backward hook: the graph, the inputs it will most likely be
    compiled with (`predicted`), and why it cannot be shipped."""

    bw_module: Any
    why_not: str | None
    predicted: "Prediction" = dataclasses.field(default_factory=lambda: Prediction())


@dataclasses.dataclass
class Prediction:
    """The backward's inputs as the compiled forward will most likely save them (empty: use its
    placeholders), each input's name and producing forward op (for the log), and how many
    inputs differ from the placeholders."""

    inputs: list[Any] = dataclasses.field(default_factory=list)
    labels: list[str] = dataclasses.field(default_factory=list)
    restrided: int = 0


def install(on_partition: Callable[[Partitioned], None],
            around_backward: Callable[[Any, list[Any]], contextlib.AbstractContextManager[Any]]) -> None:
    """Call `on_partition` after each joint graph is split, and run each backward compile inside
    `around_backward(bw_module, placeholders)`, where `placeholders` are the inputs it is really
    compiled with (restrided to the compiled forward's outputs). Idempotent; `uninstall()` undoes it."""
    gc = _graph_compile()
    partition = getattr(gc._aot_stage2a_partition, _WRAPPED, gc._aot_stage2a_partition)
    bw_compile = getattr(gc._aot_stage2b_bw_compile, _WRAPPED, gc._aot_stage2b_bw_compile)

    @functools.wraps(partition)
    def partition_hook(*args: Any, **kwargs: Any) -> Any:
        out = partition(*args, **kwargs)
        try:
            why_not = _why_not(out, args, kwargs)
            predicted = Prediction()
            if why_not is None:
                try:
                    predicted = predict_inputs(out[0], out[1])
                except Exception as exc:  # ship the partition's own strides
                    log.info("pcompile: cannot predict the backward's input strides (%s: %s)", type(exc).__name__, exc)
            on_partition(Partitioned(out[1], why_not, predicted))
        except Exception:  # never let the speculation break the real compile
            pass
        return out

    @functools.wraps(bw_compile)
    def bw_compile_hook(*args: Any, **kwargs: Any) -> Any:
        bw_module = args[0] if args else kwargs.get("bw_module")

        def wrap(compiler: Callable[..., Any]) -> Callable[..., Any]:
            def compile_backward(gm: Any, placeholders: Any) -> Any:
                with contextlib.ExitStack() as stack:
                    try:
                        stack.enter_context(around_backward(bw_module, list(placeholders)))
                    except Exception:  # the speculation's trouble never fails the real compile
                        pass
                    return compiler(gm, placeholders)
            return compile_backward

        # 2.14 passes the compiler as the 7th argument; 2.11 reads aot_config.bw_compiler.
        if len(args) >= 7:
            return bw_compile(*args[:6], wrap(args[6]), *args[7:], **kwargs)
        if "bw_compiler" in kwargs:
            return bw_compile(*args, **{**kwargs, "bw_compiler": wrap(kwargs["bw_compiler"])})
        aot_config = _arg(args, kwargs, 5, "aot_config")
        original = getattr(aot_config, "bw_compiler", None)
        if original is None:
            return bw_compile(*args, **kwargs)
        aot_config.bw_compiler = wrap(original)
        try:
            return bw_compile(*args, **kwargs)
        finally:
            aot_config.bw_compiler = original

    setattr(partition_hook, _WRAPPED, partition)
    setattr(bw_compile_hook, _WRAPPED, bw_compile)
    gc._aot_stage2a_partition = partition_hook
    gc._aot_stage2b_bw_compile = bw_compile_hook


def predict_inputs(fw_module: Any, bw_module: Any) -> Prediction:
    """The backward's inputs as the compiled forward will most likely save them.

    The partition's placeholders have eager strides. With layout optimisation (Inductor's choice
    for convolution graphs, `GraphLowering.decide_layout_opt`) the compiled forward saves a dense
    4-D output channels-last if the node is in `find_nodes_prefer_channels_last()` (convolutions,
    what feeds them, and what follows them up to the last one), and AOTAutograd restrides the
    backward's inputs to match (`_aot_stage2b_bw_compile`), which changes the backward's FX key.
    This repeats that rule (`GraphLowering.run_node`, outputs): a buffer gets exact channels-last
    strides; a forward input is copied only if it is not channels-last already; a view keeps its
    strides. The FX key still checks each prediction: a wrong one only means the parent compiles
    its backward itself.
    """
    import types

    import torch
    from torch._inductor.graph import GraphLowering
    from torch._prims_common import is_non_overlapping_and_dense_or_false

    produced = {n.name: n for n in fw_module.graph.nodes}
    placeholders = bw_module.graph.find_nodes(op="placeholder")
    labels = [_label(node, produced.get(node.name)) for node in placeholders]
    vals = [node.meta.get("val") for node in placeholders]
    if not GraphLowering.decide_layout_opt(fw_module, is_inference=False):
        return Prediction(vals, labels, 0)
    prefer = GraphLowering.find_nodes_prefer_channels_last(types.SimpleNamespace(module=fw_module))  # type: ignore[arg-type]
    out, restrided = [], 0
    for node, val in zip(placeholders, vals):
        src = produced.get(node.name)
        if (isinstance(val, torch.Tensor) and val.dim() == 4 and src is not None and src in prefer
                and not _is_view(src) and is_non_overlapping_and_dense_or_false(val)
                and not (src.op == "placeholder" and val.is_contiguous(memory_format=torch.channels_last))):
            # A fresh tensor, not a view (the pickler cannot ship views made here); dumps() ships
            # the storage size of the original, which the parent's restrided input keeps.
            with val.fake_mode:
                new = torch.empty(tuple(val.shape), dtype=val.dtype, device=val.device, memory_format=torch.channels_last)
            restrided += new.stride() != val.stride()
            val = new
        out.append(val)
    return Prediction(out, labels, restrided)


def _label(node: Any, src: Any) -> str:
    """A backward input's name and the forward op that produced it (diagnostics)."""
    return node.name if src is None else f"{node.name} = {src.op if src.op == 'placeholder' else src.target}"


def _is_view(node: Any) -> bool:
    return bool(getattr(node.target, "is_view", False))


def differing_inputs(guessed: list[Any], real: list[Any], names: list[str] | None = None) -> list[str]:
    """Where the compiled forward's outputs differ from what the partition predicted (`names`:
    Prediction.labels, for the log)."""
    import torch

    names = names or []
    out = []
    for i, (g, r) in enumerate(zip(guessed, real)):
        label = f"input {i}" + (f" ({names[i]})" if i < len(names) else "")
        if isinstance(g, torch.Tensor) and isinstance(r, torch.Tensor):
            if tuple(g.shape) != tuple(r.shape) or g.stride() != r.stride() or g.dtype != r.dtype:
                out.append(f"{label}: {tuple(g.shape)}/{g.stride()} -> {tuple(r.shape)}/{r.stride()}")
        elif type(g) is not type(r) or (not isinstance(g, torch.Tensor) and g != r):
            out.append(f"{label}: {g!r} -> {r!r}")
    if len(guessed) != len(real):
        out.append(f"{len(guessed)} inputs -> {len(real)}")
    return out


def dump_fx_keys(directory: str) -> None:
    """Diagnostics (PCOMPILE_DEBUG_FX_KEYS=DIR): write Inductor's description of every FX graph key
    this process computes to DIR/<pid>-<key>.txt, to see why a shipped backward's key differed."""
    import os

    import torch._inductor.codecache as cc

    original = getattr(cc.compiled_fx_graph_hash, _WRAPPED, cc.compiled_fx_graph_hash)

    @functools.wraps(original)
    def hashed(*args: Any, **kwargs: Any) -> Any:
        key, lines = original(*args, **kwargs)
        try:
            os.makedirs(directory, exist_ok=True)
            with open(os.path.join(directory, f"{os.getpid()}-{key[:12]}.txt"), "w") as fh:
                fh.write("\n".join(lines))
        except OSError:
            pass
        return key, lines

    setattr(hashed, _WRAPPED, original)
    cc.compiled_fx_graph_hash = hashed


def uninstall() -> None:
    gc = _graph_compile()
    for name in ("_aot_stage2a_partition", "_aot_stage2b_bw_compile"):
        fn = getattr(gc, name)
        setattr(gc, name, getattr(fn, _WRAPPED, fn))


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str) -> Any:
    return args[index] if len(args) > index else kwargs.get(name)


def _why_not(out: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """None if this backward can be compiled elsewhere with the key the parent will compute."""
    import torch
    import torch._inductor.config as iconfig

    if _arg(args, kwargs, 2, "maybe_subclass_meta") is not None:
        return "tensor subclasses"
    if out[3]:
        return "symints saved for backward (dynamic shapes)"
    aot_config = _arg(args, kwargs, 4, "aot_config")
    if aot_config is None or getattr(aot_config, "is_export", False):
        return "export"
    if iconfig.triton.cudagraphs:
        return "cudagraphs (the forward fixes the backward's device box)"
    bw_module = out[1]
    for node in bw_module.graph.find_nodes(op="placeholder"):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) and not (isinstance(val, int) and not isinstance(val, bool)):
            return f"placeholder {node.name} is {type(val).__name__}"
    from torch._inductor.codecache import BypassFxGraphCache, FxGraphCache

    try:
        FxGraphCache._check_for_hop(bw_module)
    except BypassFxGraphCache as exc:
        return f"not cacheable ({exc})"
    try:
        from torch._inductor.compile_fx_ext import _graph_contains_triton_kernel_wrappers

        if _graph_contains_triton_kernel_wrappers(bw_module):
            return "user Triton kernels"
    except ImportError:
        pass
    return None


def fx_cache_hits() -> int:
    """Inductor's own count of FX graph cache hits in this process."""
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["fxgraph_cache_hit"])


def placeholder_vals(gm: Any) -> list[Any]:
    return [n.meta.get("val") for n in gm.graph.find_nodes(op="placeholder")]


@dataclasses.dataclass
class Shipment:
    """Everything the other process needs to repeat the parent's backward compile."""

    gm: Any
    example_inputs: list[Any]
    inductor_config: dict[str, Any]
    flags: dict[str, Any]
    #: bytes of each input's storage: a saved activation is often a view into a larger buffer
    #: (q, k, v of one projection), the pickler rebuilds minimal storages, and the storage size is
    #: part of the FX key.
    storage_bytes: list[int | None] = dataclasses.field(default_factory=list)


def dumps(bw_module: Any, inputs: list[Any] | None = None) -> bytes:
    """The backward graph with its guessed inputs (default: its placeholders' values), Inductor
    config and numerics flags."""
    import torch
    import torch._inductor.config as iconfig
    from torch.fx._graph_pickler import GraphPickler, Options

    flags: dict[str, Any] = {}
    for owner, name in _FLAGS:
        try:
            flags[f"{owner}.{name}"] = getattr(_resolve(owner), name)
        except (ImportError, AttributeError):
            pass
    flags["deterministic"] = torch.are_deterministic_algorithms_enabled()
    flags["deterministic_warn_only"] = torch.is_deterministic_algorithms_warn_only_enabled()
    original = placeholder_vals(bw_module)
    vals = list(inputs) if inputs else original
    storage = [int(v.untyped_storage().nbytes()) if isinstance(v, torch.Tensor) else None for v in original]
    shipment = Shipment(bw_module, vals, iconfig.save_config_portable(), flags, storage)
    # Every op by name (the default filter refuses non-aten ops such as prims.fma, which
    # decompositions emit): both ends run the same torch, so the names resolve.
    # Node metadata naming the user's modules and functions (forward stacks copied onto backward
    # nodes) would need the user's script importable in the worker; lowering does not read it.
    return GraphPickler.dumps(shipment, Options(ops_filter=None, node_metadata_key_filter=_meta_key_wanted))


def _resolve(dotted: str) -> Any:
    """`torch.backends.cuda.matmul` is an object, not a module: import the longest module prefix,
    then walk attributes. (Importing it as a module failed, so TF32 and reduced-precision matmul
    settings were never shipped: nanoGPT sets allow_tf32, and every backward the worker compiled
    for it had another FX key than the parent's, H100 2026-11-25.)"""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        return functools.reduce(getattr, parts[cut:], obj)
    raise ImportError(dotted)


def _meta_key_wanted(key: str) -> bool:
    return not key.endswith(("nn_module_stack", "source_fn_stack"))


def _apply_flags(flags: dict[str, Any]) -> None:
    """Set the parent's numerics flags (the worker runs one shipment at a time, each sets all)."""
    import torch

    for path, value in flags.items():
        owner, _, name = path.rpartition(".")
        if owner.startswith("torch."):
            setattr(_resolve(owner), name, value)
    torch.use_deterministic_algorithms(flags["deterministic"], warn_only=flags["deterministic_warn_only"])


def _config_extra() -> Any:
    from torch._inductor.compile_fx import CompilerConfigExtra
    from torch._inductor.utils import BoxedBool

    from torch._inductor.cudagraph_utils import BoxedDeviceIndex

    values = {"cudagraphs": BoxedBool(False), "graph_id": 0, "forward_device": BoxedDeviceIndex(None),
              "forward_is_partitioned": BoxedBool(False),
              # 2.15's names for the last two
              "forward_device_index": BoxedDeviceIndex(None), "forward_is_cudagraph_partitioned": BoxedBool(False)}
    names = {f.name for f in dataclasses.fields(CompilerConfigExtra)}
    return CompilerConfigExtra(**{k: v for k, v in values.items() if k in names})


def prewarm() -> None:
    """Pay a fresh process's one-time Inductor costs before the first graph arrives: the module
    imports lowering needs, the torch source hash and system description in every FX key, and the
    post-grad pattern tables (built lazily on first use)."""
    for name in ("torch._inductor.lowering", "torch._inductor.graph", "torch._inductor.scheduler",
                 "torch._inductor.codegen.wrapper", "torch._inductor.codegen.triton", "torch._inductor.codegen.cpp",
                 "torch._inductor.fx_passes.post_grad"):
        try:
            importlib.import_module(name)
        except Exception:
            pass
    try:
        from torch._inductor.codecache import CacheBase, torch_key

        torch_key()
        CacheBase.get_system()
    except Exception:
        pass
    try:
        from torch._inductor.fx_passes.post_grad import lazy_init

        lazy_init()
    except Exception:
        pass


def _with_storage(inputs: list[Any], storage_bytes: list[int | None], fake_mode: Any) -> list[Any]:
    """Inputs that viewed a larger storage in the parent view one of that size here too."""
    import torch

    out = []
    for t, nbytes in zip(inputs, storage_bytes + [None] * (len(inputs) - len(storage_bytes))):
        if isinstance(t, torch.Tensor) and nbytes and t.untyped_storage().nbytes() != nbytes and t.element_size():
            with fake_mode:
                base = torch.empty((nbytes // t.element_size(),), dtype=t.dtype, device=t.device)
                t = base.as_strided(t.shape, t.stride(), t.storage_offset())
        out.append(t)
    return out


def _inner_compile() -> Callable[..., Any]:
    """compile_fx's inner compile as `compile_fx` builds it (2.14 binds the decomposition table,
    which enters the FX cache key as a kwarg)."""
    from torch._inductor.compile_fx import _CompileFxKwargs, compile_fx_inner
    from torch._inductor.decomposition import select_decomp_table

    if "get_decomp_fn" in getattr(_CompileFxKwargs, "__annotations__", {}):
        return functools.partial(compile_fx_inner, get_decomp_fn=select_decomp_table)
    return compile_fx_inner


def compile_shipped(data: bytes) -> None:
    """In the other process: the parent's `bw_compiler(bw_module, placeholders)` call, replayed.

    The result reaches the parent through Inductor's FX graph cache (pcompile's store), not
    through this function."""
    import torch
    import torch._inductor.config as iconfig
    from torch._inductor.compile_fx import compile_fx_backward
    from torch._inductor.virtualized import V
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx._graph_pickler import GraphPickler
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    fake_mode = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
    shipment = GraphPickler.loads(data, fake_mode)
    if not isinstance(shipment, Shipment):
        raise TypeError(f"expected a Shipment, got {type(shipment).__name__}")
    context = torch._guards.TracingContext(fake_mode)
    _apply_flags(shipment.flags)
    inputs = _with_storage(list(shipment.example_inputs), shipment.storage_bytes, fake_mode)
    with contextlib.ExitStack() as stack:
        stack.enter_context(iconfig.patch(shipment.inductor_config))
        stack.enter_context(V.set_fake_mode(fake_mode))
        stack.enter_context(torch._guards.tracing(context))
        stack.enter_context(torch.no_grad())
        stack.enter_context(torch._C._DisableAutocast())
        compile_fx_backward(shipment.gm, inputs, _config_extra(), inner_compile=_inner_compile())
