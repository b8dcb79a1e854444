"""When the cache dir cannot be used: compile in a private temp dir, cache nothing, say so once.

Why: pcompile points Inductor's and Triton's working dirs into its cache dir, so a cache dir that
is full, read-only, unwritable, gone or hung would otherwise fail the compile itself. Switching
those dirs (environment variables Inductor and Triton read at every use) to a fresh temp dir and
turning the store off gives stock Inductor's result; the temp dir goes at exit. One line on
stderr names the problem and the action.
"""
from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path

from pcompile.config import Settings
from pcompile.settings import DISABLE, EVENTS
from pcompile.store import diskfault

_lock = threading.Lock()
_private: str | None = None
_reason: str | None = None


def active() -> bool:
    """True once this process has given up its cache dir."""
    return _private is not None


def reason() -> str | None:
    """Why this process gave up its cache dir ("cache dir X is full"), or None."""
    return _reason


def _moved(var: str, root: Path) -> bool:
    value = os.environ.get(var)
    return not value or diskfault._under(value, root)


def fall_back(root: Path, code: int, detail: str = "") -> bool:
    """Move Inductor/Triton working dirs under `root` to a private temp dir; False if already done."""
    global _private, _reason
    with _lock:
        if _private is not None:
            return False
        private = tempfile.mkdtemp(prefix="pcompile-private-")
        atexit.register(shutil.rmtree, private, True)
        for var, sub in (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", os.path.join("inductor", "triton"))):
            if _moved(var, root):
                os.environ[var] = os.path.join(private, sub)
        os.environ[EVENTS.name] = "0"  # the event log lives in the cache dir too
        os.environ[DISABLE.name] = "1"  # compile workers started from now on run stock
        _private = private
    try:
        from pcompile.compat import cache_dir

        cache_dir.forget_paths()  # a retried compile must not reuse files under the old dir
    except Exception:
        pass
    _sweep_own_temp_files(root)
    why = f" ({detail})" if detail and detail != os.strerror(code) else ""
    _reason = f"cache dir {root} {diskfault.describe(code)}{why}"
    print(f"pcompile: cache dir {root} {diskfault.describe(code)}{why}: compiling in a private temp dir, "
          f"nothing cached; the job goes on ({diskfault.fix(code)})", file=sys.stderr, flush=True)
    return True


def _sweep_own_temp_files(root: Path) -> None:
    """Remove the temp files this process's failed writes left under `root` (Inductor's
    `.<pid>.<tid>.tmp`, pcompile's `….pcompile.<pid>.tmp` and the store's `….<pid>.<uuid>.tmp`).
    Finished files stay: every one of them was renamed into place whole."""
    pid = str(os.getpid())
    for base, depth in ((root / "inductor", 2), (root / "store" / "tmp", 1)):
        todo = [(base, 1)]
        while todo:
            directory, level = todo.pop()
            try:
                children = list(os.scandir(directory))
            except OSError:
                continue
            for child in children:
                name = child.name
                try:
                    if child.is_dir(follow_symlinks=False):
                        if level < depth:
                            todo.append((Path(child.path), level + 1))
                    elif name.endswith(".tmp") and (name.startswith(f".{pid}.") or f".pcompile.{pid}." in name
                                                    or f".{pid}." in name and level == 1 and depth == 1):
                        os.unlink(child.path)
                except OSError:
                    pass


def check_at_start(settings: Settings | None = None) -> bool:
    """Probe the cache dir before the first compile; True if it is usable."""
    settings = settings or Settings.from_env()
    problem = diskfault.probe(settings.cache_dir, settings.min_free_bytes, settings.dir_timeout)
    if problem is None:
        return True
    fall_back(settings.cache_dir, *problem)
    return False


def recover(exc: BaseException) -> bool:
    """True if `exc` came from the cache dir and the compile may be retried in the private dir.

    A fault seen again after the switch is not the cache dir's (the temp dir failed too): False,
    so the error reaches the user as it would with stock Inductor.
    """
    if active():
        return False
    root = Settings.from_env().cache_dir
    code = diskfault.classify(exc, root)
    if code is None:
        return False
    return fall_back(root, code, "while compiling")
