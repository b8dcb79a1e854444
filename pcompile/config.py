"""Where the caches live and how they behave, resolved once from CLI flags and the environment.

Every process of a job (ranks, workers, the warm process) must agree on these, so they come
from environment variables that child processes inherit (read through pcompile/settings.py),
with CLI flags as overrides.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path
from typing import Iterator, Mapping

from pcompile import settings

#: Everything `Settings.from_env` reads. A job handed to a shared compile worker (the node
#: daemon's, a Ray actor) carries them (`Settings.job_env`): the worker's own environment is that
#: of whoever started it, and its store look-ups and writes (Triton's cubins, autotune entries)
#: must go to the cache the requester named (`pcompile warm --cache-dir B` beside a daemon that a
#: job for another cache dir started).
STORE_VARIABLES = (settings.CACHE_DIR, settings.SHARED_DIR, settings.REMOTE, settings.READ_ONLY, settings.MAX_BYTES,
                   settings.MAX_ENTRIES, settings.LEASE_TIMEOUT, settings.MIN_FREE_BYTES, settings.CACHE_DIR_TIMEOUT)


@dataclasses.dataclass(frozen=True)
class Settings:
    cache_dir: Path
    shared_dir: Path | None = None
    remote: str | None = None
    read_only: bool = False
    max_bytes: int = settings.MAX_BYTES.default
    max_entries: int = settings.MAX_ENTRIES.default
    lease_timeout: float = settings.LEASE_TIMEOUT.default
    min_free_bytes: int = settings.MIN_FREE_BYTES.default  # below it: cache nothing, work in a temp dir
    dir_timeout: float = settings.CACHE_DIR_TIMEOUT.default

    @staticmethod
    def from_env(cache_dir: str | None = None, shared_dir: str | None = None) -> "Settings":
        cache = cache_dir or settings.CACHE_DIR.get()
        shared = shared_dir or settings.SHARED_DIR.get()
        return Settings(
            cache_dir=Path(cache).expanduser().absolute(),
            shared_dir=Path(shared).expanduser().absolute() if shared else None,
            remote=settings.REMOTE.get(),
            read_only=settings.READ_ONLY.get(),
            max_bytes=settings.MAX_BYTES.get(),
            max_entries=settings.MAX_ENTRIES.get(),
            lease_timeout=settings.LEASE_TIMEOUT.get(),
            min_free_bytes=settings.MIN_FREE_BYTES.get(),
            dir_timeout=settings.CACHE_DIR_TIMEOUT.get(),
        )

    def export_env(self) -> dict[str, str]:
        """The variables a child process needs to see this same configuration."""
        out = {settings.CACHE_DIR.name: str(self.cache_dir)}
        if self.shared_dir:
            out[settings.SHARED_DIR.name] = str(self.shared_dir)
        if self.remote:
            out[settings.REMOTE.name] = self.remote
        if self.read_only:
            out[settings.READ_ONLY.name] = "1"
        return out

    def job_env(self) -> dict[str, str | None]:
        """Every STORE_VARIABLES entry as a worker must see it to serve this configuration (None:
        unset there); see `applied_env`."""
        out: dict[str, str | None] = {var.name: var.raw() for var in STORE_VARIABLES}
        out.update({settings.CACHE_DIR.name: str(self.cache_dir),
                    settings.SHARED_DIR.name: str(self.shared_dir) if self.shared_dir else None,
                    settings.REMOTE.name: self.remote, settings.READ_ONLY.name: "1" if self.read_only else None})
        return out


@contextlib.contextmanager
def applied_env(env: Mapping[str, str | None] | None) -> Iterator[None]:
    """os.environ with `env` applied (None: unset) inside the block, as it was after it. For a
    worker running one job at a time; None, or values the environment already has (the job runs
    in the requester's own process: the local pool, a fallback), change nothing."""
    changed = {name: value for name, value in (env or {}).items() if os.environ.get(name) != value}
    if not changed:
        yield
        return
    saved = {name: os.environ.get(name) for name in changed}
    try:
        for name, value in changed.items():
            _put_env(name, value)
        yield
    finally:
        for name, value in saved.items():
            _put_env(name, value)


def _put_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
