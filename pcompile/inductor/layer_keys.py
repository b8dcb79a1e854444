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
- kernel (Triton, through Triton's cache manager): software only, for the same reason;
  Triton's hash holds arch and ptxas.
- kernel (Triton, a compile-pool job: `pool_kernel_key`): the kernel source as for cuda:0, with
  the target from its DeviceProperties, ptxas, the job's config, libdevice and Triton's env.
- kernel (C++): software + the C++ compiler's version; Inductor's key holds the command line.
- kernel (the vector-ISA probe's library: `isa_probe`): as C++; torch's key holds the probe's
  source, its ISA flags and the compiler's and torch's versions. Its load check (`isa_probe_load`)
  holds for one CPU model, flag set and C library only (`versions.cpu_identity`).
"""
from __future__ import annotations

import functools
import json
import threading
from typing import Any

from pcompile.keys import Key, KeyInputs, Target, fingerprint, make_key
from pcompile.keys import versions
from pcompile.keys.key import canonical_json

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


def _isa_probe_fingerprint() -> dict[str, str]:
    return {**_cpp_fingerprint(), "x.inductor_layer": "isa-probe"}


def _isa_probe_load_fingerprint() -> dict[str, str]:
    return {**_cpp_fingerprint(), "x.inductor_layer": "isa-probe-load", "x.cpu": versions.cpu_identity()}


_BUILDERS = {
    "graph": _graph_fingerprint,
    "autograd": _graph_fingerprint,
    "autotune": lambda: fingerprint(IN_KEY, {"inductor_layer": "autotune"}),
    # a warm host's no-benchmark choice: same Inductor key, never the same pcompile key as a measured winner
    "autotune_predicted": lambda: fingerprint(IN_KEY, {"inductor_layer": "autotune-predicted"}),
    "triton": lambda: fingerprint(IN_KEY, {"inductor_layer": "triton"}),
    "cpp": _cpp_fingerprint,
    "isa_probe": _isa_probe_fingerprint,
    "isa_probe_load": _isa_probe_load_fingerprint,
    # a compiled function's Dynamo program: its graphs are inside, so the device is part of it
    "program": lambda: {**_graph_fingerprint(), "inductor_layer": "program"},
}

#: fingerprint kind -> pcompile layer
LAYER_OF = {"graph": "graph", "autograd": "autograd", "autotune": "autotune", "autotune_predicted": "autotune",
            "triton": "kernel", "cpp": "kernel", "isa_probe": "kernel", "isa_probe_load": "kernel",
            "program": "program"}


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


#: The artifact a pool kernel entry holds: the stock worker's pickled return value.
POOL_KERNEL_ARTIFACT = "inductor-triton-worker-result-v1"
_pool_cache: dict[tuple[str, tuple[tuple[str, str], ...]], dict[str, str]] = {}
_pool_lock = threading.Lock()  # held while probing: one probe, however many waiter threads ask


@functools.lru_cache(maxsize=8)
def _file_digest(path: str) -> str:
    import xxhash

    try:
        with open(path, "rb") as f:
            return xxhash.xxh3_64_hexdigest(f.read())
    except OSError:
        return "unreadable"


def pool_kernel_key(source: str, extra_env: dict[str, Any], extra_config: dict[str, Any]) -> tuple[Key, KeyInputs, dict[str, str]]:
    """The key of a Triton job Inductor hands its compile pool. The target comes from the
    DeviceProperties in the source (what Triton really compiles for), not from this host, so a
    CPU-only warm host and the GPU job agree. The source is hashed as for cuda:0 (its
    DeviceProperties index is the only difference between GPUs of one board), so every rank of a
    node shares one entry; a result is bound to the requesting kernel's index when it is
    resolved (device_index.py)."""
    from pcompile.compat import pool_hook
    from pcompile.inductor import device_index

    device = pool_hook.device_of(source)
    arch = (f"sm_{device[1]}" if device[0] == "cuda" else f"{device[0]}_{device[1]}") if device else "unknown"
    libdevice = extra_env.get("TRITON_LIBDEVICE_PATH")
    extra = {
        "artifact": POOL_KERNEL_ARTIFACT,
        "extra_config": canonical_json(extra_config).decode(),
        "libdevice": _file_digest(libdevice) if libdevice else "bundled",
        "triton_env": json.dumps(pool_hook.triton_env(), sort_keys=True),
    }
    fp = pool_kernel_fingerprint(arch, tuple(sorted(extra.items())))
    key, inputs = make_key("kernel", device_index.kernel_key_source(source), fp)
    return key, inputs, fp


def pool_kernel_fingerprint(arch: str, extra: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """Memoised: the first probe (triton_key, ptxas --version) costs ~0.5 s, and 64 waiter
    threads computing it at once would each pay it under the GIL."""
    cache_key = (arch, extra)
    with _pool_lock:
        fp = _pool_cache.get(cache_key)
        if fp is None:
            fp = _pool_cache[cache_key] = fingerprint(Target(arch, ""), extra=dict(extra), ptxas=True)
    return dict(fp)


def reset() -> None:
    """Forget cached fingerprints (tests that change PCOMPILE_TARGET_* in-process)."""
    with _lock:
        _cache.clear()
    with _pool_lock:
        _pool_cache.clear()
