"""One warning per problem per process: the one `warn_once` every floor uses.

Ground floor: imports only errors.py, so settings.py (whose bad-value lines go to stderr, not
through `warnings`) uses the same `first_time` set.

A flaky tier, a missing pool or an unsupported torch would otherwise repeat the same line for
every graph and kernel of a training job. Callers name the problem with a tag; the first call
with a tag warns, later ones are silent. Two channels, as before: a `PcompileFallbackWarning`
(the default: pcompile falls back to stock behaviour, which test suites and `-W error` can
catch), or a line on a logger (`logger=`: operational trouble such as a tier or pool that went
away, which pcompile.logs prints as one line).
"""
from __future__ import annotations

import logging
import threading
import warnings

from pcompile.errors import PcompileFallbackWarning

_warned: set[str] = set()
_lock = threading.Lock()


def first_time(tag: str) -> bool:
    """True the first time `tag` is seen in this process (thread-safe)."""
    with _lock:
        if tag in _warned:
            return False
        _warned.add(tag)
        return True


def warn_once(tag: str, message: str, *, logger: logging.Logger | None = None) -> None:
    """Warn `message` the first time `tag` comes up in this process; nothing after that."""
    if not first_time(tag):
        return
    if logger is not None:
        logger.warning("%s", message)
    else:
        warnings.warn(message, PcompileFallbackWarning, stacklevel=3)


def forget(prefix: str = "") -> None:
    """Warn again about everything (tests, and a forked child that reports on its own), or only
    about the tags that start with `prefix` (settings.reload())."""
    with _lock:
        if not prefix:
            _warned.clear()
            return
        for tag in [t for t in _warned if t.startswith(prefix)]:
            _warned.discard(tag)
