"""Sign and check manifests. A manifest lists every blob's sha256 and size, so signing its
canonical body (Manifest.payload()) covers the blobs too; Tier.get checks the signature before
it reads a single blob, and the blob hashes before it returns anything to a loader.

Signature field: "<scheme>:<key id>:<signature>", scheme hmac-sha256 (hex) or ed25519 (base64).
The signed message is a fixed domain tag plus the payload, so a pcompile signature can never be
replayed as a signature over anything else made with the same key.
"""
from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import threading
from typing import Any, Callable, Protocol

from pcompile.errors import UntrustedEntryError
from pcompile.trust.signing_keys import Ed25519Private, Ed25519Public, HmacKey


class Manifest(Protocol):
    """What signing needs of a store manifest (store/entry.py's Manifest, a frozen dataclass).
    Trust sits beside the store, not above it: the store installs the signer and verifier."""

    body: dict[str, Any]
    signature: str | None

    def payload(self) -> bytes: ...

DOMAIN = b"pcompile-manifest-signature-v1\n"
HMAC_SCHEME = "hmac-sha256"
ED25519_SCHEME = "ed25519"
_MAX_SIGNATURE_CHARS = 256




def signed_message(manifest: Manifest) -> bytes:
    return DOMAIN + manifest.payload()


class ManifestSigner:
    """The `Tier.signer` hook: returns the manifest with a signature attached."""

    def __init__(self, *, ed25519: Ed25519Private | None = None, hmac_key: HmacKey | None = None) -> None:
        if ed25519 is None and hmac_key is None:
            raise ValueError("a signer needs a key")
        self.ed25519 = ed25519
        self.hmac_key = hmac_key
        self.scheme = ED25519_SCHEME if ed25519 is not None else HMAC_SCHEME

    def __call__(self, manifest: Manifest) -> Manifest:
        message = signed_message(manifest)
        if self.ed25519 is not None:
            sig = base64.b64encode(self.ed25519.key.sign(message)).decode()
            field = f"{ED25519_SCHEME}:{self.ed25519.public.id}:{sig}"
        else:
            assert self.hmac_key is not None
            field = f"{HMAC_SCHEME}:{self.hmac_key.id}:{hmac.new(self.hmac_key.secret, message, hashlib.sha256).hexdigest()}"
        return dataclasses.replace(manifest, signature=field)


class ManifestVerifier:
    """The `Tier.trust` hook: raises UntrustedEntryError unless a configured key signed it.

    `on_refuse(manifest, reason)` is told about every refusal (counted in `pcompile stats`).
    """

    def __init__(
        self,
        *,
        hmac_keys: list[HmacKey] | None = None,
        ed25519_keys: list[Ed25519Public] | None = None,
        on_refuse: Callable[[Manifest, str], None] | None = None,
    ) -> None:
        self.hmac = {k.id: k for k in hmac_keys or []}
        self.ed25519 = {k.id: k for k in ed25519_keys or []}
        if not self.hmac and not self.ed25519:
            raise ValueError("a verifier needs at least one key")
        self.on_refuse = on_refuse
        self.refused = 0
        self._lock = threading.Lock()

    def __call__(self, manifest: Manifest) -> None:
        reason = self._problem(manifest)
        if reason is None:
            return
        with self._lock:
            self.refused += 1
        if self.on_refuse is not None:
            try:
                self.on_refuse(manifest, reason)
            except Exception:
                pass
        raise UntrustedEntryError(f"{manifest.body.get('key')}: {reason} (not loaded)")

    def _problem(self, manifest: Manifest) -> str | None:
        field = manifest.signature
        if not field:
            return "unsigned entry refused because signing is configured"
        if not isinstance(field, str) or len(field) > _MAX_SIGNATURE_CHARS or field.count(":") != 2:
            return "malformed signature"
        scheme, kid, sig = field.split(":")
        message = signed_message(manifest)
        if scheme == HMAC_SCHEME:
            key = self.hmac.get(kid)
            if key is None:
                return f"signed with an unknown HMAC key {kid}"
            good = hmac.new(key.secret, message, hashlib.sha256).hexdigest()
            return None if hmac.compare_digest(good, sig) else "HMAC signature does not match"
        if scheme == ED25519_SCHEME:
            pub = self.ed25519.get(kid)
            if pub is None:
                return f"signed with an unknown ed25519 key {kid}"
            try:
                raw = base64.b64decode(sig, validate=True)
            except (binascii.Error, ValueError):
                return "malformed ed25519 signature"
            from cryptography.exceptions import InvalidSignature

            try:
                pub.key.verify(raw, message)
            except InvalidSignature:
                return "ed25519 signature does not verify"
            return None
        return f"unknown signature scheme {scheme[:32]!r}"
