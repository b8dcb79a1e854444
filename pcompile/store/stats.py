"""Counters for `pcompile stats`: each process keeps its own and flushes them to one small file.

Per-process files mean no cross-process locking on the hot path; `pcompile stats` sums them and
folds the files of exited processes into totals.json under a lock (local disk only).
"""
from __future__ import annotations

import atexit
import json
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

from filelock import FileLock

from pcompile.store import fsio
from pcompile.store import hits as _hits

_FLUSH_INTERVAL = 1.0


def _zero() -> dict[str, Any]:
    return {
        "compiles": 0,
        "compile_seconds": 0.0,
        "saved_seconds": 0.0,
        "quarantined": 0,
        "write_errors": 0,
        "lease_waits": 0,
        "lease_wait_seconds": 0.0,
        "layers": {layer: {"hits": 0, "misses": 0} for layer in _hits.LAYERS},  # untimed, inner: added when seen
        "tiers": {},
    }


def _tier_zero() -> dict[str, Any]:
    return {"hits": 0, "misses": 0, "bytes_read": 0, "bytes_written": 0, "read_seconds": 0.0, "write_seconds": 0.0, "errors": 0}


def merge(into: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    for name, value in other.items():
        if name in ("layers", "tiers"):
            bucket = into.setdefault(name, {})
            for sub, counters in value.items():
                target = bucket.setdefault(sub, {})
                for cname, cval in counters.items():
                    target[cname] = target.get(cname, 0) + cval
        elif isinstance(value, (int, float)):
            into[name] = into.get(name, 0) + value
    return into


class Stats:
    """This process's counters; thread-safe; flushed at most once a second and at exit."""

    def __init__(self, directory: Path) -> None:
        self.dir = Path(directory)
        self.data = _zero()
        self._lock = threading.Lock()
        self._dirty = False
        self._last_flush = 0.0
        self._timer_pid: int | None = None
        self._path = self.dir / f"{socket.gethostname()}.{os.getpid()}.json"
        atexit.register(self.flush)

    def layer(self, layer: str, hit: bool) -> None:
        self.lookup(layer, "hit" if hit else "miss")

    def lookup(self, layer: str, outcome: str) -> None:
        """Count one look-up of `layer` as hit, miss, untimed or inner (see store/hits.py)."""
        with self._lock:
            counters = self.data["layers"].setdefault(layer, {"hits": 0, "misses": 0})
            name = _hits.COUNTER[outcome]
            counters[name] = counters.get(name, 0) + 1
        self._changed()

    def tier(self, tier: str, **delta: float) -> None:
        with self._lock:
            counters = self.data["tiers"].setdefault(tier, _tier_zero())
            for name, value in delta.items():
                counters[name] = counters.get(name, 0) + value
        self._changed()

    def add(self, **delta: float) -> None:
        with self._lock:
            for name, value in delta.items():
                self.data[name] = self.data.get(name, 0) + value
        self._changed()

    def _changed(self) -> None:
        self._dirty = True
        if time.monotonic() - self._last_flush >= _FLUSH_INTERVAL:
            self.flush()
        elif self._timer_pid != os.getpid():  # none pending in this process (a fork inherits the flag, not the thread)
            self._timer_pid = os.getpid()
            timer = threading.Timer(_FLUSH_INTERVAL, self._timed_flush)
            timer.daemon = True
            timer.start()

    def _timed_flush(self) -> None:
        """The last counts of a burst reach the file within a second, also in a process that is
        killed rather than exiting (a pool worker when its daemon stops): `pcompile stats` then
        agrees with the job's event log."""
        self._timer_pid = None
        self.flush()

    def flush(self) -> None:
        if not self._dirty:
            return
        with self._lock:
            payload = json.dumps(self.data).encode()
            self._dirty = False
            self._last_flush = time.monotonic()
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            fsio.atomic_write(self._path, payload, self.dir, replace=True)
        except OSError:
            pass  # stats must never fail a job


def _alive(host: str, pid: int) -> bool:
    if host != socket.gethostname():
        return True  # cannot tell; keep it separate
    return pid_alive(pid)


def pid_alive(pid: int) -> bool:
    """A process of this host with that pid exists (one we may not signal counts as alive)."""
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def collect(directory: Path) -> dict[str, Any]:
    """Sum of totals.json and every live process's file; folds dead processes into totals."""
    directory = Path(directory)
    total = _zero()
    if not directory.is_dir():
        return total
    totals_path = directory / "totals.json"
    try:
        with FileLock(str(directory / ".totals.lock"), timeout=10):
            totals = json.loads(fsio.read_file(totals_path) or b"{}") or _zero()
            folded = False
            for path in directory.glob("*.*.json"):
                if path.name == "totals.json":
                    continue
                host, _, pid = path.stem.rpartition(".")
                try:
                    data = json.loads(path.read_bytes())
                except (OSError, ValueError):
                    continue
                if pid.isdigit() and not _alive(host, int(pid)):
                    merge(totals, data)
                    path.unlink(missing_ok=True)
                    folded = True
                else:
                    merge(total, data)
            if folded:
                fsio.atomic_write(totals_path, json.dumps(totals).encode(), directory, replace=True)
            merge(total, totals)
    except (OSError, TimeoutError):
        pass
    return total



ZEROED_FILE = "zeroed-at"


def zero(directory: Path) -> dict[str, Any]:
    """`pcompile stats --zero`: drop every counter file (totals and each process's) under the same
    lock `collect` folds with, and note when, so `stats` can say "since <time>". A process still
    running keeps its own counts in memory and writes them again at its next flush: returned as
    `live_pids`, so the CLI can say so instead of pretending they were zeroed."""
    directory = Path(directory)
    removed, live = 0, []
    if directory.is_dir():
        with FileLock(str(directory / ".totals.lock"), timeout=10):
            for path in directory.glob("*.json"):
                host, _, pid = path.stem.rpartition(".")
                if path.name != "totals.json" and pid.isdigit() and _alive(host, int(pid)) and int(pid) != os.getpid():
                    live.append(int(pid))
                path.unlink(missing_ok=True)
                removed += 1
    directory.mkdir(parents=True, exist_ok=True)
    now = time.time()
    fsio.atomic_write(directory / ZEROED_FILE, repr(now).encode(), directory, replace=True)
    return {"files_removed": removed, "live_pids": sorted(live), "zeroed_at": now}


def zeroed_at(directory: Path) -> float | None:
    """When `pcompile stats --zero` last ran on this cache (None: never)."""
    try:
        return float((Path(directory) / ZEROED_FILE).read_text())
    except (OSError, ValueError):
        return None
