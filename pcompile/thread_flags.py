"""A per-thread on/off flag set for the length of a `with` block (nesting restores the outer value).

Why: several layers mark "what this thread is doing now" for code far below them (store reads
that are housekeeping, autotune puts that are predictions, partitions inside pcompile's own
backend) without threading a parameter through torch's call stack.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Iterator


@contextlib.contextmanager
def raised(local: threading.local, name: str) -> Iterator[None]:
    before = getattr(local, name, False)
    setattr(local, name, True)
    try:
        yield
    finally:
        setattr(local, name, before)


def is_raised(local: threading.local, name: str) -> bool:
    return bool(getattr(local, name, False))
