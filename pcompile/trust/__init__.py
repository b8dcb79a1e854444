"""Trust: signed manifests (HMAC-SHA256 or ed25519) and who may write where.

The store applies the policy to its tiers (store/compose.py); see policy.py for the rules and keys.py
for the keys. Trust never imports the store: it signs anything shaped like a manifest.
"""
from __future__ import annotations

from pcompile.trust.policy import TrustConfig
from pcompile.trust.signing import ManifestSigner, ManifestVerifier, UntrustedEntryError

__all__ = ["TrustConfig", "ManifestSigner", "ManifestVerifier", "UntrustedEntryError"]
