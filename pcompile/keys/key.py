"""Keys name artifacts: LAYER-HEX32, an xxh3-128 over the artifact's source and its fingerprint.

The key is derived only from content (source + build-relevant fingerprint), never from where or
by whom it was compiled, so every rank on every host computes the same key for the same artifact.
The strict textual form doubles as a guard: a valid key can never be a path.
"""
from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Mapping

import xxhash

from pcompile.errors import BadKeyError

LAYERS: tuple[str, ...] = ("graph", "autograd", "kernel", "autotune", "program")
KEY_FORMAT = 1
_KEY_RE = re.compile(r"(" + "|".join(LAYERS) + r")-([0-9a-f]{32})")


def canonical_json(obj: Any) -> bytes:
    """The one serialisation used for hashing and signing: sorted keys, no whitespace."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def source_hash(source: bytes | str) -> str:
    data = source.encode() if isinstance(source, str) else bytes(source)
    return xxhash.xxh3_128_hexdigest(data)


@dataclasses.dataclass(frozen=True, order=True)
class Key:
    layer: str
    digest: str

    def __str__(self) -> str:
        return f"{self.layer}-{self.digest}"

    @staticmethod
    def parse(text: str) -> "Key":
        if not isinstance(text, str) or not _KEY_RE.fullmatch(text):
            shown = repr(text)[:80]
            raise BadKeyError(
                f"malformed key {shown}: expected LAYER-HEX32 with LAYER one of {', '.join(LAYERS)} "
                "(copy one from `pcompile report`'s kernel table or `--json`; `explain` also takes the graph and kernel names it prints)"
            )
        layer, digest = text.split("-", 1)
        return Key(layer, digest)


@dataclasses.dataclass(frozen=True)
class KeyInputs:
    """Everything a key was computed from; stored beside the entry so `explain` can diff two keys."""

    layer: str
    source_hash: str
    fingerprint: Mapping[str, str]

    def to_json(self) -> dict[str, Any]:
        return {"format": KEY_FORMAT, "layer": self.layer, "source_hash": self.source_hash, "fingerprint": dict(self.fingerprint)}

    @staticmethod
    def from_json(obj: Mapping[str, Any]) -> "KeyInputs":
        return KeyInputs(str(obj["layer"]), str(obj["source_hash"]), {str(k): str(v) for k, v in dict(obj["fingerprint"]).items()})

    def key(self) -> Key:
        return Key(self.layer, xxhash.xxh3_128_hexdigest(canonical_json(self.to_json())))


def make_key(layer: str, source: bytes | str, fingerprint: Mapping[str, str]) -> tuple[Key, KeyInputs]:
    if layer not in LAYERS:
        raise BadKeyError(f"unknown layer {layer!r}: use one of {', '.join(LAYERS)}")
    inputs = KeyInputs(layer, source_hash(source), {str(k): str(v) for k, v in fingerprint.items()})
    return inputs.key(), inputs
