"""The CUDA device index in Inductor's cache keys and generated code: every private touch.

pcompile.inductor.device_index decides *when* a key is computed as if `cuda:h` were `cuda:0`
and *which* device a loaded entry is bound to; this module does the touching, for torch 2.11
to 2.14 (read in 2.11.0 and 2.14.1; same names, same call sites in both):

Keys
  torch._inductor.codecache.compiled_fx_graph_hash(gm, example_inputs, fx_kwargs, inputs_to_check)
  torch._functorch._aot_autograd.autograd_cache.autograd_cache_key(gm, example_inputs, ...)  (first named mod on 2.12+)
      both looked up by module global at their one call site; wrapped so each runs inside the
      policy's key scope.
  torch._inductor.codecache.FxGraphCachePickler.__init__(self, gm, ...)
      the pickler both keys hash with (AOTAutogradCachePickler subclasses it). Inside a key scope
      its per-instance `dispatch_table` gets a torch.device reducer (tensor metadata, attributes).
  The graph itself (public torch.fx: node args, map_aggregate, recompile): inside a key scope
      its device arguments read cuda:0 and it is marked for recompiling, since both keys'
      reducers regenerate its code from the graph (2.14's AOTAutograd pickler in its
      reducer_override, (_Lazy)GraphModule.__reduce__ otherwise); restored on exit.
  torch._inductor.runtime.autotune_cache.AutotuneCache._prepare_key(filename)
      the autotune key is the kernel file's name, a hash of a source that embeds
      `DeviceProperties(type='cuda', index=h, ...)`: hashed here as the index-0 source would be.

Loads
  torch._inductor.codecache.FxGraphCache._lookup_graph(key, example_inputs, ...)
      the one place an FX entry is looked up, with the caller's inputs (also for AOTAutograd
      hits): wrapped to tell the policy which device the caller's inputs are on.
  torch._inductor.output_code.CompiledFxGraph.after_deserialization(self, constants)
      runs on every loaded entry before its wrapper module is written and imported; fields read
      and rebound: source_code, cache_key (the PyCodeCache key of source_code: the module path),
      device_types, device_idxs (cudagraphs' device), constants (tensors saved in the entry).
      An OSError raised here is torch's own "treat as a miss and recompile" (both versions).
  CachingAutotuner fields (runtime/triton_heuristics.py): device_props (a DeviceProperties
      NamedTuple), triton_meta["device"], compile_results[*].compile_meta["device"]: the index
      the launchers load cubins on (_make_launchers' DeviceGuard), for pool results and for the
      entry's bundled kernels, which TritonBundler files in async_compile.CompiledTritonKernels
      (`_cache`, `key(source)`) as StaticAutotunerFuture(`static_autotuner`) before the load.

Generated code: the python wrapper names the device through the patterns in `INDEX_PATTERNS`
(codegen/wrapper.py, codegen/cuda/device_op_overrides.py, runtime/hints.py's DeviceProperties
repr, torch.device's repr). The C++ wrapper (cpp_wrapper, AOTInductor) is never normalised.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import os
import re
from typing import Any, Callable, ContextManager, Iterator, Protocol

from pcompile.compat import CompatError, require_attr

CHECKED = {'torch': '2.11.0, 2.14.1, 2.15.0'}


def cpp_wrapper_on() -> bool:
    """The C++ wrapper (cpp_wrapper, AOTInductor) spells devices its own way: never normalised."""
    from torch._inductor import config

    aoti = getattr(config, "aot_inductor", None)
    return bool(getattr(config, "cpp_wrapper", False) or (aoti is not None and getattr(aoti, "output_path", "")))


#: Every way Inductor's python wrapper and Triton kernel sources spell a CUDA device index; the
#: index is the named group `i`. Names that merely contain an index (stream1, semaphores_cuda_1)
#: are not device references and are left alone.
INDEX_PATTERNS: tuple[re.Pattern[str], ...] = tuple(re.compile(p) for p in (
    r"device\(type='cuda', index=(?P<i>\d+)\)",          # repr(torch.device): fallback args, constants
    r"DeviceProperties\(type='cuda', index=(?P<i>\d+),",  # triton_meta of every kernel
    r"_DeviceGuard\((?P<i>\d+)\)",                        # device_guard()
    r"\.set_device\((?P<i>\d+)\)",                        # set_device()
    r"get_raw_stream\((?P<i>\d+)\)",                      # write_get_raw_stream()
    r"""['"]cuda:(?P<i>\d+)['"]""",                       # torch.device("cuda:N"), benchmark harness
    r"""torch\.device\(['"]cuda['"], (?P<i>\d+)\)""",
    r"default_generators\[(?P<i>\d+)\]",                  # graph-safe RNG state
))
_KERNEL_DEVICE = INDEX_PATTERNS[1]

_installed: dict[str, tuple[Any, str, Any]] = {}  # name -> (owner, attribute, original)


class Policy(Protocol):
    """What pcompile.inductor.device_index provides to the hooks below."""

    def key_scope(self, gm: Any, example_inputs: Any) -> ContextManager[None]: ...
    def key_home(self) -> int | None: ...
    def binding(self, example_inputs: Any) -> ContextManager[None]: ...
    def rebind_target(self) -> int | None: ...
    def note(self, event: str) -> None: ...


# -- generated code ---------------------------------------------------------------------------
def indices_in(text: str) -> set[int]:
    """Every CUDA device index `text` names through INDEX_PATTERNS."""
    return {int(m.group("i")) for p in INDEX_PATTERNS for m in p.finditer(text)}


def rebind_text(text: str, old: int, new: int) -> str:
    """`text` with every INDEX_PATTERNS reference to cuda:`old` turned into cuda:`new`."""
    def swap(m: re.Match[str]) -> str:
        if int(m.group("i")) != old:
            return m.group(0)
        start, end = m.span("i")
        base = m.start()
        return m.group(0)[: start - base] + str(new) + m.group(0)[end - base:]

    for pattern in INDEX_PATTERNS:
        text = pattern.sub(swap, text)
    return text


def canonical_kernel_source(source: str) -> str:
    """A Triton kernel's source as compiled for cuda:0 (its DeviceProperties index set to 0); only
    the index differs between GPUs of one board, so this names the kernel on every GPU."""
    found = {int(m.group("i")) for m in _KERNEL_DEVICE.finditer(source)}
    if len(found) != 1 or found == {0}:
        return source
    return rebind_text(source, found.pop(), 0)


def _code_hash(source: str) -> str:
    """PyCodeCache's key (and file stem) for `source`."""
    from torch._inductor.codecache import get_hash

    return get_hash(source.strip(), "", "code")


# -- check ------------------------------------------------------------------------------------
def _modules() -> tuple[Any, Any, Any, Any]:
    import torch._functorch._aot_autograd.autograd_cache as autograd_cache
    import torch._inductor.codecache as codecache
    import torch._inductor.output_code as output_code
    import torch._inductor.runtime.autotune_cache as autotune_cache

    return codecache, autograd_cache, output_code, autotune_cache


def _params(fn: Any) -> list[str]:
    return list(inspect.signature(fn).parameters)


def check() -> None:
    """Raise CompatError naming the first private API that moved."""
    codecache, autograd_cache, output_code, autotune_cache = _modules()
    fx_hash = require_attr(codecache, "compiled_fx_graph_hash", "torch._inductor.codecache")
    if _params(fx_hash)[:2] != ["gm", "example_inputs"]:
        raise CompatError(f"compiled_fx_graph_hash takes {_params(fx_hash)}, expected (gm, example_inputs, ...)")
    aot_key = require_attr(autograd_cache, "autograd_cache_key", "torch._functorch._aot_autograd.autograd_cache")
    if _params(aot_key)[:2] not in (["mod", "example_inputs"], ["gm", "example_inputs"]):  # 2.12+ / 2.11
        raise CompatError(f"autograd_cache_key takes {_params(aot_key)}, expected (mod or gm, example_inputs, ...)")
    pickler = require_attr(codecache, "FxGraphCachePickler", "torch._inductor.codecache")
    if _params(pickler.__init__)[:2] != ["self", "gm"]:
        raise CompatError("FxGraphCachePickler.__init__ no longer takes gm first")
    cache = require_attr(codecache, "FxGraphCache", "torch._inductor.codecache")
    lookup = require_attr(cache, "_lookup_graph", "FxGraphCache")
    if _params(lookup)[:2] != ["key", "example_inputs"]:
        raise CompatError(f"FxGraphCache._lookup_graph takes {_params(lookup)}, expected (key, example_inputs, ...)")
    graph = require_attr(output_code, "CompiledFxGraph", "torch._inductor.output_code")
    require_attr(graph, "after_deserialization", "CompiledFxGraph")
    fields = {f.name for f in dataclasses.fields(graph)}
    missing = {"source_code", "cache_key", "device_types", "device_idxs", "constants"} - fields
    if missing:
        raise CompatError(f"CompiledFxGraph lost fields {sorted(missing)}")
    require_attr(codecache, "get_hash", "torch._inductor.codecache")
    require_attr(require_attr(codecache, "PyCodeCache", "torch._inductor.codecache"), "write", "PyCodeCache")
    tune = require_attr(autotune_cache, "AutotuneCache", "torch._inductor.runtime.autotune_cache")
    if _params(require_attr(tune, "_prepare_key", "AutotuneCache")) != ["filename"]:
        raise CompatError("AutotuneCache._prepare_key no longer takes (filename)")
    from torch._inductor.runtime.hints import DeviceProperties

    if "index" not in DeviceProperties._fields:
        raise CompatError("DeviceProperties has no index field")
    import torch

    props = DeviceProperties(type="cuda", index=3, multi_processor_count=1, cc=90, major=9,
                             regs_per_multiprocessor=1, max_threads_per_multi_processor=1, max_threads_per_block=1,
                             warp_size=32)
    if indices_in(repr(props)) != {3} or indices_in(repr(torch.device("cuda", 3))) != {3}:
        raise CompatError("DeviceProperties/torch.device no longer print as INDEX_PATTERNS expect")


# -- installing -------------------------------------------------------------------------------
def _patch(name: str, owner: Any, attr: str, make: Callable[[Any], Any], static: bool = False) -> None:
    if name in _installed:
        return
    original = inspect.getattr_static(owner, attr)
    func = original.__func__ if isinstance(original, staticmethod) else original
    new = make(func)
    setattr(owner, attr, staticmethod(new) if static else new)
    _installed[name] = (owner, attr, original)


def install(policy: Policy) -> None:
    """Hook keys and loads (idempotent)."""
    codecache, autograd_cache, output_code, autotune_cache = _modules()

    def key_wrapper(orig: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(orig)
        def wrapped(gm: Any, example_inputs: Any, *args: Any, **kwargs: Any) -> Any:
            with policy.key_scope(gm, example_inputs):
                return orig(gm, example_inputs, *args, **kwargs)
        return wrapped

    _patch("fx_key", codecache, "compiled_fx_graph_hash", key_wrapper)
    _patch("aot_key", autograd_cache, "autograd_cache_key", key_wrapper)

    def pickler_init(orig: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(orig)
        def __init__(self: Any, gm: Any, *args: Any, **kwargs: Any) -> None:
            orig(self, gm, *args, **kwargs)
            home = policy.key_home()
            if home is not None:
                _map_device_reducers(self, gm, home)
        return __init__

    _patch("pickler", codecache.FxGraphCachePickler, "__init__", pickler_init)

    def lookup(orig: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(orig)
        def _lookup_graph(key: Any, example_inputs: Any, *args: Any, **kwargs: Any) -> Any:
            with policy.binding(example_inputs):
                return orig(key, example_inputs, *args, **kwargs)
        return _lookup_graph

    _patch("lookup", codecache.FxGraphCache, "_lookup_graph", lookup, static=True)

    def after_deserialization(orig: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(orig)
        def wrapped(self: Any, constants: Any) -> Any:
            target = policy.rebind_target()
            if target is not None:
                rebind_graph(self, target, policy)
            return orig(self, constants)
        return wrapped

    _patch("load", output_code.CompiledFxGraph, "after_deserialization", after_deserialization)
    install_autotune_key()


def install_autotune_key() -> None:
    """Autotune keys as for cuda:0. Also in compile workers, where kernels are imported (and
    their autotune entries looked up), so parent and workers agree on the key."""
    _, _, _, autotune_cache = _modules()

    def prepare(orig: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(orig)
        def _prepare_key(filename: str) -> str:
            return orig(canonical_kernel_filename(filename))
        return _prepare_key

    _patch("autotune", autotune_cache.AutotuneCache, "_prepare_key", prepare, static=True)


def uninstall() -> None:
    for name, (owner, attr, original) in list(_installed.items()):
        setattr(owner, attr, original)
        del _installed[name]


def installed() -> list[str]:
    return sorted(_installed)


# -- keys -------------------------------------------------------------------------------------
def _map_device_reducers(pickler: Any, gm: Any, home: int) -> None:
    """Make `pickler` hash torch.device cuda:`home` (tensor metadata, attributes) as cuda:0."""
    import torch

    def reduce_device(d: torch.device) -> Any:
        if d.type == "cuda" and d.index == home:
            return torch.device, ("cuda", 0)
        return d.__reduce__()

    pickler.dispatch_table[torch.device] = reduce_device


_CUDA_STR = re.compile(r"cuda:(\d+)")


#: What `graph_devices` reports for an unindexed "cuda" (the current device when traced).
CURRENT = -1


def _leaf_index(value: Any) -> int | None:
    """The CUDA index a graph argument names (a torch.device or a "cuda[:N]" string), CURRENT
    for an unindexed one, None for anything else."""
    import torch

    if isinstance(value, torch.device):
        if value.type != "cuda":
            return None
        return CURRENT if value.index is None else value.index
    if isinstance(value, str):
        if value == "cuda":
            return CURRENT
        m = _CUDA_STR.fullmatch(value)
        return int(m.group(1)) if m else None
    return None


def _graph_modules(gm: Any) -> list[Any]:
    import torch

    return [m for m in gm.modules() if isinstance(m, torch.fx.GraphModule)] if isinstance(gm, torch.nn.Module) else []


def graph_devices(gm: Any) -> set[int]:
    """CUDA indices the nodes of `gm` (and its sub-graphs) name as arguments: graph constants
    such as iota/full/arange/scalar_tensor, transfers; CURRENT for an unindexed "cuda"."""
    from torch.fx.node import map_aggregate

    found: set[int] = set()

    def visit(value: Any) -> Any:
        idx = _leaf_index(value)
        if idx is not None:
            found.add(idx)
        return value

    for m in _graph_modules(gm):
        for node in m.graph.nodes:
            map_aggregate(node.args, visit)
            map_aggregate(node.kwargs, visit)
    return found


def _recompile(m: Any) -> None:
    """Regenerate code and forward from the graph. A lazy GraphModule (Dynamo's) only marks
    itself: its code is then generated where stock generates it (the key's reducer, the next
    call), so its attributes keep stock's order, which the AOTAutograd key pickles."""
    m.recompile()


@contextlib.contextmanager
def mapped_graph(gm: Any, home: int) -> Iterator[None]:
    """`gm`'s device arguments cuda:`home` read cuda:0 inside the block, so every way the key
    pickles the graph (its generated code, Dynamo's or Inductor's reducer) sees index 0; the
    graph, its code and its forward are restored on exit, before anything runs or lowers it."""
    import torch

    def to_zero(value: Any) -> Any:
        if _leaf_index(value) != home:
            return value
        return torch.device("cuda", 0) if isinstance(value, torch.device) else "cuda:0"

    from torch.fx.node import map_aggregate

    saved: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []
    touched: list[Any] = []
    try:
        for m in _graph_modules(gm):
            changed = False
            for node in m.graph.nodes:
                args, kwargs = map_aggregate(node.args, to_zero), map_aggregate(node.kwargs, to_zero)
                if args != node.args or kwargs != node.kwargs:
                    saved.append((node, node.args, node.kwargs))
                    node.args, node.kwargs = args, kwargs
                    changed = True
            if changed:
                touched.append(m)
                _recompile(m)
        yield
    finally:
        for node, args, kwargs in saved:
            node.args, node.kwargs = args, kwargs
        for m in touched:
            _recompile(m)


def canonical_kernel_filename(filename: str) -> str:
    """The file name the index-0 variant of the kernel in `filename` has (itself if already)."""
    try:
        with open(filename) as fh:
            source = fh.read()
    except (OSError, TypeError, UnicodeDecodeError):
        return filename
    canonical = canonical_kernel_source(source)
    if canonical is source:
        return filename
    return os.path.join(os.path.dirname(filename), _code_hash(canonical) + ".py")


# -- loads ------------------------------------------------------------------------------------
def graph_home(graph: Any) -> int | None:
    """The one CUDA device a loaded CompiledFxGraph was compiled for, or None (CPU, several)."""
    idxs = list(getattr(graph, "device_idxs", ()) or ())
    if "cuda" not in (getattr(graph, "device_types", ()) or ()) or len(idxs) != 1:
        return None
    return int(idxs[0])


def rebind_graph(graph: Any, target: int, policy: Policy) -> None:
    """Bind a loaded FX entry compiled on another GPU to cuda:`target`, or raise OSError (torch
    then recompiles) when its code names devices this cannot account for."""
    home = graph_home(graph)
    if home is None or home == target:
        return
    source = graph.source_code
    if not isinstance(source, str) or indices_in(source) != {home}:
        policy.note("refused")
        raise OSError(f"pcompile: cached graph names devices {sorted(indices_in(str(source)))}, not only cuda:{home}; "
                      "recompiling for this device")
    from torch._inductor.codecache import PyCodeCache

    rebound = rebind_text(source, home, target)
    _rekey_bundled_kernels(source, home, target)
    graph.source_code = rebound
    graph.cache_key = PyCodeCache.write(rebound)[0]  # a module file of its own, never the home device's
    graph.device_idxs = type(graph.device_idxs)([target])
    constants = getattr(graph, "constants", None)
    if constants:
        graph.constants = {name: _to_device(t, home, target) for name, t in constants.items()}
    policy.note("rebound")


#: One kernel in a python wrapper: async_compile.triton('name', '''<source>''', device_str='cuda').
_KERNEL_CALL = re.compile(r"async_compile\.triton\('[^']*', '''(.*?)''', device_str='cuda'\)", re.DOTALL)


def _rekey_bundled_kernels(source: str, home: int, target: int) -> None:
    """The entry's bundled, ready-to-launch kernels (TritonBundler files them in
    async_compile.CompiledTritonKernels under their cuda:`home` source, just before this load)
    are filed under the rebound source and bound to cuda:`target`, so the rebound wrapper finds
    them as the home device's would: no recompile, and the stored autotune winner rechecked."""
    from torch._inductor.async_compile import CompiledTritonKernels

    cache = CompiledTritonKernels._cache
    for kernel_source in _KERNEL_CALL.findall(source):
        old_key = CompiledTritonKernels.key(kernel_source)
        future = cache.get(old_key)
        autotuner = getattr(future, "static_autotuner", None)
        if autotuner is None:
            continue
        rebind_autotuner(autotuner, target)
        cache[CompiledTritonKernels.key(rebind_text(kernel_source, home, target))] = future
        del cache[old_key]


def _to_device(value: Any, home: int, target: int) -> Any:
    import torch

    if isinstance(value, torch.Tensor) and value.device.type == "cuda" and value.device.index == home:
        return value.to(torch.device("cuda", target))
    return value


def rebind_autotuner(kernel: Any, target: int) -> bool:
    """Point a CachingAutotuner compiled for another GPU at cuda:`target` (before its launchers
    are made). True if anything changed."""
    props = getattr(kernel, "device_props", None)
    if props is None or getattr(props, "type", None) != "cuda" or props.index == target:
        return False
    kernel.device_props = props._replace(index=target)
    meta = getattr(kernel, "triton_meta", None)
    if isinstance(meta, dict) and "device" in meta:
        meta["device"] = target
    for result in getattr(kernel, "compile_results", None) or ():
        compile_meta = getattr(result, "compile_meta", None)
        if isinstance(compile_meta, dict) and "device" in compile_meta:
            compile_meta["device"] = target
    return True
