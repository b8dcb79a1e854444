"""The store's composition root: which tiers a process gets, and how each is signed and checked.

`open_store()` is the one place that turns settings and the trust policy into a `Store`:
node-local tier, then the shared directory, then the remote, each given its signer and verifier
by `apply_trust()`. The trust package only says who signs and what is accepted (trust/policy.py);
wiring that into tiers is the store's job, so trust never imports the store.
"""
from __future__ import annotations

import errno
import logging
import os
import threading

from pcompile.config import Settings
from pcompile.errors import PcompileError
from pcompile.store.fs_tier import DirectoryTier
from pcompile.store.tier import Tier
from pcompile.store.tiered import Store
from pcompile.trust.policy import TrustConfig
from pcompile.trust.signing import Manifest

log = logging.getLogger("pcompile.store")


def open_store(settings: Settings | None = None, *, must_exist: bool = False, writable: bool = False) -> Store:
    """The store for `settings` (default: the environment's): every tier the settings name."""
    settings = settings or Settings.from_env()
    tiers: list[Tier] = [DirectoryTier(settings.cache_dir / "store", "local", create=not must_exist)]
    if settings.shared_dir is not None:
        try:
            tiers.append(DirectoryTier(settings.shared_dir / "store", "shared", create=not must_exist and not settings.read_only))
        except PcompileError as exc:
            if must_exist or writable:
                raise  # a command aimed at the shared tier: say so and stop
            from pcompile.logs import setup

            setup()  # a job goes on without the shared tier, never without its node-local one
            log.warning("shared tier unusable (%s); the job goes on with the node-local cache", exc)
    if settings.remote:
        from pcompile.store.remote import open_remote

        try:
            tiers.append(open_remote(settings))
        except PcompileError as exc:
            if must_exist or writable:
                raise  # a command aimed at the remote: say so and stop
            from pcompile.logs import setup

            setup()  # a job goes on without the remote tier, never without its node-local one
            log.warning("%s; the job goes on without the remote tier", exc)
    if writable:
        for tier in tiers:
            if tier.capabilities.directory and not os.access(tier.root, os.W_OK):  # type: ignore[attr-defined]
                raise PcompileError(f"{tier.root} is not writable: fix its permissions or choose another directory")
    store = Store(tiers, settings)
    apply_trust(store)
    return store


def _refuse_unsigned(manifest: Manifest) -> Manifest:
    """The signer of a checked tier in a process without a signing key: publishing there would
    only plant entries every reader refuses. An OSError, so Store.put warns once and goes on."""
    raise PermissionError(
        errno.EACCES,
        "signatures are checked but this process has no signing key; set PCOMPILE_READ_ONLY=1 for consumers, "
        "or give writers PCOMPILE_SIGNING_KEY_FILE",
    )


def apply_trust(store: "Store", config: TrustConfig | None = None) -> TrustConfig:
    """Set each tier's signer and trust hooks (trust/policy.py says which), then tell each tier
    the store it serves (Tier.attach: the remote reports into the store's stats)."""
    config = config or TrustConfig.from_env()
    signer = config.signer()
    for tier in store.tiers:
        checked = tier.kind != "local" and config.checks
        tier.signer = signer
        if checked and signer is None and tier.kind == "shared":
            tier.signer = _refuse_unsigned
        tier.trust = config.verifier(_count_refusal(store, tier.name)) if checked else None
        tier.attach(store)
    return config


def _count_refusal(store: "Store", tier_name: str):
    def refused() -> None:
        store.stats.add(untrusted=1)
        store.stats.tier(tier_name, untrusted=1)

    return refused


_default: Store | None = None
_default_lock = threading.Lock()


def default_store() -> Store:
    """The process-wide store from the environment (what the inductor hooks use)."""
    global _default
    with _default_lock:
        if _default is None or _default.settings != Settings.from_env():
            _default = open_store(Settings.from_env())
        return _default


def opened_store() -> Store | None:
    """The process-wide store if this process has opened it (never opens one)."""
    return _default


def _forget_after_fork() -> None:
    """A forked child must not share its parent's Store (its stats file is named by pid)."""
    global _default
    _default = None


os.register_at_fork(after_in_child=_forget_after_fork)
