"""Environment pcompile sets for Inductor and Triton, before anything reads it.

These are environment variables (not just in-process config) because Inductor's compile
workers are separate processes that inherit the environment when the pool starts:
- TORCHINDUCTOR_CACHE_DIR = <pcompile cache dir>/inductor, unless the user set it;
- TRITON_CACHE_DIR = <TORCHINDUCTOR_CACHE_DIR>/triton, unless the user set it (Inductor would
  otherwise pick <inductor dir>/triton/<device index>, one copy per GPU of identical files);
- TRITON_CACHE_MANAGER = pcompile's store-backed manager, unless the user set their own (then
  Triton kernels stay out of the store and pcompile says so once).
"""
from __future__ import annotations

import os

from pcompile.config import Settings
from pcompile.inductor.gate import warn_once

ENV_INDUCTOR_DIR = "TORCHINDUCTOR_CACHE_DIR"
ENV_TRITON_DIR = "TRITON_CACHE_DIR"
ENV_TRITON_MANAGER = "TRITON_CACHE_MANAGER"


def inductor_dir(settings: Settings | None = None) -> str:
    settings = settings or Settings.from_env()
    return str(settings.cache_dir / "inductor")


def set_cache_dirs(settings: Settings | None = None) -> dict[str, str]:
    """Set the cache-dir variables the user left unset; returns what was set."""
    changed: dict[str, str] = {}
    if not os.environ.get(ENV_INDUCTOR_DIR):
        os.environ[ENV_INDUCTOR_DIR] = changed[ENV_INDUCTOR_DIR] = inductor_dir(settings)
    if not os.environ.get(ENV_TRITON_DIR):
        os.environ[ENV_TRITON_DIR] = changed[ENV_TRITON_DIR] = os.path.join(os.environ[ENV_INDUCTOR_DIR], "triton")
    return changed


def set_triton_manager(manager_path: str) -> bool:
    """Route Triton's cache through `manager_path`; False if the user chose another manager."""
    current = os.environ.get(ENV_TRITON_MANAGER)
    if current and current != manager_path:
        warn_once("triton-manager", f"pcompile: TRITON_CACHE_MANAGER={current} is set, so Triton kernels "
                  "stay out of pcompile's cache (unset it to share them)")
        return False
    os.environ[ENV_TRITON_MANAGER] = manager_path
    return True


def clear_triton_manager(manager_path: str) -> None:
    if os.environ.get(ENV_TRITON_MANAGER) == manager_path:
        del os.environ[ENV_TRITON_MANAGER]
