"""Where a node's pool lives: one directory per (cache dir, host, Python environment).

Why the host and an environment identity are in the path: the cache dir may sit on a shared
filesystem (a home directory on NFS), and a Unix socket only rendezvous processes of one host;
two virtualenvs with different torch builds must never share workers either. Nothing here
enters a cache key, so the hostname is harmless.
"""
from __future__ import annotations

import dataclasses
import os
import socket
import sys
import tempfile
from pathlib import Path

import xxhash

from pcompile.pool.protocol import PROTOCOL_VERSION

SOCKET_PATH_LIMIT = 100  # sun_path is 108 bytes on Linux; keep a margin


def environment_identity() -> str:
    """A digest of what decides which code a worker runs: interpreter, import path, pcompile."""
    import pcompile

    parts = [
        sys.executable,
        sys.version,
        os.environ.get("PYTHONPATH", ""),
        getattr(pcompile, "__version__", "?"),
        str(PROTOCOL_VERSION),
        str(os.getuid()),
    ]
    return xxhash.xxh64_hexdigest("\0".join(parts).encode())


@dataclasses.dataclass(frozen=True)
class PoolPaths:
    dir: Path
    socket: Path
    lock: Path
    pidfile: Path
    log: Path
    identity: str

    @staticmethod
    def for_cache_dir(cache_dir: Path | str, identity: str | None = None) -> "PoolPaths":
        identity = identity or environment_identity()
        host = socket.gethostname().split(".")[0] or "localhost"
        pool_dir = Path(cache_dir).absolute() / "pool" / f"{host}-{identity[:12]}"
        sock = pool_dir / "daemon.sock"
        if len(os.fsencode(str(sock))) > SOCKET_PATH_LIMIT:
            # Too long for sun_path: a short, deterministic path in a private temp dir instead.
            short = Path(tempfile.gettempdir()) / f"pcompile-{os.getuid()}"
            sock = short / f"{xxhash.xxh64_hexdigest(str(pool_dir).encode())}.sock"
        return PoolPaths(pool_dir, sock, pool_dir / "start.lock", pool_dir / "daemon.pid", pool_dir / "daemon.log", identity)

    def ensure(self) -> None:
        """Create the pool dir and the socket's dir, private to this user (0700)."""
        for d in {self.dir, self.socket.parent}:
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
            st = d.stat()
            if st.st_uid != os.getuid():
                raise PermissionError(f"{d} belongs to uid {st.st_uid}, not to this user")
        if self.socket.parent != self.dir:
            os.chmod(self.socket.parent, 0o700)
