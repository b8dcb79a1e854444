"""One interface for every tier (local dir, shared FS, Redis, S3), like sccache's Storage trait.

A backend implements six byte-level primitives. Verification, quarantine and the publish order
(blobs first, manifest last) live here once, so no backend can get them wrong.
"""
from __future__ import annotations

import abc
import contextlib
import dataclasses
import logging
import threading
from typing import Callable, Iterator

from pcompile import warn
from pcompile.errors import CorruptEntryError
from pcompile.keys.key import Key
from pcompile.store.entry import Entry, Manifest, blob_hash, verify_blob
from pcompile.thread_flags import is_raised, raised

log = logging.getLogger("pcompile.store")

#: Checks a manifest's signature before any blob is read; raises CorruptEntryError. None: no signing.
TrustCheck = Callable[[Manifest], None]
#: Returns the manifest with a signature attached. None: publish unsigned.
Signer = Callable[[Manifest], Manifest]

def report_once(tier: str, key: str, message: str) -> None:
    """One line per bad entry per tier and process."""
    warn.warn_once(f"bad-entry:{tier}:{key}", f"{tier} tier: {message}; not loaded, will recompile", logger=log)


_housekeeping = threading.local()


@contextlib.contextmanager
def housekeeping() -> Iterator[None]:
    """Reads in this block (this thread) check entries; they are not uses, so a directory tier
    must not refresh atime, which its GC takes as last access."""
    with raised(_housekeeping, "on"):
        yield


def in_housekeeping() -> bool:
    return is_raised(_housekeeping, "on")


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a tier offers beyond the six primitives, declared by the tier itself so the store
    never asks for its type."""

    #: A directory on a filesystem, with `root`, `leases` and `tmp` beside its entries: its lease
    #: dir can coordinate compile single-flight, disk faults (full, read-only, gone) apply to it,
    #: and as the node-local tier it has a byte budget kept by GC.
    directory: bool = False
    #: > 0: reading it is slow enough that a node's processes take turns (one fetch per key per
    #: node, backfilled into the node-local tier); the others wait up to this many seconds.
    node_fetch_wait: float = 0.0


class Tier(abc.ABC):
    """A place entries live. `kind` is local, shared or remote; `name` labels stats."""

    kind: str = "local"
    name: str = "local"
    capabilities: Capabilities = Capabilities()

    def __init__(self) -> None:
        self.trust: TrustCheck | None = None
        self.signer: Signer | None = None
        self.on_quarantine: Callable[[Key, str], None] | None = None

    def location(self) -> str:
        """Where this tier points, safe to log (no credentials)."""
        return self.name

    def attach(self, store: object) -> None:
        """Called once the store that reads this tier is built (store/compose.py)."""

    # -- primitives a backend implements -------------------------------------------------
    @abc.abstractmethod
    def read_manifest(self, key: Key) -> bytes | None: ...

    @abc.abstractmethod
    def read_blob(self, sha256: str) -> bytes | None: ...

    @abc.abstractmethod
    def has_blob(self, sha256: str, size: int) -> bool: ...

    @abc.abstractmethod
    def write_blob(self, sha256: str, data: bytes) -> None:
        """Atomic and idempotent: a reader sees the whole blob or none."""

    @abc.abstractmethod
    def write_manifest(self, key: Key, data: bytes) -> None:
        """Atomic; called only after every blob it names is durable."""

    @abc.abstractmethod
    def remove(self, key: Key) -> None: ...

    @abc.abstractmethod
    def keys(self) -> Iterator[Key]: ...

    def quarantine(self, key: Key, reason: str, bad_blob: str | None = None) -> None:
        """Take a bad entry out of service; backends may keep it aside for inspection."""
        self.remove(key)

    def touch(self, key: Key) -> None:
        """Record an access for LRU; optional."""

    def usage(self) -> tuple[int, int]:
        """(entries, bytes); backends that cannot count cheaply return what they can."""
        return sum(1 for _ in self.keys()), 0

    def close(self) -> None:
        pass

    # -- shared logic --------------------------------------------------------------------
    def get(self, key: Key) -> Entry | None:
        """A verified entry, or None. Bad entries are quarantined and reported once."""
        raw = self.read_manifest(key)
        if raw is None:
            return None
        bad_blob: str | None = None
        try:
            manifest = Manifest.decode(raw, key)
            if self.trust is not None:
                self.trust(manifest)
            blobs: dict[str, bytes] = {}
            for name, info in manifest.blobs.items():
                data = self.read_blob(info["sha256"])
                if data is not None and (len(data) != info["size"] or blob_hash(data) != info["sha256"]):
                    bad_blob = info["sha256"]
                if data is None and self.read_manifest(key) is None:
                    return None  # removed by GC while we read: a plain miss, not corruption
                verify_blob(manifest, name, data)
                blobs[name] = data  # type: ignore[assignment]
        except CorruptEntryError as exc:
            if exc.quarantine:
                self._quarantine(key, str(exc), bad_blob)
            else:
                report_once(self.name, str(key), f"{exc} (left in place)")
            return None
        self.touch(key)
        return manifest.to_entry(blobs)

    def verify(self, key: Key) -> str | None:
        """The problem with an entry, or None if it is sound. Does not quarantine or count as a use."""
        with housekeeping():
            raw = self.read_manifest(key)
            if raw is None:
                return "manifest missing"
            try:
                manifest = Manifest.decode(raw, key)
                if self.trust is not None:
                    self.trust(manifest)
                for name, info in manifest.blobs.items():
                    verify_blob(manifest, name, self.read_blob(info["sha256"]))
            except CorruptEntryError as exc:
                return str(exc)
            return None

    def bad_blob_of(self, key: Key) -> str | None:
        with housekeeping():
            return self._bad_blob_of(key)

    def _bad_blob_of(self, key: Key) -> str | None:
        raw = self.read_manifest(key)
        try:
            manifest = Manifest.decode(raw or b"", key)
        except CorruptEntryError:
            return None
        for info in manifest.blobs.values():
            data = self.read_blob(info["sha256"])
            if data is not None and (len(data) != info["size"] or blob_hash(data) != info["sha256"]):
                return info["sha256"]
        return None

    def _quarantine(self, key: Key, reason: str, bad_blob: str | None) -> None:
        report_once(self.name, str(key), reason)
        try:
            self.quarantine(key, reason, bad_blob)
        except OSError as exc:  # a read-only mount: still never load it
            log.debug("could not quarantine %s: %s", key, exc)
        if self.on_quarantine:
            self.on_quarantine(key, reason)

    def put(self, entry: Entry) -> Manifest:
        """Publish: every blob durable first, then the manifest. All or nothing for readers."""
        manifest = Manifest.for_entry(entry)
        if self.signer is not None:
            manifest = self.signer(manifest)
        for name, data in entry.blobs.items():
            sha = manifest.blobs[name]["sha256"]
            if not self.has_blob(sha, len(data)):
                self.write_blob(sha, data)
        self.write_manifest(entry.key, manifest.encode())
        return manifest
