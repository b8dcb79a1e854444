"""Store lookups and publishes for Inductor's caches, with single-flight across processes.

On a miss, `lookup` takes `store.acquire_or_wait(key)`: if another process is compiling that
key, this one waits for its entry and returns it as a hit; if this process got the lease, the
miss is returned and the lease is held until one of:
  - the publish for that key (`publish`), the normal case;
  - the same thread starting a lookup of the same kind: compiles of one kind never nest within
    a thread, so a lease still held then belongs to a compile that ended without a publish
    (torch decided the result was not cacheable, or the compile failed);
  - the end of the enclosing `scope()` (pcompile's backend call wraps every compile in one);
  - an explicit `release(key)` (the Triton manager's finaliser), or process exit.
Leases are taken in layer order (autograd, then graph, then kernel) and a thread holds at most
one per kind, so two processes can never wait on each other in a cycle.

Nothing here raises into torch: a broken store is a warning and a miss.
"""
from __future__ import annotations

import atexit
import dataclasses
import logging
import os
import threading
import time
from typing import Any, Iterator

import contextlib

from pcompile.inductor.gate import warn_once
from pcompile.inductor.layer_keys import store_key
from pcompile.inductor.timing import span
from pcompile.keys import Key
from pcompile.store.entry import Entry
from pcompile.store.lease import Lease

log = logging.getLogger("pcompile.inductor")


@dataclasses.dataclass
class _Held:
    lease: Lease
    kind: str
    thread: int
    since: float


_lock = threading.Lock()
_held: dict[str, _Held] = {}
_tls = threading.local()


def store() -> Any | None:
    """The process-wide store, or None (with one warning) if it cannot be opened."""
    try:
        from pcompile.store.tiered import default_store

        return default_store()
    except Exception as exc:
        warn_once("store-open", f"pcompile: cannot open the cache ({exc}); compiling without it")
        return None


def _scopes() -> list[set[str]]:
    stack = getattr(_tls, "scopes", None)
    if stack is None:
        stack = _tls.scopes = []
    return stack


@contextlib.contextmanager
def scope() -> Iterator[None]:
    """Leases taken by this thread inside the block are released when it ends."""
    taken: set[str] = set()
    stack = _scopes()
    stack.append(taken)
    try:
        yield
    finally:
        stack.pop()
        for name in taken:
            release(name)


def _hold(key: Key, lease: Lease, kind: str) -> None:
    name = str(key)
    with _lock:
        previous = _held.pop(name, None)
        _held[name] = _Held(lease, kind, threading.get_ident(), time.monotonic())
    if previous is not None and previous.lease is not lease:
        previous.lease.release()
    for taken in _scopes():
        taken.add(name)


def release(name: str | Key, only: Lease | None = None) -> float | None:
    """Release the lease on `name` if this process holds it (and it is `only`, when given).

    Returns how long it was held, or None if nothing was released.
    """
    with _lock:
        held = _held.get(str(name))
        if held is None or (only is not None and held.lease is not only):
            return None
        del _held[str(name)]
    try:
        held.lease.release()
    except Exception:
        pass
    return time.monotonic() - held.since


def _release_stale(kind: str) -> None:
    me = threading.get_ident()
    with _lock:
        stale = [name for name, h in _held.items() if h.kind == kind and h.thread == me]
    for name in stale:
        release(name)


def held_keys() -> list[str]:
    with _lock:
        return sorted(_held)


def held_lease(name: str | Key) -> Lease | None:
    with _lock:
        held = _held.get(str(name))
    return held.lease if held is not None else None


def _record_hit(st: Any, entry: Entry) -> None:
    st.stats.layer(entry.key.layer, hit=True)
    st.stats.add(saved_seconds=entry.compile_seconds)


def lookup(kind: str, inductor_key: str, *, single_flight: bool = True) -> Entry | None:
    """The stored entry for Inductor's key, waiting out another process's compile; None = miss."""
    st = store()
    if st is None:
        return None
    try:
        key, _inputs = store_key(kind, inductor_key)
    except Exception as exc:
        warn_once(f"key:{kind}", f"pcompile: cannot compute {kind} keys ({exc}); that layer runs uncached")
        return None
    _release_stale(kind)
    try:
        with span("pcompile.lookup", layer=key.layer, kind=kind, key=str(key)):
            entry = st.get(key, record=False)
            if entry is not None:
                _record_hit(st, entry)
                return entry
            if not single_flight:
                st.stats.layer(key.layer, hit=False)
                return None
            got = st.acquire_or_wait(key)
            if isinstance(got, Entry):
                log.info("pcompile: %s was compiled by another process; using its result", key)
                _record_hit(st, got)
                return got
            st.stats.layer(key.layer, hit=False)
            if isinstance(got, Lease):
                _hold(key, got, kind)
            return None
    except Exception as exc:
        warn_once(f"lookup:{kind}", f"pcompile: cache lookup failed ({type(exc).__name__}: {exc}); compiling without it")
        return None


def publish(kind: str, inductor_key: str, blobs: dict[str, bytes], meta: dict[str, Any] | None = None,
            compile_seconds: float | None = None) -> bool:
    """Store a freshly compiled artifact under Inductor's key and release its lease. Never raises."""
    st = store()
    try:
        key, inputs = store_key(kind, inductor_key)
    except Exception as exc:
        warn_once(f"key:{kind}", f"pcompile: cannot compute {kind} keys ({exc}); that layer runs uncached")
        return False
    name = str(key)
    with _lock:
        held = _held.get(name)
    seconds = compile_seconds
    if seconds is None:
        seconds = (time.monotonic() - held.since) if held is not None else 0.0
    try:
        if st is None:
            return False
        with span("pcompile.publish", layer=key.layer, kind=kind, key=name):
            entry = Entry(key=key, blobs=blobs, inputs=inputs, meta=dict(meta or {}), compile_seconds=max(0.0, float(seconds)))
            return bool(st.put(entry))
    except Exception as exc:
        warn_once(f"publish:{kind}", f"pcompile: could not publish to the cache ({type(exc).__name__}: {exc}); the job goes on")
        return False
    finally:
        release(name)


def release_all() -> None:
    with _lock:
        names = list(_held)
    for name in names:
        release(name)


def _after_fork_in_child() -> None:
    """A forked child holds none of its parent's leases; releasing them would unlink the parent's."""
    global _lock
    _lock = threading.Lock()
    _held.clear()
    _tls.__dict__.clear()


atexit.register(release_all)
os.register_at_fork(after_in_child=_after_fork_in_child)
