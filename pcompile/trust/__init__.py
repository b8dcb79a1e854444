"""Trust: signed manifests (HMAC-SHA256 or ed25519) and who may write where.

Store.open calls `configure_tiers(store)`; see policy.py for the rules and keys.py for the keys.
"""
from __future__ import annotations

from pcompile.trust.policy import TrustConfig, configure_tiers
from pcompile.trust.signing import ManifestSigner, ManifestVerifier, UntrustedEntryError

__all__ = ["TrustConfig", "configure_tiers", "ManifestSigner", "ManifestVerifier", "UntrustedEntryError"]
