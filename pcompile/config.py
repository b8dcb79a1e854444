"""Where the caches live and how they behave, resolved once from CLI flags and the environment.

Every process of a job (ranks, workers, the warm process) must agree on these, so they come
from environment variables that child processes inherit (read through pcompile/settings.py),
with CLI flags as overrides.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from pcompile import settings


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
