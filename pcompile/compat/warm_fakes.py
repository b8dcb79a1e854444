"""The warm's fake tensors: the mode a training script runs under, and what makes ordinary script
code work on its fakes (module moves, checkpoint loads, scalar reads, ops torch has no fake rule for).

Part of the warm's private-torch surface (see warm_runtime.py); tests/test_warm_compat.py runs
this module's check().
"""
from __future__ import annotations

import functools
import threading
from typing import Any, Callable

import torch

from pcompile.compat.warm_runtime import mark, marked, missing, untraced

CHECKED = {"torch": "2.11.0, 2.14.1, 2.15.0 (2.15: check() and tests/test_warm*.py)"}

PRIVATE_SYMBOLS: list[tuple[str, str]] = [
    ("torch._subclasses.fake_tensor", "FakeTensor"),
    ("torch._subclasses.fake_tensor", "FakeTensorMode"),
    ("torch._subclasses.fake_tensor", "unset_fake_temporarily"),
    ("torch._subclasses.fake_tensor", "DataDependentOutputException"),
    ("torch._subclasses.fake_tensor", "DynamicOutputShapeException"),
    ("torch._subclasses.fake_tensor", "UnsupportedOperatorException"),
    ("torch._utils", "_rebuild_tensor_v2"),
    ("torch._meta_registrations", "meta_scaled_mm"),
    ("torch._tensor_str", "_tensor_str"),
    ("torch._tensor_str", "_add_suffixes"),
    ("torch._tensor_str", "PRINT_OPTS"),
    ("torch._subclasses.fake_tensor.FakeTensorMode", "create_symbolic_nested_int"),
    ("torch.nested._internal.nested_int", "NestedIntNode"),
    ("torch.nested._internal.nested_tensor", "_tensor_id_counter"),
]


def check() -> list[str]:
    """Names of the private symbols this module needs that this torch lacks (empty when all is well)."""
    gone = missing(PRIVATE_SYMBOLS)
    # instance attributes the swap hook edits (allow_fake_param_moves)
    from torch._subclasses.fake_tensor import FakeTensorMode

    converter = FakeTensorMode().fake_tensor_converter
    for owner, attr in ((converter, "constant_storage_mapping"), (converter.meta_converter, "tensor_memo"),
                        (converter.meta_converter, "describer")):
        if not hasattr(owner, attr):
            gone.append(f"{type(owner).__qualname__}().{attr}")
    return gone


def zeros_like_on_cpu(t: torch.Tensor) -> torch.Tensor:
    """A real CPU tensor of zeros with `t`'s shape, dtype and (where dense) strides."""
    shape, dtype = tuple(t.shape), t.dtype
    try:
        return torch.zeros(shape, dtype=dtype).as_strided(shape, t.stride()) if t.is_contiguous() else \
            torch.empty_strided(shape, t.stride(), dtype=dtype).zero_()
    except (RuntimeError, ValueError):
        return torch.zeros(shape, dtype=dtype)


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
                                               FakeTensorMode, UnsupportedOperatorException)
    from torch.utils._pytree import tree_flatten, tree_map

    from pcompile.compat import warm_values as values

    local = threading.local()

    def virtual(x: Any) -> bool:
        if isinstance(x, FakeTensor):
            return True
        if isinstance(x, torch.Tensor):
            return x.device.type == "cuda"
        return isinstance(x, torch.device) and x.type == "cuda"

    def writes_real_tensor(func: Any, args: Any, kwargs: Any) -> bool:
        return any(not isinstance(v, FakeTensor) and v.device.type != "cuda"
                   for v in values.written_tensors(func, args, kwargs))

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
                return self._on_host(func, args, kwargs, "copy to a CPU tensor", to_device=False)
            local.depth = depth + 1
            try:
                out = super().__torch_dispatch__(func, types, args, kwargs)
            except (DataDependentOutputException, DynamicOutputShapeException):
                if depth:
                    raise
                ok, cpu = values.run_on_shadows(func, args, kwargs)  # host data: its real values
                if ok:
                    return values.to_fakes(self, cpu)
                return self._on_host(func, args, kwargs, f"{func} (depends on values)", to_device=True)
            except UnsupportedOperatorException:
                if depth:
                    raise
                # no fake can hold the result (a strided nested tensor: torch.nested.nested_tensor
                # of CUDA tensors without layout=torch.jagged); run it on the host, as for values
                return self._on_host(func, args, kwargs, f"{func} (a fake cannot hold it: ran on CPU)", to_device=True)
            finally:
                local.depth = depth
            if depth:
                return out
            values.after(func, args, kwargs, out)
            return tree_map(self._host_result, out)

        def _host_result(self, x: Any) -> Any:
            if isinstance(x, FakeTensor) and x.device.type != "cuda" and x.fake_mode is self:
                real = values.value_of(x)
                if real is not None:
                    return real
                on_host_read(".cpu()")
                return zeros_like_on_cpu(x)
            return x

        def _on_host(self, func: Any, args: Any, kwargs: Any, how: str, to_device: bool) -> Any:
            """Run `func` for real on CPU with every virtual input read as its real values where
            it has them (warm_values) and as zeros where it is a placeholder. With `to_device`,
            tensor results come back as CUDA fakes of the shape that computation gave. Counted as
            a placeholder read unless only floating-point placeholders met real host data (a model
            output indexed by a real mask: its shape is right, only its values are placeholders)."""
            placeholders: list[torch.Tensor] = []
            known = [False]

            def host(x: Any) -> Any:
                if isinstance(x, torch.Tensor) and virtual(x):
                    real = values.value_of(x)
                    if real is not None:
                        known[0] = True
                        return real
                    placeholders.append(x)
                    return zeros_like_on_cpu(x)
                if isinstance(x, torch.device) and x.type == "cuda":
                    return torch.device("cpu")
                return x

            host_args, host_kwargs = tree_map(host, args), tree_map(host, kwargs)
            if placeholders and not (known[0] and all(p.is_floating_point() for p in placeholders)):
                on_host_read(how)
            out = func(*host_args, **host_kwargs)
            if not to_device:
                return out

            def back(x: Any) -> Any:
                if isinstance(x, torch.Tensor) and not x.is_nested:  # no fake holds a strided nested tensor
                    with self:
                        return torch.empty_strided(tuple(x.shape), x.stride(), dtype=x.dtype, device="cuda")
                return x

            return tree_map(back, out)

        def create_symbolic_nested_int(self, *, nt_tensor_id: int | None = None) -> Any:
            """The ragged size of a nested jagged tensor built from CUDA fakes, as eager gives it.

            FakeTensorMode makes it a symbol of its ShapeEnv (tracing's view), and this mode has
            none: the script's fakes stand for eager GPU tensors, so `torch.nested.nested_tensor(...,
            layout=torch.jagged)` on cuda failed ("self.shape_env must not be None"). Eager's is a
            plain nested int numbered from nested_tensor's own counter (get_tensor_symint); Dynamo
            and FakeTensor.get_nested_int memoise it per offsets tensor as they do eager's."""
            if self.shape_env is not None:
                return super().create_symbolic_nested_int(nt_tensor_id=nt_tensor_id)
            from torch.nested._internal import nested_tensor
            from torch.nested._internal.nested_int import NestedIntNode

            if nt_tensor_id is None:
                nt_tensor_id = nested_tensor._tensor_id_counter
                nested_tensor._tensor_id_counter += 1
            return torch.SymInt(NestedIntNode(nt_tensor_id, 1))

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
    if marked(original, "allow_fake_param_moves"):
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
        from pcompile.compat import warm_values

        warm_values.forget(t1, t2)  # its weak references would make the swap refuse
        for mode in {id(t.fake_mode): t.fake_mode for t in (t1, t2) if is_fake(t)}.values():
            forget(mode, (t1, t2))
        return original(t1, t2)

    mark(swap_tensors, "allow_fake_param_moves")
    tu.swap_tensors = untraced(swap_tensors)


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
    if marked(original_load, "load_cuda_checkpoints_as_fakes"):
        return
    original_rebuild = tutils._rebuild_tensor_v2
    local = threading.local()
    from pcompile.compat import warm_checkpoints

    warm_checkpoints.read_placeholders()  # checkpoints saved during the warm load back (protect.py)

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
            warm_checkpoints.zero_if_placeholder(storage)  # a virtual tensor saved during the warm, loaded to CPU
            return ser.default_restore_location(storage, dev)

        outer = getattr(local, "state", None)
        local.state = (intended, mode)
        try:
            with unset_fake_temporarily(), warm_checkpoints.deferred_zeros():
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
    mark(load, "load_cuda_checkpoints_as_fakes")
    load = untraced(load)
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


_read_route: list[Callable[..., Any]] = []


def _eager(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` with Dynamo off for its frame and every frame below it. On the GPU these reads are C
    methods with no Python frame; here they are Python functions, and a read that runs eagerly
    inside a compiled function (after a graph break: `if bool(mask.all()):` in nn.Transformer)
    had Dynamo try to compile the read's own frames, warning about pcompile's `sys._getframe`."""
    return torch.compiler.disable(fn, recursive=True)


def fake_scalar_reads(owned: Callable[[Any], bool], read: Callable[[Any, str], Any]) -> None:
    """Route value reads of the script's fake tensors (`.item()`, `bool()`, `float()`, format, repr, ...)
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
            return _eager(method)

        setattr(FakeTensor, name, make(name, original))
    original_format = FakeTensor.__format__

    def __format__(self: Any, spec: str) -> str:
        if _read_route[0](self) and self.dim() == 0:  # as torch formats a 0-d tensor: through item()
            return format(_read_route[1](self, "item"), spec)
        return original_format(self, spec)

    FakeTensor.__format__ = _eager(__format__)
    original_repr = FakeTensor.__repr__

    def __repr__(self: Any, *, tensor_contents: Any = None) -> str:  # print(t), str(t), f"{t}"
        if tensor_contents is None and self.layout == torch.strided and _read_route[0](self):
            return _read_route[1](self, "__repr__")
        return original_repr(self, tensor_contents=tensor_contents)

    FakeTensor.__repr__ = _eager(__repr__)
    FakeTensor._pcompile_reads = True


def device_repr(t: torch.Tensor, host: torch.Tensor) -> str:
    """torch's repr of the device tensor `t` if its memory held `host`'s values (a real CPU tensor
    of t's shape and dtype): `tensor([0., 0.], device='cuda:0', requires_grad=True)`, as the GPU job
    prints it, where FakeTensor's own repr is `FakeTensor(..., device='cuda:0', size=(2,))`.
    The suffix rules are torch._tensor_str._str_intern's for a strided tensor."""
    from torch._tensor_str import PRINT_OPTS, _add_suffixes, _tensor_str

    prefix = "tensor("
    suffixes = []
    default = torch.get_default_device()
    if not (default.type == t.device.type == "cuda" and torch.cuda.current_device() == t.device.index):
        suffixes.append(f"device='{t.device}'")
    if t.numel() == 0:
        if t.dim() != 1:
            suffixes.append(f"size={tuple(t.shape)}")
        if t.dtype != torch.get_default_dtype():
            suffixes.append(f"dtype={t.dtype}")
        contents = "[]"
    else:
        if not PRINT_OPTS.edgeitems:
            suffixes.append(f"size={tuple(t.shape)}")
        complex_default = torch.cdouble if torch.get_default_dtype() == torch.double else torch.cfloat
        if t.dtype not in (torch.get_default_dtype(), complex_default, torch.int64, torch.bool):
            suffixes.append(f"dtype={t.dtype}")
        contents = _tensor_str(host, len(prefix))
    try:
        grad_fn = t.grad_fn
    except RuntimeError:  # torch prints "Invalid" for a view it cannot rebase
        grad_fn = None
    if grad_fn is not None:
        name = type(grad_fn).__name__
        suffixes.append(f"grad_fn=<{grad_fn.name().rsplit('::', 1)[-1] if name == 'CppFunction' else name}>")
    elif t.requires_grad:
        suffixes.append("requires_grad=True")
    text = _add_suffixes(prefix + contents, suffixes, len(prefix), force_newline=False)
    # A module's parameter moved to the device stays a Parameter to isinstance (its `_is_param` flag)
    # while its class is FakeTensor: add what nn.Parameter.__repr__ adds.
    if isinstance(t, torch.nn.Parameter) and not issubclass(type(t), torch.nn.Parameter):
        return "Parameter containing:\n" + text
    return text
