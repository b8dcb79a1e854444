"""The remote tier (Redis, S3): a guarded wrapper that makes a flaky network safe for a job.

A backend (backend.py: redis_backend.RedisBackend, s3_backend.S3Backend) implements only the
byte primitives and sends every network round trip through `self.io(fn, *args)`. `RemoteTier` wraps it and adds, once for
every backend:

* deadlines: each round trip runs on a worker thread and is abandoned after the timeout
  (PCOMPILE_REMOTE_TIMEOUT, default 2 s), on top of the client's own socket timeouts;
* a circuit breaker: after K failures in a row (a timeout counts as K, since each one costs the
  full timeout) the remote is skipped for T seconds, node-wide (a small file under the node-local
  cache dir tells the other ranks), then one probe decides;
* one warning per process, after which the job carries on with its local tiers;
* write-behind: `put` queues the entry (background.BackgroundWriter) and returns at once;
* node-level single-flight for reads, declared (`capabilities.node_fetch_wait`) and run by the
  store for every slow tier: one process per node fetches a missing entry into the node-local
  tier under a lease; the others wait for it there instead of all asking the remote;
* a short negative cache, so polling for a key another rank is compiling does not hammer the
  remote with GETs for a manifest that is not there yet;
* read-only discipline: with PCOMPILE_READ_ONLY=1, or when signatures are checked but this
  process has no signing key, nothing is ever written or deleted remotely.

Verification, signatures and publish order stay in Tier.get/put: this class calls them.
"""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
import time
import urllib.parse
from typing import TYPE_CHECKING, Any, Callable, Iterator

from pcompile import settings as env
from pcompile import warn
from pcompile.config import Settings
from pcompile.errors import CorruptEntryError, PcompileError, RemoteUnavailable
from pcompile.keys.key import Key
from pcompile.store.background import BackgroundWriter, DeadlineExceeded, DeadlineRunner, at_exit, set_exit_flush_seconds
from pcompile.store.backend import RemoteBackend, redact
from pcompile.store.breaker import CircuitBreaker
from pcompile.store.entry import Entry, Manifest
from pcompile.store.tier import Capabilities, Tier, TrustCheck

if TYPE_CHECKING:
    from pcompile.store.stats import Stats
    from pcompile.store.tiered import Store

log = logging.getLogger("pcompile.store.remote")



@dataclasses.dataclass(frozen=True)
class RemoteOptions:
    """How the remote tier behaves under failure; every process of a job reads the same env."""

    timeout: float = env.REMOTE_TIMEOUT.default  # per network round trip, and the deadline a job may be stalled
    breaker_failures: int = env.REMOTE_BREAKER_FAILURES.default  # K: consecutive failures that open the breaker
    breaker_seconds: float = env.REMOTE_BREAKER_SECONDS.default  # T: how long the remote is skipped once open
    queue_entries: int = env.REMOTE_QUEUE.default
    queue_bytes: int = env.REMOTE_QUEUE_BYTES.default
    flush_seconds: float = env.REMOTE_FLUSH_TIMEOUT.default  # exit waits at most this long for queued writes
    miss_ttl: float = env.REMOTE_MISS_TTL.default  # a remote miss is remembered this long per process
    fetch_wait: float = env.REMOTE_FETCH_WAIT.default  # longest a rank waits for a peer's fetch (then a miss)
    min_rate: float = env.REMOTE_MIN_RATE.default  # bytes/s a chunk transfer may not fall below (deadline allowance)
    io_threads: int = 4

    @staticmethod
    def from_env() -> "RemoteOptions":
        return RemoteOptions(
            timeout=env.REMOTE_TIMEOUT.get(),
            breaker_failures=env.REMOTE_BREAKER_FAILURES.get(),
            breaker_seconds=env.REMOTE_BREAKER_SECONDS.get(),
            queue_entries=env.REMOTE_QUEUE.get(),
            queue_bytes=env.REMOTE_QUEUE_BYTES.get(),
            flush_seconds=env.REMOTE_FLUSH_TIMEOUT.get(),
            miss_ttl=env.REMOTE_MISS_TTL.get(),
            fetch_wait=env.REMOTE_FETCH_WAIT.get(),
            min_rate=env.REMOTE_MIN_RATE.get(),
        )

    def deadline(self, nbytes: int = 0) -> float:
        """Backstop per round trip: the socket timeout (idle time) should fire first, with a
        clearer error; the deadline also catches a server that trickles bytes. A round trip
        that moves a chunk gets the time that chunk takes at `min_rate` on top."""
        return self.timeout * 1.25 + 0.1 + nbytes / self.min_rate


class RemoteTier(Tier):
    """A remote backend made safe for a training job; see the module docstring."""

    kind = "remote"

    def __init__(self, backend: RemoteBackend, options: RemoteOptions, settings: Settings) -> None:
        self._trust_raw: TrustCheck | None = None
        self._untrusted = threading.local()
        super().__init__()
        self.backend = backend
        self.name = backend.name
        self.options = options
        self.settings = settings
        self.read_only = settings.read_only
        self._runner = DeadlineRunner(options.io_threads, name=f"pcompile-{backend.name}-io")
        backend.io = self._io
        node_dir = settings.cache_dir / "store"
        ident = hashlib.sha256(backend.location().encode()).hexdigest()[:12]
        self.breaker = CircuitBreaker(
            options.breaker_failures, options.breaker_seconds, node_dir / "leases" / f"remote-{ident}.down", node_dir / "tmp"
        )
        self.counters: dict[str, float] = {}
        self._counters_lock = threading.Lock()
        self.stats: "Stats | None" = None
        self._misses: dict[str, float] = {}
        self.capabilities = Capabilities(node_fetch_wait=options.fetch_wait)
        self.writer = BackgroundWriter(
            self._write_now,
            max_entries=options.queue_entries,
            max_bytes=options.queue_bytes,
            on_done=self._write_done,
            on_drop=self._write_dropped,
            name=f"pcompile-{backend.name}-writer",
        )
        set_exit_flush_seconds(options.flush_seconds)

    # -- wiring ---------------------------------------------------------------------------
    def attach(self, store: "Store") -> None:
        """Report into the store's stats (the store runs the node's single-flight fetch and
        backfills what this tier returns into the node-local tier)."""
        self.stats = store.stats
        at_exit(store.stats.flush)  # writers flush after Stats' own atexit hook ran

    def location(self) -> str:
        return self.backend.location()

    # -- trust: remember a signature failure so quarantine leaves the entry alone ---------
    @property  # type: ignore[override]
    def trust(self) -> TrustCheck | None:
        if self._trust_raw is None:
            return None
        return self._checked_trust

    @trust.setter
    def trust(self, check: TrustCheck | None) -> None:
        self._trust_raw = check

    def _checked_trust(self, manifest: Manifest) -> None:
        assert self._trust_raw is not None
        try:
            self._trust_raw(manifest)
        except CorruptEntryError:
            self._untrusted.flag = True
            raise

    # -- counters ---------------------------------------------------------------------------
    def _count(self, **delta: float) -> None:
        with self._counters_lock:
            for name, value in delta.items():
                self.counters[name] = self.counters.get(name, 0) + value
        if self.stats is not None:
            self.stats.tier(self.name, **delta)

    def _warn(self, message: str) -> None:
        """One warning per remote tier: after it the job carries on with its local tiers."""
        warn.warn_once(f"remote-{id(self)}", message, logger=log)

    # -- the guarded round trip -------------------------------------------------------------
    def _warn_if_peer_opened(self) -> None:
        if self.breaker.opened_by_peer:
            self._warn(
                f"{self.name} tier at {self.backend.location()} was found unreachable by another process on this node; "
                f"it is skipped for up to {self.options.breaker_seconds:g} s and the job goes on with local tiers"
            )

    def _io(self, fn: Callable[..., Any], *args: Any, nbytes: int = 0) -> Any:
        if not self.breaker.allow():
            self._warn_if_peer_opened()
            raise RemoteUnavailable(f"{self.name} tier skipped (circuit breaker open)", skipped=True)
        try:
            result = self._runner.call(fn, args, self.options.deadline(nbytes))
        except Exception as exc:
            timeout = isinstance(exc, DeadlineExceeded) or self.backend.is_timeout(exc)
            opened = self.breaker.failure(timeout)
            self._count(errors=1, timeouts=1 if timeout else 0, breaker_trips=1 if opened else 0)
            what = f"{exc.__class__.__name__}: {exc}".strip()[:200]
            self._warn(
                f"{self.name} tier at {self.backend.location()} failed ({what}); "
                f"it is skipped for {self.options.breaker_seconds:g} s after {self.options.breaker_failures} failures "
                f"(a timeout counts as all of them), and the job goes on with local tiers"
            )
            raise RemoteUnavailable(
                f"{self.name} tier at {self.backend.location()} unreachable ({what}): check PCOMPILE_REMOTE and the server"
            ) from exc
        self.breaker.success()
        return result

    # -- primitives: the backend's, guarded ---------------------------------------------------
    def read_manifest(self, key: Key) -> bytes | None:
        return self.backend.read_manifest(key)

    def read_blob(self, sha256: str) -> bytes | None:
        return self.backend.read_blob(sha256)

    def has_blob(self, sha256: str, size: int) -> bool:
        return self.backend.has_blob(sha256, size)

    def write_blob(self, sha256: str, data: bytes) -> None:
        self._refuse_if_read_only()
        self.backend.write_blob(sha256, data)

    def write_manifest(self, key: Key, data: bytes) -> None:
        self._refuse_if_read_only()
        self.backend.write_manifest(key, data)

    def remove(self, key: Key) -> None:
        self._refuse_if_read_only()
        self.backend.remove(key)

    def keys(self) -> Iterator[Key]:
        return self.backend.keys()

    def sample_keys(self, n: int) -> list[Key]:
        """Up to n keys for `pcompile verify` (random where the backend allows); `keys()` for all."""
        return self.backend.sample_keys(n)

    def usage(self) -> tuple[int, int]:
        """(entries, bytes); (0, 0) when the remote is unreachable (already warned about)."""
        try:
            return self.backend.usage()
        except RemoteUnavailable:
            return 0, 0

    def verify(self, key: Key) -> str | None:
        self._untrusted.flag = False  # so a later quarantine() knows whether *this* one was a signature failure
        return Tier.verify(self, key)

    def _refuse_if_read_only(self) -> None:
        if not self.may_write():
            raise PcompileError(f"the {self.name} tier is read-only for this process (PCOMPILE_READ_ONLY or no signing key)")

    def may_write(self) -> bool:
        """Never with PCOMPILE_READ_ONLY; never unsigned when readers check signatures."""
        return not self.read_only and not (self._trust_raw is not None and self.signer is None)

    # -- reads ------------------------------------------------------------------------------
    def get(self, key: Key) -> Entry | None:
        """A verified entry or None. Never raises for remote trouble and never waits past the
        deadline per round trip. One process per node asks (Store's node fetch, declared by
        `capabilities.node_fetch_wait`); a miss is remembered for `miss_ttl` seconds."""
        if not self.breaker.allow():
            self._warn_if_peer_opened()
            self._count(skipped=1)
            return None
        name = str(key)
        missed = self._misses.get(name)
        if missed is not None:
            if time.monotonic() - missed < self.options.miss_ttl:
                self._count(cached_misses=1)
                return None
            self._misses.pop(name, None)
        self._untrusted.flag = False
        try:
            entry = Tier.get(self, key)
        except RemoteUnavailable:
            entry = None
        if entry is None:
            self._misses[name] = time.monotonic()
            if len(self._misses) > 100_000:
                self._misses.clear()
            return None
        self._count(fetches=1)
        return entry

    def quarantine(self, key: Key, reason: str, bad_blob: str | None = None) -> None:
        """Delete a corrupt remote entry so a writer republishes it, with two exceptions.

        Signature failures are left in place: a reader with a wrong or rotated key must not be
        able to wipe a shared cache (a writer's next publish replaces the entry anyway). And a
        read-only process deletes nothing.
        """
        if getattr(self._untrusted, "flag", False):
            return  # counted as `untrusted` by the trust hook
        if not self.may_write():
            return
        try:
            self.backend.quarantine(key, reason, bad_blob)
            self._count(quarantined=1)
        except Exception:
            pass

    # -- writes -----------------------------------------------------------------------------
    def put(self, entry: Entry) -> Manifest | None:  # type: ignore[override]
        """Queue the entry for the background writer and return at once (None: not published yet)."""
        if not self.may_write():
            self._count(writes_refused=1)
            return None
        if not self.breaker.allow():
            self._count(dropped_writes=1)
            return None
        copy = Entry(entry.key, dict(entry.blobs), entry.inputs, dict(entry.meta), entry.compile_seconds)
        try:
            if self.writer.submit(copy):
                self._count(queued_writes=1)
        except Exception as exc:  # e.g. no thread can start at interpreter shutdown
            self._write_dropped(copy, str(exc))
        return None

    def _write_now(self, entry: Entry) -> None:
        """On the writer thread: blobs first, then the (signed) manifest, via Tier.put."""
        Tier.put(self, entry)

    def _write_done(self, entry: Entry, seconds: float) -> None:
        self._count(remote_writes=1, remote_bytes_written=entry.size, remote_write_seconds=seconds)

    def _write_dropped(self, entry: Entry, reason: str) -> None:
        self._count(dropped_writes=1)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait for queued writes (tests, `pcompile warm` before it exits)."""
        return self.writer.flush(self.options.flush_seconds if timeout is None else timeout)

    def close(self) -> None:
        self.writer.close(self.options.flush_seconds)


def open_remote(settings: Settings) -> RemoteTier:
    """What open_store (compose.py) appends as the slowest tier when PCOMPILE_REMOTE is set."""
    assert settings.remote
    options = RemoteOptions.from_env()
    return RemoteTier(open_backend(settings.remote, options), options, settings)


def open_backend(url: str, options: RemoteOptions) -> RemoteBackend:
    """The backend for a PCOMPILE_REMOTE URL; raises PcompileError for a URL it cannot use."""
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme in ("redis", "rediss", "unix"):
        from pcompile.store.redis_backend import RedisBackend

        return RedisBackend.from_url(url, timeout=options.timeout)
    if scheme == "s3":
        from pcompile.store.s3_backend import S3Backend

        return S3Backend.from_url(url, timeout=options.timeout)
    raise PcompileError(
        f"PCOMPILE_REMOTE={redact(url)!r} is not a remote this pcompile knows: use redis://HOST:PORT/DB, rediss://… or s3://BUCKET/PREFIX"
    )
