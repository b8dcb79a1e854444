"""Environment pcompile sets for Inductor and Triton, before anything reads it.

These are environment variables (not just in-process config) because Inductor's compile
workers are separate processes that inherit the environment when the pool starts:
- TORCHINDUCTOR_CACHE_DIR = <pcompile cache dir>/inductor, unless the user set it (torch's own
  default, which torch writes into the environment on import, does not count as set);
- TRITON_CACHE_DIR = <TORCHINDUCTOR_CACHE_DIR>/triton, unless the user set it (Inductor would
  otherwise pick <inductor dir>/triton/<device index>, one copy per GPU of identical files);
- TRITON_CACHE_MANAGER = pcompile's store-backed manager, unless the user set their own (then
  Triton kernels stay out of the store and pcompile says so once).

Inductor hands these dirs to every compile job as it reads them at submit time (a script may
change them while it runs); `for_outside_worker` keeps a warm's jobs inside its file sandbox.
"""
from __future__ import annotations

import os
from pathlib import Path

from pcompile.config import Settings
from pcompile.settings import WARM_SANDBOX_ACTIVE
from pcompile.warn import warn_once

ENV_INDUCTOR_DIR = "TORCHINDUCTOR_CACHE_DIR"
ENV_TRITON_DIR = "TRITON_CACHE_DIR"
ENV_TRITON_MANAGER = "TRITON_CACHE_MANAGER"


def inductor_dir(settings: Settings | None = None) -> str:
    settings = settings or Settings.from_env()
    return str(settings.cache_dir / "inductor")


def _set_by_torch(value: str) -> bool:
    """True if `value` is torch's own default (torch writes it into the environment on import)."""
    from pcompile.compat import cache_dir

    default = cache_dir.torch_default_dir()
    return default is not None and os.path.abspath(value) == default


def unusable_cache_dir(settings: Settings | None = None) -> str | None:
    """One line saying why the cache dir pcompile would give torch cannot be used, or None.

    torch creates TORCHINDUCTOR_CACHE_DIR while `import torch._dynamo` runs (torch.compile's first
    call), and a path it cannot create (a file where the dir goes, a read-only file system) fails
    that import, so the job. Checked cheaply (made, one empty file written) before it is set."""
    from pcompile.store import diskfault

    settings = settings or Settings.from_env()
    problem = diskfault.path_problem(inductor_dir(settings))
    if problem is None:
        return None
    code, detail = problem
    why = f" ({detail})" if detail and detail != os.strerror(code) else ""
    return (f"pcompile: cache dir {settings.cache_dir} {diskfault.describe(code)}{why}: pcompile steps aside and "
            f"torch compiles with its own cache dirs, nothing cached by pcompile; the job goes on "
            f"({diskfault.fix(code)})")


def set_cache_dirs(settings: Settings | None = None) -> dict[str, str]:
    """Set the cache-dir variables the user left unset; returns what was set.

    A TORCHINDUCTOR_CACHE_DIR equal to torch's default counts as unset: `import torch._dynamo`
    writes the default there before any backend runs. A TRITON_CACHE_DIR inside the directory
    being replaced moves with it.
    """
    changed: dict[str, str] = {}
    previous = os.environ.get(ENV_INDUCTOR_DIR)
    if not previous or _set_by_torch(previous):
        os.environ[ENV_INDUCTOR_DIR] = changed[ENV_INDUCTOR_DIR] = inductor_dir(settings)
    triton_dir = os.environ.get(ENV_TRITON_DIR)
    moved_with_inductor = bool(triton_dir and previous and changed and
                               os.path.abspath(triton_dir).startswith(os.path.abspath(previous) + os.sep))
    if not triton_dir or moved_with_inductor:
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


def _under(path: str, root: Path | None) -> bool:
    if root is None:
        return False
    full, base = os.path.abspath(path), os.path.abspath(root)
    return full == base or full.startswith(base + os.sep)


def for_outside_worker(extra_env: dict[str, str | None], settings: Settings) -> dict[str, str | None]:
    """A compile job's cache dirs as a worker outside this process's file sandbox may write them.

    In a `pcompile warm` child (PCOMPILE_WARM_SANDBOX_ACTIVE set) only pcompile's own dirs are the
    same inside the sandbox and out. A cache dir the script chose while it runs (torch's
    `fresh_inductor_cache()` in cold-start benchmarks, a temp dir put in TORCHINDUCTOR_CACHE_DIR)
    exists only in the sandbox's view, and the node pool's workers, which run outside it, would
    create it on the real file system. Such a job writes into pcompile's own dirs instead: a worker
    writes only the kernel's source and cubins there, which the warm is run to keep, and the
    compiled kernel comes back to this process whichever dir the worker used."""
    if not WARM_SANDBOX_ACTIVE.get():
        return extra_env
    mine = {ENV_INDUCTOR_DIR: inductor_dir(settings), ENV_TRITON_DIR: os.path.join(inductor_dir(settings), "triton")}
    out = dict(extra_env)
    for var, own in mine.items():
        value = out.get(var)
        if value and not (_under(value, settings.cache_dir) or _under(value, settings.shared_dir)):
            out[var] = own
    return out
