"""The gateway from Inductor to the store: every layer's lookups and publishes, with
single-flight across processes.

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
import contextlib
import dataclasses
import logging
import os
import threading
import time
from typing import Any, Callable, Iterator

from pcompile.warn import warn_once
from pcompile.inductor import board_notice
from pcompile.inductor.layer_keys import store_key
from pcompile.inductor.timing import emit, now, span
from pcompile.keys import Key
from pcompile.store import boards
from pcompile.store.entry import Entry
from pcompile.store.lease import Lease

log = logging.getLogger("pcompile.inductor")


@dataclasses.dataclass
class _Held:
    lease: Lease
    kind: str
    thread: int
    since: float
    nested: float = 0.0  # compile seconds of entries published inside this one (same thread)


_lock = threading.Lock()
_held: dict[str, _Held] = {}
_tls = threading.local()
#: Called as fn(kind, inductor_key, outcome) once a lookup knows its answer: "hit", "leased"
#: (this process compiles it), or "miss" (no single-flight); and "waiting" before that, when
#: another process holds the key's lease. The backward worker uses it to tell its parent which
#: key it has claimed.
_listeners: list[Callable[[str, str, str], None]] = []


def add_listener(fn: Callable[[str, str, str], None]) -> None:
    if fn not in _listeners:  # a reinstalled feature (tests) is told once, not twice
        _listeners.append(fn)


def _tell(kind: str, inductor_key: str, outcome: str) -> None:
    for fn in list(_listeners):
        try:
            fn(kind, inductor_key, outcome)
        except Exception:
            pass


def store() -> Any | None:
    """The process-wide store, or None (with one warning) if it cannot be opened."""
    from pcompile.inductor import private_dir

    if private_dir.active():
        return None  # the cache dir failed: nothing is looked up or published any more
    try:
        from pcompile.store.compose import default_store

        st = default_store()
        if st.on_local_fault is None:
            st.on_local_fault = lambda code, detail, _root=st.settings.cache_dir: private_dir.fall_back(_root, code, detail)
        return st
    except Exception as exc:
        warn_once("store-open", f"pcompile: cannot open the cache ({exc}); compiling without it")
        return None


@dataclasses.dataclass
class Scope:
    """One compile (a backend call): the leases it took and what its lookups found."""

    taken: set[str] = dataclasses.field(default_factory=set)
    hits: int = 0
    misses: int = 0
    published: int = 0

    @property
    def outcome(self) -> str | None:
        """compiled if anything was compiled here, hit if everything came from the store."""
        if self.misses or self.published:
            return "compiled"
        return "hit" if self.hits else None


def _scopes() -> list[Scope]:
    stack = getattr(_tls, "scopes", None)
    if stack is None:
        stack = _tls.scopes = []
    return stack


def _note(field: str) -> None:
    for sc in _scopes():
        setattr(sc, field, getattr(sc, field) + 1)


@contextlib.contextmanager
def inside(layer: str, untimed: bool | None = None) -> Iterator[None]:
    """This thread is building an entry of `layer`: its own look-ups of that layer (Triton's
    per-config cubins inside an Inductor kernel compile) are inner, not hits or misses.
    `untimed`: the job it serves runs where kernels cannot be timed (see `cannot_time`)."""
    previous = getattr(_tls, "inside", None), getattr(_tls, "untimed", None)
    _tls.inside = layer
    if untimed is not None:
        _tls.untimed = untimed
    try:
        yield
    finally:
        _tls.inside, _tls.untimed = previous


def building(layer: str) -> bool:
    """True while this thread builds an entry of `layer` (inside `inside(layer)`)."""
    return getattr(_tls, "inside", None) == layer


def cannot_time() -> bool:
    """This process (or the job a worker compiles for) runs on a virtual device: pcompile warm."""
    flag = getattr(_tls, "untimed", None)
    from pcompile.settings import WARMING

    return bool(flag) if flag is not None else bool(WARMING.get())


def account(st: Any, layer: str, outcome: str, entry: Entry | None = None, **fields: Any) -> None:
    """Count one look-up of `layer` (hit, miss or untimed: store/hits.py) in the stats and as a
    `cache_lookup` event, for look-ups whose answer took more than one store read."""
    if st is not None:
        st.stats.lookup(layer, outcome)
        if entry is not None:
            st.stats.add(saved_seconds=entry.compile_seconds)
    if entry is not None:
        fields["saved_s"] = entry.compile_seconds
    emit("cache_lookup", now(), 0.0, layer=layer, tier="store", outcome=outcome, **fields)
    if outcome == "hit":
        _note("hits")
    elif outcome == "miss" and layer != "autotune":
        _note("misses")


@contextlib.contextmanager
def scope() -> Iterator[Scope]:
    """Leases taken by this thread inside the block are released when it ends."""
    current = Scope()
    stack = _scopes()
    stack.append(current)
    try:
        yield current
    finally:
        stack.pop()
        for name in current.taken:
            release(name)


def _hold(key: Key, lease: Lease, kind: str) -> None:
    name = str(key)
    with _lock:
        previous = _held.pop(name, None)
        _held[name] = _Held(lease, kind, threading.get_ident(), time.monotonic())
    if previous is not None and previous.lease is not lease:
        previous.lease.release()
    for sc in _scopes():
        sc.taken.add(name)


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


def lookup(kind: str, inductor_key: str, *, single_flight: bool = True, counted: bool = True) -> Entry | None:
    """The stored entry for Inductor's key, waiting out another process's compile; None = miss.

    `counted=False`: the caller accounts the look-up itself (`account`), so this read is inner.
    Look-ups of the layer this thread is building (`inside`) are inner too.
    """
    st = store()
    if st is None:
        return None
    try:
        key, _inputs = store_key(kind, inductor_key)
    except Exception as exc:
        warn_once(f"key:{kind}", f"pcompile: cannot compute {kind} keys ({exc}); that layer runs uncached")
        return None
    _release_stale(kind)
    inner = not counted or getattr(_tls, "inside", None) == key.layer
    fields: dict[str, Any] = {"layer": key.layer, "tier": "store", "key": str(key), "artifact": kind}
    if inner:
        fields["inner"] = True
    if key.layer in boards.BOARD_LAYERS and str(_inputs.fingerprint.get("target_arch", "")).startswith("sm_"):
        fields["board"] = _inputs.fingerprint.get("target_name")  # `pcompile report` and `stats` name each job's board
    try:
        with span("cache_lookup", **fields) as ev:
            t0 = now()
            entry = st.get(key, record=False)
            ev.latency = now() - t0
            if entry is None and single_flight:
                w0 = now()
                got = st.acquire_or_wait(key, on_wait=lambda: _tell(kind, inductor_key, "waiting"))
                if isinstance(got, Entry):
                    emit("lease_wait", w0, now() - w0, **fields)
                    log.info("pcompile: %s was compiled by another process; using its result", key)
                    entry = got
                elif isinstance(got, Lease):
                    _hold(key, got, kind)
                    _tell(kind, inductor_key, "leased")
            if entry is not None:
                _tell(kind, inductor_key, "hit")
                ev.outcome = "hit"
                ev.saved_s = entry.compile_seconds
                if inner:
                    st.stats.lookup(key.layer, "inner")
                else:
                    st.stats.lookup(key.layer, "hit")
                    st.stats.add(saved_seconds=entry.compile_seconds)
                    _note("hits")
                return entry
            if held_lease(key) is None:
                _tell(kind, inductor_key, "miss")
            if not inner and kind in ("graph", "autograd"):  # what the key was made of, for `pcompile explain`
                from pcompile.keys import key_details

                key_details.save(st.settings.cache_dir, str(key), inductor_key)
            st.stats.lookup(key.layer, "inner" if inner else "miss")
            ev.outcome = "miss"
            if not inner and key.layer != "autotune":
                _note("misses")
                if key.layer in boards.BOARD_LAYERS:
                    board_notice.note_miss(st, _inputs.fingerprint)
            return None
    except Exception as exc:
        warn_once(f"lookup:{kind}", f"pcompile: cache lookup failed ({type(exc).__name__}: {exc}); compiling without it")
        return None


def get_or_compute(key: Key, compute: Callable[[], Entry], *, artifact: str,
                   **fields: Any) -> tuple[Entry, str] | None:
    """One compile per key across every process, for entries pcompile keys itself (the compile
    pool's kernels: layer_keys.pool_kernel_key), not through an Inductor key: the stored entry
    (`hit`), another process's result (`waited`), or `compute()`'s, published (`compiled`).

    Counted as one look-up of the key's layer (store/hits.py), as a `cache_lookup` event with
    `fields`, in the enclosing compile scope, and told to the listeners as kind `artifact`. None
    when there is no store (warned once; the caller compiles uncached). Errors of the store or of
    `compute` are the caller's: it knows its fallback."""
    st = store()
    if st is None:
        return None
    t0 = now()
    entry, outcome = st.get_or_compute(key, compute)  # counts hit/miss per layer in the store's stats
    hit = outcome != "compiled"
    extra = {"saved_s": entry.compile_seconds} if hit else {}
    emit("cache_lookup", t0, now() - t0 if hit else 0.0, layer=key.layer, tier="store", key=str(key),
         artifact=artifact, outcome="hit" if hit else "miss", **extra, **fields)
    if hit:
        _note("hits")
    elif key.layer != "autotune":
        _note("misses")
        _note("published")
    _tell(artifact, str(key), "hit" if hit else "miss")
    return entry, outcome


def present(kind: str, inductor_key: str) -> bool:
    """Whether this node's store already has the entry (a manifest read; no stats, no lease)."""
    st = store()
    if st is None:
        return True  # nothing to do without a store
    try:
        key, _inputs = store_key(kind, inductor_key)
        return st.local.read_manifest(key) is not None
    except Exception:
        return True


def publish(kind: str, inductor_key: str, blobs: dict[str, bytes], meta: dict[str, Any] | None = None,
            compile_seconds: float | None = None, compiled: bool = True) -> bool:
    """Store an artifact under Inductor's key and release its lease. Never raises.

    `compiled=False` for artifacts this process did not build (a backfill from Inductor's local
    cache), so `pcompile stats` counts compiles honestly. The entry's compile time is the time its
    lease was held, minus entries published inside it; `compile_seconds` is the fallback when this
    process compiled without a lease.
    """
    st = store()
    try:
        key, inputs = store_key(kind, inductor_key)
    except Exception as exc:
        warn_once(f"key:{kind}", f"pcompile: cannot compute {kind} keys ({exc}); that layer runs uncached")
        return False
    name = str(key)
    me = threading.get_ident()
    with _lock:
        held = _held.get(name)
        # Self time: the lease's span minus what was published inside it (an AOTAutograd entry
        # contains its graphs' compiles), so hits do not count the same seconds twice.
        if held is not None:
            seconds = max(0.0, time.monotonic() - held.since - held.nested)
        else:
            seconds = max(0.0, float(compile_seconds or 0.0))
        for other_name, other in _held.items():
            if other_name != name and other.thread == me:
                other.nested += seconds
    try:
        if st is None:
            return False
        entry = Entry(key=key, blobs=blobs, inputs=inputs, meta=dict(meta or {}), compile_seconds=seconds)
        ok = bool(st.put(entry, compiled=compiled))
        if ok and key.layer in boards.BOARD_LAYERS:
            board_notice.note_publish(st, inputs.fingerprint)
        if compiled and key.layer != "autotune":  # a winner or a prediction is not a compile
            _note("published")
        if compiled and kind in ("cpp", "triton") and entry.compile_seconds:
            emit("kernel_compile", now() - entry.compile_seconds, entry.compile_seconds, key=name, artifact=kind,
                 outcome="compiled", name=str((meta or {}).get("file") or (meta or {}).get("group") or ""),
                 **({"inner": True} if getattr(_tls, "inside", None) == key.layer else {}))
        return ok
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
