"""Single-flight across processes and hosts without fcntl: lease files with heartbeats.

Acquire = hard-link a temp file to leases/<key>.lease (link creation is atomic and fails if the
name exists, on local filesystems and NFS alike). The holder's heartbeat thread touches the file;
a waiter declares a lease stale when its mtime has not changed for `timeout` seconds of the
waiter's own monotonic clock, so clock skew between hosts does not matter. A stale lease is
renamed away (only one renamer wins) and the waiter acquires. Single-flight is an optimisation:
if two processes ever both compile, publishes are atomic and identical, so nothing is corrupted.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
import weakref
from pathlib import Path

from pcompile.store import fsio


class Lease:
    def __init__(self, path: Path, holder: str, manager: "LeaseDir") -> None:
        self.path = path
        self.holder = holder
        self._manager = manager
        self.released = False

    def still_held(self) -> bool:
        return _read_holder(self.path) == self.holder

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        _Heartbeat.instance().forget(self)
        if self.still_held():
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_body(path: Path) -> dict:
    """The lease file's JSON ({} if missing, empty or unreadable)."""
    raw = fsio.read_file(path)
    try:
        body = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _read_holder(path: Path) -> str | None:
    holder = _read_body(path).get("holder")
    return None if holder is None else str(holder)


def _holder_died_here(path: Path) -> bool:
    """The lease's holder is a process of this host that no longer exists."""
    body = _read_body(path)
    try:
        pid, host = int(body.get("pid") or 0), body.get("host")
    except (ValueError, TypeError):
        return False
    if pid <= 0 or host != socket.gethostname() or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # EPERM: alive, someone else's
        return False
    try:  # killed but not yet reaped by its parent: a zombie holds nothing
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


class LeaseDir:
    """Leases for one directory tier; `timeout` is how long a silent holder is trusted."""

    def __init__(self, directory: Path, tmp_dir: Path, timeout: float = 60.0) -> None:
        self.dir = Path(directory)
        self.tmp = Path(tmp_dir)
        self.timeout = float(timeout)
        self._seen: dict[str, tuple[float, float]] = {}  # name -> (mtime, first seen at, monotonic)

    def path(self, name: str) -> Path:
        return self.dir / f"{name}.lease"

    def try_acquire(self, name: str) -> Lease | None:
        """Take the lease if free or stale; None if a live holder has it."""
        path = self.path(name)
        holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        body = json.dumps({"holder": holder, "pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}).encode()
        self.dir.mkdir(parents=True, exist_ok=True)
        for _attempt in range(3):
            if fsio.atomic_write(path, body, self.tmp, replace=False):
                lease = Lease(path, holder, self)
                _Heartbeat.instance().add(lease, self.timeout)
                self._seen.pop(name, None)
                return lease
            if not self._is_stale(name, path):
                return None
            self._break(path)
        return None

    def _is_stale(self, name: str, path: Path) -> bool:
        try:
            mtime = path.stat().st_mtime
        except FileNotFoundError:
            return True  # released between our attempts: try again
        if _holder_died_here(path):
            return True  # a crashed process on this host: no need to wait out its heartbeat
        now = time.monotonic()
        seen = self._seen.get(name)
        if seen is None or seen[0] != mtime:
            self._seen[name] = (mtime, now)
            return False
        return now - seen[1] >= self.timeout

    def _break(self, path: Path) -> None:
        """Rename a stale lease aside; if what we grabbed was in fact fresh, put it back."""
        observed = _read_holder(path)
        aside = self.tmp / f"stale.{fsio.unique_suffix()}"
        try:
            os.replace(path, aside)
        except FileNotFoundError:
            return
        try:
            if _read_holder(aside) != observed:
                try:
                    os.link(aside, path)
                except FileExistsError:
                    pass
        finally:
            try:
                os.unlink(aside)
            except FileNotFoundError:
                pass

    def exists(self, name: str) -> bool:
        return self.path(name).exists()


class _Heartbeat:
    """One daemon thread per process keeps every held lease fresh."""

    _lock = threading.Lock()
    _inst: "_Heartbeat | None" = None

    def __init__(self) -> None:
        self._leases: "weakref.WeakSet[Lease]" = weakref.WeakSet()
        self._interval = 5.0
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pcompile-lease-heartbeat", daemon=True)
        self._thread.start()

    @classmethod
    def instance(cls) -> "_Heartbeat":
        with cls._lock:
            if cls._inst is None or not cls._inst._thread.is_alive():
                cls._inst = _Heartbeat()
            return cls._inst

    def add(self, lease: Lease, timeout: float) -> None:
        with self._lock:
            self._leases.add(lease)
            self._interval = max(0.05, min(self._interval, timeout / 4))
        self._wake.set()

    def forget(self, lease: Lease) -> None:
        with self._lock:
            self._leases.discard(lease)

    def _run(self) -> None:
        while True:
            self._wake.wait(self._interval)
            self._wake.clear()
            with self._lock:
                leases = list(self._leases)
            for lease in leases:
                try:
                    os.utime(lease.path)
                except OSError:
                    pass


def _after_fork() -> None:
    _Heartbeat._inst = None  # a forked child owns none of its parent's leases


os.register_at_fork(after_in_child=_after_fork)
