"""Structured compile events: `with span(kind, **fields) as ev:` and `emit(kind, start, dur, **fields)`.

Every phase pcompile sees (Dynamo capture, AOTAutograd, lowering, each kernel compile, each
cache lookup per tier, lease waits, warm steps) becomes one JSON line in
`<cache_dir>/events/<job_id>.jsonl`, so `pcompile report` can show where compile time went and
what the cache saved. Recording never raises into the caller and costs well under a
microsecond per call when disabled (`PCOMPILE_EVENTS=0`).

A shared compile worker serving several jobs passes `job=<requester's job id>` (and `rank=`,
`worker=`) so its events land in the requester's log.

Kinds in use: dynamo, aot_autograd, inductor_lowering, graph_compile, kernel_compile (key,
worker), cache_lookup (layer, tier, outcome; `saved_s` on hits = seconds the entry first took
to compile), lease_wait, warm_step, verify, gc. Outcomes: hit, miss, compiled, error.
"""
from __future__ import annotations

import itertools
import os
import threading
import time
from pathlib import Path
from typing import Any

from pcompile.events import _context, _profiler
from pcompile.settings import EVENTS
from pcompile.events._sink import Sink, events_dir

__all__ = ["span", "emit", "enabled", "job_id", "log_path", "events_dir", "now", "Span", "KINDS", "OUTCOMES"]

SCHEMA = 1
KINDS = ("dynamo", "aot_autograd", "inductor_lowering", "graph_compile", "kernel_compile", "cache_lookup",
         "lease_wait", "warm_step", "verify", "gc")
OUTCOMES = ("hit", "miss", "compiled", "error")

_sink = Sink()
_ids = itertools.count(1)
_local = threading.local()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_sink._after_fork)


def enabled() -> bool:
    """Events are on unless PCOMPILE_EVENTS is 0/false/no/off."""
    return bool(EVENTS.get())


def job_id() -> str:
    return _context.job_id()


def log_path() -> Path:
    """Where this process's events go (the file may not exist until the first event)."""
    return events_dir() / (_context.job_id() + ".jsonl")


class on_behalf_of:
    """Inside this block, this thread's events go to `job`'s log (None: this process's own).

    A shared compile worker (node daemon, Ray actor) works for whichever job asked; what it
    records while doing so (its cache look-ups, kernel compiles) belongs to that job, so that a
    job the user never ran (the daemon's own) shows up nowhere: `pcompile stats`, `report` and
    the warm summary count one job's look-ups from one log."""

    def __init__(self, job: str | None) -> None:
        self.job = job
        self._previous: str | None = None

    def __enter__(self) -> "on_behalf_of":
        self._previous = getattr(_local, "job", None)
        _local.job = self.job
        return self

    def __exit__(self, *exc: Any) -> bool:
        _local.job = self._previous
        return False


def _job_of(fields: dict[str, Any]) -> str | None:
    job = fields.pop("job", None)
    return job if job is not None else getattr(_local, "job", None)


def now() -> float:
    """Wall-clock seconds (time.time()), the clock `emit` expects for `start`."""
    return time.time()


def _stack() -> list:
    st = getattr(_local, "stack", None)
    if st is None:
        st = _local.stack = []
    return st


def _base(kind: str, start: float, dur: float) -> dict[str, Any]:
    rec = {"v": SCHEMA, "kind": kind, "ts": round(start, 6), "dur": round(max(dur, 0.0), 6), "pid": os.getpid(),
           "tid": threading.get_native_id(), "host": _context.host()}
    r = _context.rank()
    if r is not None:
        rec["rank"] = r
    return rec


_RESERVED = frozenset({"v", "kind", "ts", "dur", "id"})


def _clean(fields: dict[str, Any]) -> dict[str, Any]:
    """Fields as given, minus Nones; a name the record itself uses is kept as `field_<name>`."""
    return {(f"field_{k}" if k in _RESERVED else k): v for k, v in fields.items() if v is not None}


class Span:
    """A timed region; set `.outcome` (or any field via `.set(...)`) inside the `with` block."""

    __slots__ = ("kind", "fields", "outcome", "id", "parent", "_t0", "_wall", "_rf")

    def __init__(self, kind: str, fields: dict[str, Any]) -> None:
        self.kind = kind
        self.fields = fields
        self.outcome: str | None = fields.pop("outcome", None)
        self.id: str | None = None
        self.parent: str | None = None
        self._rf: Any = None

    def set(self, **fields: Any) -> "Span":
        if "outcome" in fields:
            self.outcome = fields.pop("outcome")
        self.fields.update(fields)
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        if name in Span.__slots__:
            object.__setattr__(self, name, value)
        else:  # ev.key = ..., ev.tier = ...: plain fields
            self.fields[name] = value

    def __getattr__(self, name: str) -> Any:
        try:
            return self.fields[name]
        except KeyError:
            raise AttributeError(name) from None

    def __enter__(self) -> "Span":
        try:
            st = _stack()
            self.parent = st[-1] if st else None
            self.id = f"{os.getpid()}.{next(_ids)}"
            st.append(self.id)
            self._rf = _profiler.open_range(self.kind)
        except Exception:
            pass
        self._wall = time.time()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        dur = time.perf_counter() - self._t0
        try:
            if self._rf is not None:
                _profiler.close_range(self._rf)
            st = _stack()
            if st and st[-1] == self.id:
                st.pop()
            if exc_type is not None and self.outcome is None:
                self.outcome = "error"
                self.fields.setdefault("error", f"{exc_type.__name__}: {exc}"[:300])
            rec = _base(self.kind, self._wall, dur)
            rec["id"] = self.id
            if self.parent:
                rec["parent"] = self.parent
            if self.outcome is not None:
                rec["outcome"] = self.outcome
            job = _job_of(self.fields)
            rec.update(_clean(self.fields))
            _sink.write(rec, job)
        except Exception:
            pass
        return False


class _NullSpan:
    """What `span` returns when events are off: accepts the same calls, records nothing."""

    __slots__ = ()

    def __enter__(self) -> "_NullSpan":
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False

    def set(self, **fields: Any) -> "_NullSpan":
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return None


_NULL = _NullSpan()


def span(kind: str, /, **fields: Any) -> Span | _NullSpan:
    """Time a region as one event of `kind` (also a `pcompile::<kind>` profiler range)."""
    if not enabled():
        return _NULL
    return Span(kind, fields)


def emit(kind: str, start: float, dur: float, /, **fields: Any) -> None:
    """Record an event timed elsewhere (e.g. in a worker). `start` is time.time(); a
    time.perf_counter() value is also accepted and converted."""
    if not enabled():
        return
    try:
        start = float(start)
        if start < 1e9:  # a perf_counter reading: map it onto the wall clock
            start = time.time() - (time.perf_counter() - start)
        rec = _base(kind, start, float(dur))
        st = _stack()
        if st and "parent" not in fields:
            rec["parent"] = st[-1]
        job = _job_of(fields)
        rec.update(_clean(fields))
        _sink.write(rec, job)
    except Exception:
        pass
