"""The store a job talks to: tiers fast to slow, read-through with backfill, single-flight.

Reads try node-local, then shared, then remote; a hit in a slower tier is copied into the faster
ones. Writes go to every writable tier (slow tiers may wrap themselves in a background writer).
A tier that fails is logged once and skipped: pcompile never fails a job over its cache.
"""
from __future__ import annotations

import errno
import itertools
import logging
import os
import threading
import time
from pathlib import Path
from typing import Callable

from pcompile import warn
from pcompile.config import Settings
from pcompile.errors import PcompileError, StoreWriteError
from pcompile.keys.key import Key
from pcompile.store import diskfault, fsio
from pcompile.store.entry import Entry
from pcompile.store.lease import Lease, LeaseDir
from pcompile.store.stats import Stats
from pcompile.store.tier import Tier

log = logging.getLogger("pcompile.store")

_GC_EVERY_PUTS = 200

#: the longest pause between two looks at a lease and the tiers while another process compiles
POLL_MAX_S = 0.5
#: the pause between two checks that a lease on this node's own disk is still held
NEARBY_POLL_S = 0.02
_store_ids = itertools.count()


class Store:
    def __init__(self, tiers: list[Tier], settings: Settings, stats: Stats | None = None) -> None:
        if not tiers:
            raise PcompileError("a store needs at least one tier")
        from pcompile.logs import setup

        setup()
        self.tiers = tiers
        self.settings = settings
        self.stats = stats or Stats(settings.cache_dir / "stats")
        self.local = tiers[0]
        self._puts = 0
        self._uid = next(_store_ids)
        self._down: set[Tier] = set()
        self._gc_asked = 0.0
        #: Called as fn(errno, detail) when the local tier's dir fails (full, read-only, gone) or
        #: drops below the free-space floor; the Inductor layer moves its working files away.
        self.on_local_fault: Callable[[int, str], object] | None = None
        # Compile single-flight is coordinated where every participant can see it: the shared
        # tier if there is one, else this node's local dir.
        self.coordinator: Tier | None = next((t for t in reversed(tiers) if t.capabilities.directory), None)
        self.leases: LeaseDir | None = (
            LeaseDir(self.coordinator.leases, self.coordinator.tmp, timeout=settings.lease_timeout)  # type: ignore[attr-defined]
            if self.coordinator is not None else None
        )
        # the node's processes take turns reading slow tiers (one fetch per key per node), waiting
        # for one another as long as the slowest of them declares
        self.fetch_wait = max((t.capabilities.node_fetch_wait for t in tiers[1:]), default=0.0)
        self.fetches: LeaseDir | None = (
            LeaseDir(self.local.leases / "fetch", self.local.tmp, timeout=min(self.fetch_wait, 30.0))  # type: ignore[attr-defined]
            if self.local.capabilities.directory and self.fetch_wait > 0 else None
        )
        for tier in tiers:
            tier.on_quarantine = lambda key, reason, _t=tier: self.stats.add(quarantined=1)

    def warn_once(self, tag: str, message: str) -> None:
        """One line per problem per store: a flaky tier must not flood a training log."""
        warn.warn_once(f"store-{self._uid}:{tag}", message, logger=log)

    # -- construction --------------------------------------------------------------------
    def writable_tiers(self) -> list[Tier]:
        """Read-only consumers, and verify-only holders of a public key, write node-local only."""
        if self.settings.read_only:
            return [self.local]
        return [t for t in self.tiers if (t is self.local or t.trust is None or t.signer is not None) and t not in self._down]

    def _tier_down(self, tier: Tier, exc: OSError) -> None:
        """A directory tier whose filesystem is full, read-only or gone: stop writing there (and
        taking leases there) for the rest of the process, with one line; reads go on."""
        self._down.add(tier)
        self.warn_once(f"down:{tier.name}", f"{tier.name} tier {tier.location()} {diskfault.describe(exc.errno or 0)} "
                       f"({exc.strerror or exc}): not publishing there or taking compile leases there from now on; the job goes on")

    # -- reads ---------------------------------------------------------------------------
    def get(self, key: Key, *, record: bool = True) -> Entry | None:
        entry = self._read(key, 0, 1)
        if entry is None and len(self.tiers) > 1:
            entry = self._fetch_for_node(key)
        if record:
            if entry is not None:
                self.stats.layer(key.layer, hit=True)
                self.stats.add(saved_seconds=entry.compile_seconds)
            else:
                self.stats.layer(key.layer, hit=False)
        return entry

    def _fetch_for_node(self, key: Key) -> Entry | None:
        """Read the slower tiers for `key` once per node: the node's ranks all want the same
        entries at the same moment, and one fetch (backfilled into the local tier) serves them
        all. A process that finds a neighbour fetching waits for that backfill (a neighbour that
        died is noticed by the lease at once), up to the slowest tier's `node_fetch_wait`, then
        reads for itself. The one node fetch for every slow tier (shared directory, remote)."""
        if self.fetches is None:
            return self._read(key, 1, len(self.tiers))
        name = f"fetch-{key}"
        deadline = time.monotonic() + self.fetch_wait
        while True:
            try:
                lease = self.fetches.try_acquire(name)
            except OSError:
                return self._read(key, 1, len(self.tiers))
            if lease is not None:
                try:
                    return self._read(key, 0, 1) or self._read(key, 1, len(self.tiers))
                finally:
                    lease.release()
            time.sleep(0.01)
            if not self.fetches.exists(name):  # the neighbour's fetch ended: its backfill is local, or it missed
                return self._read(key, 0, 1) or self._read(key, 1, len(self.tiers))
            if time.monotonic() >= deadline:
                return self._read(key, 1, len(self.tiers))

    def _read(self, key: Key, start: int, stop: int) -> Entry | None:
        """The first hit among tiers[start:stop], backfilled into the faster tiers."""
        for index in range(start, stop):
            tier = self.tiers[index]
            t0 = time.perf_counter()
            try:
                entry = tier.get(key)
            except Exception as exc:  # a broken tier is a miss, never a failure
                self.stats.tier(tier.name, errors=1)
                self.warn_once(f"read:{tier.name}", f"{tier.name} tier unreadable ({exc.__class__.__name__}: {exc}); continuing without it")
                continue
            dt = time.perf_counter() - t0
            if entry is None:
                self.stats.tier(tier.name, misses=1, read_seconds=dt)
                continue
            self.stats.tier(tier.name, hits=1, read_seconds=dt, bytes_read=entry.size)
            if index > 0:
                self._backfill(entry, self.tiers[:index])
            return entry
        return None

    def _backfill(self, entry: Entry, tiers: list[Tier]) -> None:
        for tier in tiers:
            if tier not in self.writable_tiers():
                continue
            try:
                tier.put(entry)
            except OSError as exc:
                self.stats.tier(tier.name, errors=1)
                self.warn_once(f"backfill:{tier.name}", f"could not backfill the {tier.name} tier ({exc.strerror or exc})")

    # -- writes --------------------------------------------------------------------------
    def put(self, entry: Entry, *, compiled: bool = True) -> bool:
        """Publish to every writable tier. False (with one warning) if the fast tier refused."""
        ok = True
        for tier in self.writable_tiers():
            t0 = time.perf_counter()
            try:
                if tier is self.local:
                    self._check_headroom(entry.size)
                    if self._over_budget(entry.size):
                        continue
                tier.put(entry)
                if tier is self.local and tier.capabilities.directory:
                    from pcompile.store.gc import note_write

                    note_write(tier, entry.size)
                self.stats.tier(tier.name, bytes_written=entry.size, write_seconds=time.perf_counter() - t0)
            except OSError as exc:
                self.stats.tier(tier.name, errors=1)
                self.stats.add(write_errors=1)
                reason = "disk full" if fsio.is_disk_full(exc) else (exc.strerror or str(exc))
                if tier is self.local and exc.errno in diskfault.PROBLEMS and self.on_local_fault is not None:
                    self.on_local_fault(exc.errno, exc.strerror or str(exc))
                    ok = False
                    continue
                if tier is not self.local and tier.capabilities.directory and exc.errno in diskfault.PROBLEMS:
                    self._tier_down(tier, exc)
                    continue
                self.warn_once(f"write:{tier.name}", f"cannot write to the {tier.name} cache tier ({reason}); the job goes on without caching there")
                if tier is self.local:
                    ok = False
        if compiled:
            self.stats.add(compiles=1, compile_seconds=entry.compile_seconds)
        self._puts += 1
        if self._puts % _GC_EVERY_PUTS == 1:
            self._maybe_gc()
        return ok

    def _over_budget(self, size: int) -> bool:
        """True (and a GC asked for) if writing `size` more bytes would take the node-local tier
        past PCOMPILE_MAX_BYTES: the last GC's count plus what the node's writers added since its
        scan (gc.py's write ledger). Two writers checking at the same instant may both pass: the
        overshoot is at most one entry per concurrent writer, and GC takes it back."""
        if not self.local.capabilities.directory:
            return False
        from pcompile.store.gc import read_usage, written_since

        usage = read_usage(self.local)
        if usage is None:
            return False
        total, scanned_at = usage
        if total + written_since(self.local, scanned_at - 1.0) + size <= self.settings.max_bytes:
            return False
        self.stats.add(budget_skips=1)
        log.info("node-local cache at its budget (PCOMPILE_MAX_BYTES=%d): not caching %d bytes until GC makes room",
                 self.settings.max_bytes, size)
        if time.monotonic() - self._gc_asked > 2.0:
            self._gc_asked = time.monotonic()
            self._maybe_gc(force=True)
        return True

    def _check_headroom(self, size: int) -> None:
        """Refuse (as ENOSPC) a local write that would take the filesystem below the floor."""
        floor = self.settings.min_free_bytes
        free = diskfault.free_bytes(self.local.root if self.local.capabilities.directory else self.settings.cache_dir)  # type: ignore[attr-defined]
        if floor > 0 and free is not None and free - size < floor:
            raise OSError(errno.ENOSPC, f"{free // 1024} KiB free, below the {floor // 1024**2} MiB floor "
                          "(PCOMPILE_MIN_FREE_BYTES)")

    def _maybe_gc(self, force: bool = False) -> None:
        """Keep the local tier within its budget, in the background, one collector per node;
        `force`: the budget is reached, collect down to 90% of it so new entries find room."""
        local = self.local
        if not local.capabilities.directory:
            return

        def run() -> None:
            from pcompile.store.gc import collect_garbage

            leases = LeaseDir(local.leases, local.tmp, timeout=600)
            try:
                lease = leases.try_acquire("gc")
                if lease is None:
                    return
                with lease:
                    target = int(self.settings.max_bytes * 0.9) if force else self.settings.max_bytes
                    collect_garbage(local, max_bytes=target, max_entries=self.settings.max_entries)
            except Exception as exc:  # GC must never disturb a job
                log.debug("background gc failed: %s", exc)

        threading.Thread(target=run, name="pcompile-gc", daemon=True).start()

    # -- single flight -------------------------------------------------------------------
    def acquire_or_wait(self, key: Key, *, wait_timeout: float | None = None, poll: float = 0.05,
                        on_wait: Callable[[], None] | None = None) -> Entry | Lease | None:
        """The entry if someone else produced it, a Lease if this caller must produce it, or None
        (no coordination possible, or waiting ran past wait_timeout: compile without a lease).
        `on_wait` is called once, when it turns out another process holds the lease."""
        if self.leases is None or self.coordinator in self._down:
            return None
        limit = time.monotonic() + (wait_timeout if wait_timeout is not None else max(600.0, 10 * self.settings.lease_timeout))
        waited_from: float | None = None
        delay = poll
        # A lease on this node's own disk has its holder on this node: between the backed-off looks
        # at the lease and the tiers, a waiter checks (one stat) every NEARBY_POLL_S whether the
        # lease is still there, and looks again at once when the holder has released it, that is
        # right after its publish. A lease on a shared filesystem, whose server every node's
        # waiters poll, keeps the backed-off pace alone. benchmarks/lease_wake.py: a waiter woke a
        # median 148-164 ms after the publish (up to the 0.5 s back-off), now 9-10 ms.
        nearby = self.coordinator is self.local
        name = str(key)
        held_at = os.fspath(self.leases.path(name))
        next_full = 0.0
        while True:
            if waited_from is not None and nearby and time.monotonic() < next_full and os.path.exists(held_at):
                time.sleep(NEARBY_POLL_S)  # the holder is still at work
                continue
            try:
                lease = self.leases.try_acquire(name)
            except OSError as exc:
                if self.coordinator is self.local and exc.errno in diskfault.PROBLEMS and self.on_local_fault is not None:
                    self.on_local_fault(exc.errno, exc.strerror or str(exc))
                    return None
                if self.coordinator is not None and exc.errno in diskfault.PROBLEMS:
                    self._tier_down(self.coordinator, exc)
                else:
                    self.warn_once("lease", f"cannot take compile leases ({exc.strerror or exc}); compiling without single-flight")
                return None
            if lease is not None:
                entry = self.get(key, record=False)  # published while we raced for the lease?
                if entry is not None:
                    lease.release()
                    return entry
                return lease
            now = time.monotonic()
            if waited_from is None:
                waited_from = now
                self.stats.add(lease_waits=1)
                if on_wait is not None:
                    on_wait()
            entry = self.get(key, record=False)
            if entry is not None:
                self.stats.add(lease_wait_seconds=time.monotonic() - waited_from)
                return entry
            if now > limit:
                self.warn_once("lease-timeout", f"gave up waiting for another process to compile {key}; compiling here")
                return None
            next_full = now + delay
            time.sleep(min(delay, NEARBY_POLL_S) if nearby else delay)
            delay = min(delay * 1.5, POLL_MAX_S)

    def get_or_compute(self, key: Key, compute: Callable[[], Entry], *, wait_timeout: float | None = None) -> tuple[Entry, str]:
        """One compile per key across every process that shares a coordinating tier.

        Returns (entry, outcome) with outcome hit | waited | compiled. Publishing failures are
        warnings: the caller still gets its freshly compiled entry.
        """
        entry = self.get(key, record=False)
        if entry is not None:
            self._record_hit(entry)
            return entry, "hit"
        got = self.acquire_or_wait(key, wait_timeout=wait_timeout)
        if isinstance(got, Entry):
            self._record_hit(got)
            return got, "waited"
        self.stats.layer(key.layer, hit=False)
        try:
            t0 = time.perf_counter()
            entry = compute()
            if not entry.compile_seconds:
                entry.compile_seconds = time.perf_counter() - t0
            try:
                self.put(entry)
            except StoreWriteError as exc:
                self.warn_once("put", str(exc))
            return entry, "compiled"
        finally:
            if isinstance(got, Lease):
                got.release()

    def _record_hit(self, entry: Entry) -> None:
        self.stats.layer(entry.key.layer, hit=True)
        self.stats.add(saved_seconds=entry.compile_seconds)

    # -- housekeeping --------------------------------------------------------------------
    def close(self) -> None:
        self.stats.flush()
        for tier in self.tiers:
            try:
                tier.close()
            except Exception:
                pass


def store_root(settings: Settings) -> Path:
    return settings.cache_dir / "store"
