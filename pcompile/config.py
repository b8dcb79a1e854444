"""Where the caches live and how they behave, resolved once from CLI flags and the environment.

Every process of a job (ranks, workers, the warm process) must agree on these, so they come
from environment variables that child processes inherit, with CLI flags as overrides.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from pcompile.errors import PcompileError

ENV_CACHE_DIR = "PCOMPILE_CACHE_DIR"
ENV_SHARED_DIR = "PCOMPILE_SHARED_DIR"
ENV_REMOTE = "PCOMPILE_REMOTE"
ENV_READ_ONLY = "PCOMPILE_READ_ONLY"
ENV_MAX_BYTES = "PCOMPILE_MAX_BYTES"
ENV_MAX_ENTRIES = "PCOMPILE_MAX_ENTRIES"
ENV_LEASE_TIMEOUT = "PCOMPILE_LEASE_TIMEOUT"
ENV_MIN_FREE_BYTES = "PCOMPILE_MIN_FREE_BYTES"
ENV_DIR_TIMEOUT = "PCOMPILE_CACHE_DIR_TIMEOUT"

DEFAULT_MAX_BYTES = 10 * 1024**3
DEFAULT_MAX_ENTRIES = 200_000
#: Free space the cache dir's filesystem keeps: below it pcompile caches nothing there and moves
#: Inductor's working files to a private temp dir (a job must not fill a shared disk).
DEFAULT_MIN_FREE_BYTES = 256 * 1024**2


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(float(raw))
    except ValueError:
        raise PcompileError(f"{name}={raw!r} is not a number; set it to an integer or unset it") from None


def _truthy(raw: str | None) -> bool:
    return (raw or "").strip().lower() in {"1", "true", "yes", "on"}


def switch(name: str) -> bool | None:
    """An on/off environment variable whose default depends on the machine: True or False if
    the user set it, None (decide by default) if unset or unrecognised."""
    raw = os.environ.get(name, "").strip().lower()
    if raw in {"1", "true", "yes", "on"}:
        return True
    if raw in {"0", "false", "no", "off"}:
        return False
    return None


@dataclasses.dataclass(frozen=True)
class Settings:
    cache_dir: Path
    shared_dir: Path | None = None
    remote: str | None = None
    read_only: bool = False
    max_bytes: int = DEFAULT_MAX_BYTES
    max_entries: int = DEFAULT_MAX_ENTRIES
    lease_timeout: float = 60.0
    min_free_bytes: int = DEFAULT_MIN_FREE_BYTES
    dir_timeout: float = 10.0

    @staticmethod
    def from_env(cache_dir: str | None = None, shared_dir: str | None = None) -> "Settings":
        cache = cache_dir or os.environ.get(ENV_CACHE_DIR) or str(Path.home() / ".cache" / "pcompile")
        shared = shared_dir or os.environ.get(ENV_SHARED_DIR) or None
        return Settings(
            cache_dir=Path(cache).expanduser().absolute(),
            shared_dir=Path(shared).expanduser().absolute() if shared else None,
            remote=os.environ.get(ENV_REMOTE) or None,
            read_only=_truthy(os.environ.get(ENV_READ_ONLY)),
            max_bytes=_env_int(ENV_MAX_BYTES, DEFAULT_MAX_BYTES),
            max_entries=_env_int(ENV_MAX_ENTRIES, DEFAULT_MAX_ENTRIES),
            lease_timeout=float(_env_int(ENV_LEASE_TIMEOUT, 60)),
            min_free_bytes=_env_int(ENV_MIN_FREE_BYTES, DEFAULT_MIN_FREE_BYTES),
            dir_timeout=float(_env_int(ENV_DIR_TIMEOUT, 10)),
        )

    def export_env(self) -> dict[str, str]:
        """The variables a child process needs to see this same configuration."""
        env = {ENV_CACHE_DIR: str(self.cache_dir)}
        if self.shared_dir:
            env[ENV_SHARED_DIR] = str(self.shared_dir)
        if self.remote:
            env[ENV_REMOTE] = self.remote
        if self.read_only:
            env[ENV_READ_ONLY] = "1"
        return env
