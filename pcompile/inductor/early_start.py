"""Whether the backward worker starts at the torch.compile call or waits for the first miss.

Starting it early lets its ~12 s of imports overlap Dynamo's tracing, which only pays off for a
process that will compile. Two cheap signals say that one will not, or need not:
- the cache already holds AOTAutograd entries: a restart, a job after a warm, or a rank beside
  finished ones. A hot job's worker was 5-7 CPU-s of imports beside its first step for nothing
  (H200, ResNet-50 after a warm: 1.23x stock hot in one pair);
- another process on this node already took the early start. N ranks started at once on an empty
  cache each started one (8 GPT-2 ranks on the H200: ~12 CPU-s of imports each, beside the ranks'
  tracing), yet most of them only wait for another rank's entries.
Either way the worker still starts at this process's first AOTAutograd miss (backward_ahead.py).
"""
from __future__ import annotations

import os

LOCK_NAME = "backward-worker.lock"


def cache_holds_autograd_entries() -> bool:
    """Whether the node-local or shared store has any AOTAutograd entry (one directory listing)."""
    from pcompile.config import Settings
    from pcompile.store.fs_tier import holds_any

    try:
        settings = Settings.from_env()
    except Exception:
        return False
    roots = [settings.cache_dir / "store"] + ([settings.shared_dir / "store"] if settings.shared_dir else [])
    return any(holds_any(root, "autograd") for root in roots)


def claim_node() -> int | bool:
    """Take this node's early start: an exclusive flock on the cache dir's lock file, held for the
    process's life (the kernel drops it when the process ends). Returns the held descriptor, False
    if another process holds it, True where no lock can be taken (no flock, no usable cache dir:
    every process starts its own, as before)."""
    try:
        import fcntl
    except ImportError:
        return True
    from pcompile.config import Settings

    try:
        directory = Settings.from_env().cache_dir
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except Exception:  # the store will say what is wrong with the directory
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    return fd
