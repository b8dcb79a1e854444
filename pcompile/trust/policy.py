"""Which tier signs and which tier checks, from the environment.

* Signing is configured when any key is set (HMAC key, ed25519 signing or verify key). Then every
  shared and remote tier checks signatures: an unsigned, unknown-key or wrongly signed manifest
  is refused before any blob is read (counted as `untrusted`, reported once per key, recompiled).
* The node-local tier is not checked: only this user's processes write it, and entries reach it
  from slower tiers only after passing the check there (a reader holding just a public key could
  not re-sign a backfilled copy anyway).
* Every tier signs what it publishes when this process holds a signing key (ed25519 private key,
  else the HMAC key). A process that checks signatures but cannot sign never writes to shared
  or remote tiers: its entries would be refused by every reader.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from pcompile.trust.signing_keys import Ed25519Private, Ed25519Public, HmacKey, load_hmac, load_signing_key, load_verify_keys
from pcompile.trust.signing import Manifest, ManifestSigner, ManifestVerifier


@dataclasses.dataclass(frozen=True)
class TrustConfig:
    hmac: HmacKey | None = None
    signing: Ed25519Private | None = None
    verify: tuple[Ed25519Public, ...] = ()

    @staticmethod
    def from_env() -> "TrustConfig":
        """Raises PcompileError for unreadable or unusable keys: never silently unsigned."""
        return TrustConfig(load_hmac(), load_signing_key(), tuple(load_verify_keys()))

    @property
    def checks(self) -> bool:
        return self.hmac is not None or self.signing is not None or bool(self.verify)

    def signer(self) -> ManifestSigner | None:
        if self.signing is None and self.hmac is None:
            return None
        return ManifestSigner(ed25519=self.signing, hmac_key=self.hmac)

    def verifier(self, on_refused: Callable[[], None] | None = None) -> ManifestVerifier | None:
        """`on_refused()` is called once per refused manifest (the store counts it per tier)."""
        if not self.checks:
            return None
        publics = list(self.verify)
        if self.signing is not None and all(p.id != self.signing.public.id for p in publics):
            publics.append(self.signing.public)

        def refused(manifest: Manifest, reason: str) -> None:
            if on_refused is not None:
                on_refused()

        return ManifestVerifier(hmac_keys=[self.hmac] if self.hmac else [], ed25519_keys=publics, on_refuse=refused)

    def describe(self) -> str:
        if not self.checks:
            return "off (entries are unsigned; anyone who can write a shared or remote tier can run code)"
        kinds = []
        if self.hmac:
            kinds.append(f"hmac-sha256 key {self.hmac.id}")
        ids = sorted({p.id for p in self.verify} | ({self.signing.public.id} if self.signing else set()))
        if ids:
            kinds.append("ed25519 keys " + ",".join(ids))
        signer = self.signer()
        return f"on: accepts {'; '.join(kinds)}; signs with {signer.scheme if signer else 'nothing (read-only for shared/remote)'}"
