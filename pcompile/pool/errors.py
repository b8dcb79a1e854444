"""How a pool job can fail, as exception types a caller can tell apart.

Why separate types: the caller's policy differs by cause. A compile that raised is the
user's error (re-raise it, as stock Inductor would). A crashed or hung worker is a fault of
the environment (OOM killer, a segfault in a compiler): the Inductor hook retries that job
in-process so the training job goes on. A pool that is unreachable is pcompile's fault and
must never be visible beyond one warning.
"""
from __future__ import annotations


class PoolError(Exception):
    """Base class for every failure that comes from the pool rather than from the job itself."""


class PoolUnavailable(PoolError):
    """The daemon could not be started or reached; the caller should run the job in-process."""


class WorkerCrashed(PoolError):
    """The worker process running the job died (signal or exit) before answering."""


class JobTimedOut(PoolError):
    """The job ran past its per-job timeout; its worker was killed and replaced."""


class JobLost(PoolError):
    """The connection to the daemon dropped (daemon exited) before the job finished."""
