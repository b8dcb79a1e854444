"""An entry: named blobs plus a manifest that lists each blob's sha256 and size.

The manifest carries a digest of its own canonical body, so a flipped byte anywhere (manifest
or blob) is detected before anything is deserialised. Signing (pcompile.trust) signs the same
canonical body and adds a `signature` field, which the digest does not cover.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from typing import Any, Mapping

from pcompile.errors import CorruptEntryError
from pcompile.keys.key import Key, KeyInputs, canonical_json

MANIFEST_FORMAT = 1
_UNSIGNED_FIELDS = ("digest", "signature")


def blob_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclasses.dataclass
class Entry:
    """What a layer stores for one key. `blobs` maps a name chosen by the layer to its bytes."""

    key: Key
    blobs: dict[str, bytes]
    inputs: KeyInputs | None = None
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
    compile_seconds: float = 0.0

    @property
    def size(self) -> int:
        return sum(len(b) for b in self.blobs.values())


@dataclasses.dataclass(frozen=True)
class Manifest:
    body: dict[str, Any]
    signature: str | None = None

    @property
    def key(self) -> Key:
        return Key.parse(self.body["key"])

    @property
    def blobs(self) -> dict[str, dict[str, Any]]:
        return self.body["blobs"]

    def payload(self) -> bytes:
        """Exactly the bytes the digest and any signature cover."""
        return canonical_json(self.body)

    def encode(self) -> bytes:
        obj = dict(self.body)
        obj["digest"] = hashlib.sha256(self.payload()).hexdigest()
        if self.signature is not None:
            obj["signature"] = self.signature
        return json.dumps(obj, sort_keys=True, indent=1).encode()

    @staticmethod
    def for_entry(entry: Entry) -> "Manifest":
        body = {
            "format": MANIFEST_FORMAT,
            "key": str(entry.key),
            "layer": entry.key.layer,
            "inputs": entry.inputs.to_json() if entry.inputs else None,
            "blobs": {name: {"sha256": blob_hash(data), "size": len(data)} for name, data in sorted(entry.blobs.items())},
            "meta": entry.meta,
            "compile_seconds": round(float(entry.compile_seconds), 6),
            "created": round(time.time(), 3),
        }
        return Manifest(body)

    @staticmethod
    def decode(raw: bytes, expect: Key) -> "Manifest":
        """Parse and check the self-digest and the key; raises CorruptEntryError."""
        try:
            obj = json.loads(raw)
            if not isinstance(obj, dict):
                raise ValueError("not an object")
        except (ValueError, UnicodeDecodeError) as exc:
            raise CorruptEntryError(f"manifest of {expect} is not valid JSON ({exc.__class__.__name__})") from None
        digest = obj.pop("digest", None)
        signature = obj.pop("signature", None)
        body = obj
        if digest != hashlib.sha256(canonical_json(body)).hexdigest():
            raise CorruptEntryError(f"manifest of {expect} fails its digest check")
        if body.get("format") != MANIFEST_FORMAT:
            raise CorruptEntryError(f"manifest of {expect} has unknown format {body.get('format')!r}")
        if body.get("key") != str(expect):
            raise CorruptEntryError(f"manifest stored under {expect} names {body.get('key')!r} (a foreign entry)")
        blobs = body.get("blobs")
        if not isinstance(blobs, dict) or not all(
            isinstance(v, dict) and isinstance(v.get("sha256"), str) and len(v["sha256"]) == 64 and isinstance(v.get("size"), int)
            for v in blobs.values()
        ):
            raise CorruptEntryError(f"manifest of {expect} has a malformed blob list")
        return Manifest(body, signature)

    def to_entry(self, blobs: Mapping[str, bytes]) -> Entry:
        inputs = self.body.get("inputs")
        return Entry(
            key=self.key,
            blobs=dict(blobs),
            inputs=KeyInputs.from_json(inputs) if inputs else None,
            meta=dict(self.body.get("meta") or {}),
            compile_seconds=float(self.body.get("compile_seconds") or 0.0),
        )


def verify_blob(manifest: Manifest, name: str, data: bytes | None) -> None:
    want = manifest.blobs[name]
    if data is None:
        raise CorruptEntryError(f"{manifest.key}: blob {name!r} is missing")
    if len(data) != want["size"]:
        raise CorruptEntryError(f"{manifest.key}: blob {name!r} is {len(data)} bytes, manifest says {want['size']} (truncated?)")
    if blob_hash(data) != want["sha256"]:
        raise CorruptEntryError(f"{manifest.key}: blob {name!r} fails its sha256 check")
