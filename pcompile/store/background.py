"""Remote I/O off the caller's thread: deadline-bounded calls and a bounded write-behind queue.

Why threads at all: socket timeouts bound a stalled read or connect, but not everything a client
library does before it opens a socket (DNS, a credential-provider chain probing instance
metadata, TLS handshakes that trickle). Running each network round trip on a worker thread and
waiting with a deadline makes "a remote failure never stalls a job beyond the timeout" hold no
matter which library call hangs. A call that overruns is abandoned, not killed: its thread frees
itself when the socket timeout fires.

Writes to slow tiers go through `BackgroundWriter`: a bounded queue (entries and bytes) drained
by one daemon thread, flushed at interpreter exit within a time limit. A full queue or an
unflushed entry at exit is a *dropped* write: counted, never an error, because the entry is
already safe in the fast tiers.
"""
from __future__ import annotations

import atexit
import collections
import logging
import os
import queue
import threading
import time
import weakref
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Callable, Deque

from pcompile.store.entry import Entry

log = logging.getLogger("pcompile.store.remote")


class DeadlineExceeded(TimeoutError):
    """A remote call did not finish within its deadline; it was abandoned."""


class DeadlineRunner:
    """A few daemon threads that run callables; the caller waits at most `deadline` seconds.

    Daemon threads, not concurrent.futures.ThreadPoolExecutor: the executor joins its threads at
    interpreter exit, so one hung socket would hold up the job's exit.
    """

    def __init__(self, threads: int = 4, name: str = "pcompile-remote-io") -> None:
        self._size = max(1, threads)
        self._name = name
        self._lock = threading.Lock()
        self._pid = -1
        self._queue: "queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]]" = queue.SimpleQueue()

    def _ensure(self) -> None:
        if self._pid == os.getpid():
            return
        with self._lock:
            if self._pid == os.getpid():
                return
            # first use, or a forked child: the parent's threads do not exist here
            self._queue = queue.SimpleQueue()
            for i in range(self._size):
                threading.Thread(target=self._work, args=(self._queue,), name=f"{self._name}-{i}", daemon=True).start()
            self._pid = os.getpid()

    @staticmethod
    def _work(q: "queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]]") -> None:
        while True:
            fut, fn, args = q.get()
            if not fut.set_running_or_notify_cancel():
                continue  # the caller gave up before we started: do not run it late
            try:
                fut.set_result(fn(*args))
            except BaseException as exc:  # handed to the caller, who classifies it
                fut.set_exception(exc)

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...], deadline: float) -> Any:
        self._ensure()
        fut: "Future[Any]" = Future()
        self._queue.put((fut, fn, args))
        try:
            return fut.result(timeout=deadline)
        except FutureTimeout:
            fut.cancel()
            raise DeadlineExceeded(f"no answer within {deadline:.1f} s") from None


class BackgroundWriter:
    """Bounded write-behind: `submit` never blocks; one daemon thread calls `write(entry)`.

    `on_done(entry, seconds)` after a write, `on_drop(entry, reason)` for a write that will never
    happen (queue full, write failed, not flushed at exit).
    """

    def __init__(
        self,
        write: Callable[[Entry], None],
        *,
        max_entries: int,
        max_bytes: int,
        on_done: Callable[[Entry, float], None] | None = None,
        on_drop: Callable[[Entry, str], None] | None = None,
        name: str = "pcompile-remote-writer",
    ) -> None:
        self._write = write
        self.max_entries = max(1, max_entries)
        self.max_bytes = max(1, max_bytes)
        self._on_done = on_done
        self._on_drop = on_drop
        self._name = name
        self._cond = threading.Condition()
        self._pending: Deque[Entry] = collections.deque()
        self._pending_bytes = 0
        self._busy = 0  # entries taken off the queue and being written
        self._closed = False
        self._pid = -1
        _live_writers.add(self)

    # -- producer side -------------------------------------------------------------------
    def submit(self, entry: Entry) -> bool:
        """Queue a write; False (and one drop) if the queue is full or closed."""
        size = entry.size
        with self._cond:
            self._ensure_thread()
            if self._closed:
                reason = "writer closed"
            elif len(self._pending) >= self.max_entries or (self._pending and self._pending_bytes + size > self.max_bytes):
                reason = "queue full"
            else:
                self._pending.append(entry)
                self._pending_bytes += size
                self._cond.notify_all()
                return True
        self._drop(entry, reason)
        return False

    def pending(self) -> int:
        with self._cond:
            return len(self._pending) + self._busy

    def flush(self, timeout: float) -> bool:
        """Wait until every queued write is done; False if `timeout` ran out first."""
        end = time.monotonic() + max(0.0, timeout)
        with self._cond:
            while self._pending or self._busy:
                if self._pid != os.getpid():
                    return not self._pending  # forked child: the parent's thread is not ours
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self, timeout: float) -> int:
        """Flush within `timeout`, then drop what is left; returns how many writes were dropped."""
        self.flush(timeout)
        with self._cond:
            self._closed = True
            left = list(self._pending)
            self._pending.clear()
            self._pending_bytes = 0
            self._cond.notify_all()
        for entry in left:
            self._drop(entry, "not flushed before exit")
        return len(left)

    # -- consumer side -------------------------------------------------------------------
    def _ensure_thread(self) -> None:
        if self._pid == os.getpid():
            return
        # first submit, or a forked child that inherited the parent's queue but not its thread
        self._pending.clear()
        self._pending_bytes = 0
        self._busy = 0
        self._pid = os.getpid()
        threading.Thread(target=self._run, name=self._name, daemon=True).start()

    def _run(self) -> None:
        me = os.getpid()
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if self._pid != me or (self._closed and not self._pending):
                    return
                entry = self._pending.popleft()
                self._pending_bytes -= entry.size
                self._busy += 1
            t0 = time.perf_counter()
            try:
                self._write(entry)
            except Exception as exc:  # the remote is optional: a failed write is a dropped write
                self._drop(entry, f"{exc.__class__.__name__}: {exc}")
            else:
                if self._on_done:
                    self._on_done(entry, time.perf_counter() - t0)
            finally:
                with self._cond:
                    self._busy -= 1
                    self._cond.notify_all()

    def _drop(self, entry: Entry, reason: str) -> None:
        log.debug("remote write of %s dropped: %s", entry.key, reason)
        if self._on_drop:
            try:
                self._on_drop(entry, reason)
            except Exception:
                pass


_live_writers: "weakref.WeakSet[BackgroundWriter]" = weakref.WeakSet()
_exit_hooks: "list[weakref.WeakMethod[Callable[[], None]]]" = []


def at_exit(hook: Callable[[], None]) -> None:
    """Run the bound method `hook` after the writers flushed (stats must be saved after the last
    drop was counted). Held weakly: registering does not keep a closed store alive."""
    _exit_hooks.append(weakref.WeakMethod(hook))  # type: ignore[arg-type]


_flush_seconds = [10.0]


def set_exit_flush_seconds(seconds: float) -> None:
    _flush_seconds[0] = max(0.0, seconds)


@atexit.register
def _flush_all_at_exit() -> None:
    """One time budget for all writers together: exit is delayed at most that long."""
    end = time.monotonic() + _flush_seconds[0]
    for writer in list(_live_writers):
        try:
            writer.close(max(0.0, end - time.monotonic()))
        except Exception:
            pass
    for ref in list(_exit_hooks):
        hook = ref()
        if hook is None:
            continue
        try:
            hook()
        except Exception:
            pass
