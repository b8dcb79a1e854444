"""pcompile's store as the backend of Inductor's "remote" caches (FX graph, AOTAutograd, autotune).

torch builds a `Remote*Cache` per lookup; with `backend_override_cls` set it asks our factory
for the backend, then calls `_get(key)` / `_put(key, bytes)` with keys such as
`pt2:fx-graph-v1::<fx key>:c1` and JSON-encoded bytes. Everything above that (pickling, guards,
bundled Triton kernels, local files) stays torch's. Each layer gets its own subclass so torch's
per-class cache stats stay readable.

Single-flight applies to the graph and autograd layers. It does not to autotune results: a
result is written only after benchmarking on a GPU, at the kernel's first launch, and often
never (kernels with one config), so a lease taken at the lookup would make other ranks wait
for a publish that may not come. Autotune lookups are plain reads.

Predicted winners: a warm host cannot benchmark, so it files Inductor's own no-benchmark choice
under a separate key (`predicting()`, from compat/autotune_choice.py). A GPU job whose measured
winner is missing uses the prediction (`PCOMPILE_AUTOTUNE=predicted`, the default outside tuning modes: the first step
then skips benchmarking) or ignores it (`PCOMPILE_AUTOTUNE=benchmark`, the default under max-autotune: benchmark at first launch
and publish the measured winner, which every later job prefers over the prediction).
"""
from __future__ import annotations

import contextlib
import json
import threading
from typing import Any, Iterator

from pcompile.inductor import store_gateway
from pcompile.settings import AUTOTUNE
from pcompile.thread_flags import raised
from pcompile.compat import remote_cache as compat

#: layer the factory serves -> (fingerprint kind, single flight?)
_LAYERS: dict[str, tuple[str, bool]] = {
    "graph": ("graph", True),
    "autograd": ("autograd", True),
    "autotune": ("autotune", False),
    "autotune_bundle": ("autotune", False),
}

BLOB = "value"
_classes: dict[str, type] = {}

_tls = threading.local()


def autotune_policy() -> str:
    """PCOMPILE_AUTOTUNE: whether a missing measured winner may be replaced by a warm's prediction.
    `auto` benchmarks in a tuning mode: the user of max-autotune (or coordinate descent) chose
    start-up time for steady-state speed, which a prediction gives away. Inductor's config is
    patched process-wide while torch.compile(mode=...) compiles and loads its kernels, which is
    when this look-up happens."""
    policy = str(AUTOTUNE.get())
    if policy != "auto":
        return policy
    from pcompile.compat.autotune_choice import tuning_mode

    return "benchmark" if tuning_mode() else "predicted"


@contextlib.contextmanager
def predicting() -> Iterator[None]:
    """Autotune puts in this block (this thread) are predictions, not measured winners."""
    with raised(_tls, "predicting"):
        yield


def _autotune_lookup(key: str) -> bytes | None:
    """A measured winner, else (PCOMPILE_AUTOTUNE=predicted) a warm host's prediction: ONE autotune
    look-up for the accounting (store/hits.py), whichever read answered it. With neither, a host
    that cannot time kernels (a warm) leaves the kernel for the GPU job: `untimed`, not a miss."""
    entry = store_gateway.lookup("autotune", key, single_flight=False, counted=False)
    winner = "measured"
    # Never inside a kernel entry's build (a pool job): the entry would keep only the predicted
    # config for every later job, whatever its policy and whatever winner is measured later. The
    # process that asked for the kernel applies its own view (compat/autotune_recheck.py).
    if entry is None and autotune_policy() == "predicted" and not store_gateway.building("kernel"):
        entry = store_gateway.lookup("autotune_predicted", key, single_flight=False, counted=False)
        winner = "predicted"
    if entry is not None:
        store_gateway.account(store_gateway.store(), "autotune", "hit", entry, winner=winner)
        return entry.blobs.get(BLOB)
    store_gateway.account(store_gateway.store(), "autotune", "untimed" if store_gateway.cannot_time() else "miss")
    return None


def _time_taken(data: bytes) -> float | None:
    """Inductor's own measure of the compile (JSON field time_taken_ms), when present."""
    if not data.startswith(b"{"):
        return None
    try:
        ms = json.loads(data).get("time_taken_ms")
    except (ValueError, AttributeError):
        return None
    return float(ms) / 1000.0 if isinstance(ms, (int, float)) else None


def backend_class(layer: str) -> type:
    """The backend class torch instantiates for `layer` (built once; subclasses torch's base)."""
    found = _classes.get(layer)
    if found is not None:
        return found
    kind, single_flight = _LAYERS[layer]
    base = compat.backend_base()

    def _get(self: Any, key: str) -> bytes | None:
        if kind == "autotune":
            return _autotune_lookup(key)
        entry = store_gateway.lookup(kind, key, single_flight=single_flight)
        return None if entry is None else entry.blobs.get(BLOB)

    def _put(self: Any, key: str, data: Any) -> None:
        if isinstance(data, str):
            data = data.encode()
        if not isinstance(data, (bytes, bytearray)):
            return  # torch's serde always gives bytes; anything else is not ours to store
        data = bytes(data)
        if layer == "autotune" and getattr(_tls, "predicting", False):
            if store_gateway.publish("autotune_predicted", key, {BLOB: data}, compiled=False,
                                     meta={"inductor_key": key, "source": "pcompile.warm.predicted", "predicted": True}):
                store_gateway.account(store_gateway.store(), "autotune", "predicted")  # store/hits.py: beside `untimed`
            return
        store_gateway.publish(kind, key, {BLOB: data}, meta={"inductor_key": key, "source": f"inductor.{layer}"},
                       compile_seconds=_time_taken(data))

    name = "Pcompile" + "".join(part.title() for part in layer.split("_")) + "Backend"
    cls = type(name, (base,), {"_get": _get, "_put": _put, "__doc__": f"pcompile store backend for the {layer} layer", "layer": layer})
    _classes[layer] = cls
    return cls


def install() -> list[str]:
    """Point every Remote*Cache at the store; returns the layers installed."""
    installed = []
    for layer in compat.CLASS_FOR_LAYER:
        compat.set_backend(layer, backend_class(layer))
        installed.append(layer)
    # Autotune keys are computed where kernels are imported, compile workers included (which
    # call this through inductor/worker_prewarm.py): all must hash them as for cuda:0 (device_index.py).
    from pcompile.inductor import device_index

    device_index.install_autotune_key()
    return installed


def uninstall() -> None:
    for layer in compat.CLASS_FOR_LAYER:
        if compat.current_backend(layer) is _classes.get(layer):
            compat.set_backend(layer, None)
