"""Every private torch API the warm path touches, in one place, for torch 2.11 to 2.15.

(Moved here from pcompile/warm/compat.py so that every private touch lives under compat/; it still
holds several concerns and is the next one to split.)

The warm child runs an ordinary training script on fake tensors under the virtual device. Stock
torch then needs a few adjustments so that executing compiled code does nothing, no value is
read from device memory (which holds garbage), and module moves work on fakes. Each function
here installs one adjustment and names the private symbol it relies on; `check()` verifies they
all still exist so a torch upgrade fails loudly (tests/test_warm_compat.py) instead of warming
wrongly.
"""
from __future__ import annotations

import functools
import os
import threading
from typing import Any, Callable

import torch

from pcompile.inductor.gate import TORCH_RANGE as SUPPORTED  # one range for hooks and warm

CHECKED = {"torch": "2.11.0, 2.14.1, 2.15.0 (2.15: check() and tests/test_warm*.py)"}

# (module path, attribute) of every private symbol used below.
PRIVATE_SYMBOLS: list[tuple[str, str]] = [
    ("torch._subclasses.fake_tensor", "FakeTensor"),
    ("torch._subclasses.fake_tensor", "FakeTensorMode"),
    ("torch._C._dynamo.guards", "_empty_strided_cuda"),
    ("torch._C._dynamo.guards", "_empty_strided_cpu"),
    ("torch._C._dynamo.guards", "_reinterpret_tensor"),
    ("torch._C._dynamo.guards", "assert_alignment"),
    ("torch._inductor.runtime.triton_heuristics", "CachingAutotuner"),
    ("torch._inductor.fx_passes.joint_graph", "UniformValueConstantFolder"),
    ("torch._inductor.constant_folding", "ConstantFolder"),
    ("torch._inductor.compile_fx", "joint_graph_passes"),
    ("torch._inductor.compile_fx", "_compile_fx_inner"),
    ("torch._inductor.compile_fx", "compile_fx"),
    ("torch._tensor_str", "_str"),
    ("torch._dynamo.utils", "counters"),
    ("torch.testing._internal.distributed.fake_pg", "FakeStore"),
    ("torch.utils._triton", "triton_hash_with_backend"),
    ("torch.nn.parallel.distributed", "_verify_param_shape_across_processes"),
    ("torch.nn.parallel.distributed", "_sync_module_states"),
    ("torch.amp.grad_scaler.GradScaler", "_maybe_opt_step"),
    ("torch._inductor.fx_passes.pad_mm", "_should_pad"),
    ("torch._inductor.cudagraph_trees", "cudagraphify_impl"),
    ("torch._inductor.compile_fx", "cudagraphify_impl"),
    ("torch._inductor.fx_passes.pad_mm", "get_do_bench"),
    ("torch._inductor.config", "fx_graph_cache"),
    ("torch._functorch.config", "enable_autograd_cache"),
    ("torch._functorch._aot_autograd.autograd_cache", "autograd_cache_key"),
    ("torch._functorch._aot_autograd.autograd_cache.AOTAutogradCache", "save"),
    ("torch._inductor.codecache.FxGraphCache", "_save_graph"),
    ("torch._inductor.runtime.benchmarking", "Benchmarker"),
    ("torch._inductor.runtime.benchmarking", "benchmarker"),
    ("torch._subclasses.fake_tensor", "unset_fake_temporarily"),
]



def _marked(fn: Any, concern: str) -> bool:
    """Whether `fn` already carries this concern's wrapper. One marker per concern: several
    concerns wrap the same function (functools.wraps copies the marks outward)."""
    return concern in getattr(fn, "_pcompile_patches", ())


def _mark(fn: Any, concern: str) -> None:
    fn._pcompile_patches = (*getattr(fn, "_pcompile_patches", ()), concern)

def torch_version() -> tuple[int, int]:
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def version_supported() -> bool:
    return SUPPORTED[0] <= torch_version() <= SUPPORTED[1]


def _resolve(module: str, attr: str) -> Any:
    import importlib

    try:
        return getattr(importlib.import_module(module), attr)
    except ModuleNotFoundError:
        parent, cls = module.rsplit(".", 1)  # a class attribute: "pkg.mod.Class", "attr"
        return getattr(getattr(importlib.import_module(parent), cls), attr)


def check() -> list[str]:
    """Names of private symbols that are missing in this torch (empty when all is well)."""
    missing = []
    for module, attr in PRIVATE_SYMBOLS:
        try:
            _resolve(module, attr)
        except (ImportError, AttributeError):
            missing.append(f"{module}.{attr}")
    # instance attributes the swap hook edits (allow_fake_param_moves)
    from torch._subclasses.fake_tensor import FakeTensorMode

    converter = FakeTensorMode().fake_tensor_converter
    for owner, attr in ((converter, "constant_storage_mapping"), (converter.meta_converter, "tensor_memo"),
                        (converter.meta_converter, "describer")):
        if not hasattr(owner, attr):
            missing.append(f"{type(owner).__qualname__}().{attr}")
    return missing


# ------------------------------------------------------------------ fake tensors
def new_fake_mode(on_host_read: Callable[[str], None]) -> Any:
    """The mode the whole script runs under: a device-scoped fake mode.

    Only ops that touch CUDA (a CUDA tensor or fake among the inputs, or `device=cuda`) run on
    fakes; every other op -- the data loader's numpy and CPU tensor work, model construction and
    weight init on CPU, loss accumulators, LR schedules -- runs for real, exactly as on a GPU host.
    Where a CUDA value flows back to the host, the virtual GPU reads as zeros (pcompile/warm/reads.py):
    a fake CPU result becomes a real CPU tensor of zeros, a real CPU tensor written from a CUDA value
    gets zeros, and an op whose output depends on values (nonzero, equal, ...) runs on CPU zeros.
    `on_host_read(how)` counts each such read.

    A subclass of FakeTensorMode, not a separate dispatch mode: it occupies the one infra slot for
    fake modes, so Dynamo's own fake mode replaces it while tracing and compiling (a user-level
    dispatch mode would be seen by, and disable, torch.compile)."""
    from torch._subclasses.fake_tensor import (DataDependentOutputException, DynamicOutputShapeException, FakeTensor,
                                               FakeTensorMode)
    from torch.utils._pytree import tree_flatten, tree_map

    local = threading.local()

    def virtual(x: Any) -> bool:
        if isinstance(x, FakeTensor):
            return True
        if isinstance(x, torch.Tensor):
            return x.device.type == "cuda"
        return isinstance(x, torch.device) and x.type == "cuda"

    def writes_real_tensor(func: Any, args: Any, kwargs: Any) -> bool:
        schema = getattr(func, "_schema", None)
        if schema is None:
            return False
        for i, arg in enumerate(schema.arguments):
            value = args[i] if i < len(args) else kwargs.get(arg.name)
            if arg.alias_info is not None and arg.alias_info.is_write:
                for v in (value if isinstance(value, (list, tuple)) else (value,)):
                    if isinstance(v, torch.Tensor) and not isinstance(v, FakeTensor) and v.device.type != "cuda":
                        return True
        return False

    class DeviceScopedFakeMode(FakeTensorMode):
        # Higher-order operators look their rule up by the mode's exact type, so FakeTensorMode's
        # rules never reach a subclass ("no rule registered for HigherOrderOperator": activation
        # checkpointing's graphsafe_run_with_rng_state on 2.11, DTensor's run_dtensor_rng_op in
        # FSDP2 init). With this flag they reach __torch_dispatch__, which hands them that rule,
        # registered now or later.
        supports_higher_order_operators = True

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            if isinstance(func, torch._ops.HigherOrderOperator):
                rule = func.python_key_table.get(FakeTensorMode)
                if rule is None or getattr(local, "hop", None) is func:  # newer torch: the rule comes back here
                    return super().__torch_dispatch__(func, types, args, kwargs)
                outer, local.hop = getattr(local, "hop", None), func
                try:
                    return rule(self, *args, **kwargs)  # the HOP has popped this mode, as for an exact-type rule
                finally:
                    local.hop = outer
            depth = getattr(local, "depth", 0)  # > 0: inside fake tensor's own decompositions
            if depth == 0 and not any(virtual(x) for x in tree_flatten((args, kwargs))[0]):
                return func(*args, **kwargs)  # a host op: run it for real
            if depth == 0 and writes_real_tensor(func, args, kwargs):
                return self._on_host_zeros(func, args, kwargs, "copy to a CPU tensor", to_device=False)
            local.depth = depth + 1
            try:
                out = super().__torch_dispatch__(func, types, args, kwargs)
            except (DataDependentOutputException, DynamicOutputShapeException):
                if depth:
                    raise
                return self._on_host_zeros(func, args, kwargs, f"{func} (depends on values)", to_device=True)
            finally:
                local.depth = depth
            if depth:
                return out
            return tree_map(self._host_result, out)

        def _host_result(self, x: Any) -> Any:
            if isinstance(x, FakeTensor) and x.device.type != "cuda" and x.fake_mode is self:
                on_host_read(".cpu()")
                from pcompile.warm.reads import zeros_like_on_cpu

                return zeros_like_on_cpu(x)
            return x

        def _on_host_zeros(self, func: Any, args: Any, kwargs: Any, how: str, to_device: bool) -> Any:
            """Run `func` for real on CPU with every virtual input read as zeros. With `to_device`,
            tensor results come back as CUDA fakes of the shape that computation gave."""
            from pcompile.warm.reads import zeros_like_on_cpu

            on_host_read(how)

            def host(x: Any) -> Any:
                if isinstance(x, torch.Tensor) and virtual(x):
                    return zeros_like_on_cpu(x)
                if isinstance(x, torch.device) and x.type == "cuda":
                    return torch.device("cpu")
                return x

            out = func(*tree_map(host, args), **tree_map(host, kwargs))
            if not to_device:
                return out

            def back(x: Any) -> Any:
                if isinstance(x, torch.Tensor):
                    with self:
                        return torch.empty_strided(tuple(x.shape), x.stride(), dtype=x.dtype, device="cuda")
                return x

            return tree_map(back, out)

    return DeviceScopedFakeMode(allow_non_fake_inputs=True)


def is_fake(t: object) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor)


def active_fake_mode() -> Any:
    return torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE)


def allow_fake_param_moves() -> None:
    """`model.cuda()` swaps each parameter with its fake (torch.utils.swap_tensors, see
    keep_parameters_when_moved), which refuses tensors with weakrefs, and FakeTensorMode's
    converter refers to both weakly: the fake in its memo, the real tensor in its describer's
    id table. Drop those entries first (only lookup caches) so the swap goes through."""
    import torch.utils as tu

    original = tu.swap_tensors
    if _marked(original, "allow_fake_param_moves"):
        return

    def forget(mode: Any, pair: tuple[torch.Tensor, torch.Tensor]) -> None:
        converter = mode.fake_tensor_converter
        meta = converter.meta_converter
        for t in pair:
            meta.describer.lookup_tensor.pop(t, None)
        for key, value in list(meta.tensor_memo.items()):
            if value is pair[0] or value is pair[1]:
                del meta.tensor_memo[key]
        # one-element fakes carry their real value (`constant`) and sit weakly in the alias table
        for key, refs in list(converter.constant_storage_mapping.items()):
            kept = [r for r in refs if r() is not pair[0] and r() is not pair[1]]
            if len(kept) != len(refs):
                converter.constant_storage_mapping[key] = kept
        for t in pair:
            if is_fake(t) and getattr(t, "constant", None) is not None:
                t.constant = None

    def swap_tensors(t1: torch.Tensor, t2: torch.Tensor) -> None:
        for mode in {id(t.fake_mode): t.fake_mode for t in (t1, t2) if is_fake(t)}.values():
            forget(mode, (t1, t2))
        return original(t1, t2)

    _mark(swap_tensors, "allow_fake_param_moves")
    tu.swap_tensors = swap_tensors


def load_cuda_checkpoints_as_fakes() -> None:
    """torch.load under the script's fake mode reads a checkpoint as a GPU host would.

    torch.serialization sees the active fake mode (detect_fake_mode) and then reads *no* data: every
    storage becomes a meta storage tagged with its location, and each tensor rebuilt on one is a
    plain meta tensor -- neither a real CPU tensor nor a CUDA fake. The device-scoped mode runs ops
    on those as host ops, so copying one into a CPU model (load_state_dict before .to(device):
    nanoGPT's sample.py, timm's validate.py with a checkpoint) failed with "Cannot copy out of meta
    tensor; no data!", and a checkpoint or data file loaded to CPU had no values.
    Load with the fake mode set aside instead: storages bound for CPU get their real bytes, and
    storages bound for CUDA (saved from CUDA with no map_location, or a map_location string, device
    or dict naming cuda) are read on CPU and each tensor on them is rebuilt as `.to(device)` under
    the mode: a CUDA fake of the same shape, dtype and device. A callable map_location could move
    storages itself (storage.cuda()), so those loads run unchanged."""
    import torch._utils as tutils
    import torch.serialization as ser
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    original_load = ser.load
    if _marked(original_load, "load_cuda_checkpoints_as_fakes"):
        return
    original_rebuild = tutils._rebuild_tensor_v2
    local = threading.local()

    def target(location: str, map_location: Any) -> str:
        if map_location is None:
            return location
        if isinstance(map_location, (str, torch.device)):
            return str(map_location)
        return str(map_location.get(location, location))  # a dict: locations it does not name keep theirs

    def load(f: Any, map_location: Any = None, *args: Any, **kwargs: Any) -> Any:
        mode = active_fake_mode()
        if mode is None or not (map_location is None or isinstance(map_location, (str, torch.device, dict))):
            return original_load(f, map_location, *args, **kwargs)
        intended: dict[int, str] = {}

        def restore(storage: Any, location: str) -> Any:
            dev = target(location, map_location)
            if dev.startswith("cuda"):
                intended[id(storage)] = dev  # stays on CPU; its tensors become fakes in rebuild
                return storage
            return ser.default_restore_location(storage, dev)

        outer = getattr(local, "state", None)
        local.state = (intended, mode)
        try:
            with unset_fake_temporarily():
                return original_load(f, restore, *args, **kwargs)
        finally:
            local.state = outer

    def rebuild(storage: Any, *args: Any, **kwargs: Any) -> Any:
        t = original_rebuild(storage, *args, **kwargs)
        state = getattr(local, "state", None)
        if state is not None:
            intended, mode = state
            dev = intended.get(id(getattr(storage, "_untyped_storage", storage)))
            if dev is not None:
                with mode:
                    moved = t.detach().to(dev)
                return moved.requires_grad_(True) if t.requires_grad else moved
        return t

    # torch.save pickles tensors by reference to torch._utils._rebuild_tensor_v2: the wrapper takes
    # its module and name, so pickles written under warm stay the same bytes
    functools.update_wrapper(rebuild, original_rebuild)
    functools.update_wrapper(load, original_load)
    _mark(load, "load_cuda_checkpoints_as_fakes")
    ser.load = load
    torch.load = load
    tutils._rebuild_tensor_v2 = rebuild


_OUT_META_LIB: Any = None


def meta_for_scaled_mm_out() -> None:
    """Inductor's wrappers call extern GEMMs with out= (extern_kernels._scaled_mm(..., out=buf)), and
    torch registers a meta kernel only for aten._scaled_mm.default: on fakes the .out overload fell
    through FakeTensorMode's unsafe fallback to the real CUDA kernel (cublasCreate on the virtual
    device: CUBLAS_STATUS_NOT_INITIALIZED; float8 training, e.g. torchao Float8Linear). Give it a Meta
    kernel that checks the inputs as the .default one does and returns `out` (already allocated)."""
    global _OUT_META_LIB
    if _OUT_META_LIB is not None:
        return
    aten = torch.ops.aten
    if not hasattr(aten, "_scaled_mm") or "out" not in aten._scaled_mm.overloads():
        return
    if torch._C._dispatch_has_kernel_for_dispatch_key(aten._scaled_mm.out.name(), "Meta"):
        return
    from torch._meta_registrations import meta_scaled_mm

    def scaled_mm_out(self: Any, mat2: Any, scale_a: Any, scale_b: Any, bias: Any = None, scale_result: Any = None,
                      out_dtype: Any = None, use_fast_accum: bool = False, *, out: Any) -> Any:
        ref = meta_scaled_mm(self, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum)
        torch._check(tuple(out.shape) == tuple(ref.shape), lambda: f"_scaled_mm out shape {tuple(out.shape)} != {tuple(ref.shape)}")
        return out

    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_scaled_mm.out", scaled_mm_out, "Meta")
    _OUT_META_LIB = lib


def keep_parameters_when_moved() -> None:
    """`model.to("cuda")` of real CPU parameters gives fakes, which nn.Module._apply would wrap in
    new Parameter objects, one per module: tied weights (an embedding shared with the LM head)
    would come apart and the compiled graph would gain an input the GPU job's has not. Swapping in
    place (torch's own future behaviour, public API) keeps every Parameter object, so ties hold."""
    torch.__future__.set_swap_module_params_on_conversion(True)


# ------------------------------------------------------------------ executing compiled code on fakes
def route_wrapper_allocations() -> None:
    """Inductor's generated wrappers allocate through C++ helpers that bypass the dispatcher and
    would hand real (garbage) device buffers to the next op. Under the script's fake mode, build
    fakes instead; outside it, keep stock behaviour. Must run before any compiled module loads."""
    g = torch._C._dynamo.guards
    if getattr(g, "_pcompile_routed", False):
        return

    def empty_like_device(device: str, original: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        def empty_strided(size: Any, stride: Any, dtype: torch.dtype, *rest: Any) -> torch.Tensor:
            if active_fake_mode() is not None:
                return torch.empty_strided(size, stride, dtype=dtype, device=device)
            return original(size, stride, dtype, *rest)

        return empty_strided

    g._empty_strided_cuda = empty_like_device("cuda", g._empty_strided_cuda)
    g._empty_strided_cpu = empty_like_device("cpu", g._empty_strided_cpu)
    if hasattr(g, "_empty_strided_cpu_pinned"):
        g._empty_strided_cpu_pinned = empty_like_device("cpu", g._empty_strided_cpu_pinned)

    original_reinterpret = g._reinterpret_tensor

    def reinterpret_tensor(t: torch.Tensor, size: Any, stride: Any, offset: int = 0) -> torch.Tensor:
        if is_fake(t):
            return torch.as_strided(t, size, stride, t.storage_offset() + offset)
        return original_reinterpret(t, size, stride, offset)

    g._reinterpret_tensor = reinterpret_tensor
    original_alignment = g.assert_alignment

    def assert_alignment(t: torch.Tensor, *args: Any) -> None:
        if is_fake(t):
            return None
        return original_alignment(t, *args)

    g.assert_alignment = assert_alignment
    g._pcompile_routed = True


def skip_kernel_launches(on_unselected: Callable[[str, int, Any], None]) -> None:
    """CachingAutotuner.run launches (and, with several configs, benchmarks) a Triton kernel. On
    the virtual device it must do neither; `on_unselected(name, n_configs, autotuner)` sees kernels
    whose autotune winner could therefore not be measured (and may predict one)."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    if _marked(CachingAutotuner.run, "skip_kernel_launches"):
        return

    def run(self: Any, *args: Any, **kwargs: Any) -> None:
        if not getattr(self, "launchers", None):
            self.precompile()  # as stock run() does first: loads the cubins, launches nothing
        if len(self.launchers or ()) > 1 and getattr(_timing, "compiling", 0):
            # a module Inductor benchmarks while compiling (fusion choices): its timing is faked
            # (fake_gpu_timings), so its first config stands in, as one picked launcher would
            self.launchers = self.launchers[:1]
            return None
        n = len(getattr(self, "launchers", None) or getattr(self, "compile_results", None) or self.configs or [])
        if n > 1:
            on_unselected(getattr(self.fn, "__name__", "?"), n, self)
        return None

    _mark(run, "skip_kernel_launches")
    CachingAutotuner.run = run


class _OnCpu(torch.utils._python_dispatch.TorchDispatchMode):
    """Evaluates every op on CPU: real device tensors are copied over, device=cuda becomes cpu."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        from torch.utils._pytree import tree_map

        def to_cpu(x: Any) -> Any:
            if isinstance(x, torch.Tensor) and x.device.type == "cuda" and not is_fake(x):
                return x.cpu()
            if isinstance(x, torch.device) and x.type == "cuda":
                return torch.device("cpu")
            return x

        args, kwargs = tree_map(to_cpu, (args, kwargs or {}))
        return func(*args, **kwargs)


def fold_constants_on_cpu() -> None:
    """Inductor's joint-graph pass `constant_fold_uniform_value` evaluates small tensors on the
    device and reads them back; here that would fold stale memory into kernels. Evaluate the
    folder on CPU (the replacement nodes take their device from the graph, not the value)."""
    from torch._inductor.constant_folding import ConstantFolder
    from torch._inductor.fx_passes.joint_graph import UniformValueConstantFolder

    if _marked(UniformValueConstantFolder.__init__, "fold_constants_on_cpu"):
        return
    original_init = UniformValueConstantFolder.__init__
    original_run = ConstantFolder.run

    @functools.wraps(original_init)
    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        with _OnCpu():
            original_init(self, *args, **kwargs)

    @functools.wraps(original_run)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(self, UniformValueConstantFolder):
            return original_run(self, *args, **kwargs)
        with _OnCpu():
            return original_run(self, *args, **kwargs)

    _mark(init, "fold_constants_on_cpu")
    UniformValueConstantFolder.__init__ = init
    ConstantFolder.run = run


def placeholder_repr_for_device_tensors() -> None:
    """Printing a real CUDA tensor reads device memory (garbage here; torch 2.11's guard builder
    does it for optimizer state and once allocated 24 GB). Print a placeholder instead."""
    import torch._tensor_str as ts

    original = ts._str
    if _marked(original, "placeholder_repr_for_device_tensors"):
        return

    def _str(self: torch.Tensor, *, tensor_contents: Any = None) -> str:
        if self.device.type == "cuda" and not is_fake(self):
            return f"tensor(<no values on the pcompile virtual device>, size={tuple(self.shape)}, dtype={self.dtype}, device='{self.device}')"
        return original(self, tensor_contents=tensor_contents)

    _mark(_str, "placeholder_repr_for_device_tensors")
    ts._str = _str


_read_route: list[Callable[..., Any]] = []


def fake_scalar_reads(owned: Callable[[Any], bool], read: Callable[[Any, str], Any]) -> None:
    """Route value reads of the script's fake tensors (`.item()`, `bool()`, `float()`, format, ...)
    to `read(tensor, how)`, which returns a stand-in. `owned(tensor)` limits this to the script's
    own fakes: Dynamo's internal fakes keep stock behaviour. A later call replaces the route."""
    from torch._subclasses.fake_tensor import FakeTensor

    _read_route[:] = [owned, read]
    if getattr(FakeTensor, "_pcompile_reads", False):
        return
    for name in ("item", "tolist", "__bool__", "__float__", "__int__", "__index__", "__complex__", "numpy"):
        original = getattr(FakeTensor, name)

        def make(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
            def method(self: Any, *args: Any, **kwargs: Any) -> Any:
                if _read_route[0](self):
                    return _read_route[1](self, name)
                return original(self, *args, **kwargs)

            method.__name__ = name
            return method

        setattr(FakeTensor, name, make(name, original))
    original_format = FakeTensor.__format__

    def __format__(self: Any, spec: str) -> str:
        if _read_route[0](self) and self.dim() == 0:  # as torch formats a 0-d tensor: through item()
            return format(_read_route[1](self, "item"), spec)
        return original_format(self, spec)

    FakeTensor.__format__ = __format__
    FakeTensor._pcompile_reads = True


# ------------------------------------------------------------------ compile windows and caches
def during_inductor_compile(enter: Callable[[], None], leave: Callable[[], None]) -> None:
    """Call enter()/leave() around Inductor's joint-graph passes and each inner compile
    (forward, and the lazily compiled backward), the windows where strict mode applies."""
    import torch._inductor.compile_fx as cfx

    if _marked(cfx._compile_fx_inner, "during_inductor_compile"):
        return

    def windowed(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            enter()
            try:
                return fn(*args, **kwargs)
            finally:
                leave()

        _mark(inner, "during_inductor_compile")
        return inner

    cfx.joint_graph_passes = windowed(cfx.joint_graph_passes)
    cfx._compile_fx_inner = windowed(cfx._compile_fx_inner)


def normalize_graphs_before_inductor(normalize: Callable[[Any], Any]) -> None:
    """Dynamo annotates graph inputs with the type of the value it saw (FakeTensor here,
    Parameter/Tensor in the GPU job) and AOTAutograd hashes that code. Normalise every graph
    that reaches Inductor, whichever backend string the script used (the pcompile backend does
    the same; doing it twice is harmless)."""
    import torch._inductor.compile_fx as cfx

    original = cfx.compile_fx
    if _marked(original, "normalize_graphs_before_inductor"):
        return

    @functools.wraps(original)
    def compile_fx(model: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(model, torch.fx.GraphModule):
            model = normalize(model)
        return original(model, *args, **kwargs)

    _mark(compile_fx, "normalize_graphs_before_inductor")
    cfx.compile_fx = compile_fx


def dump_aot_keys(path: str) -> None:
    """Diagnostics: append every AOTAutograd cache key with its per-field hash lines to `path`
    (JSON lines), so a warm process and a GPU job can be diffed field by field on a miss."""
    import json

    from torch._functorch._aot_autograd import autograd_cache as ac

    original = ac.autograd_cache_key
    if getattr(original, "_pcompile_dump", False):
        return

    @functools.wraps(original)
    def autograd_cache_key(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        try:
            key, lines = result
            with open(path, "a") as fh:
                fh.write(json.dumps({"key": key, "lines": [str(x)[:2000] for x in lines]}) + "\n")
        except Exception:
            pass
        return result

    autograd_cache_key._pcompile_dump = True  # type: ignore[attr-defined]
    ac.autograd_cache_key = autograd_cache_key


def enable_graph_caches() -> list[str]:
    """Switch on the FX graph and AOTAutograd caches if something turned them off; names what
    changed. Their default (on) values are what a GPU job has, so normally nothing changes; the
    functorch flag is part of every AOTAutograd key, so it is never touched when pcompile's own
    install has set it."""
    import torch._functorch.config as fc
    import torch._inductor.config as ic

    changed = []
    if not ic.fx_graph_cache:
        ic.fx_graph_cache = True
        changed.append("inductor.fx_graph_cache")
    if not fc.enable_autograd_cache and not getattr(fc, "enable_remote_autograd_cache", None):
        fc.enable_autograd_cache = True
        changed.append("functorch.enable_autograd_cache")
    return changed


def fake_store() -> Any:
    """A store for the "fake" process-group backend; importing the module registers the backend."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    return FakeStore()


class _NoGpuTiming(Exception):
    pass


def pad_mm_prediction() -> str:
    raw = os.environ.get("PCOMPILE_WARM_PAD_MM", "pad").strip().lower()
    return "nopad" if raw in ("nopad", "no", "0", "false", "off") else "pad"


def no_gpu_timing_in_pad_mm(on_guess: Callable[[], None], harmless: Callable[[], Any]) -> None:
    """Inductor's pad_mm joint-graph pass times padded vs. unpadded matmuls on the GPU when it has
    no cached decision. There is no GPU here: predict (semantically identical either way), write
    nothing into the decision cache, and let `on_guess()` count it for the report. The prediction
    is "pad" (PCOMPILE_WARM_PAD_MM=nopad to change it): the pass only asks for timings once its own
    checks found a compute-bound matmul with a misaligned dimension, the case padding exists for,
    and the choice is baked into the warmed graph for every GPU job that hits it (on the H100,
    GPT-2's graphs warmed with "don't pad" spent 1.33x stock's GPU kernel time per step). The
    random benchmark inputs it creates first are launches whose values nobody reads: `harmless()`
    is a context manager that exempts them from strict mode."""
    from torch._inductor.fx_passes import pad_mm

    if _marked(pad_mm._should_pad, "no_gpu_timing_in_pad_mm"):
        return
    original = pad_mm._should_pad

    def get_do_bench() -> Callable[..., float]:
        def bench(*args: Any, **kwargs: Any) -> float:
            raise _NoGpuTiming()

        return bench

    @functools.wraps(original)
    def _should_pad(*args: Any, **kwargs: Any) -> bool:
        try:
            with harmless():
                return original(*args, **kwargs)
        except _NoGpuTiming:
            on_guess()
            return pad_mm_prediction() == "pad"

    _mark(_should_pad, "no_gpu_timing_in_pad_mm")
    pad_mm.get_do_bench = get_do_bench
    pad_mm._should_pad = _should_pad


_timing = threading.local()


def gpu_timing_faked() -> bool:
    """True if this thread's current graph compile asked for a GPU timing (see fake_gpu_timings)."""
    return bool(getattr(_timing, "graph", False))


def fake_gpu_timings(on_fake: Callable[[str], None]) -> None:
    """max-autotune (template choices, epilogue fusion) and benchmark_fusion time candidates on the
    GPU. Here nothing runs: every GPU benchmark returns the same 1.0 ms without calling its
    function, so Inductor still precompiles every candidate (their cubins land in the cache) and
    makes *some* choice to finish the graph; `keep_tuned_graphs_unpublished` then keeps that graph
    out of the caches, so the GPU job benchmarks the (already compiled) candidates itself and
    publishes the real winners for every job after it."""
    from torch._inductor import autotune_process, select_algorithm
    from torch._inductor.runtime import benchmarking

    classes = {benchmarking.Benchmarker, type(benchmarking.benchmarker)}
    if _marked(benchmarking.Benchmarker.benchmark_gpu, "fake_gpu_timings"):
        return

    def faked(what: str, original: Callable[..., Any], gpu: Callable[..., bool]) -> Callable[..., Any]:
        @functools.wraps(original)
        def bench(*args: Any, **kwargs: Any) -> Any:
            if not gpu(*args, **kwargs):
                return original(*args, **kwargs)
            _timing.graph = _timing.aot = True
            on_fake(what)
            return 1.0

        _mark(bench, "fake_gpu_timings")
        return bench

    def on_gpu(self: Any, fn: Any = None, fn_args: Any = None, fn_kwargs: Any = None, device: Any = None, **kw: Any) -> bool:
        if device is not None:
            return torch.device(device).type != "cpu"
        try:
            return self.infer_device(*(fn_args or ()), **(fn_kwargs or {})).type != "cpu"
        except ValueError:
            return True

    for cls in classes:
        for name in ("benchmark_gpu", "benchmark_gpu_with_cuda_graph"):
            if name in cls.__dict__:
                setattr(cls, name, faked(name, cls.__dict__[name], lambda *a, **k: True))
        if "benchmark" in cls.__dict__:
            cls.benchmark = faked("benchmark", cls.__dict__["benchmark"], on_gpu)
    for mod in (select_algorithm, autotune_process):
        if hasattr(mod, "do_bench_using_profiling"):
            mod.do_bench_using_profiling = faked("do_bench_using_profiling", mod.do_bench_using_profiling, lambda *a, **k: True)

    # max-autotune keeps its timings in a persistent local cache (PersistentCache: inductor/cache/<hash>
    # in the cache dir). Timings faked here must not land there: the next warm would read them back,
    # ask for no GPU timing, and publish a graph whose choices came from the constant (the second
    # warm of timm_validate_maxautotune wrote 1 FX graph), and the GPU job would pick its winners
    # from them without benchmarking. Writes after a faked timing are dropped; real timings already
    # in the cache (from a GPU job) are still read.
    from torch._inductor.codecache import PersistentCache

    original_update = PersistentCache.update_local_cache

    @functools.wraps(original_update)
    def update_local_cache(self: Any, local_cache: Any) -> None:
        if gpu_timing_faked():
            return None
        return original_update(self, local_cache)

    PersistentCache.update_local_cache = update_local_cache


def keep_tuned_graphs_unpublished(on_skip: Callable[[str], None]) -> None:
    """A graph whose compile needed a GPU timing holds a choice made without one: never save its
    FX graph entry, nor the AOTAutograd entry that would point at it (see fake_gpu_timings). The
    flags reset where each FX compile and each AOTAutograd key computation begins."""
    import torch._inductor.compile_fx as cfx
    from torch._functorch._aot_autograd import autograd_cache as ac
    from torch._inductor.codecache import FxGraphCache

    if _marked(FxGraphCache._save_graph, "keep_tuned_graphs_unpublished"):
        return
    save_graph, save_aot, inner, aot_key = FxGraphCache._save_graph, ac.AOTAutogradCache.save, cfx._compile_fx_inner, ac.autograd_cache_key

    def _save_graph(*args: Any, **kwargs: Any) -> None:
        if gpu_timing_faked():
            on_skip("fx_graph")
            return None
        return save_graph(*args, **kwargs)

    def save(*args: Any, **kwargs: Any) -> None:
        if getattr(_timing, "aot", False):
            on_skip("aot_autograd")
            return None
        return save_aot(*args, **kwargs)

    @functools.wraps(inner)
    def _compile_fx_inner(*args: Any, **kwargs: Any) -> Any:
        _timing.graph = False
        _timing.compiling = getattr(_timing, "compiling", 0) + 1
        try:
            return inner(*args, **kwargs)
        finally:
            _timing.compiling -= 1

    @functools.wraps(aot_key)
    def autograd_cache_key(*args: Any, **kwargs: Any) -> Any:
        _timing.aot = False
        return aot_key(*args, **kwargs)

    for fn in (_save_graph, save, _compile_fx_inner, autograd_cache_key):
        _mark(fn, "keep_tuned_graphs_unpublished")
    FxGraphCache._save_graph = staticmethod(_save_graph)
    ac.AOTAutogradCache.save = staticmethod(save)
    cfx._compile_fx_inner = _compile_fx_inner
    ac.autograd_cache_key = autograd_cache_key


def no_cuda_graph_capture(on_skip: Callable[[], None]) -> None:
    """mode="reduce-overhead": the graphs compile exactly as on the GPU (cudagraphs is part of
    their key), but capture happens on their first runs, which here would record nothing real.
    Run the compiled callable directly instead; capture is run-time work with nothing to cache."""
    import torch._inductor.compile_fx as cfx
    import torch._inductor.cudagraph_trees as trees

    if _marked(trees.cudagraphify_impl, "no_cuda_graph_capture"):
        return

    def skip(model: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[..., Any]:
        on_skip()
        return model

    _mark(skip, "no_cuda_graph_capture")
    trees.cudagraphify_impl = skip
    cfx.cudagraphify_impl = skip


def grad_scaler_assumes_finite() -> None:
    """GradScaler.step reads found_inf with .item() to decide whether to step; on fakes there is
    no value. Warm takes the branch a healthy step takes (finite grads: step the optimizer), so the
    optimizer step is still compiled."""
    from torch.amp.grad_scaler import GradScaler

    if _marked(GradScaler._maybe_opt_step, "grad_scaler_assumes_finite"):
        return

    def _maybe_opt_step(self: Any, optimizer: Any, optimizer_state: Any, *args: Any, **kwargs: Any) -> Any:
        return optimizer.step(*args, **kwargs)

    _mark(_maybe_opt_step, "grad_scaler_assumes_finite")
    GradScaler._maybe_opt_step = _maybe_opt_step


def ddp_skip_value_checks() -> None:
    """DDP's constructor compares and broadcasts parameter *values* across ranks in C++; on fake
    parameters there are none. Rank 0 of a fake group has nothing to compare with anyway."""
    import torch.nn.parallel.distributed as ddp

    ddp._verify_param_shape_across_processes = lambda *a, **k: None
    ddp._sync_module_states = lambda *a, **k: None


def triton_backend_hash() -> str:
    from torch.utils._triton import triton_hash_with_backend

    return str(triton_hash_with_backend())


def counters() -> dict[str, dict[str, int]]:
    from torch._dynamo.utils import counters as c

    return {k: dict(v) for k, v in c.items()}


def max_autotune_enabled() -> bool:
    import torch._inductor.config as ic

    return bool(ic.max_autotune or ic.max_autotune_gemm or ic.max_autotune_pointwise or ic.coordinate_descent_tuning)
