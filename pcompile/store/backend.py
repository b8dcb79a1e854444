"""A remote store's byte primitives (Redis, S3); which one a PCOMPILE_REMOTE URL names is remote.open_backend.

A backend moves bytes and nothing else; remote.RemoteTier wraps it with deadlines, the circuit
breaker, write-behind and the read-only rules, and Tier (tier.py) verifies what it returns.
"""
from __future__ import annotations

import urllib.parse
from typing import Any, Callable

from pcompile.keys.key import Key
from pcompile.store.tier import Tier


class RemoteBackend(Tier):
    """A remote store's byte primitives. Every network round trip goes through `self.io`.

    `io(fn, *args, nbytes=N)` is replaced by RemoteTier with a deadline- and breaker-guarded
    runner; each call should move at most one chunk (a few MiB; N is an upper bound of what it
    moves) so that a per-call deadline is meaningful for big blobs.
    Backends return None/False for "not there" and raise for anything else.
    """

    kind = "remote"
    #: the label in `pcompile stats`
    name = "remote"

    def __init__(self) -> None:
        super().__init__()
        self.io: Callable[..., Any] = lambda fn, *args, nbytes=0: fn(*args)

    def location(self) -> str:
        """Where this tier points, with credentials removed (safe to log)."""
        return self.name

    def is_timeout(self, exc: BaseException) -> bool:
        return isinstance(exc, TimeoutError)

    def sample_keys(self, n: int) -> list[Key]:
        """Up to n manifest keys, spread over the keyspace when the backend can do it cheaply."""
        out: list[Key] = []
        for key in self.keys():
            out.append(key)
            if len(out) >= n:
                break
        return out


def redact(url: str) -> str:
    """A URL without its password (for messages and logs)."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None and "@" not in parts.netloc:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}:***@" if parts.username else "***@"
    return urllib.parse.urlunsplit((parts.scheme, user + host, parts.path, "", ""))
