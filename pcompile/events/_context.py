"""Who is recording: job id, rank, host and pid, resolved once per process (and again after fork).

The job id must be the same in every process of a job so that all their events land in one
log; it comes from the launcher's environment, or is minted once and exported so that child
processes (ranks started later, compile workers) inherit it.
"""
from __future__ import annotations

import os
import re
import socket
import time
import uuid

from pcompile.settings import CACHE_DIR, JOB_ID

_LAUNCHER_JOB_ENVS = ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID")
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")

_host: str | None = None


def job_id() -> str:
    """The current job's id, minting and exporting one if no launcher set it."""
    for raw in (JOB_ID.get(), *(os.environ.get(name) for name in _LAUNCHER_JOB_ENVS)):
        if raw:
            return sanitize(raw)
    new = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
    os.environ[JOB_ID.name] = new
    return new


def explicit_job_id() -> str | None:
    """PCOMPILE_JOB_ID as set (by a launcher, or minted and exported by job_id())."""
    return JOB_ID.get()


def identity() -> tuple:
    """What decides which log this process writes to: a change of any part reopens it."""
    return (os.getpid(), CACHE_DIR.raw(), JOB_ID.raw(), *(os.environ.get(name) for name in _LAUNCHER_JOB_ENVS))


def sanitize(raw: str) -> str:
    """A job id that is safe as a file name (no separators, no traversal)."""
    clean = _SAFE.sub("_", raw.strip()).strip("._") or "job"
    return clean[:120]


def rank() -> int | None:
    for name in ("RANK", "LOCAL_RANK"):
        raw = os.environ.get(name)
        if raw:
            try:
                return int(raw)
            except ValueError:
                return None
    return None


def host() -> str:
    global _host
    if _host is None:
        try:
            _host = socket.gethostname()
        except OSError:
            _host = "unknown"
    return _host
