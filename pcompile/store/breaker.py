"""The remote tier's circuit breaker: stop asking a dead remote, node-wide, then probe again.

A timeout costs a job the full deadline, so it counts as K failures; once open, the breaker's
end time is written to a small file on the node-local disk so every rank of the node skips the
remote as soon as one of them found it dead (remote.py wires it in).
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

from pcompile.store import fsio


class CircuitBreaker:
    """Closed → open after K failures (a timeout counts K) → half-open after T s → one probe.

    `shared` is a file on the node-local disk holding the wall-clock time the breaker is open
    until, so ranks on one node stop asking a dead remote as soon as one of them found out.
    """

    def __init__(self, failures: int, seconds: float, shared: Path | None = None, tmp: Path | None = None) -> None:
        self.failures = max(1, failures)
        self.seconds = seconds
        self.shared = shared
        self.tmp = tmp
        self._lock = threading.Lock()
        self._consecutive = 0
        self._open_until = 0.0  # monotonic
        self._half_open = False
        self._checked_shared = -1.0
        self.opened_by_peer = False

    def allow(self) -> bool:
        now = time.monotonic()
        with self._lock:
            if now < self._open_until:
                return False
            if self.shared is not None and now - self._checked_shared >= 0.25:
                self._checked_shared = now
                until = self._read_shared()
                left = until - time.time()
                if left > 0:
                    self._open_until = now + left
                    self._half_open = True
                    self.opened_by_peer = True
                    return False
            return True

    def success(self) -> None:
        with self._lock:
            self._consecutive = 0
            self._half_open = False

    def failure(self, timeout: bool) -> bool:
        """Record a failure; True if this one opened the breaker."""
        with self._lock:
            self._consecutive += self.failures if timeout else 1
            if not (self._half_open or self._consecutive >= self.failures):
                return False
            self._consecutive = 0
            self._half_open = True
            self._open_until = time.monotonic() + self.seconds
        self._write_shared(time.time() + self.seconds)
        return True

    def is_open(self) -> bool:
        return not self.allow()

    def _read_shared(self) -> float:
        assert self.shared is not None
        raw = fsio.read_file(self.shared)
        try:
            return float(raw or b"0")
        except ValueError:
            return 0.0

    def _write_shared(self, until: float) -> None:
        if self.shared is None or self.tmp is None:
            return
        try:
            self.tmp.mkdir(parents=True, exist_ok=True)
            fsio.atomic_write(self.shared, f"{until:.3f}".encode(), self.tmp, replace=True)
        except OSError:
            pass  # best effort: each process still has its own breaker
