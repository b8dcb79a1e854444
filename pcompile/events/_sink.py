"""Appending event lines to the per-job log: safe across processes, bounded, never raising.

Each event is one `os.write` of one short line on an O_APPEND descriptor, so lines from
concurrent processes on one node never interleave. The log stops growing at a byte budget
(one warning), and when a process creates a new job log it prunes the oldest ones.
"""
from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

from pcompile.events import _context
from pcompile.settings import EVENTS_KEEP, EVENTS_MAX_BYTES

MAX_LINE = 8192
MAX_OTHER_JOBS = 16
SUFFIX = ".jsonl"

log = logging.getLogger("pcompile.events")


def events_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """`<cache_dir>/events`, with the cache dir taken from Settings when not given."""
    if cache_dir is None:
        from pcompile.config import Settings

        cache_dir = Settings.from_env().cache_dir
    return Path(cache_dir) / "events"


class Sink:
    """One open log per (process, cache dir, job); reopened when any of them changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ident: tuple | None = None
        self._fd: int | None = None
        self._path: Path | None = None
        self._max_bytes = EVENTS_MAX_BYTES.default
        self._full = False
        self._broken = False
        self._others: dict[tuple, int] = {}

    def path(self) -> Path | None:
        return self._path

    def write(self, record: dict, job: str | None = None) -> None:
        """Append one record to this process's job log, or to `job`'s (a shared compile worker
        recording on behalf of the process that asked it)."""
        try:
            line = _encode(record)
            if job is not None and job != _context.explicit_job_id():
                self._write_other(_context.sanitize(str(job)), line)
                return
            fd = self._descriptor()
            if fd is None:
                return
            if os.fstat(fd).st_size + len(line) > self._max_bytes:
                if not self._full:
                    self._full = True
                    log.warning("pcompile: event log %s reached %d bytes; further events of this job are dropped "
                                "(raise %s to keep more)", self._path, self._max_bytes, EVENTS_MAX_BYTES.name)
                return
            os.write(fd, line)
        except Exception as exc:  # recording must never break the caller
            self._disable(exc)

    def _write_other(self, job: str, line: bytes) -> None:
        key = (*_context.identity()[:2], job)
        fd = self._others.get(key)
        if fd is None:
            with self._lock:
                if len(self._others) >= MAX_OTHER_JOBS:  # a long-lived worker serves many jobs: keep a few open
                    old_key = next(iter(self._others))
                    try:
                        os.close(self._others.pop(old_key))
                    except OSError:
                        pass
                directory = events_dir()
                directory.mkdir(parents=True, exist_ok=True)
                fd = os.open(directory / (job + SUFFIX), os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
                self._others[key] = fd
        if os.fstat(fd).st_size + len(line) <= EVENTS_MAX_BYTES.get():
            os.write(fd, line)

    def _descriptor(self) -> int | None:
        ident = _context.identity()
        if ident == self._ident:
            return None if (self._broken or self._full) else self._fd
        with self._lock:
            if ident != self._ident:
                self._open(ident)
        return None if (self._broken or self._full) else self._fd

    def _open(self, ident: tuple) -> None:
        if self._fd is not None:  # after a fork this closes only the child's copy
            try:
                os.close(self._fd)
            except OSError:
                pass
        self._fd, self._full, self._broken = None, False, False
        self._ident = ident
        self._max_bytes = EVENTS_MAX_BYTES.get()
        directory = events_dir()
        directory.mkdir(parents=True, exist_ok=True)
        self._path = directory / (_context.job_id() + SUFFIX)
        # job_id() may have minted and exported an id: remember the environment as it is now.
        self._ident = _context.identity()
        created = False
        try:
            self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
            created = True
        except FileExistsError:
            self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0))
        if created:
            prune(directory, keep=EVENTS_KEEP.get(), spare=self._path)

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        for fd in self._others.values():  # the parent's descriptors: close our copies
            try:
                os.close(fd)
            except OSError:
                pass
        self._others = {}

    def _disable(self, exc: BaseException) -> None:
        if not self._broken:
            self._broken = True
            from pcompile.store.diskfault import classify

            if isinstance(exc, OSError) and classify(exc, Path(self._path or "/").parent.parent) is not None:
                log.debug("events off: %s", exc)  # a cache-dir fault: the compile path says so, once
                return
            log.warning("pcompile: events disabled for this process: cannot write %s: %s", self._path, exc)


def prune(directory: Path, keep: int, spare: Path | None = None) -> list[Path]:
    """Delete all but the newest `keep` job logs; never the one being written."""
    try:
        logs = sorted(directory.glob("*" + SUFFIX), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return []
    removed = []
    for old in logs[max(keep, 1):]:
        if spare is not None and old == spare:
            continue
        try:
            old.unlink()
            removed.append(old)
        except OSError:
            pass
    return removed


def _encode(record: dict) -> bytes:
    line = json.dumps(record, separators=(",", ":"), default=_fallback, ensure_ascii=True)
    if len(line) > MAX_LINE:
        keep = {k: record[k] for k in ("v", "kind", "ts", "dur", "pid", "rank", "host", "id", "parent", "outcome") if k in record}
        keep["truncated"] = True
        line = json.dumps(keep, separators=(",", ":"), default=_fallback)
    return (line + "\n").encode()


def _fallback(obj: object) -> str:
    text = str(obj)
    return text if len(text) <= 512 else text[:509] + "..."
