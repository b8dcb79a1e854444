"""GPU timings Inductor asks for while compiling (pad_mm's decision, max-autotune's candidates,
benchmark fusion): answered without a GPU, and the graphs whose choices depended on them kept
out of every cache so that the GPU job tunes and publishes the real winners.

Part of the warm's private-torch surface (see warm_runtime.py); tests/test_warm_compat.py runs
this module's check().
"""
from __future__ import annotations

import functools
import threading
from typing import Any, Callable

import torch

from pcompile.compat.warm_runtime import mark, marked, missing
from pcompile.settings import WARM_PAD_MM

CHECKED = {"torch": "2.11.0, 2.14.1, 2.15.0 (2.15: check() and tests/test_warm*.py; ExternKernelCaller.benchmark read on 2.14.1, its test run on 2.11.0 and 2.15.0)"}

PRIVATE_SYMBOLS: list[tuple[str, str]] = [
    ("torch._inductor.fx_passes.pad_mm", "_should_pad"),
    ("torch._inductor.fx_passes.pad_mm", "get_do_bench"),
    ("torch._inductor.runtime.benchmarking", "Benchmarker"),
    ("torch._inductor.runtime.benchmarking", "benchmarker"),
    ("torch._inductor.select_algorithm.ExternKernelCaller", "benchmark"),
    ("torch._inductor.codecache.PersistentCache", "update_local_cache"),
    ("torch._inductor.codecache.FxGraphCache", "_save_graph"),
    ("torch._functorch._aot_autograd.autograd_cache.AOTAutogradCache", "save"),
    ("torch._functorch._aot_autograd.autograd_cache", "autograd_cache_key"),
    ("torch._inductor.compile_fx", "_compile_fx_inner"),
]


def check() -> list[str]:
    """Names of the private symbols this module needs that this torch lacks (empty when all is well)."""
    gone = missing(PRIVATE_SYMBOLS)
    if not gone:
        import inspect

        from torch._inductor.select_algorithm import ExternKernelCaller

        if "has_out_variant" not in inspect.signature(ExternKernelCaller.__init__).parameters:
            gone.append("torch._inductor.select_algorithm.ExternKernelCaller(has_out_variant=)")
    return gone


class _NoGpuTiming(Exception):
    pass


def pad_mm_prediction() -> str:
    return str(WARM_PAD_MM.get())


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

    if marked(pad_mm._should_pad, "no_gpu_timing_in_pad_mm"):
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

    mark(_should_pad, "no_gpu_timing_in_pad_mm")
    pad_mm.get_do_bench = get_do_bench
    pad_mm._should_pad = _should_pad


_timing = threading.local()


def inside_graph_compile() -> bool:
    """True inside one of Inductor's graph compiles on this thread (where fusion choices are timed)."""
    return bool(getattr(_timing, "compiling", 0))


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
    if marked(benchmarking.Benchmarker.benchmark_gpu, "fake_gpu_timings"):
        return

    def faked(what: str, original: Callable[..., Any], gpu: Callable[..., bool]) -> Callable[..., Any]:
        @functools.wraps(original)
        def bench(*args: Any, **kwargs: Any) -> Any:
            if not gpu(*args, **kwargs):
                return original(*args, **kwargs)
            _timing.graph = _timing.aot = True
            on_fake(what)
            return 1.0

        mark(bench, "fake_gpu_timings")
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

    # An ATen choice without an out= variant (convolution, grouped mm, a custom op's fallback) is
    # called once for real before it is timed, outside the benchmarker: on the virtual device that
    # is a native launch inside the compile, and a cuDNN convolution fails (no cuDNN handle on a
    # compile-only device), so Inductor logs "Runtime error during autotuning" and drops the ATen
    # choice as infinitely slow. Its timing is faked like every other candidate's, without the call.
    def extern_without_out(self: Any, *args: Any, out: Any = None, **kw: Any) -> bool:
        tensors = [t for t in (*args, out) if isinstance(t, torch.Tensor)]
        return (not getattr(self, "has_out_variant", True) and (out is None or out.numel() > 0)
                and any(t.device.type != "cpu" for t in tensors))

    caller = select_algorithm.ExternKernelCaller
    caller.benchmark = faked("extern_without_out", caller.__dict__["benchmark"], extern_without_out)

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

    if marked(FxGraphCache._save_graph, "keep_tuned_graphs_unpublished"):
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
        mark(fn, "keep_tuned_graphs_unpublished")
    FxGraphCache._save_graph = staticmethod(_save_graph)
    ac.AOTAutogradCache.save = staticmethod(save)
    cfx._compile_fx_inner = _compile_fx_inner
    ac.autograd_cache_key = autograd_cache_key
