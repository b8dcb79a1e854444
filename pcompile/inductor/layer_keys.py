"""pcompile keys for Inductor's own cache keys: make_key(layer, inductor_key, fingerprint(...)).

Inductor's keys already hash the graph, the inputs' metadata, the config, torch's sources and (for
GPU graphs) the device name, CUDA and Triton versions; Triton's hash covers the kernel source,
ptxas and the target arch. The fingerprint adds what pcompile must partition on beyond that,
and must be computed identically by every process that should share an entry, including
Inductor's compile workers, which is why only the graph layers probe the device:

- graph, autograd: software + the target device (arch and exact board name); on a CPU target
  also the vector ISA, which Inductor's FX key lacks although its generated C++ depends on it.
- autotune: software only. Lookups run inside compile workers, where probing CUDA is unsafe;
  the key torch passes already holds backend_hash (Triton, ptxas, arch) and the kernel source
  (which embeds the SM count and compute capability).
- kernel (Triton): software only, for the same reason; Triton's hash holds arch and ptxas.
- kernel (C++): software + the C++ compiler's version; Inductor's key holds the command line.
"""
from __future__ import annotations

import threading

from pcompile.keys import Key, KeyInputs, Target, fingerprint, make_key
from pcompile.keys import versions

_lock = threading.Lock()
_cache: dict[str, dict[str, str]] = {}

#: The pseudo-target for layers whose Inductor/Triton key already pins the device.
IN_KEY = Target("in-key", "")


def _graph_fingerprint() -> dict[str, str]:
    target = Target.current()
    extra: dict[str, str] = {"inductor_layer": "graph"}
    if target.arch == "cpu":
        from pcompile.compat import cpu_isa

        try:
            extra["cpu_isa"] = cpu_isa.vec_isa()
        except Exception as exc:  # never fail a compile over a key field
            extra["cpu_isa"] = f"unknown:{type(exc).__name__}"
    return fingerprint(target, extra)


def _cpp_fingerprint() -> dict[str, str]:
    from pcompile.compat import cpp_compile

    return fingerprint(Target("cpu", versions.machine()), {"inductor_layer": "cpp", "cxx": cpp_compile.compiler_id()})


_BUILDERS = {
    "graph": _graph_fingerprint,
    "autograd": _graph_fingerprint,
    "autotune": lambda: fingerprint(IN_KEY, {"inductor_layer": "autotune"}),
    # a warm host's no-benchmark choice: same Inductor key, never the same pcompile key as a measured winner
    "autotune_predicted": lambda: fingerprint(IN_KEY, {"inductor_layer": "autotune-predicted"}),
    "triton": lambda: fingerprint(IN_KEY, {"inductor_layer": "triton"}),
    "cpp": _cpp_fingerprint,
    # a whole compiled frame (programs.py): pinned to the target like the graphs it bundles
    "program": lambda: {**_graph_fingerprint(), "inductor_layer": "program"},
}

#: fingerprint kind -> pcompile layer
LAYER_OF = {"graph": "graph", "autograd": "autograd", "autotune": "autotune", "autotune_predicted": "autotune",
            "triton": "kernel", "cpp": "kernel", "program": "program"}


def layer_fingerprint(kind: str) -> dict[str, str]:
    """The (per-process cached) fingerprint for one kind of Inductor artifact."""
    with _lock:
        found = _cache.get(kind)
    if found is None:
        found = _BUILDERS[kind]()
        with _lock:
            _cache.setdefault(kind, found)
    return found


def store_key(kind: str, inductor_key: str) -> tuple[Key, KeyInputs]:
    """pcompile's key for Inductor's (or Triton's) key `inductor_key` of artifact kind `kind`."""
    return make_key(LAYER_OF[kind], inductor_key, layer_fingerprint(kind))


def reset() -> None:
    """Forget cached fingerprints (tests that change PCOMPILE_TARGET_* in-process)."""
    with _lock:
        _cache.clear()
