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
"""
from __future__ import annotations

import json
from typing import Any

from pcompile.inductor import flight
from pcompile.inductor.compat import remote_cache as compat

#: layer the factory serves -> (fingerprint kind, single flight?)
_LAYERS: dict[str, tuple[str, bool]] = {
    "graph": ("graph", True),
    "autograd": ("autograd", True),
    "autotune": ("autotune", False),
    "autotune_bundle": ("autotune", False),
}

BLOB = "value"
_classes: dict[str, type] = {}


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
        entry = flight.lookup(kind, key, single_flight=single_flight)
        if entry is None:
            return None
        return entry.blobs.get(BLOB)

    def _put(self: Any, key: str, data: Any) -> None:
        if isinstance(data, str):
            data = data.encode()
        if not isinstance(data, (bytes, bytearray)):
            return  # torch's serde always gives bytes; anything else is not ours to store
        data = bytes(data)
        flight.publish(kind, key, {BLOB: data}, meta={"inductor_key": key, "source": f"inductor.{layer}"},
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
    return installed


def uninstall() -> None:
    for layer in compat.CLASS_FOR_LAYER:
        if compat.current_backend(layer) is _classes.get(layer):
            compat.set_backend(layer, None)
