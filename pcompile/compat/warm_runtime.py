"""The warm path's private-torch surface, for torch 2.11 to 2.15: the version gate, the whole
check, and the compile windows and graph caches.

The warm child runs an ordinary training script on fake tensors under the virtual device. Stock
torch then needs a few adjustments so that executing compiled code does nothing, no value is read
from device memory (which holds garbage), module moves work on fakes, and GPU timings are never
made up into cached choices. Each function installs one adjustment and names the private symbol
it relies on, one module per concern:

- warm_fakes.py: the fake mode the script runs under, and script code on fakes;
- warm_compiled_autograd.py: compiled autograd's capture on the script's fakes;
- warm_launches.py: executing compiled code on fakes;
- warm_nested.py: nested jagged tensors built on the script's fakes;
- warm_programs.py: the guards of the programs a warm writes;
- warm_timings.py: GPU timings asked for while compiling;
- warm_training.py: DDP, GradScaler and the fake process group's store;
- warm_uncached.py: graphs Inductor will not cache, and why;
- warm_values.py: real values for tensors made from the script's host data;
- this module: what they share, `check()` over all of them, and the compile windows and caches.

`check()` verifies every symbol still exists so a torch upgrade fails loudly
(tests/test_warm_compat.py) instead of warming wrongly.
"""
from __future__ import annotations

import functools
import importlib
from typing import Any, Callable

import torch

from pcompile.compat.gate import TORCH_RANGE as SUPPORTED  # one range for hooks and warm

CHECKED = {"torch": "2.11.0, 2.14.1, 2.15.0 (2.15: check() and tests/test_warm*.py)"}

#: the warm modules whose check() this module's check() runs too
CONCERNS = ("warm_checkpoints", "warm_compiled_autograd", "warm_fakes", "warm_launches", "warm_nested", "warm_programs", "warm_storage", "warm_timings", "warm_tracers", "warm_training", "warm_uncached", "warm_values")

# (module path, attribute) of every private symbol used below.
PRIVATE_SYMBOLS: list[tuple[str, str]] = [
    ("torch._inductor.compile_fx", "joint_graph_passes"),
    ("torch._inductor.compile_fx", "_compile_fx_inner"),
    ("torch._inductor.compile_fx", "compile_fx"),
    ("torch._inductor.config", "fx_graph_cache"),
    ("torch._functorch.config", "enable_autograd_cache"),
    ("torch._functorch._aot_autograd.autograd_cache", "autograd_cache_key"),
    ("torch._dynamo.utils", "counters"),
    ("torch.utils._triton", "triton_hash_with_backend"),
]


def marked(fn: Any, concern: str) -> bool:
    """Whether `fn` already carries this concern's wrapper. One marker per concern: several
    concerns wrap the same function (functools.wraps copies the marks outward)."""
    return concern in getattr(fn, "_pcompile_patches", ())


def mark(fn: Any, concern: str) -> None:
    fn._pcompile_patches = (*getattr(fn, "_pcompile_patches", ()), concern)


def untraced(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, and all it calls, run with Dynamo off (torch.compiler.disable). Every pcompile function
    put in place of a torch function the script calls goes through this (or `untraced_frame`):
    called eagerly inside a compiled function (after a graph break: `loss.backward()`), its frames
    would otherwise be compiled by Dynamo, recompiled as pcompile's own state changes, and warned
    about (`time.monotonic`), in code the user never wrote. Inside a traced frame, a call to it is a
    graph break, as a call to the torch function it stands in for is."""
    return torch.compiler.disable(fn, recursive=True)


def untraced_frame(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`'s own frame is never traced, but what it calls is, as stock would (non-recursive
    disable): for a wrapper that calls back into the script's code (a backward runs the script's
    hooks and compiled autograd). Its own bookkeeping must then go through `untraced`."""
    return torch.compiler.disable(fn, recursive=False)


def torch_version() -> tuple[int, int]:
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def version_supported() -> bool:
    return SUPPORTED[0] <= torch_version() <= SUPPORTED[1]


def _resolve(module: str, attr: str) -> Any:
    try:
        return getattr(importlib.import_module(module), attr)
    except ModuleNotFoundError:
        parent, cls = module.rsplit(".", 1)  # a class attribute: "pkg.mod.Class", "attr"
        return getattr(getattr(importlib.import_module(parent), cls), attr)


def missing(symbols: list[tuple[str, str]]) -> list[str]:
    """The dotted names among `symbols` that do not resolve in this torch."""
    gone = []
    for module, attr in symbols:
        try:
            _resolve(module, attr)
        except (ImportError, AttributeError):
            gone.append(f"{module}.{attr}")
    return gone


def check() -> list[str]:
    """Names of private symbols the whole warm path needs that this torch lacks (empty when all is well)."""
    gone = missing(PRIVATE_SYMBOLS)
    for name in CONCERNS:  # imported here: each of them imports this module's marks
        gone += importlib.import_module(f"pcompile.compat.{name}").check()
    return gone


def during_inductor_compile(enter: Callable[[], None], leave: Callable[[], None]) -> None:
    """Call enter()/leave() around Inductor's joint-graph passes and each inner compile
    (forward, and the lazily compiled backward), the windows where strict mode applies; torch's
    counters are observed there too (observe_counters)."""
    import torch._inductor.compile_fx as cfx

    if marked(cfx._compile_fx_inner, "during_inductor_compile"):
        return

    def windowed(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            observe_counters()
            enter()
            try:
                return fn(*args, **kwargs)
            finally:
                leave()
                observe_counters()

        mark(inner, "during_inductor_compile")
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
    if marked(original, "normalize_graphs_before_inductor"):
        return

    @functools.wraps(original)
    def compile_fx(model: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(model, torch.fx.GraphModule):
            model = normalize(model)
        return original(model, *args, **kwargs)

    mark(compile_fx, "normalize_graphs_before_inductor")
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


def triton_backend_hash() -> str:
    from torch.utils._triton import triton_hash_with_backend

    return str(triton_hash_with_backend())


_last_counts: dict[str, dict[str, int]] = {}
_banked_counts: dict[str, dict[str, int]] = {}


def observe_counters() -> None:
    """Note torch's compile counters now. A script may clear them (`torch._dynamo.utils.counters.clear()`,
    as tutorials and torch's own TestCase do): a group whose every count is lower than at the last look
    was cleared, and its counts seen before are banked, so the warm still adds up what it compiled
    (a single lower count is a gauge torch sets, such as DDP's bucket count, not a clear). (Torch
    replaces the per-group Counter objects itself while compiling, keeping their counts, so the
    values are tracked, not the objects.)"""
    from torch._dynamo.utils import counters as c

    now = {group: dict(counter) for group, counter in list(c.items())}
    for group, last in _last_counts.items():
        current = now.get(group, {})
        seen = {name: n for name, n in last.items() if n > 0}
        if seen and all(current.get(name, 0) < n for name, n in seen.items()):  # the group was cleared
            bank = _banked_counts.setdefault(group, {})
            for name, n in seen.items():
                bank[name] = bank.get(name, 0) + n
    _last_counts.clear()
    _last_counts.update(now)


def counters() -> dict[str, dict[str, int]]:
    """Torch's compile counters over the whole warm, across any clear by the script (observe_counters)."""
    observe_counters()
    out = {group: dict(counts) for group, counts in _last_counts.items()}
    for group, bank in _banked_counts.items():
        into = out.setdefault(group, {})
        for name, n in bank.items():
            into[name] = into.get(name, 0) + n
    return out


def max_autotune_enabled() -> bool:
    import torch._inductor.config as ic

    return bool(ic.max_autotune or ic.max_autotune_gemm or ic.max_autotune_pointwise or ic.coordinate_descent_tuning)
